"""Batching as part of the engine interface (issue 20 section 4) and the sweep's array route (issue 21 goal 1).

* ``Engine.profiles`` of an engine without a batch route is its ``profile`` per stack; the structured
  engine's batch routes (C kernel, XLA) and ``Auto``'s delegation give what the single-profile call
  gives (to the bit on the C kernel), checked against a NumPy dense product as well;
* ``Grid.stacks`` builds the batch's arrays straight from the axis columns: row b is
  ``Grid.stack(point b)`` to the bit;
* ``summary_arrays`` on an ``AlibiBatch`` equals ``summarize`` per point, every field to the bit, on
  many random batches, and its arrays reach Arrow as the per-point values would;
* ``implausible_rows`` / ``unresolved_rows`` against their definitions written out here.
"""

import ast
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import posbias.numerics as nx
from posbias.numerics.batch import AlibiBatch
from posbias.numerics.engine import Engine, implausible, implausible_rows, linear_profile, unresolved_rows
from posbias.numerics.summary import summarize, summary_arrays
from posbias.sweep import grid as grid_mod
from posbias.sweep import spec as spec_mod

REPO = Path(__file__).resolve().parents[2]
MASKS = [nx.Causal(), nx.Full(), nx.SlidingWindow(5), nx.Prefix(3)]


def _stacks(seed, count, layers=5, heads=3, mask=None, temperature=1.0, steep=()):
    rng = np.random.default_rng(seed)
    out = []
    for b in range(count):
        slopes = rng.uniform(0, 2, (layers, heads))
        if b in steep:
            slopes[0, 0] = 2100.0  # m / tau >= 840: beyond the C kernel and linear arithmetic (fallbacks)
        out.append(
            nx.AlibiStack.build(
                rng.uniform(0, 1, layers),
                slopes,
                rng.uniform(-3, 3, (layers, heads)),
                rng.uniform(0.1, 1, (layers, heads)),
                temperature=temperature,
                mask=mask,
            )
        )
    return out


def _dense_profile(stack, n):
    """p = e_{N-1}^T R^(T-1) ... R^(0) from the kernels formed densely in NumPy (independent of the engines)."""
    allowed = np.asarray(nx.allowed(stack.mask, n), dtype=bool)
    i, j = np.indices((n, n))
    v = np.zeros(n)
    v[-1] = 1.0
    slopes, diagonal = stack.scaled()
    for t in range(stack.num_layers - 1, -1, -1):
        a = np.zeros((n, n))
        for h in range(stack.num_heads):
            logits = -slopes[t, h] * np.abs(i - j) + diagonal[t, h] * (i == j)
            logits = np.where(allowed, logits, -np.inf)
            w = np.exp(logits - logits.max(axis=1, keepdims=True))
            a += stack.head_weights[t, h] * w / w.sum(axis=1, keepdims=True)
        lam = stack.lambdas[t]
        v = (1 - lam) * v + lam * (v @ a)
    return v


@dataclass(frozen=True)
class _Looping(Engine):
    """An engine without a batch route: the dense NumPy product per stack."""

    name = "looping"

    def compute(self, stack, num_tokens, *, dtype, progress):
        return linear_profile(
            _dense_profile(stack, num_tokens),
            np.zeros(stack.num_layers),
            np.zeros(stack.num_layers),
            engine=self.name,
            path="numpy",
        )

    def needs_jax(self, stack, dtype):
        return False


def test_the_base_class_has_no_batch_route_and_loops_over_profile():
    stacks = _stacks(0, 4)
    engine = _Looping()
    assert engine.batched(stacks, 12) == [None] * 4
    seen = []
    got = engine.profiles(stacks, 12, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(k, 4) for k in range(1, 5)]
    for stack, result in zip(stacks, got):
        assert np.array_equal(result.probabilities, engine.profile(stack, 12).probabilities)
    with pytest.raises(nx.Unsupported, match="num_tokens must be >= 1"):
        engine.profiles(stacks, 0)


def test_the_batch_module_inspects_no_engine_type():
    """numerics/batch.py calls the engine; it names neither Auto nor Structured (issue 20 section 4)."""
    tree = ast.parse((REPO / "numerics" / "batch.py").read_text(encoding="utf-8"))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not ({"Auto", "Structured"} & (names | imported))


