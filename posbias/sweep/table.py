"""The sweep table: one Parquet row per grid point, one file per batch, written atomically.

Columns: ``point`` (the grid index), one column per axis (in a bias sweep also ``bias_spec``,
the spec string of each point with its placeholders filled), then every key of
``Summary.to_dict()`` (nested summaries flattened as ``diagonal_min``; a key that
equals an axis name gets the prefix ``summary_``), ``engine`` and ``path`` among them;
with profiles the renormalised profile p as ``profile`` (list<double>). Column types
come from the ``Summary`` field annotations (``float | None`` -> nullable double), so
every batch file has the same schema whatever its values, and the union of the files
reads as one table (``pandas.read_parquet(DIR / "table")``, ``polars.read_parquet``).

Each batch is written to a hidden temporary name in the same folder and renamed into
place (``os.replace``), so a file named ``part-NNNNNN.parquet`` is always complete; its
key-value metadata names the sweep (spec digest), the batch and the process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from pathlib import Path

import numpy as np

from posbias.errors import UserError
from posbias.io.files import alive

TABLE_DIR = "table"
META_KEY = b"posbias.sweep"
TMP_PREFIX = ".part-"


def part_name(index: int) -> str:
    return f"part-{index:06d}.parquet"


def _arrow_type(hint, probe):
    import pyarrow as pa

    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = args[0] if len(args) == 1 else hint
    if hint is bool or isinstance(probe, bool):
        return pa.bool_()
    if hint is int or (isinstance(probe, (int, np.integer)) and hint is not float):
        return pa.int64()
    if hint is float or isinstance(probe, (float, np.floating)):
        return pa.float64()
    if hint is str or isinstance(probe, str):
        return pa.string()
    if typing.get_origin(hint) in (tuple, list) or isinstance(probe, (list, tuple)):
        return pa.list_(pa.string())
    return pa.float64()


def _hints(cls) -> dict:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve: fall back to the probe's values
        return {}


def summary_columns(probe) -> list[tuple[str, str | None, object]]:
    """[(column, (key, subkey) path, arrow type)] for every key of ``probe.to_dict()``."""
    hints = _hints(type(probe))
    fields = {f.name: f for f in dataclasses.fields(probe)}
    out = []
    for key, value in probe.to_dict().items():
        hint = hints.get(key)
        sub_cls = None
        if key in fields:
            inner = [a for a in typing.get_args(hint) if dataclasses.is_dataclass(a)] if hint else []
            sub_cls = (
                inner[0]
                if inner
                else (type(getattr(probe, key)) if dataclasses.is_dataclass(getattr(probe, key)) else None)
            )
        if sub_cls is not None:
            sub_hints = _hints(sub_cls)
            sample = value or {}
            for f in dataclasses.fields(sub_cls):
                out.append((f"{key}_{f.name}", (key, f.name), _arrow_type(sub_hints.get(f.name), sample.get(f.name))))
        elif isinstance(value, dict):
            for sub, v in value.items():
                out.append((f"{key}_{sub}", (key, sub), _arrow_type(None, v)))
        else:
            out.append((key, (key, None), _arrow_type(hint, value)))
    return out


def axis_type(name: str, values: np.ndarray):
    import pyarrow as pa

    if name == "slopes":
        return pa.list_(pa.float64())
    if name in ("mask", "bias", "bias_spec"):
        return pa.string()
    return pa.int64() if values.dtype.kind == "i" else pa.float64()


@dataclasses.dataclass(frozen=True)
class Layout:
    """The table's schema: axis columns, summary columns (name, path in to_dict, type), profile or not."""

    axes: tuple[str, ...]
    summary: tuple
    profiles: bool
    schema: object

    @staticmethod
    def build(grid, probe, profiles: bool) -> Layout:
        import pyarrow as pa

        axes = tuple(grid.columns)
        fields = [pa.field("point", pa.int64(), nullable=False)]
        fields += [pa.field(a, axis_type(a, grid.columns[a])) for a in axes]
        summary = []
        for name, path, typ in summary_columns(probe):
            column = f"summary_{name}" if name in axes or name in ("point", "profile") else name
            summary.append((column, path, typ))
            fields.append(pa.field(column, typ))
        if profiles:
            fields.append(pa.field("profile", pa.list_(pa.float64())))
        return Layout(axes, tuple(summary), profiles, pa.schema(fields))


def batch_table(layout: Layout, grid, points: np.ndarray, summaries: dict[str, list], profiles):
    """A pyarrow Table of one batch's rows (in ``points`` order) from its summary columns
    (``Summary.to_dict`` key -> list, or NumPy array, masked where None, over the points:
    ``numerics.summary.summary_arrays``; arrays go to Arrow without per-point objects) and its
    (B, N) profiles (or None)."""
    import pyarrow as pa

    cols = {"point": pa.array(points, pa.int64())}
    for a in layout.axes:
        values = grid.columns[a][points]
        if a == "slopes":
            values = [list(v) for v in values]
        elif a in ("mask", "bias", "bias_spec"):
            values = list(values)
        cols[a] = pa.array(values, layout.schema.field(a).type)
    for column, (key, sub), typ in layout.summary:
        values = summaries.get(key, [None] * len(points))
        if sub is not None:
            values = [(v or {}).get(sub) for v in values]
        cols[column] = pa.array(values, typ)
    if layout.profiles:
        flat = np.asarray(profiles, np.float64).reshape(-1)
        width = flat.size // max(len(points), 1)
        offsets = (np.arange(len(points) + 1) * width).astype(np.int32)
        cols["profile"] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.float64()))
    return pa.table(cols, schema=layout.schema)


