"""mkdocs hook: the benchmarks page's figures come from ``benchmarks/results*.json``, never by hand.

A line ``<!-- bench: FILE PATH [COLUMNS] -->`` in a page is replaced, when the site is built, by a
Markdown table of that file's entry at PATH (keys joined by dots; ``.`` for the whole file):

* a list of records: one row per record, the columns named in COLUMNS (comma-separated; default
  all keys of the first record);
* a record: one row per key (COLUMNS, if given, selects and orders the keys);
* a number or string: the value alone, inline.

Numbers print with 4 significant digits (integers in full). A missing file or key fails the build
with the page and the directive named, so a page never shows a figure no benchmark produced.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks"
DIRECTIVE = re.compile(r"<!-- bench: (\S+) (\S+)(?: (\S+))? -->")


class BenchmarkDirectiveError(ValueError):
    """A directive names a file, key or column the results do not have."""


def fmt(value) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {fmt(v)}" for k, v in value.items())
    if isinstance(value, list) and all(isinstance(v, (int, float)) for v in value):
        return ", ".join(fmt(v) for v in value)
    return str(value).replace("|", "\\|")


def lookup(data, path: str):
    if path == ".":
        return data
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            raise KeyError(key)
        data = data[key]
    return data


def table(entry, columns: list[str] | None) -> str:
    if isinstance(entry, list) and entry and all(isinstance(r, dict) for r in entry):
        cols = columns or list(entry[0])
        missing = [c for c in cols if any(c not in r for r in entry)]
        if missing:
            raise KeyError(", ".join(missing))
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in entry]
        return "\n".join(lines)
    if isinstance(entry, dict):
        keys = columns or list(entry)
        missing = [k for k in keys if k not in entry]
        if missing:
            raise KeyError(", ".join(missing))
        return "\n".join(["| quantity | value |", "|---|---|"] + [f"| {k} | {fmt(entry[k])} |" for k in keys])
    return fmt(entry)


def expand(markdown: str, results: Path = RESULTS, page: str = "?") -> str:
    """``markdown`` with every directive replaced by its table or value."""

    def one(match: re.Match) -> str:
        name, path, cols = match.groups()
        file = results / name
        try:
            data = json.loads(file.read_text())
            return table(lookup(data, path), cols.split(",") if cols else None)
        except FileNotFoundError:
            raise BenchmarkDirectiveError(f"{page}: {match.group(0)}: no file {file}") from None
        except KeyError as e:
            raise BenchmarkDirectiveError(f"{page}: {match.group(0)}: {name} has no {e.args[0]}") from None

    return DIRECTIVE.sub(one, markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:  # mkdocs hook
    return expand(markdown, page=page.file.src_path)