@settings(max_examples=12, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 8),
    st.integers(1, 40),
    st.sampled_from(MASKS),
    st.sampled_from([1.0, 0.6, 2.5]),
)
def test_native_batch_route_is_the_single_profile_to_the_bit(seed, count, n, mask, temperature):
    steep = {count // 2} if count > 2 else set()
    for engine in (nx.Structured(), nx.Structured(extended=True), nx.Auto()):
        fallback = steep if isinstance(engine, nx.Auto) else set()  # only auto computes such a slope
        stacks = _stacks(seed, count, mask=mask, temperature=temperature, steep=fallback)
        batch = engine.batched(AlibiBatch.of(stacks), n)
        got = engine.profiles(AlibiBatch.of(stacks), n)
        for b, stack in enumerate(stacks):
            single = engine.profile(stack, n)
            if b in fallback:
                assert batch[b] is None  # steep: left to the single-profile route (auto's fallbacks)
            for result in (got[b], batch[b]):
                if result is None:
                    continue
                assert (result.engine, result.path, result.notes) == (single.engine, single.path, single.notes)
                assert np.array_equal(result.probabilities, single.probabilities)
                assert np.array_equal(result.log_probabilities, single.log_probabilities)
                assert np.array_equal(result.min_self_weight, single.min_self_weight)
                assert np.array_equal(result.last_self_weight, single.last_self_weight)
            assert np.max(np.abs(got[b].probabilities - _dense_profile(stack, n))) <= 1e-12


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(2, 40), st.sampled_from(MASKS))
def test_xla_batch_route_equals_single_profiles(seed, count, n, mask):
    stacks = _stacks(seed, count, mask=mask, temperature=0.8)
    engine = nx.Structured(native=False)
    got = engine.batched(AlibiBatch.of(stacks), n)
    for stack, result in zip(stacks, got):
        single = engine.profile(stack, n)
        assert (result.path, result.resolution) == (single.path, single.resolution)
        assert np.max(np.abs(result.probabilities - single.probabilities)) <= 1e-13
        assert np.max(np.abs(result.probabilities - _dense_profile(stack, n))) <= 1e-12


def test_alibi_batch_is_the_sequence_of_its_stacks():
    stacks = _stacks(3, 5, temperature=0.7, mask=nx.SlidingWindow(4))
    batch = AlibiBatch.of(stacks)
    assert len(batch) == 5 and AlibiBatch.of(batch) is batch
    slopes, diagonal = batch.scaled()
    for b, stack in enumerate(stacks):
        row = batch[b]
        for name in ("lambdas", "slopes", "diagonal", "head_weights"):
            assert np.array_equal(getattr(row, name), getattr(stack, name))
        assert row.temperature == stack.temperature and row.mask == stack.mask
        assert np.array_equal(slopes[b], stack.scaled()[0]) and np.array_equal(diagonal[b], stack.scaled()[1])
    assert [s.lambdas.tolist() for s in batch.take([4, 1])] == [stacks[4].lambdas.tolist(), stacks[1].lambdas.tolist()]
    assert AlibiBatch.of([stacks[0], _stacks(4, 1, heads=2)[0]]) is None  # two shapes
    assert AlibiBatch.of([]) is None


SPECS = [
    {
        "base": {"layers": 4, "heads": 3, "tokens": 12, "content_diagonal": 1.0, "temperature": 0.7},
        "axes": {"lambda": [0.2, 0.9], "slope_scale": [0.5, 3.0], "content_diagonal": [-2.0, 0.0, 1.5]},
    },
    {
        "base": {"layers": 6, "heads": 2, "tokens": 10, "schedule": "power_decay:0.8,0.5"},
        "axes": {"lambda0": [0.3, 0.6, 0.9], "beta": [0.5, 1.0, 2.0], "mask": ["causal", "window:3"]},
    },
    {
        "base": {"layers": 3, "heads": 2, "tokens": 9},
        "axes": {"slopes": [[0.5, 1.0], [2.0, 0.25]], "slope_scale": [1.0, 7.0], "lambda": [0.5]},
    },
]


