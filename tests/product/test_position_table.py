"""Per-position CSV tables written chunk by chunk (posbias.io.output.PositionTable, posbias.io.files.write_run):
the same bytes as the text made whole, floats that read back bit for bit, the figure's set stamp equal to
``set_stamp`` of the files' contents, and memory that does not grow with N."""

from __future__ import annotations

import tracemalloc

import numpy as np

from posbias.io import output
from posbias.io.files import STAMP_KEY, set_stamp, write_run


def _expected(columns: dict[str, np.ndarray]) -> str:
    """The format written out by hand: a header, then 'j,repr(x),...' per row."""
    lines = [",".join(["token_position", *columns])]
    lines += [
        ",".join([str(j), *(repr(float(c[j])) for c in columns.values())])
        for j in range(len(next(iter(columns.values()))))
    ]
    return "\n".join(lines) + "\n"


def test_chunks_join_to_the_whole_text_across_chunk_boundaries():
    rng = np.random.default_rng(0)
    n = 2 * output.ROWS_PER_CHUNK + 7
    columns = {"probability": rng.dirichlet(np.ones(n)), "log_probability": rng.normal(size=n) * 1e-300}
    table = output.position_table(**columns)
    chunks = list(table.chunks())
    assert len(chunks) == 1 + 3  # the header, then three blocks of rows
    assert "".join(chunks) == str(table) == output.position_csv(**columns) == _expected(columns)
    back = np.loadtxt(str(table).splitlines()[1:], delimiter=",")
    assert np.array_equal(back[:, 1], columns["probability"]) and np.array_equal(back[:, 2], columns["log_probability"])


def test_an_empty_table_is_its_header():
    assert str(output.position_table(probability=np.zeros(0))) == "token_position,probability\n"


def test_written_chunk_by_chunk_with_the_stamp_of_its_contents(tmp_path):
    from matplotlib.figure import Figure
    from PIL import Image

    p = np.full(output.ROWS_PER_CHUNK + 3, 1.0 / (output.ROWS_PER_CHUNK + 3))
    texts = {"profile.csv": output.position_table(probability=p), "summary.json": "{}\n"}
    write_run(tmp_path / "out", texts, {"profile.png": Figure()})
    written = {name: (tmp_path / "out" / name).read_text() for name in texts}
    assert written["profile.csv"] == output.position_csv(probability=p)
    assert Image.open(tmp_path / "out" / "profile.png").text[STAMP_KEY] == set_stamp(written)


def _formatting_peak(chunks: int) -> tuple[int, int]:
    """(peak bytes traced while formatting ``chunks`` blocks of rows, total characters formatted)."""
    p = np.random.default_rng(1).random(chunks * output.ROWS_PER_CHUNK)
    tracemalloc.start()
    total = sum(len(chunk) for chunk in output.position_table(probability=p).chunks())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, total


def test_formatting_memory_does_not_grow_with_n():
    """Eight times the rows, eight times the text, about the same peak (one chunk's rows at a time,
    measured by tracemalloc); the whole text at once would have grown with it."""
    peak_small, total_small = _formatting_peak(2)
    peak_large, total_large = _formatting_peak(16)
    assert total_large > 7 * total_small
    assert peak_large < 1.5 * peak_small, (peak_small, peak_large)
    assert peak_large < total_large / 2
