"""Profile files: the first value column of a ``token_position,<name>[,...]`` CSV, as
``posbias rollout`` (profile.csv) and ``posbias measure`` (influence.csv) write them, refused
with one line unless it is a probability vector over positions 0 .. N-1 (finite, non-negative,
summing to 1 within ``MASS_TOLERANCE``), read with bounded memory whatever the file's size."""

from __future__ import annotations

import errno
import math
import os
import stat
from pathlib import Path

import numpy as np

from posbias.errors import UserError

MASS_TOLERANCE = 1e-9


class ProfileError(UserError):
    """A profile file that cannot be read as a profile; one line naming the file (the fast reader lets
    these through where it gives up on anything else)."""


MAX_ROWS = 2**20
"""Rows (positions) a profile file may hold: 1,048,576. A file is read one line at a time into
a float64 array that grows by doubling up to this size, so reading one holds at most 8 MiB
beside one line (``MAX_LINE`` characters), whatever the file's size."""
MAX_LINE = 4096
MAX_BYTES = MAX_ROWS * 256
"""A larger file is refused from its size before any parsing (256 bytes a row: room for the
widest file posbias writes, influence.csv's four columns, several times over)."""


def read_profile(path: Path) -> np.ndarray:
    """The first column after ``token_position`` of a CSV (positions 0 .. N-1, in order; e.g.
    ``profile.csv`` of ``posbias rollout`` or ``influence.csv`` of ``posbias measure``), refused
    with one line unless finite, non-negative and summing to 1 within 1e-9, or when it holds
    more than ``MAX_ROWS`` rows or ``MAX_BYTES`` bytes (read with bounded memory: see MAX_ROWS).
    Blank lines are skipped; line numbers in messages are the file's."""
    path = Path(path)
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        if stat.S_ISREG(info.st_mode) and info.st_size > MAX_BYTES:
            raise ProfileError(
                f"{path}: {info.st_size} bytes, larger than the {MAX_BYTES // 2**20} MiB a profile "
                f"file may hold (at most {MAX_ROWS} rows)"
            )
        with open(path, "rb") as handle:
            fast = _parse_fast(handle, path)
        if fast is not None:
            return _checked_mass(path, fast)
        with open(path, "rb") as handle:
            return _checked_mass(path, _parse(path, handle))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None


def _parse_fast(handle, path: Path) -> np.ndarray | None:
    """The profile column read by pyarrow's streaming CSV reader (1 MiB blocks), or None when
    the file is anything but clean (``_parse``, the reference reader, then says what is wrong):
    the same values as ``_parse``, as both round correctly to the nearest float64."""
    import pyarrow as pa
    from pyarrow import csv

    header = b""
    while not header.strip():
        header = handle.readline(MAX_LINE + 1)
        if not header or len(header) > MAX_LINE:
            return None
    try:
        names = [h.strip() for h in header.decode("utf-8").rstrip("\r\n").split(",")]
    except UnicodeDecodeError:
        return None
    if len(names) < 2 or names[0] != "token_position":
        return None
    columns = [f"c{i}" for i in range(len(names))]
    try:
        reader = csv.open_csv(
            handle,
            read_options=csv.ReadOptions(column_names=columns, block_size=2**20),
            parse_options=csv.ParseOptions(newlines_in_values=False),
            convert_options=csv.ConvertOptions(
                column_types={"c0": pa.int64(), "c1": pa.float64()},
                include_columns=["c0", "c1"],
                null_values=[],
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
        positions, values, count = [], [], 0
        for batch in reader:
            count += batch.num_rows
            if count > MAX_ROWS:
                raise ProfileError(f"{path}: more than {MAX_ROWS} rows, the most a profile file may hold")
            if batch.column(0).null_count or batch.column(1).null_count:
                return None
            positions.append(batch.column(0).to_numpy())
            values.append(batch.column(1).to_numpy())
    except ProfileError:
        raise
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError):
        return None
    if count == 0:
        return None
    positions, values = np.concatenate(positions), np.concatenate(values).astype(np.float64)
    if not (np.array_equal(positions, np.arange(count)) and np.all(np.isfinite(values)) and np.all(values >= 0)):
        return None
    return values


def _checked_mass(path: Path, values: np.ndarray) -> np.ndarray:
    total = float(values.sum())
    if abs(total - 1.0) > MASS_TOLERANCE:
        raise ProfileError(f"{path}: profile sums to {total!r}, expected 1 within {MASS_TOLERANCE:g}")
    return values


def _parse(path: Path, handle) -> np.ndarray:  # noqa: C901 (one branch per bad line; issue 20 §4)
    values = np.empty(1024)
    header, count, total_bytes, number = None, 0, 0, 0
    while True:
        raw = handle.readline(MAX_LINE + 1)
        if not raw:
            break
        number += 1
        total_bytes += len(raw)
        if total_bytes > MAX_BYTES:
            raise ProfileError(f"{path}: larger than the {MAX_BYTES // 2**20} MiB a profile file may hold")
        if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
            raise ProfileError(f"{path}: line {number} is longer than {MAX_LINE} characters, expected 'position,value'")
        try:
            line = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            raise ProfileError(f"{path}: line {number} is not UTF-8 text") from None
        if not line.strip():
            continue
        if header is None:
            header = [h.strip() for h in line.split(",")]
            if len(header) < 2 or header[0] != "token_position":
                raise ProfileError(
                    f"{path}: header {line!r}, expected 'token_position,<name>[,...]' (the profile "
                    "is the first column after token_position)"
                )
            continue
        cells = line.split(",")
        try:
            position, value = int(cells[0]), float(cells[1])
            if len(cells) != len(header):
                raise ValueError
        except (ValueError, IndexError):
            raise ProfileError(f"{path}: line {number} is {line[:80]!r}, expected 'position,value'") from None
        if position != count:
            raise ProfileError(
                f"{path}: line {number} has position {position}, expected {count} (positions 0 .. N-1 in order)"
            )
        if not math.isfinite(value) or value < 0:
            raise ProfileError(f"{path}: line {number} has value {value!r}, expected a finite value >= 0")
        if count == MAX_ROWS:
            raise ProfileError(f"{path}: more than {MAX_ROWS} rows, the most a profile file may hold")
        if count == values.size:
            values = np.concatenate([values, np.empty(values.size)])
        values[count] = value
        count += 1
    if header is None:
        raise ProfileError(f"{path}: empty file, expected a header token_position,probability and one row per token")
    if count == 0:
        raise ProfileError(f"{path}: no rows, expected one row per token")
    return values[:count].copy()