def write_part(folder: Path, index: int, table, meta: dict) -> Path:
    """Write one batch file atomically (temporary name, fsync, rename); returns its path."""
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    final = folder / part_name(index)
    tmp = folder / f"{TMP_PREFIX}{index:06d}.{os.getpid()}.tmp"
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), META_KEY: json.dumps(meta).encode()})
    try:
        with open(tmp, "wb") as handle:
            pq.write_table(table, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()
    return final


def part_meta(path: Path) -> tuple[int, dict, object] | None:
    """(rows, posbias metadata, arrow schema without metadata) of a batch file, or None if unreadable."""
    import pyarrow.parquet as pq

    try:
        md = pq.read_metadata(path)
        schema = md.schema.to_arrow_schema()
    except Exception:  # noqa: BLE001 - any unreadable file is "not finished"
        return None
    raw = (schema.metadata or {}).get(META_KEY)
    try:
        meta = json.loads(raw) if raw else {}
    except ValueError:
        meta = {}
    return md.num_rows, meta, schema.remove_metadata()


def finished(folder: Path, layout: Layout, batches, digest: str) -> tuple[set[int], list[str]]:
    """Indices of batches whose file is present and valid (rows, schema, sweep digest);
    plus one note per file that was present but is redone (unreadable or incomplete).
    A file of another sweep (different digest) is an error: mixing tables is refused."""
    done, notes = set(), []
    if not folder.is_dir():
        return done, notes
    by_index = {b.index: b for b in batches}
    for path in sorted(folder.glob("part-*.parquet")):
        try:
            index = int(path.stem.split("-", 1)[1])
        except ValueError:
            continue
        info = part_meta(path)
        if info is None:
            notes.append(f"{path}: unreadable; recomputing it")
            continue
        rows, meta, schema = info
        if meta.get("digest") not in (None, digest):
            raise UserError(
                f"{path}: belongs to another sweep (spec digest {str(meta.get('digest'))[:12]}, "
                f"expected {digest[:12]}); use another --out folder"
            )
        batch = by_index.get(index)
        if (
            batch is None
            or rows != len(batch.points)
            or not schema.equals(layout.schema.remove_metadata())
            or meta.get("batch") != index
        ):
            notes.append(f"{path}: does not match batch {index} of this sweep (rows or columns); recomputing it")
            continue
        done.add(index)
    return done, notes


def remove_stale_temporaries(folder: Path, indices: set[int]) -> None:
    """Remove temporary files of these batches left by processes that are gone (a kill -9
    mid-write); other processes of a multi-process sweep own the other batches."""
    if not folder.is_dir():
        return
    for path in folder.glob(TMP_PREFIX + "*.tmp"):
        index, pid = path.name[len(TMP_PREFIX) :].split(".")[:2]
        if index.isdigit() and int(index) in indices and pid.isdigit() and not alive(int(pid)):
            path.unlink(missing_ok=True)


def read_table(out_dir: str | Path, manifest: dict | None = None):
    """The whole sweep table as one pyarrow Table, rows in grid order (by ``point``).

    Refuses (UserError, one line) anything but one complete sweep: the manifest must say
    ``complete``, and the part files must be exactly batches 0..B-1 of the plan, each carrying
    the manifest's digest and its own batch index, readable, with one row per grid point in
    all (points 0..n-1 once each). A folder mixing two sweeps, a truncated or foreign file, a
    missing batch or an unfinished sweep is never read as a table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from posbias.sweep import manifest as mf

    out_dir = Path(out_dir)
    main = manifest if manifest is not None else mf.read(out_dir)
    if main is None:
        raise UserError(f"{out_dir}: no sweep here (expected {mf.MAIN})")
    if not main["complete"]:
        raise UserError(
            f"{out_dir}: the sweep is unfinished ({mf.MAIN} says complete: false); run it again with --resume"
        )
    folder = out_dir / TABLE_DIR
    expected = {part_name(i): i for i in range(main["plan"]["batches"])}
    present = {p.name for p in folder.glob("part-*.parquet")} if folder.is_dir() else set()
    missing, extra = sorted(set(expected) - present), sorted(present - set(expected))
    if missing or extra:
        what = (
            f"{len(missing)} batch file(s) missing ({missing[0]})"
            if missing
            else f"{len(extra)} file(s) of no batch of this plan ({extra[0]})"
        )
        raise UserError(f"{folder}: {what}; expected {len(expected)} files part-000000.parquet ..")
    tables = []
    for name, index in expected.items():
        path = folder / name
        info = part_meta(path)
        if info is None:
            raise UserError(
                f"{path}: unreadable batch file (truncated or not Parquet); run the sweep "
                "again with --resume to recompute it"
            )
        _, meta, _ = info
        if meta.get("digest") != main["digest"] or meta.get("batch") != index:
            raise UserError(
                f"{path}: belongs to another sweep (digest {str(meta.get('digest'))[:12]}, "
                f"batch {meta.get('batch')}; {mf.MAIN} says {main['digest'][:12]}, batch {index})"
            )
        try:
            tables.append(pq.read_table(path))
        except Exception:  # noqa: BLE001 - pyarrow raises several types for a damaged file
            raise UserError(f"{path}: unreadable batch file (truncated or damaged)") from None
    try:
        table = pa.concat_tables(tables)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        raise UserError(f"{folder}: the batch files have different columns (not one sweep)") from None
    table = table.take(pa.compute.sort_indices(table, sort_keys=[("point", "ascending")])).replace_schema_metadata()
    points = table.column("point").to_numpy()
    if len(points) != main["points"] or not np.array_equal(points, np.arange(main["points"])):
        raise UserError(f"{folder}: {len(points)} rows for {main['points']} grid points (each point once expected)")
    return table
