"""What a .npy/.npz file declares (names, shapes, dtypes), read from its headers alone.

A zip bomb or a header announcing a huge array is refused from these declarations before
anything is decompressed beyond the headers (``posbias.io.kernel_file`` checks them against
the memory limit)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def read_errors() -> tuple[type[BaseException], ...]:
    """What reading an array file can raise on a corrupt, truncated or hostile file (zlib.error,
    zipfile.BadZipFile, a header numpy cannot parse, an unsupported compression method ...)."""
    import zipfile
    import zlib

    return (
        OSError,
        ValueError,
        EOFError,
        KeyError,
        TypeError,
        SyntaxError,
        NotImplementedError,
        RuntimeError,
        zipfile.BadZipFile,
        zlib.error,
    )


def _npy_header(handle) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) from an .npy stream's header, reading no array data."""
    version = np.lib.format.read_magic(handle)
    try:
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
    except (ValueError, SyntaxError, TypeError) as exc:
        if "EOF" in str(exc):
            raise
        raise ValueError(f"malformed .npy header ({type(exc).__name__})") from None
    if any(int(n) < 0 for n in shape):
        raise ValueError(f"header declares a negative dimension {shape}")
    return shape, dtype


def declared_arrays(path: Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """name -> (shape, dtype) of every array in a .npy ('kernels') or .npz file, from headers only.

    Raises one of ``read_errors()`` on a file that is neither, or whose headers are corrupt."""
    import zipfile

    with open(path, "rb") as f:
        magic = f.read(6)
        f.seek(0)
        if magic == b"\x93NUMPY":
            return {"kernels": _npy_header(f)}
    if not zipfile.is_zipfile(path):
        raise ValueError("neither an .npy array nor an .npz archive" if magic else "the file is empty")
    out = {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if not info.filename.endswith(".npy"):
                continue
            name = info.filename[:-4]
            if name in out:
                raise ValueError(f"the archive holds two arrays named {name!r}")
            with z.open(info) as member:
                out[name] = _npy_header(member)
    return out
