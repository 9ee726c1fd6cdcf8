"""Relative positional biases (issue 19 §1–2, THEORY.md C7): the families, the stack, the engines.

References are independent of the code under test: the dense engine soft-maxes every N x N
logit matrix (no cumulative weights), the structured engine computes ALiBi by geometric-tail
recurrences, T5's bucketing is checked against a scalar transcription of T5's formula and,
on the published configurations, against exact integer arithmetic, Kerple against the
formulas evaluated in 40-digit mpmath.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posbias.bias_spec import parse_bias, parse_biases
from posbias.errors import UserError
from posbias.numerics import engines
from posbias.numerics.bias import Alibi, Bias, Function, KerpleLog, KerplePower, T5Buckets, Table, t5_buckets
from posbias.numerics.bias_engine import BiasEngine
from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.dense import Dense
from posbias.numerics.engine import Unsupported
from posbias.numerics.masks import Causal, Full, Prefix, SlidingWindow
from posbias.numerics.native_bias import available as native_available
from posbias.numerics.stack import AlibiStack, StackError
from posbias.numerics.structured import Structured

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ENGINES = [BiasEngine(native=False), BiasEngine(native=False, chunk=4)]
if native_available():
    ENGINES += [BiasEngine(), BiasEngine(threads=1)]

# ----------------------------------------------------------------------------- strategies
small = st.floats(-3.0, 3.0, allow_nan=False)


@st.composite
def sides(draw):
    kind = draw(st.sampled_from(["alibi", "kerple-log", "kerple-power", "t5", "table", "window", "expr"]))
    if kind == "alibi":
        return Alibi(draw(st.floats(0.0, 2.0)))
    if kind == "kerple-log":
        return KerpleLog(draw(st.floats(-1.0, 2.0)), draw(st.floats(0.0, 3.0)))
    if kind == "kerple-power":
        return KerplePower(draw(st.floats(-0.2, 2.0)), draw(st.floats(0.0, 2.0)))
    if kind == "t5":
        bidirectional = draw(st.booleans())
        nb = draw(st.integers(4, 16))
        half = (nb // 2 if bidirectional else nb) // 2
        md = draw(st.integers(half + 1, 40))
        return T5Buckets(nb, md, tuple(draw(st.lists(small, min_size=nb, max_size=nb))), bidirectional)
    if kind in ("table", "window"):
        return Table(tuple(draw(st.lists(small, min_size=1, max_size=8))), window=kind == "window")
    a = draw(st.floats(0.1, 2.0))
    return parse_bias(f"expr:-a*sqrt(g) + cos(g)/2;a={a!r}").past


@st.composite
def bias_stacks(draw):
    t, h = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    mask = draw(st.sampled_from([Causal(), Full(), Prefix(3), SlidingWindow(4)]))
    heads = []
    for _ in range(h):
        past = draw(sides())
        future = draw(st.one_of(st.none(), sides()))
        heads.append(Bias(past, future))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    return BiasStack.build(
        rng.uniform(0, 1, t),
        heads,
        diagonal=rng.normal(0, 1.5, (t, h)),
        sink=rng.normal(0, 1.5, (t, h)) * draw(st.booleans()),
        head_weights=rng.uniform(0.05, 1, (t, h)),
        temperature=draw(st.sampled_from([0.7, 1.0, 2.0])),
        mask=mask,
    )


# ----------------------------------------------------------------------------- engines vs dense
@SETTINGS
@given(bias_stacks(), st.sampled_from([1, 2, 5, 13, 24]))
def test_engines_agree_with_dense_on_generated_stacks(stack, n):
    reference = Dense().profile(stack, n)
    assert abs(reference.probabilities.sum() - 1) < 1e-12
    for engine in ENGINES:
        got = engine.profile(stack, n)
        assert np.abs(got.probabilities - reference.probabilities).max() < 1e-12, engine
        assert np.abs(got.min_self_weight - reference.min_self_weight).max() < 1e-12, engine
        assert np.abs(got.last_self_weight - reference.last_self_weight).max() < 1e-12, engine
        assert abs(got.probabilities.sum() - 1) < 1e-12


@pytest.mark.parametrize("mask", [Causal(), Full(), Prefix(40), SlidingWindow(37)])
def test_engines_agree_with_dense_at_a_few_hundred_tokens(mask):
    rng = np.random.default_rng(3)
    heads = [
        Bias(KerpleLog(0.8, 0.7)),
        Bias(KerplePower(0.3, 0.6), Alibi(0.2)),
        Bias(Table((0.0, 1.0, -1.0, 0.5))),
        Bias(
            T5Buckets(32, 128, tuple(rng.normal(size=32)), True),
            T5Buckets(32, 128, tuple(rng.normal(size=32)), True, future=True),
        ),
    ]
    stack = BiasStack.build(
        rng.uniform(0.2, 0.9, 6),
        heads,
        diagonal=rng.normal(size=(6, 4)),
        sink=rng.normal(size=(6, 4)),
        head_weights=rng.uniform(0.1, 1, (6, 4)),
        mask=mask,
    )
    reference = Dense().profile(stack, 300).probabilities
    for engine in ENGINES:
        assert np.abs(engine.profile(stack, 300).probabilities - reference).max() < 1e-12, engine


# ----------------------------------------------------------------------------- ALiBi: the structured engine
@SETTINGS
@given(
    st.integers(1, 4),
    st.lists(st.floats(0.0, 3.0), min_size=1, max_size=4),
    st.sampled_from([Causal(), Full(), Prefix(4), SlidingWindow(5)]),
    st.sampled_from([1, 3, 16, 40]),
    st.integers(0, 2**31),
)
def test_alibi_biases_agree_with_the_structured_engine(t, slopes, mask, n, seed):
    rng = np.random.default_rng(seed)
    h = len(slopes)
    d, w, lam = rng.normal(0, 2, (t, h)), rng.uniform(0.1, 1, (t, h)), rng.uniform(0, 1, t)
    stack = BiasStack.build(lam, [Bias(Alibi(m)) for m in slopes], diagonal=d, head_weights=w, mask=mask)
    alibi = AlibiStack.build(lam, slopes, diagonal=d, head_weights=w, mask=mask)
    assert np.array_equal(stack.as_alibi().slopes, alibi.slopes)
    for reference in (Structured().profile(alibi, n), Structured(native=False).profile(alibi, n)):
        for engine in ENGINES:
            got = engine.profile(stack, n)
            assert np.abs(got.probabilities - reference.probabilities).max() <= 1e-15, engine
            assert np.abs(got.min_self_weight - reference.min_self_weight).max() <= 1e-15, engine


def test_auto_routes_alibi_to_the_structured_engine_and_other_biases_to_the_bias_engine():
    alibi = BiasStack.build([0.5, 0.5], parse_biases("expr:2 - 0.5*g/alibi:0.25"), diagonal=1.0)
    result = engines.profile(alibi, 64)
    assert result.engine == "structured"
    assert any("ALiBi" in note for note in result.notes)
    kerple = BiasStack.build([0.5, 0.5], parse_biases("kerple-log:1,1"))
    result = engines.profile(kerple, 64)
    assert result.engine == "bias" and result.path in ("native", "xla")
    np.testing.assert_allclose(result.probabilities, Dense().profile(kerple, 64).probabilities, rtol=0, atol=1e-12)
    sinked = BiasStack.build([0.5], Bias(Alibi(0.5)), sink=2.0)  # a sink is not ALiBi
    assert sinked.as_alibi() is None and engines.profile(sinked, 16).engine == "bias"


@pytest.mark.parametrize(
    "bias, slope",
    [
        (Bias(KerplePower(0.75, 1.0)), 0.75),  # -r1 g^1
        (Bias(KerplePower(0.4, 0.0)), 0.0),  # -r1 g^0 = -r1: a constant
        (Bias(KerpleLog(0.0, 2.0)), 0.0),  # r1 = 0: uniform
        (Bias(Table(tuple(3.0 - 0.1 * g for g in range(40)))), None),  # linear on g < 40, constant beyond
        (Bias(Function("1.5 - 0.3*g", lambda g: 1.5 - 0.3 * g)), 0.3),
    ],
)
def test_biases_linear_on_the_used_distances_are_alibi(bias, slope):
    """A bias equal to b(0) - m g on g < N is the ALiBi stack of slope m (auto takes the structured
    engine); the structured profile of slope m agrees with the bias engine's on the given values."""
    n = 32  # the table is linear on every distance below 32 (its first 40 entries)
    got = bias.alibi_slope_at(n)
    expected = 0.1 if slope is None else slope
    assert got is not None and abs(got - expected) <= 1e-15
    lam, d = [0.6, 0.3, 0.9], [[0.5], [-1.0], [2.0]]
    stack = BiasStack.build(lam, bias, diagonal=d)
    routed = engines.profile(stack, n)
    assert routed.engine == "structured" and any("ALiBi" in note for note in routed.notes)
    exact = BiasEngine(native=False).profile(stack, n).probabilities
    assert np.abs(routed.probabilities - exact).max() <= 1e-14
    reference = Dense().profile(AlibiStack.build(lam, [[expected]] * 3, diagonal=d), n).probabilities
    assert np.abs(routed.probabilities - reference).max() <= 1e-12
    assert abs(routed.probabilities.sum() - 1.0) <= 1e-12


