"""posbias.verify.strategies: every strategy draws what it promises (to 1e-12), reaches its edge
cases and the deep sizes, and shrinks toward small readable cases."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

from posbias.numerics import Structured
from posbias.numerics.masks import Causal, Full, Prefix, SlidingWindow
from posbias.numerics.stack import AlibiStack
from posbias.theorem import orders
from posbias.verify import strategies as ps

TOL = 1e-12
CI = settings(ps.settings_for("ci"), max_examples=40)
FIND = settings(ps.settings_for("ci"), max_examples=500)


def _stochastic(k):
    k = ps.as_float(k)
    return bool(np.all(k >= 0) and np.all(np.isfinite(k)) and np.allclose(k.sum(axis=-1), 1.0, atol=TOL, rtol=0))


def _causal(k):
    return bool(np.all(np.triu(ps.as_float(k), 1) == 0))


@CI
@given(ps.causal_kernels(max_tokens=ps.EXPLICIT_MAX + 8))
def test_causal_kernels_are_causal_and_stochastic(k):
    assert k.dtype == np.float64 and k.shape[0] == k.shape[1]
    assert _stochastic(k) and _causal(k)


@CI
@given(ps.causal_kernels(max_tokens=6, exact=True))
def test_exact_causal_kernels_are_fractions_summing_to_exactly_one(k):
    assert all(isinstance(x, Fraction) for x in k.ravel())
    assert all(sum(row) == 1 for row in k) and _causal(k)


@CI
@given(ps.monotone_kernels(max_tokens=ps.EXPLICIT_MAX + 8))
def test_monotone_kernels_are_causal_stochastic_and_monotone(k):
    assert _stochastic(k) and _causal(k)
    assert orders.is_monotone(k, tol=TOL)


@CI
@given(ps.monotone_kernels(max_tokens=6, exact=True))
def test_exact_monotone_kernels_are_monotone_exactly(k):
    f = np.cumsum(k, axis=1)
    assert all(sum(row) == 1 for row in k) and all(x >= 0 for x in k.ravel()) and _causal(k)
    assert all(f[i, j] >= f[i + 1, j] for i in range(len(k) - 1) for j in range(len(k)))


@CI
@given(ps.stochastic_kernels(max_tokens=ps.EXPLICIT_MAX + 4))
def test_stochastic_kernels_are_stochastic(k):
    assert _stochastic(k)


@CI
@given(st.integers(1, 20).flatmap(lambda n: st.tuples(st.just(n), ps.distributions(n))))
def test_distributions_sum_to_one(case):
    n, mu = case
    assert mu.shape == (n,) and np.all(mu >= 0) and abs(mu.sum() - 1) <= TOL


@CI
@given(ps.lambda_schedules(max_layers=12))
def test_lambda_schedules_lie_in_the_unit_interval(lam):
    assert lam.ndim == 1 and 1 <= lam.size <= 12 and np.all((lam >= 0) & (lam <= 1))


@CI
@given(ps.alibi_stacks(max_layers=6, max_heads=5))
def test_alibi_stacks_are_valid(stack):
    assert isinstance(stack, AlibiStack)
    assert np.all(stack.slopes >= 0) and np.all(np.isfinite(stack.diagonal))
    assert np.allclose(stack.head_weights.sum(axis=1), 1.0, atol=TOL)
    assert np.all((stack.lambdas >= 0) & (stack.lambdas <= 1)) and stack.temperature > 0


def test_edge_cases_are_reached():
    # exact zeros and saturated rows in float kernels; lambda exactly 0 and 1 in one schedule
    find(
        ps.causal_kernels(max_tokens=5),
        lambda k: np.any(np.tril(k) == 0) and np.any((k > 0) & (k < 1e-300)) or np.any(np.tril(k, -1) == 1.0),
        settings=FIND,
    )
    find(ps.lambda_schedules(max_layers=6), lambda lam: 0.0 in lam and 1.0 in lam, settings=FIND)
    for kind in (Causal, SlidingWindow, Prefix, Full):
        find(ps.masks(), lambda m, kind=kind: isinstance(m, kind), settings=FIND)
    find(
        ps.alibi_stacks(max_heads=4),
        lambda s: s.num_heads == 4 and s.temperature != 1.0 and np.any(s.diagonal != 0),
        settings=FIND,
    )


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")  # repr of a 64 x 32 stack
def test_deep_sizes_are_reached():
    deep = ps.SIZES["deep"]
    assert deep.max_tokens >= 512 and deep.max_layers >= 64 and deep.max_heads >= 32
    first = settings(FIND, phases=[Phase.generate])  # the first draw; no shrinking of a 64 x 32 stack
    stack, n = find(
        ps.alibi_cases("deep", num_layers=deep.max_layers, num_heads=deep.max_heads, num_tokens=deep.max_tokens),
        lambda c: True,
        settings=first,
    )
    assert (stack.num_layers, stack.num_heads, n) == (64, 32, 512)
    p = Structured().profile(stack, n).probabilities
    assert abs(float(np.sum(p)) - 1) < 1e-9


@settings(CI, max_examples=10)
@given(ps.alibi_cases("deep"))
def test_deep_cases_stay_within_their_bounds(case):
    stack, n = case
    assert 1 <= n <= 512 and stack.num_layers <= 64 and stack.num_heads <= 32


def test_shrinking_gives_readable_cases():
    assert find(ps.causal_kernels(max_tokens=6), lambda k: k.shape[0] == 3).tolist() == np.eye(3).tolist()
    k = find(ps.monotone_kernels(max_tokens=6, exact=True), lambda k: len(k) == 3 and k[2, 2] != 1)
    assert [[str(x) for x in row] for row in k] == [["1", "0", "0"], ["0", "1", "0"], ["0", "1/6", "5/6"]]
    lam = find(ps.lambda_schedules(max_layers=6), lambda lam: lam.size == 2)
    assert lam.tolist() == [0.0, 0.0]
    stack = find(ps.alibi_stacks(), lambda s: True)
    assert (stack.num_layers, stack.num_heads, stack.slopes.tolist(), stack.mask) == (1, 1, [[0.0]], Causal())


def test_profiles_are_registered_by_name():
    profiles = ps.register_profiles()
    assert set(profiles) == {"ci", "dev", "deep"}
    ci = settings.get_profile("posbias-ci")
    assert ci.derandomize and ci.database is None and ci.deadline is None
    assert ps.settings_for("deep").max_examples > ps.settings_for("dev").max_examples > ci.max_examples
    with pytest.raises(ValueError, match="unknown profile"):
        ps.settings_for("nightly")
