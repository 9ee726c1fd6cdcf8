"""The C whole-stack profile (numerics/native.py, numerics/native/alibi_layer.c).

Checked against a dense NumPy reference (each head's masked softmax of
d [i = j] - m |i - j|, heads averaged, R^(t) multiplied), in linear arithmetic and, where
float64 underflows, in log space (NumPy log-sum-exp and mpmath). Nothing is skipped:
without a C compiler these tests fail.
"""

import os
import subprocess
import sys

import mpmath
import numpy as np
import pytest

from posbias.numerics import native

MASKS = ("causal", "window", "prefix", "full")


# ----------------------------------------------------------------------------- references


def masked_logits(m, d, n, window, k):
    """d [i = j] - m |i - j| over the allowed j (causal, a window of ``window`` tokens, a
    bidirectional prefix of ``k``), -inf elsewhere."""
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    allowed = j <= i
    if window:
        allowed &= (i - j) <= window - 1
    if k > 1:
        allowed |= (i < k) & (j < k)
    logits = np.where(i == j, np.clip(d, -600, 600), 0.0) - m * np.abs(i - j)
    return np.where(allowed, logits, -np.inf)


def dense_kernel(m, d, n, window, k):
    """Row-stochastic kernel of one head: softmax over allowed j of d [i = j] - m |i - j|."""
    logits = masked_logits(m, d, n, window, k)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def dense_layers(lam, m, d, w, n, window, k):
    """(R^(t) for every layer, head-averaged kernels)."""
    kernels, rs = [], []
    for t in range(lam.shape[0]):
        a = sum(w[t, h] * dense_kernel(m[t, h], d[t, h], n, window, k) for h in range(m.shape[1]))
        kernels.append(a)
        rs.append((1 - lam[t]) * np.eye(n) + lam[t] * a)
    return rs, kernels


def dense_profile(lam, m, d, w, n, window, k):
    rs, _ = dense_layers(lam, m, d, w, n, window, k)
    v = np.zeros(n)
    v[-1] = 1.0
    for r in reversed(rs):
        v = v @ r
    return v