@pytest.mark.parametrize(
    "bias, n",
    [
        (Bias(Table(tuple(3.0 - 0.1 * g for g in range(40)))), 41),  # the constant tail is reached
        (Bias(Table((0.0, -0.5, -1.0), window=True)), 8),  # no weight beyond 3: a window
        (Bias(KerplePower(0.5, 1.0000001)), 64),  # nearly, not exactly, linear
        (Bias(Function("0.2*g", lambda g: 0.2 * g)), 16),  # rising with distance
        (Bias(KerplePower(0.5, 1.0), KerplePower(0.25, 1.0)), 16),  # two different slopes
    ],
)
def test_biases_not_linear_on_the_used_distances_are_not_alibi(bias, n):
    assert bias.alibi_slope_at(n) is None
    assert BiasStack.build([0.5], bias).as_alibi(n) is None


def test_window_table_is_the_sliding_window_mask():
    """A table with no weight beyond L under the causal mask = the same table under window:L."""
    values = (0.0, -0.3, 0.4, -1.0, 0.2)
    lam = [0.7, 0.4, 0.9]
    windowed = BiasStack.build(lam, Bias(Table(values, window=True)), diagonal=0.5, sink=0.3)
    masked = BiasStack.build(lam, Bias(Table(values)), diagonal=0.5, sink=0.3, mask=SlidingWindow(len(values)))
    for engine in ENGINES:
        np.testing.assert_allclose(
            engine.profile(windowed, 50).probabilities, engine.profile(masked, 50).probabilities, rtol=1e-13, atol=0
        )


