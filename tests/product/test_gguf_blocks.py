"""``posbias.hf.gguf_blocks``: Q8_0, Q4_0 and Q4_1 decoded whole equal the ``gguf`` package's dequantizer bit for
bit, on random blocks (every byte pattern of the codes, float16 scales of every kind: subnormal, infinite, NaN);
tests/product/test_smollm2.py does the same on the real model's tensors."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

from posbias.hf import gguf_blocks

TYPES = ["Q8_0", "Q4_0", "Q4_1"]


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("rows, blocks_per_row", [(1, 1), (3, 2), (37, 18)])
def test_equal_to_gguf_on_random_bytes(name, rows, blocks_per_row):
    size = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}[name]
    rng = np.random.default_rng(rows * 100 + blocks_per_row)
    raw = rng.integers(0, 256, size=(rows, blocks_per_row * size), dtype=np.uint8)
    # scales (and Q4_1's minimum) of every kind among the random ones
    specials = np.array([0.0, -0.0, 6e-8, 65504.0, np.inf, -np.inf, np.nan, 1.0, -2.5], np.float16).view(np.uint8)
    for r in range(min(rows, 9)):
        raw[r, 0:2] = specials[2 * r : 2 * r + 2]
    ours = gguf_blocks.dequantize(raw, name)
    with np.errstate(invalid="ignore", over="ignore"):  # gguf warns where an infinite scale meets a zero code
        theirs = np.asarray(gguf_dequantize(raw, GGMLQuantizationType[name]), np.float32).reshape(-1)
    assert ours.dtype == np.float32 and ours.shape == (rows * blocks_per_row * 32,)
    np.testing.assert_array_equal(ours, theirs)  # NaN where gguf has NaN, every other value the same bits
    assert np.array_equal(ours.view(np.uint32)[np.isfinite(theirs)], theirs.view(np.uint32)[np.isfinite(theirs)])


def test_known_values_by_hand():
    d, m = np.float16(0.5), np.float16(-1.0)
    codes = np.arange(32) % 16  # c_i = i mod 16: low nibbles 0..15, high nibbles 0..15
    packed = (codes[:16] | (codes[16:] << 4)).astype(np.uint8)
    q41 = np.concatenate([np.array([d, m], np.float16).view(np.uint8), packed])
    np.testing.assert_array_equal(gguf_blocks.dequantize(q41, "Q4_1"), 0.5 * codes - 1.0)
    q40 = np.concatenate([np.array([d], np.float16).view(np.uint8), packed])
    np.testing.assert_array_equal(gguf_blocks.dequantize(q40, "Q4_0"), 0.5 * (codes - 8))
    q = np.arange(-16, 16, dtype=np.int8)
    q80 = np.concatenate([np.array([d], np.float16).view(np.uint8), q.view(np.uint8)])
    np.testing.assert_array_equal(gguf_blocks.dequantize(q80, "Q8_0"), 0.5 * q)


def test_other_types_are_left_to_gguf_and_a_partial_block_is_refused():
    assert gguf_blocks.dequantize(np.zeros(10, np.uint8), "Q5_1") is None
    assert gguf_blocks.dequantize(np.zeros(8, np.float32), "F32") is None
    with pytest.raises(ValueError, match="not a whole number of Q4_1 blocks"):
        gguf_blocks.dequantize(np.zeros(30, np.uint8), "Q4_1")
