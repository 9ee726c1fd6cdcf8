"""numerics.batch.profiles: many stacks of one shape, equal to one profile call per stack."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import posbias.numerics as nx


def _stacks(seed, count, layers=6, heads=5, mask=None):
    rng = np.random.default_rng(seed)
    return [
        nx.AlibiStack.build(
            rng.uniform(0, 1, layers),
            rng.uniform(0, 2, (layers, heads)),
            rng.uniform(-4, 4, (layers, heads)),
            rng.uniform(0.1, 1, (layers, heads)),
            mask=mask,
        )
        for _ in range(count)
    ]


@settings(max_examples=10, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 9),
    st.integers(1, 200),
    st.sampled_from([nx.Causal(), nx.Full(), nx.SlidingWindow(7), nx.Prefix(3)]),
    st.sampled_from(["auto", "structured", "dense"]),
)
def test_batch_equals_single_profiles(seed, count, n, mask, engine):
    stacks = _stacks(seed, count, mask=mask)
    batch = nx.profiles(stacks, n, engine=engine)
    assert len(batch) == count
    for stack, got in zip(stacks, batch):
        single = nx.profile(stack, n, engine=engine)
        assert (got.engine, got.path, got.notes) == (single.engine, single.path, single.notes)
        assert np.max(np.abs(got.probabilities - single.probabilities)) <= 1e-13
        assert abs(got.probabilities.sum() - 1) <= 1e-12
        assert np.allclose(got.min_self_weight, single.min_self_weight, rtol=0, atol=1e-13)
        assert np.allclose(got.last_self_weight, single.last_self_weight, rtol=0, atol=1e-13)
        dense = nx.profile(stack, n, engine="dense").probabilities  # an independent route
        assert np.max(np.abs(got.probabilities - dense)) <= 1e-12


def test_batch_falls_back_per_stack_where_the_native_kernel_refuses():
    """A stack the C kernel cannot take (slope 800) goes through auto's own fallback; the others do not."""
    stacks = _stacks(1, 3, layers=3, heads=2)
    steep = nx.AlibiStack.build([0.5] * 3, [[800.0, 0.1]] * 3)
    batch = nx.profiles([*stacks[:2], steep, stacks[2]], 40)
    single = nx.profile(steep, 40)
    assert batch[2].path == single.path and batch[2].notes == single.notes
    assert np.array_equal(batch[2].probabilities, single.probabilities)
    assert np.max(np.abs(batch[2].probabilities - nx.profile(steep, 40, engine="dense").probabilities)) <= 1e-12


def test_batch_progress_and_refusals():
    stacks = _stacks(2, 4)
    seen = []
    nx.profiles(stacks, 16, progress=lambda done, total: seen.append((done, total)))
    assert sorted(seen) == [(k, 4) for k in range(1, 5)]
    assert nx.profiles([], 16) == []
    with pytest.raises(ValueError, match="one shape"):
        nx.profiles([stacks[0], _stacks(3, 1, heads=2)[0]], 16)


@settings(max_examples=8, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 7),
    st.integers(1, 120),
    st.sampled_from([nx.Causal(), nx.Full(), nx.SlidingWindow(7), nx.SlidingWindow(400), nx.Prefix(3)]),
    st.sampled_from([{}, {"xla_scan": "blocked"}, {"ring": "log"}]),
)
def test_xla_batch_is_one_vmapped_call_equal_to_single_profiles(seed, count, n, mask, options):
    """The XLA route (what accelerators run): one jit(vmap) call for the batch."""
    engine = nx.Structured(native=False, **options)
    stacks = _stacks(seed, count, mask=mask)
    if engine.supports(stacks[0], n) is not None:  # the log ring refuses sliding windows
        return
    batch = nx.profiles(stacks, n, engine=engine)
    for stack, got in zip(stacks, batch):
        single = engine.profile(stack, n)
        assert got.path == single.path and got.resolution == single.resolution
        assert np.max(np.abs(got.probabilities - single.probabilities)) <= 1e-13
        assert abs(got.probabilities.sum() - 1) <= 1e-12
        dense = nx.profile(stack, n, engine="dense").probabilities
        assert np.max(np.abs(got.probabilities - dense)) <= 1e-12


SHARDED = r"""
import sys
import numpy as np
import jax
import posbias.numerics as nx

rng = np.random.default_rng(5)
stacks = [nx.AlibiStack.build(rng.uniform(0, 1, 4), rng.uniform(0, 2, (4, 6)), rng.uniform(-3, 3, (4, 6)))
          for _ in range(10)]
engine = nx.Structured(native=False)
assert len(jax.devices()) == 4
one = nx.profiles(stacks, 50, engine=engine)
four = nx.profiles(stacks, 50, engine=engine, devices=jax.devices())
same = all(np.array_equal(a.probabilities, b.probabilities) and np.array_equal(a.min_self_weight, b.min_self_weight)
           for a, b in zip(one, four))
print("identical" if same else "different")
"""


def test_sharded_batch_equals_one_device_bit_for_bit():
    """Four fake CPU devices: the batch axis sharded over a Mesh gives the one-device numbers exactly."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    out = subprocess.run([sys.executable, "-c", SHARDED], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "identical"
