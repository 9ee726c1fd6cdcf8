"""``posbias sweep``: grids of models (products and zips of axes) computed in batches, one
Parquet row per point, resumable after any kill, sharded over local devices and processes.

* ``spec``: the YAML spec (base model, axes, zip groups) and its validation;
* ``grid``: points, their stacks, shape groups and the batch plan under a memory budget;
* ``table``: the Parquet schema from ``Summary`` and atomic batch files; ``read_table``;
* ``manifest``: the JSON manifest (spec, digest, plan, versions, who computed what);
* ``runner``: the run itself (devices, processes, resume); ``cli``: the subcommand;
* ``plot``: ``posbias plot DIR`` (heat maps and collapse curves from a sweep).

>>> from posbias.sweep.spec import parse
>>> s = parse({"base": {"layers": 4, "heads": 2, "tokens": 8, "schedule": "constant:0.5"},
...            "axes": {"lambda": [0.25, 0.5], "slope_scale": {"linspace": [0, 1, 3]}}})
>>> s.shape, s.num_points
((2, 3), 6)
"""

from __future__ import annotations


def read_table(out_dir):
    """The table of the finished sweep in ``out_dir`` (pyarrow Table, rows in grid order); refuses
    (one line) an unfinished sweep or part files that do not belong together (``table.read_table``)."""
    from posbias.sweep.table import read_table as read

    return read(out_dir)