def _logsumexp(x, axis):
    top = x.max(axis=axis, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = safe + np.log(np.exp(x - safe).sum(axis=axis, keepdims=True))
    return np.squeeze(np.where(np.isfinite(top), out, -np.inf), axis=axis)


def log_dense_kernel(m, d, n, window, k):
    """log of dense_kernel, computed in log space (exact where the kernel underflows)."""
    logits = masked_logits(m, d, n, window, k)
    return logits - _logsumexp(logits, 1)[:, None]


def log_dense_profile(lam, m, d, w, n, window, k):
    """log p by log-sum-exp vector-matrix products, kernels in log space (no underflow)."""
    lv = np.full(n, -np.inf)
    lv[-1] = 0.0
    eye = np.where(np.eye(n) > 0, 0.0, -np.inf)
    for t in reversed(range(lam.shape[0])):
        with np.errstate(divide="ignore"):
            terms = [np.log(w[t, h]) + log_dense_kernel(m[t, h], d[t, h], n, window, k) for h in range(m.shape[1])]
        with np.errstate(divide="ignore"):
            log_a = _logsumexp(np.stack(terms), 0)
            log_r = np.logaddexp(np.log1p(-lam[t]) + eye, np.log(lam[t]) + log_a)
        lv = _logsumexp(lv[:, None] + log_r, 0)
    return lv


def mask_args(mask, n, rng):
    if mask == "causal":
        return None, 0
    if mask == "window":
        return int(rng.integers(1, n + 3)), 0
    if mask == "prefix":
        return None, int(rng.integers(0, n + 1))
    return None, n


def random_stack(rng, t, h, *, extreme=True, slope_hi=3.0, d_lo=-8.0, d_hi=8.0, lam=None):
    lam = rng.uniform(0, 1, t) if lam is None else lam
    m = rng.uniform(0, slope_hi, (t, h))
    d = rng.uniform(d_lo, d_hi, (t, h))
    if extreme:
        m[rng.uniform(size=(t, h)) < 0.2] = 0.0
        m[rng.uniform(size=(t, h)) < 0.15] = 30.0
        big = rng.uniform(size=(t, h)) < 0.1
        d[big] = rng.choice([-700.0, -600.0, 600.0, 700.0], size=big.sum())
    w = rng.uniform(0.05, 1, (t, h))
    w /= w.sum(axis=1, keepdims=True)
    return lam, m, d, w


def run(lam, m, d, w, n, window, k, **kw):
    return native.profile(lam, m, d, w, num_tokens=n, past_window=window, bidirectional_length=k, **kw)


# ----------------------------------------------------------------------------- tests


def test_kernel_builds_here():
    """Fails (does not skip) where the C compiler is missing or the build breaks."""
    native.library()
    assert native.available()


def test_disabled_by_environment():
    code = "from posbias.numerics import native; print(native.available())"
    env = dict(os.environ, POSBIAS_NATIVE="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("extended", [False, True], ids=["linear", "extended"])
def test_equals_dense_reference(mask, extended):
    rng = np.random.default_rng(["causal", "window", "prefix", "full"].index(mask) + 10 * extended)
    for _ in range(40):
        t, h, n = int(rng.integers(1, 6)), int(rng.integers(1, 20)), int(rng.integers(1, 65))
        lam, m, d, w = random_stack(rng, t, h)
        window, k = mask_args(mask, n, rng)
        ref = dense_profile(lam, m, d, w, n, window, k)
        res = run(lam, m, d, w, n, window, k, extended=extended, threads=2, block_size=8)
        assert res.path == ("native-extended" if extended else "native")
        assert np.max(np.abs(res.probabilities - ref)) <= 1e-13
        assert abs(res.probabilities.sum() - 1.0) <= 1e-13
        big = ref > 1e-280  # far enough above the float64 range for every intermediate term
        assert np.all(np.abs(res.probabilities[big] - ref[big]) <= 1e-12 * ref[big])
        assert np.array_equal(res.probabilities == 0, ref == 0)  # structural zeros stay exact


@pytest.mark.parametrize("mask", MASKS)
def test_self_weight_statistics(mask):
    rng = np.random.default_rng(7)
    t, h, n = 4, 11, 33
    lam, m, d, w = random_stack(rng, t, h)
    window, k = mask_args(mask, n, rng)
    _, kernels = dense_layers(lam, m, d, w, n, window, k)
    res = run(lam, m, d, w, n, window, k)
    diag = np.array([np.diag(a) for a in kernels])
    np.testing.assert_allclose(res.min_self_weight, diag.min(axis=1), rtol=1e-13, atol=0)
    np.testing.assert_allclose(res.last_self_weight, diag[:, -1], rtol=1e-13, atol=0)


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("extended", [False, True], ids=["linear", "extended"])
def test_threads_agree(mask, extended):
    rng = np.random.default_rng(3)
    n, t, h = 3001, 6, 45
    lam, m, d, w = random_stack(rng, t, h, extreme=False, slope_hi=1.0)
    window, k = {"causal": (None, 0), "window": (700, 0), "prefix": (None, 1200), "full": (None, n)}[mask]
    base = run(lam, m, d, w, n, window, k, extended=extended, threads=1)
    for threads in (2, 3, 5):
        res = run(lam, m, d, w, n, window, k, extended=extended, threads=threads)
        nz = base.probabilities > 0
        assert np.array_equal(nz, res.probabilities > 0)
        rel = np.abs(res.probabilities[nz] - base.probabilities[nz]) / base.probabilities[nz]
        assert rel.max() <= 1e-14
        if extended:
            fin = np.isfinite(base.log_probabilities)
            assert np.max(np.abs(res.log_probabilities[fin] - base.log_probabilities[fin])) <= 1e-12


@pytest.mark.parametrize("mask", MASKS)
def test_extended_equals_linear_without_underflow(mask):
    rng = np.random.default_rng(5)
    for n in (1, 2, 17, 300, 2000):
        lam, m, d, w = random_stack(rng, 5, 13, extreme=False)
        window, k = mask_args(mask, n, rng)
        lin = run(lam, m, d, w, n, window, k)
        ext = run(lam, m, d, w, n, window, k, extended=True, block_size=16)
        assert lin.probabilities.min() == 0 or lin.probabilities[lin.probabilities > 0].min() > 1e-300
        nz = lin.probabilities > 0
        assert np.array_equal(nz, ext.probabilities > 0)
        rel = np.abs(ext.probabilities[nz] - lin.probabilities[nz]) / lin.probabilities[nz]
        assert rel.max() <= 1e-13


@pytest.mark.parametrize("mask", MASKS)
def test_extended_below_float64_range(mask):
    """lambda = 1, many layers: the profile falls far below 1e-308; log p vs a log-space product."""
    rng = np.random.default_rng(11)
    deepest = 0.0
    for trial in range(6):
        n, t, h = int(rng.integers(2, 40)), int(rng.integers(150, 400)), int(rng.integers(1, 10))
        lam = np.ones(t) if trial % 2 == 0 else rng.uniform(0.5, 1.0, t)
        lam, m, d, w = random_stack(rng, t, h, extreme=False, slope_hi=1.0, d_lo=-12, d_hi=-4, lam=lam)
        window, k = mask_args(mask, n, rng)
        if window is not None:
            window = max(window, 2)
        ref = log_dense_profile(lam, m, d, w, n, window, k)
        res = run(lam, m, d, w, n, window, k, extended=True, threads=2)
        lp = res.log_probabilities
        fin = np.isfinite(ref)
        assert np.array_equal(fin, np.isfinite(lp))
        assert np.max(np.abs(lp[fin] - ref[fin]) / np.maximum(1.0, np.abs(ref[fin]))) <= 1e-10
        deepest = min(deepest, ref[fin].min())
    if mask != "full":  # with K = N the walk mixes instead of decaying
        assert deepest < np.log(1e-308)


def test_extended_against_mpmath():
    """One case checked against a 50-digit product (no float64 anywhere in the reference)."""
    mpmath.mp.dps = 50
    rng = np.random.default_rng(2)
    n, t, h = 9, 260, 3
    lam, m, d, w = random_stack(rng, t, h, extreme=False, slope_hi=1.0, d_lo=-12, d_hi=-4, lam=np.ones(t))
    v = [mpmath.mpf(0)] * (n - 1) + [mpmath.mpf(1)]
    for layer in reversed(range(t)):
        a = [[mpmath.mpf(0)] * n for _ in range(n)]
        for hh in range(h):
            mm, dd, ww = mpmath.mpf(m[layer, hh]), mpmath.mpf(d[layer, hh]), mpmath.mpf(w[layer, hh])
            for i in range(n):
                row = [mpmath.exp((dd if i == j else 0) - mm * abs(i - j)) for j in range(i + 1)]
                z = mpmath.fsum(row)
                for j in range(i + 1):
                    a[i][j] += ww * row[j] / z
        lt = mpmath.mpf(lam[layer])
        v = [mpmath.fsum(v[i] * ((1 - lt) * (i == j) + lt * a[i][j]) for i in range(n)) for j in range(n)]
    ref = np.array([float(mpmath.log(x)) for x in v])
    res = run(lam, m, d, w, n, None, 0, extended=True)
    assert ref.min() < -709  # below the float64 range
    assert np.max(np.abs(res.log_probabilities - ref) / np.maximum(1.0, np.abs(ref))) <= 1e-12
    assert np.sum(res.probabilities == 0) > 0 and np.all(np.isfinite(res.log_probabilities))


def test_range_error_is_reported_and_refined():
    """Collapse onto token 0 makes a block span more than float64's range: an error without refinement,
    exact results after refining to smaller blocks."""
    rng = np.random.default_rng(1)
    n, t, h = 19, 277, 5
    lam, m, d, w = random_stack(rng, t, h, extreme=False, slope_hi=1.0, d_lo=-12, d_hi=-4, lam=np.ones(t))
    with pytest.raises(native.NativeRangeError) as info:
        run(lam, m, d, w, n, None, 0, extended=True, block_size=8, refine=False)
    assert info.value.code == 1 and 0 <= info.value.layer < t
    res = run(lam, m, d, w, n, None, 0, extended=True, block_size=8)
    assert res.state.block_size < 8
    ref = log_dense_profile(lam, m, d, w, n, None, 0)
    assert np.max(np.abs(res.log_probabilities - ref) / np.maximum(1.0, np.abs(ref))) <= 1e-10
    assert np.all(np.isfinite(res.log_probabilities))


@pytest.mark.parametrize("extended", [False, True], ids=["linear", "extended"])
def test_layer_ranges_continue_exactly(extended):
    rng = np.random.default_rng(4)
    n, t, h = 500, 9, 12
    lam, m, d, w = random_stack(rng, t, h, extreme=False)
    whole = run(lam, m, d, w, n, 37, 0, extended=extended, threads=2)
    state, mins, lasts = None, [], []
    for stop in (9, 6, 2):
        start = {9: 6, 6: 2, 2: 0}[stop]
        part = run(lam, m, d, w, n, 37, 0, extended=extended, threads=2, layers=(start, stop), state=state)
        assert part.layers == (start, stop) and part.state.next_layer == start
        state = part.state
        mins.insert(0, part.min_self_weight)
        lasts.insert(0, part.last_self_weight)
    np.testing.assert_array_equal(part.probabilities, whole.probabilities)
    np.testing.assert_array_equal(np.concatenate(mins), whole.min_self_weight)
    np.testing.assert_array_equal(np.concatenate(lasts), whole.last_self_weight)
    with pytest.raises(ValueError):
        run(lam, m, d, w, n, 37, 0, extended=extended, layers=(0, 5))  # fresh state is at layer 9
    calls = []
    res = run(lam, m, d, w, n, 37, 0, extended=extended, threads=2, progress=lambda *a: calls.append(a))
    assert calls[-1] == (t, t) and len(calls) == t and res.layers == (0, t)
    np.testing.assert_array_equal(res.probabilities, whole.probabilities)
    np.testing.assert_array_equal(res.min_self_weight, whole.min_self_weight)


@pytest.mark.parametrize("extended", [False, True], ids=["linear", "extended"])
def test_tiny_intermediates(extended):
    """q = e^600 against alpha = e^-600, and window weights r^L far below 1e-308 that grow back
    to r^1 (slope 30): small but representable entries keep full relative precision."""
    for n, window, t in [(40, 40, 3), (80, 40, 3), (64, 30, 3), (100, 27, 3), (90, 60, 2)]:
        lam = np.ones(t)
        m = np.tile([30.0, 0.5], (t, 1))
        d = np.full((t, 2), -600.0)
        w = np.full((t, 2), 0.5)
        ref = dense_profile(lam, m, d, w, n, window, 0)
        res = run(lam, m, d, w, n, window, 0, extended=extended)
        big = ref > 1e-280
        assert np.all(np.abs(res.probabilities[big] - ref[big]) <= 1e-13 * ref[big])


def test_window_has_no_cancellation():
    """A window over a steeply increasing profile: a subtraction r^w u_{j+w} would leave
    relative garbage in the small entries; the segment recurrences are exact."""
    n, t, h = 120, 60, 2  # here (w = 10) the subtraction recurrence is 6% off in log p
    lam = np.full(t, 0.99)
    m = np.tile([0.0, 2.0], (t, 1))
    d = np.tile([6.0, 0.0], (t, 1))
    w = np.full((t, h), 0.5)
    ref = log_dense_profile(lam, m, d, w, n, 10, 0)
    for extended in (False, True):
        res = run(lam, m, d, w, n, 10, 0, extended=extended)
        fin = np.isfinite(ref) & (ref > -700)
        err = np.abs(res.log_probabilities[fin] - ref[fin]) / np.maximum(1.0, np.abs(ref[fin]))
        assert err.max() <= 1e-12
        assert np.all(res.probabilities[~np.isfinite(ref)] == 0)


def test_normaliser_matches_closed_form():
    """S is evaluated from anchors + a table, G(n0 + k) = G(n0) + r^n0 G(k): within 1e-14 of
    the closed form -expm1(-m L)/expm1(m) (checked to 40 digits)."""
    mpmath.mp.dps = 40
    rng = np.random.default_rng(0)
    reach = 1 << 20
    ns = np.unique(np.concatenate([np.arange(300), rng.integers(0, reach + 1, 200), [1023, 1024, 1025, reach]]))
    for m in [0.0, 1e-9, 2.0**-8, 0.1, 0.7071, 1.0, 5.0, 30.0, 700.0, *rng.uniform(0, 3, 5)]:
        got = native.geometric_sums(m, ns, reach=reach)
        mm = mpmath.mpf(m)
        for n_, g in zip(ns, got):
            exact = mpmath.mpf(int(n_)) if m == 0 else -mpmath.expm1(-mm * int(n_)) / mpmath.expm1(mm)
            if exact == 0:
                assert g == 0
                continue
            assert abs(mpmath.mpf(g) - exact) <= 1e-14 * exact


def test_invalid_arguments():
    lam, m, d, w = np.ones(1), np.ones((1, 2)), np.zeros((1, 2)), np.full((1, 2), 0.5)
    with pytest.raises(ValueError):
        run(lam, m, d, w, 10, 3, 5)  # window and bidirectional prefix together
    with pytest.raises(ValueError):
        run(lam, -m, d, w, 10, None, 0)
    with pytest.raises(ValueError):
        run(lam, m, d[:, :1], w, 10, None, 0)
    with pytest.raises(ValueError):
        run(lam, m, d, w, 10, 0, 0)


# ----------------------------------------------------------------------------- extreme inputs

LAMBDAS = (0.0, 1e-300, 1e-280, 1e-16, 0.5, 1.0 - 1e-16, 1.0)
SLOPES = (0.0, 1e-12, 0.5, 30.0, 700.0)
DIAGONALS = (-1e300, -600.0, 0.0, 600.0)


def test_tiny_lambda_is_not_a_range_error():
    """lambda = 1e-280 puts an entry 1e-280 below its neighbour: one float64 holds both (the
    regression: the range check compared entries with the block's largest *contribution*)."""
    for extended in (True, False):
        for block in (64, 1):
            res = run(
                np.array([1e-280]),
                np.zeros((1, 1)),
                np.zeros((1, 1)),
                np.ones((1, 1)),
                2,
                None,
                0,
                extended=extended,
                block_size=block,
                refine=False,
            )
            assert res.probabilities[0] == 1e-280 / 2 and res.probabilities[1] == 1 - 1e-280 / 2
    # one position receiving (1 - lambda) v_j + lambda (vA)_j with lambda tiny; a subnormal lambda
    # (2^-1074: beyond one block's range, so single-token blocks, which must not fail)
    for lam, block in ((1e-300, 64), (5e-324, 1)):
        res = run(
            np.full(3, lam),
            np.zeros((3, 2)),
            np.zeros((3, 2)),
            np.full((3, 2), 0.5),
            5,
            None,
            0,
            extended=True,
            block_size=block,
            refine=False,
        )
        ref = log_dense_profile(np.full(3, lam), np.zeros((3, 2)), np.zeros((3, 2)), np.full((3, 2), 0.5), 5, None, 0)
        assert np.max(np.abs(res.log_probabilities - ref) / np.maximum(1, np.abs(ref))) <= 1e-12


def test_extreme_lanes_in_one_group_single_token_blocks():
    """Heads of one SIMD group whose carries differ by far more than 2^1022 (slope 700 next to
    slope 0, q = e^{+-600}): every lane keeps its own scale, so block size 1 is exact."""
    lam = np.ones(3)
    m = np.tile([700.0, 0.0, 30.0, 700.0], (3, 1))
    d = np.tile([600.0, -600.0, 600.0, -600.0], (3, 1))
    w = np.tile([0.25, 0.25, 0.25, 0.25], (3, 1))
    for n in (2, 3, 7, 20):
        for mask in MASKS:
            window, k = {"causal": (None, 0), "window": (3, 0), "prefix": (None, n // 2), "full": (None, n)}[mask]
            ref = log_dense_profile(lam, m, d, w, n, window, k)
            res = run(lam, m, d, w, n, window, k, extended=True, block_size=1, refine=False)
            fin = np.isfinite(ref)
            assert np.array_equal(fin, np.isfinite(res.log_probabilities))
            err = np.abs(res.log_probabilities[fin] - ref[fin]) / np.maximum(1.0, np.abs(ref[fin]))
            assert err.max() <= 1e-10


from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def extreme_stacks(draw):
    n = draw(st.integers(1, 40))
    t = draw(st.integers(1, 8))
    h = draw(st.integers(1, 4))
    tau = draw(st.floats(0.5, 2.0))
    lam = np.array(draw(st.lists(st.sampled_from(LAMBDAS), min_size=t, max_size=t)))
    m_raw = np.array(draw(st.lists(st.sampled_from(SLOPES), min_size=t * h, max_size=t * h))).reshape(t, h)
    d_raw = np.array(draw(st.lists(st.sampled_from(DIAGONALS), min_size=t * h, max_size=t * h))).reshape(t, h)
    w = np.array(draw(st.lists(st.integers(0, 9), min_size=t * h, max_size=t * h)), dtype=float).reshape(t, h)
    w[:, 0] += 1.0  # every layer has some weight
    w /= w.sum(axis=1, keepdims=True)
    # the engine's scaling: divide by the temperature; |d| <= 600 (clip), slopes <= 700
    m = np.minimum(m_raw / tau, native.MAX_SLOPE)
    d = np.clip(d_raw / tau, -native.D_CLIP, native.D_CLIP)
    mask = draw(st.sampled_from(MASKS))
    window, k = None, 0
    if mask == "window":
        window = draw(st.integers(1, n + 2))
    elif mask == "prefix":
        k = draw(st.integers(0, n))
    elif mask == "full":
        k = n
    block = draw(st.sampled_from([1, 2, 8, 64]))
    threads = draw(st.sampled_from([1, 2]))
    return lam, m, d, w, n, window, k, block, threads


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extreme_stacks())
@example((np.array([1e-280]), np.zeros((1, 1)), np.zeros((1, 1)), np.ones((1, 1)), 2, None, 0, 64, 1))
def test_extreme_inputs_property(case):
    """Extreme but valid stacks: extended mode never raises (with or without refinement, and
    with single-token blocks never needs it) and matches the dense references: relative 1e-12
    where p is representable (> 1e-280), log p to 1e-10 (relative for |log p| > 1) elsewhere;
    linear mode is within 1e-13 of the dense float64 product."""
    lam, m, d, w, n, window, k, block, threads = case
    ref_lin = dense_profile(lam, m, d, w, n, window, k)
    ref_log = log_dense_profile(lam, m, d, w, n, window, k)
    lin = run(lam, m, d, w, n, window, k, threads=threads)
    assert np.max(np.abs(lin.probabilities - ref_lin)) <= 1e-13
    big = ref_lin > 1e-280
    fin = np.isfinite(ref_log)
    for kw in ({"block_size": block}, {"block_size": 1, "refine": False}):
        ext = run(lam, m, d, w, n, window, k, extended=True, threads=threads, **kw)
        p, lp = ext.probabilities, ext.log_probabilities
        assert np.all(np.abs(p[big] - ref_lin[big]) <= 1e-12 * ref_lin[big])
        assert np.array_equal(fin, np.isfinite(lp))  # structural zeros exactly, nothing else
        err = np.abs(lp[fin] - ref_log[fin]) / np.maximum(1.0, np.abs(ref_log[fin]))
        assert err.max(initial=0.0) <= 1e-10