def test_one_uniform_layer_by_hand():
    """A constant bias with sink s: row i puts e^s / (e^s + i) on token 0 and 1 / (e^s + i) elsewhere."""
    s, n = math.log(3.0), 5
    stack = BiasStack.build([1.0], Bias(Table((0.7,))), sink=s)
    expected = np.array([3 / (3 + n - 1)] + [1 / (3 + n - 1)] * (n - 1))
    for engine in ENGINES + [Dense()]:
        np.testing.assert_allclose(engine.profile(stack, n).probabilities, expected, rtol=1e-15, atol=0)


def test_rising_bias_beyond_the_linear_range_is_refused_and_auto_takes_extended_range_or_dense():
    """The linear mode refuses it; auto runs the native log-space mode (tests/numerics/test_bias_extended.py
    checks its values), or the dense engine without the native kernel."""
    stack = BiasStack.build([1.0], Bias(Table(tuple(10.0 * g for g in range(80)))))
    for engine in ENGINES:
        with pytest.raises(Unsupported, match="nats below its head's largest"):
            engine.profile(stack, 80)
    result = engines.profile(stack, 80)
    expected = ("bias", "native-extended") if native_available() else ("dense", "dense")
    assert (result.engine, result.path) == expected
    assert abs(result.probabilities.sum() - 1) < 1e-12
    np.testing.assert_allclose(result.probabilities, Dense().profile(stack, 80).probabilities, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- families
def _t5_reference(relative_position: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """T5's _relative_position_bucket for one relative position j - i, line by line on scalars (float32)."""
    ret = 0
    n = -relative_position
    if bidirectional:
        num_buckets //= 2
        ret += (1 if n < 0 else 0) * num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    val = np.float32(np.log(np.float32(n) / np.float32(max_exact)))
    val = np.float32(val / np.float32(math.log(max_distance / max_exact)))
    val = np.float32(val * np.float32(num_buckets - max_exact))
    return ret + min(max_exact + int(val), num_buckets - 1)


@settings(max_examples=200, deadline=None)
@given(st.booleans(), st.integers(4, 200), st.data())
def test_t5_buckets_match_a_transcription_of_t5(bidirectional, nb, data):
    half = (nb // 2 if bidirectional else nb) // 2
    md = data.draw(st.integers(half + 1, 2000))
    g = np.arange(0, 3 * md)
    past = t5_buckets(g, num_buckets=nb, max_distance=md, bidirectional=bidirectional)
    future = t5_buckets(g, num_buckets=nb, max_distance=md, bidirectional=bidirectional, future=True)
    assert past.tolist() == [_t5_reference(-int(x), bidirectional, nb, md) for x in g]
    assert future[1:].tolist() == [_t5_reference(int(x), bidirectional, nb, md) for x in g[1:]]


def _exact_bucket(n: int, buckets: int, max_distance: int) -> int:
    """max_exact + the largest k with (n / max_exact)^(B - max_exact) >= (max_distance / max_exact)^k, in integers."""
    me = buckets // 2
    if n < me:
        return n
    e, k = buckets - me, 0
    while k < e and n**e * me ** (k + 1) >= me**e * max_distance ** (k + 1):
        k += 1
    return min(me + k, buckets - 1)


@pytest.mark.parametrize("nb,md,bidirectional", [(32, 128, True), (32, 128, False), (64, 256, True), (32, 256, False)])
def test_t5_buckets_of_published_configurations_in_exact_integers(nb, md, bidirectional):
    g = np.arange(4 * md)
    per_side = nb // 2 if bidirectional else nb
    expected = [_exact_bucket(int(x), per_side, md) for x in g]
    assert t5_buckets(g, num_buckets=nb, max_distance=md, bidirectional=bidirectional).tolist() == expected
    if bidirectional:
        future = t5_buckets(g[1:], num_buckets=nb, max_distance=md, bidirectional=True, future=True)
        assert future.tolist() == [per_side + b for b in expected[1:]]
    # T5 (32 buckets, bidirectional, 128): distances 0..7 exact, 8..11 -> 8, 12..15 -> 9, 16..22 -> 10
    if (nb, md, bidirectional) == (32, 128, True):
        assert expected[:24] == list(range(8)) + [8] * 4 + [9] * 4 + [10] * 7 + [11]


def test_t5_values_by_bucket_and_unidirectional_future_is_bucket_zero():
    values = tuple(float(k) for k in range(8))
    past, future = Bias(T5Buckets(8, 16, values), T5Buckets(8, 16, values, future=True)).values(20)
    assert past.tolist() == [float(_exact_bucket(g, 8, 16)) for g in range(20)]
    assert future[1:].tolist() == [0.0] * 19


@settings(max_examples=50, deadline=None)
@given(st.floats(-3, 3), st.floats(0, 4))
def test_kerple_against_the_formulas(r1, r2):
    """Against -r1 log(1 + r2 g) and -r1 g^r2 in 40-digit mpmath arithmetic."""
    with mpmath.workdps(40):
        log_ref = [float(-mpmath.mpf(r1) * mpmath.log1p(mpmath.mpf(r2) * g)) for g in range(50)]
        pow_ref = [float(-mpmath.mpf(r1) * mpmath.power(g, mpmath.mpf(r2))) for g in range(50)]
    assert np.allclose(Bias(KerpleLog(r1, r2)).values(50)[0], log_ref, rtol=1e-14, atol=1e-300)
    assert np.allclose(Bias(KerplePower(r1, r2)).values(50)[0], pow_ref, rtol=1e-14, atol=1e-300)


def test_expression_specs():
    assert parse_bias("expr:1 - m*g;m=0.5") == Bias(Alibi(0.5))
    assert parse_bias("expr:0.5*g") != Bias(Alibi(0.5))  # rising: not ALiBi
    b = parse_bias("expr:-r1*log(1+r2*g);r1=0.7,r2=1.5")
    assert isinstance(b.past, Function)
    np.testing.assert_allclose(b.values(30)[0], Bias(KerpleLog(0.7, 1.5)).values(30)[0], rtol=1e-15, atol=1e-300)
    two = parse_bias("alibi:0.5|expr:-g^2")
    np.testing.assert_array_equal(two.values(4)[1], [0.0, -1.0, -4.0, -9.0])
    assert [x.spec for x in parse_biases("expr:1/(1+g)/alibi:0.25")] == ["expr:1/(1+g)", "alibi:0.25"]


@pytest.mark.parametrize(
    "spec,fragment",
    [
        ("alibi:-1", "expected a value >= 0"),
        ("kerple-log:1", "expected 2 numbers"),
        ("t5:8,16:1,2", "expected 8 bucket values"),
        ("wave:1", "unknown bias"),
        ("expr:a*g", "give values for a"),
        ("expr:g.real", "attribute access"),
        ("expr:g;b=2", "does not appear"),
        ("alibi:1|alibi:1|alibi:1", "more than one '|'"),
        ("table:1,nan", "not finite"),
    ],
)
def test_bad_specs_are_one_line_user_errors(spec, fragment):
    with pytest.raises(UserError, match=fragment) as info:
        parse_bias(spec)
    assert "\n" not in str(info.value)


# ----------------------------------------------------------------------------- validation at the boundary
def test_stack_validation():
    kerple = Bias(KerpleLog(1.0, 1.0))
    with pytest.raises(StackError, match="lambda = 1.5"):
        BiasStack.build([1.5], kerple)
    with pytest.raises(StackError, match="no positive weight"):
        BiasStack.build([0.5], [kerple, kerple], head_weights=[0.0, 0.0])
    with pytest.raises(StackError, match="at least one head"):
        BiasStack.build([0.5], [])
    with pytest.raises(StackError, match="expected a Bias"):
        BiasStack.build([0.5], [kerple, 0.5])
    with pytest.raises(StackError, match="not finite"):
        BiasStack.build([0.5], kerple, sink=np.inf)
    with pytest.raises(StackError, match="overflow"):
        BiasStack.build([0.5], kerple, diagonal=1e300, temperature=1e-300)
    overflow = BiasStack.build([0.5], Bias(Table((0.0, -1e300))), temperature=1e-10)
    with pytest.raises(StackError, match="overflows"):
        BiasEngine().profile(overflow, 4)
    rising = BiasStack.build([0.5], parse_bias("expr:exp(g)"))
    with pytest.raises(StackError, match=r"b\(710\) = inf"):
        Dense().profile(rising, 800)


def test_native_threads_and_progress_do_not_change_the_profile():
    if not native_available():
        pytest.skip("no C compiler here: the XLA path is the one tested")
    rng = np.random.default_rng(5)
    stack = BiasStack.build(
        rng.uniform(0, 1, 9),
        [Bias(KerpleLog(0.5, k)) for k in (0.5, 1.0, 2.0, 4.0)],
        diagonal=rng.normal(size=(9, 4)),
        sink=1.0,
    )
    one = BiasEngine(threads=1).profile(stack, 200).probabilities
    calls = []
    two = BiasEngine(threads=2).profile(stack, 200, progress=lambda done, total: calls.append((done, total)))
    np.testing.assert_allclose(two.probabilities, one, rtol=1e-14, atol=0)
    assert calls[-1] == (9, 9)


def test_expression_lambdified_to_jax_matches_numpy():
    import jax

    from posbias.bias_spec import jax_function as jax_bias

    with jax.enable_x64(True):
        jax_side = np.asarray(jax_bias("-r1*log(1+r2*g) + sin(g)/4;r1=0.7", r2=1.5)(np.arange(64.0)))
    numpy_side = parse_bias("expr:-r1*log(1+r2*g) + sin(g)/4;r1=0.7,r2=1.5").values(64)[0]
    np.testing.assert_allclose(jax_side, numpy_side, rtol=1e-14, atol=1e-15)
    other = parse_bias("expr:-r1*log(1+r2*g) + sin(g)/4;r1=0.7,r2=2").values(64)[0]
    assert not np.allclose(other, jax_side)  # the parameters are really substituted


def test_float32_is_refused_by_the_bias_engine_and_auto_uses_dense():
    stack = BiasStack.build([0.5, 0.5], Bias(KerpleLog(1.0, 1.0)))
    with pytest.raises(Unsupported, match="float64 only"):
        BiasEngine().profile(stack, 16, dtype=np.float32)
    result = engines.profile(stack, 16, dtype=np.float32)
    assert result.engine == "dense"
    np.testing.assert_allclose(result.probabilities, Dense().profile(stack, 16).probabilities, rtol=1e-5)
