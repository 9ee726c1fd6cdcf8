"""posbias.hf.gguf_file against the gguf package's own GGUFReader: the same metadata and the same tensor views
on every file written here (both byte orders, F32/Q8_0/Q4_1, nested arrays), and on damaged files either
a one-line GGUFFormatError or what GGUFReader reads. The SmolLM2 file is compared in test_smollm2.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

gguf = pytest.importorskip("gguf")

from posbias.hf import gguf_file  # noqa: E402
from tests import gguf_files  # noqa: E402

LLAMA = Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "llama"
QWEN2 = LLAMA.parent / "qwen2"


def assert_same_as_gguf_reader(path: Path) -> None:
    reader = gguf.GGUFReader(path)
    ours = gguf_file.read(path)
    assert list(ours.meta) == list(reader.fields)
    for key, field in reader.fields.items():
        value = ours.meta[key]
        if isinstance(value, list) and value and isinstance(value[0], list):  # GGUFReader flattens nesting
            value = [item for row in value for item in row]
        assert value == field.contents(), key
        assert type(value) is type(field.contents()), key
    assert ours.data_offset == reader.data_offset and ours.alignment == reader.alignment
    assert [t.name for t in ours.tensors] == [t.name for t in reader.tensors]
    for mine, theirs in zip(ours.tensors, reader.tensors, strict=True):
        assert mine.tensor_type == theirs.tensor_type, mine.name
        assert mine.shape == tuple(int(n) for n in theirs.shape), mine.name
        assert mine.n_elements == theirs.n_elements, mine.name
        assert mine.data.dtype == theirs.data.dtype and mine.data.shape == theirs.data.shape, mine.name
        assert np.array_equal(mine.data, theirs.data), mine.name
        assert not mine.data.flags.writeable


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf-file")
    q = gguf.GGMLQuantizationType
    files = {
        f"llama-{name}": gguf_files.write(LLAMA, root / f"llama-{name}.gguf", qtype)
        for name, qtype in (("f32", None), ("q8_0", q.Q8_0), ("q4_1", q.Q4_1))
    }
    files["qwen2-q8_0"] = gguf_files.write(QWEN2, root / "qwen2.gguf", q.Q8_0)
    return files


@pytest.mark.parametrize("name", ["llama-f32", "llama-q8_0", "llama-q4_1", "qwen2-q8_0"])
def test_equal_to_gguf_reader_on_converted_checkpoints(written, name):
    assert_same_as_gguf_reader(written[name])


@pytest.mark.parametrize("endian", ["LITTLE", "BIG"])
def test_every_value_type_nested_arrays_and_both_byte_orders(tmp_path, endian):
    path = tmp_path / "values.gguf"
    w = gguf.GGUFWriter(str(path), "llama", endianess=getattr(gguf.GGUFEndian, endian))
    w.add_uint8("v.u8", 200)
    w.add_int8("v.i8", -100)
    w.add_uint16("v.u16", 60000)
    w.add_int16("v.i16", -30000)
    w.add_uint32("v.u32", 4_000_000_000)
    w.add_int32("v.i32", -2_000_000_000)
    w.add_float32("v.f32", 0.1)
    w.add_uint64("v.u64", 2**64 - 1)
    w.add_int64("v.i64", -(2**63))
    w.add_float64("v.f64", 0.1)
    w.add_bool("v.bool", True)
    w.add_string("v.str", "café 東京 😀")
    w.add_array("v.ints", [1, -2, 3])
    w.add_array("v.floats", [0.5, 1e-30])
    w.add_array("v.strs", ["a", "", "bé"])
    w.add_array("v.nested", [[1, 2], [3]])
    w.add_tensor("t.f32", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.add_tensor("t.f16", np.arange(6, dtype=np.float16).reshape(2, 3))
    w.add_tensor("t.i32", np.arange(5, dtype=np.int32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert_same_as_gguf_reader(path)
    ours = gguf_file.read(path)
    assert ours.meta["v.nested"] == [[1, 2], [3]]  # kept nested (GGUFReader flattens it)
    assert ours.meta["v.u64"] == 2**64 - 1 and ours.meta["v.str"] == "café 東京 😀"
    assert np.array_equal(ours.tensors[0].data, np.arange(12, dtype=np.float32).reshape(3, 4))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[:10], "shorter than a GGUF header"),
        (lambda b: b"GGUX" + b[4:], "GGUF magic invalid"),
        (lambda b: b[:4] + (7).to_bytes(4, "little") + b[8:], "GGUF version 7"),
        (lambda b: b[:16] + (2**60).to_bytes(8, "little") + b[24:], "metadata entries"),
        (lambda b: b[:8] + (2**60).to_bytes(8, "little") + b[16:], "tensor entries"),
        (lambda b: b[:200], "runs past the end of the file"),
        (lambda b: b[:-1], "run past the end of the file"),
    ],
)
def test_damaged_files_raise_one_line(written, tmp_path, damage, message):
    path = tmp_path / "damaged.gguf"
    path.write_bytes(damage(written["llama-q8_0"].read_bytes()))
    with pytest.raises(gguf_file.GGUFFormatError, match=message) as info:
        gguf_file.read(path)
    assert "\n" not in str(info.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_files_raise_format_errors_or_read_as_gguf_reader_reads_them(written, tmp_path, data):
    """Bytes cut or overwritten anywhere in the header and index: ``read`` raises GGUFFormatError (never
    anything else), or it reads the file and GGUFReader reads the same."""
    good = written["llama-q4_1"].read_bytes()
    header = gguf_file.read(written["llama-q4_1"]).data_offset
    raw = bytearray(good[: data.draw(st.integers(0, len(good)), label="cut")])
    for _ in range(data.draw(st.integers(0, 3), label="flips")):
        if raw:
            raw[data.draw(st.integers(0, min(header, len(raw)) - 1), label="at")] = data.draw(st.integers(0, 255))
    path = tmp_path / "fuzzed.gguf"
    path.write_bytes(bytes(raw))
    try:
        gguf_file.read(path)
    except gguf_file.GGUFFormatError as exc:
        assert "\n" not in str(exc)
        return
    assert_same_as_gguf_reader(path)
