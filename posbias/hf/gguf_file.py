"""A GGUF file's metadata and tensor index, read in one pass over a memory map: ``read(path)``.

The layout is GGUF's (versions 2 and 3, llama.cpp's ``docs/gguf.md``), in the file's byte order
(little-endian, or big-endian where the version field reads as a multiple of 65536, as the ``gguf``
package decides it):

    magic "GGUF", version u32, tensor_count u64, kv_count u64,
    kv_count x (key: string, value_type u32, value),
    tensor_count x (name: string, n_dims u32, ne: n_dims x u64, ggml_type u32, offset u64),
    padding to ``general.alignment`` (u32, a power of two; default 32), then the tensor data,

a string being a u64 byte count and UTF-8 bytes, an array an item type u32, a u64 count and the
items (arrays of arrays nest). What ``read`` returns is what the ``gguf`` package's ``GGUFReader``
gives (``tests/product/test_gguf_file.py`` compares both on every file it writes and on the
SmolLM2 file, key by key and tensor by tensor): each metadata value as a Python value (strings
decoded, arrays as lists; GGUFReader flattens an array of arrays, this reader keeps it nested),
the pseudo-keys ``GGUF.version``, ``GGUF.tensor_count`` and ``GGUF.kv_count``, and each tensor's
data as a read-only view of the map, typed (F16, F32, F64, I8 to I64) or as the raw bytes of its
blocks (every quantized type, BF16), in numpy's order (the reverse of ggml's ``ne``).

Why not ``GGUFReader`` itself: it builds a NumPy view for every part of every field, four per
string, so a 49152-token vocabulary with its merges took 2.1 s of a 12 s ``posbias measure`` on
SmolLM2-135M (benchmarks/bench_hf.py); here the strings are decoded straight from the map. The
types, block sizes and dequantizers stay the ``gguf`` package's.

Everything is bounds-checked before it is read: a truncated or malformed file raises
``GGUFFormatError`` (a ``ValueError``) naming what and where, never reads past the end and never
allocates for a count the file cannot hold.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_NESTING = 16  # arrays of arrays: llama.cpp writes none; a deeper file is refused, not recursed into

# GGUF value types: code -> the scalar's type character, the same in struct and NumPy; 8 is a string, 9 an array
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY, UINT32 = 8, 9, 4
# ggml types stored as plain arrays (the rest, quantized and BF16, as the raw bytes of their blocks)
_TYPED = {"F16": "f2", "F32": "f4", "F64": "f8", "I8": "i1", "I16": "i2", "I32": "i4", "I64": "i8"}


class GGUFFormatError(ValueError):
    """A file that is not well-formed GGUF: one line naming what and at which byte offset."""


@dataclass(frozen=True)
class Tensor:
    """One tensor of the index: ``shape`` is ggml's ``ne`` (fastest dimension first), ``data`` a read-only
    view of the file in numpy's order (typed, or the raw bytes of its blocks: module docstring)."""

    name: str
    tensor_type: object  # gguf.GGMLQuantizationType
    shape: tuple[int, ...]
    data: np.ndarray

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=object))


@dataclass(frozen=True)
class GGUFFile:
    """``meta``: key -> Python value (module docstring); ``tensors`` in the file's order."""

    meta: dict
    tensors: list[Tensor]
    alignment: int
    data_offset: int


class _Cursor:
    """Reads GGUF values from ``buf`` in byte order ``order`` ("<" or ">"), checking every read against the end."""

    def __init__(self, buf, order: str):
        self.buf, self.order, self.pos, self.end = buf, order, 0, len(buf)

    def need(self, size: int, what: str) -> None:
        if size < 0 or self.pos + size > self.end:
            raise GGUFFormatError(f"{what} at byte {self.pos} runs past the end of the file ({self.end} bytes)")

    def scalar(self, fmt: str, what: str):
        size = struct.calcsize("<" + fmt)  # standard sizes, whatever the byte order
        self.need(size, what)
        (value,) = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self, what: str) -> str:
        size = self.scalar("Q", what)
        self.need(size, what)
        raw = self.buf[self.pos : self.pos + size]
        self.pos += size
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFFormatError(f"{what} at byte {self.pos - size} is not UTF-8 ({exc.reason})") from None

    def value(self, kind: int, what: str, depth: int = 0):
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind], what)
        if kind == STRING:
            return self.string(what)
        if kind != ARRAY:
            raise GGUFFormatError(f"{what} at byte {self.pos}: unknown value type {kind}")
        item = self.scalar("I", what)
        count = self.scalar("Q", what)
        if item in _SCALARS:  # read whole, as NumPy reads it
            dtype = np.dtype(self.order + _SCALARS[item])
            self.need(count * dtype.itemsize, f"{what} ({count} items)")
            values = np.frombuffer(self.buf, dtype, count, self.pos)
            self.pos += count * dtype.itemsize
            return values.tolist()
        if item not in (STRING, ARRAY):
            raise GGUFFormatError(f"{what} at byte {self.pos}: unknown array item type {item}")
        if depth >= MAX_NESTING:
            raise GGUFFormatError(f"{what} at byte {self.pos}: arrays nested deeper than {MAX_NESTING}")
        self.need(count * (8 if item == STRING else 12), f"{what} ({count} items)")  # the least each item takes
        return [self.value(item, what, depth + 1) for _ in range(count)]