@pytest.mark.parametrize("raw", SPECS)
def test_grid_batch_arrays_are_the_per_point_stacks_to_the_bit(raw):
    spec = spec_mod.parse(raw)
    grid = grid_mod.Grid(spec)
    keys = grid.keys()
    _, batches = grid_mod.plan(grid, keys, budget_bytes=1 << 30, cap=7)
    for batch in batches:
        arrays = grid.stacks(batch.points, batch.key)
        assert isinstance(arrays, AlibiBatch) and len(arrays) == len(batch.points)
        for b, i in enumerate(batch.points):
            one = grid.stack(int(i), batch.key)
            row = arrays[b]
            for name in ("lambdas", "slopes", "diagonal", "head_weights"):
                assert np.array_equal(getattr(row, name), getattr(one, name)), name
            assert row.temperature == one.temperature and row.mask == one.mask


def _equal(got, want):
    if isinstance(want, float) and np.isnan(want):
        return isinstance(got, float) and np.isnan(got)
    return got == want and type(got) is type(want)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 40),
    st.integers(1, 70),
    st.sampled_from(MASKS),
    st.sampled_from([1.0, 0.5]),
)
def test_vectorised_summaries_of_a_batch_equal_one_summary_per_point(seed, count, n, mask, temperature):
    """Every field to the bit (batches of 16 or more rows take the column-by-column log-sum fold)."""
    stacks = _stacks(seed, count, layers=4, mask=mask, temperature=temperature)
    batch = AlibiBatch.of(stacks)
    profiles = [nx.profile(s, n) for s in stacks]  # the single-profile route
    columns = summary_arrays(profiles, batch)
    for i, (pr, stack) in enumerate(zip(profiles, stacks)):
        want = summarize(pr, stack).to_dict()
        assert list(columns) == list(want)
        for key, value in want.items():
            column = columns[key]
            got = column.tolist()[i] if isinstance(column, np.ndarray) else column[i]
            assert _equal(got, value), (key, got, value)
    for column in columns.values():  # arrays reach Arrow as the per-point values do
        if isinstance(column, np.ndarray) and column.dtype.kind == "f":
            assert pa.array(column, pa.float64()).to_pylist() == pa.array(column.tolist(), pa.float64()).to_pylist()


def test_deep_dips_and_non_causal_masks_give_null_columns():
    """dip_depth is None beyond e^700 and the last-token atom is None for non-causal masks: masked in the arrays."""
    steep = [nx.AlibiStack.build([1.0] * 3, [[9.0, 9.0]] * 3, mask=nx.Full()) for _ in range(2)]
    n = 200
    profiles = [nx.profile(s, n) for s in steep]
    columns = summary_arrays(profiles, AlibiBatch.of(steep))
    for i, (pr, s) in enumerate(zip(profiles, steep)):
        want = summarize(pr, s)
        got_dip = (
            columns["dip_depth"].tolist()[i]
            if isinstance(columns["dip_depth"], np.ndarray)
            else columns["dip_depth"][i]
        )
        assert got_dip == want.dip_depth
        assert columns["last_token_atom"][i] is None and want.last_token_atom is None


def test_implausible_rows_against_the_single_check():
    rng = np.random.default_rng(7)
    p = rng.uniform(0.01, 1, (6, 9))
    p /= p.sum(axis=1, keepdims=True)
    p[1, 3] = -0.1  # negative entry
    p[2] *= 1.01  # mass 1.01
    p[3, 0] = np.nan
    p[4, 3] += p[4, 2]
    p[4, 2] = 0.0  # log p = -inf: the mass from p (still 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.log(p)
    got = implausible_rows(p, logp)
    want = [implausible(nx.Profile(p[b], logp[b], np.zeros(1), np.zeros(1), "e", "x")) is not None for b in range(6)]
    assert got.tolist() == want == [False, True, True, True, False, False]


def test_unresolved_rows_against_the_definition():
    p = np.array([[0.5, 1e-300, 0.5 - 1e-300], [0.5, 0.0, 0.5], [0.9, 1e-20, 0.1 - 1e-20]])
    with np.errstate(divide="ignore"):
        logp = np.log(p)
    got = unresolved_rows(p, logp, np.array([0.0, 0.0, 1e-15]))
    # row 0: finite logs everywhere (extended range): nothing lost; row 1: the zero (log -inf) and,
    # as the row is not finite everywhere, nothing else below 1e-280; row 2: 1e-20 <= 1e-15 * 0.9
    assert got.tolist() == [[False, False, False], [False, True, False], [False, True, False]]
