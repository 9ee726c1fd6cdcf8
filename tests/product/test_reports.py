"""report.json's versioned layout (posbias.io.reports): the current schema read as it is, the unversioned
layout of earlier posbias converted with one note, anything else refused in one line."""

from __future__ import annotations

import json

import pytest

from posbias.io.reports import SCHEMA_VERSION, ReportError, measure_report, read_report, validate_report

OLD_VALIDATE = {
    "16": {"a": {"w1": 0.2, "tv": 0.3}, "flat": {"w1": 0.1}},
    "8": {"a": {"w1": 0.25, "tv": 0.35}, "flat": {"w1": 0.12}},
    "sinks": {"16": {"key0_mass": [0.5, 0.6]}, "8": {"key0_mass": [0.4, 0.7]}},
}
OLD_MEASURE = {"source": "x", "num_tokens": 8, "lambdas": [0.5, 0.25], "sinks": {"key0_mass": [0.5, 0.6]}}


def _noted(source):
    lines: list[str] = []
    return read_report(source, note=lines.append), lines


def test_the_current_layout_is_read_unchanged_and_without_a_note():
    for report in (validate_report({"8": {"a": {}}}, {"8": {}}), measure_report({"lambdas": [1.0]}, {})):
        got, lines = _noted(report)
        assert got == report and got["schema_version"] == SCHEMA_VERSION and lines == []


def test_an_old_validate_report_keeps_every_length_and_moves_the_sinks(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(OLD_VALIDATE))
    got, lines = _noted(path)
    assert got["kind"] == "posbias validate"
    assert got["lengths"] == {"16": OLD_VALIDATE["16"], "8": OLD_VALIDATE["8"]}
    assert got["diagnostics"] == {"sinks": OLD_VALIDATE["sinks"]}
    assert len(lines) == 1 and "without schema_version" in lines[0] and str(path) in lines[0]


def test_an_old_measure_report_keeps_its_fields_and_moves_the_sinks():
    got, lines = _noted(OLD_MEASURE)
    assert got["kind"] == "posbias measure" and got["lambdas"] == [0.5, 0.25] and "sinks" not in got
    assert got["diagnostics"] == {"sinks": OLD_MEASURE["sinks"]} and len(lines) == 1


def test_the_default_note_is_one_line_on_stderr(capsys):
    read_report(OLD_MEASURE)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("posbias: note: ")


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not a readable report.json"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"schema_version": 7}), "schema_version 7"),
    ],
)
def test_anything_else_is_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / "report.json"
    path.write_text(content)
    with pytest.raises(ReportError, match=message) as caught:
        read_report(path, note=pytest.fail)
    assert "\n" not in str(caught.value)