def read(path) -> GGUFFile:
    """The metadata and tensor index of the GGUF file ``path`` (module docstring); ``GGUFFormatError`` on a
    malformed file, ``OSError`` on one that cannot be opened. The returned views keep the map open."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import quant_shape_to_byte_shape

    with open(Path(path), "rb") as f:
        size = f.seek(0, 2)
        if size < 24:
            raise GGUFFormatError(f"{size} bytes: shorter than a GGUF header (24 bytes)")
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if buf[:4] != MAGIC:
        raise GGUFFormatError(f"GGUF magic invalid: the file starts with {bytes(buf[:4])!r}, not {MAGIC!r}")
    (version,) = struct.unpack_from("<I", buf, 4)
    order = ">" if version & 0xFFFF == 0 else "<"
    cursor = _Cursor(buf, order)
    cursor.pos = 4
    version = cursor.scalar("I", "the version")
    if version not in VERSIONS:
        raise GGUFFormatError(f"GGUF version {version}: this reader reads versions {' and '.join(map(str, VERSIONS))}")
    tensor_count = cursor.scalar("Q", "the tensor count")
    kv_count = cursor.scalar("Q", "the metadata count")
    cursor.need(kv_count * 12, f"{kv_count} metadata entries")  # a key's length and a value type at least
    cursor.need(tensor_count * 24, f"{tensor_count} tensor entries")  # the least a tensor entry takes
    meta: dict = {"GGUF.version": version, "GGUF.tensor_count": tensor_count, "GGUF.kv_count": kv_count}
    kinds: dict = {}
    for index in range(kv_count):
        key = cursor.string(f"metadata entry {index}'s key")
        if key in meta:
            raise GGUFFormatError(f"metadata key {key} appears twice")
        kinds[key] = cursor.scalar("I", f"metadata {key}'s type")
        meta[key] = cursor.value(kinds[key], f"metadata {key}")
    entries = []
    for index in range(tensor_count):
        name = cursor.string(f"tensor entry {index}'s name")
        n_dims = cursor.scalar("I", f"tensor {name}'s dimension count")
        cursor.need(n_dims * 8, f"tensor {name}'s {n_dims} dimensions")
        ne = struct.unpack_from(f"{order}{n_dims}Q", buf, cursor.pos)
        cursor.pos += 8 * n_dims
        raw_type = cursor.scalar("I", f"tensor {name}'s type")
        offset = cursor.scalar("Q", f"tensor {name}'s offset")
        entries.append((name, ne, raw_type, offset))
    alignment = meta.get("general.alignment", DEFAULT_ALIGNMENT)
    if "general.alignment" in meta and kinds["general.alignment"] != UINT32:
        raise GGUFFormatError("metadata general.alignment is not a u32")
    if alignment <= 0 or alignment & (alignment - 1):
        raise GGUFFormatError(f"metadata general.alignment = {alignment} is not a power of two")
    data_offset = -(-cursor.pos // alignment) * alignment
    tensors, seen = [], set()
    for name, ne, raw_type, offset in entries:
        if name in seen:
            raise GGUFFormatError(f"tensor {name} appears twice")
        seen.add(name)
        try:
            qtype = GGMLQuantizationType(raw_type)
        except ValueError:
            raise GGUFFormatError(f"tensor {name}: unknown ggml type {raw_type}") from None
        block, type_size = GGML_QUANT_SIZES[qtype]
        count = int(np.prod(ne, dtype=object))
        shape = tuple(reversed(ne))
        typed = _TYPED.get(qtype.name)
        if typed is not None:
            dtype, items = np.dtype(order + typed), count
        else:
            if not shape or shape[-1] % block:
                raise GGUFFormatError(
                    f"tensor {name}: rows of shape {shape} are not whole {qtype.name} blocks of {block}"
                )
            dtype, items = np.dtype(np.uint8), count // block * type_size
            shape = quant_shape_to_byte_shape(shape, qtype)
        start = data_offset + offset
        if start + items * dtype.itemsize > size:
            raise GGUFFormatError(
                f"tensor {name}: {items * dtype.itemsize} bytes at byte {start} run past the end of the file ({size})"
            )
        data = np.frombuffer(buf, dtype, items, start).reshape(shape)
        tensors.append(Tensor(name, qtype, tuple(int(n) for n in ne), data))
    return GGUFFile(meta, tensors, int(alignment), data_offset)
