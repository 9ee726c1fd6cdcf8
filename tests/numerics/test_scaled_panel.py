"""The C kernel that forms the power engine's W panels (numerics/native_panel.py) against the NumPy
formulation it replaces, written out here: the column maxima and the cut bit for bit, the
exponential within 2 ulps of the standard library's; and the power engine on both routes against
exact rationals and each other."""

import math
from fractions import Fraction

import numpy as np
import pytest

import posbias.numerics as nx
from posbias.numerics import native_panel, scaled_product
from posbias.numerics.periodic import PeriodicStack
from posbias.numerics.power import Power
from tests.exact_rollout import exact_kernel, periodic_profile

pytestmark = pytest.mark.skipif(not native_panel.available(), reason="no C compiler")  # CI has gcc
LOG_TINY = math.log(2.0**-1022)


def numpy_panel(log_y, s, keep):
    """scaled_product's NumPy route, written out: (W, g)."""
    w = log_y + s[:, None]
    g = np.max(w, axis=0)
    w = w - np.where(np.isfinite(g), g, 0.0)
    cut = w < keep[:, None]
    with np.errstate(under="ignore"):
        w = np.exp(w)
    w[cut] = 0.0
    return w, g


def _case(seed, rows=300, cols=70):
    rng = np.random.default_rng(seed)
    big = np.log(rng.random((rows + 20, cols + 30))) * rng.uniform(1, 60) - rng.random(cols + 30)[None, :] * 300
    big[rng.random(big.shape) < 0.1] = -np.inf
    big[:, 3] = -np.inf  # a column with no term
    s = rng.normal(size=rows) * 40
    s[rng.random(rows) < 0.05] = -np.inf  # all-zero block-columns of X
    keep = LOG_TINY - np.log(rng.uniform(2.0**-400, 1.0, rows))  # log(2^-1022 / m_l), m_l <= 1
    return big[7 : 7 + rows, 11 : 11 + cols], s, keep  # a strided view, as the engine passes


@pytest.mark.parametrize("seed", range(6))
def test_panel_equals_the_numpy_route(seed):
    log_y, s, keep = _case(seed)
    want, g_want = numpy_panel(log_y, s, keep)
    buffer = np.full((log_y.shape[0], 256), np.nan)  # the engine's buffers are wider than a panel
    w = buffer[:, : log_y.shape[1]]
    g = native_panel.form_w(log_y, s, keep, w)
    assert np.array_equal(g, g_want)  # -inf where a column has no term
    assert np.array_equal(w == 0, want == 0)  # the same cut
    kept = want > 0
    assert want[kept].min() >= 2.0**-1022
    assert np.all(np.abs(w[kept] - want[kept]) <= 2 * np.spacing(want[kept]))
    assert np.isnan(buffer[:, log_y.shape[1] :]).all()  # nothing written beside the panel


def test_exponential_within_two_ulps_of_the_standard_library():
    t = np.concatenate([np.linspace(LOG_TINY, 0.0, 200_001), [LOG_TINY, -1e-300, -0.5 * math.log(2.0), 0.0]])
    w = np.empty((t.size, 1))
    g = native_panel.form_w(t[:, None], np.zeros(t.size), np.full(t.size, -np.inf), w)
    assert g.tolist() == [0.0]
    want = np.array([math.exp(x) for x in t])
    assert np.all(np.abs(w[:, 0] - want) <= 2 * np.spacing(want))
    assert w[-1, 0] == 1.0


def test_a_dead_column_of_x_is_cut_below_the_normals():
    """keep = -inf (an all-zero column of X): NumPy keeps exp(t) into the subnormals, the kernel cuts
    below 2^-1022; both rows meet only zero mantissas, so the products are the same."""
    log_y = np.array([[0.0, 0.0], [-720.0, -1.0]])
    w = np.empty((2, 2))
    native_panel.form_w(log_y, np.zeros(2), np.array([LOG_TINY, -np.inf]), w)
    want, _ = numpy_panel(log_y, np.zeros(2), np.array([LOG_TINY, -np.inf]))
    assert want[1, 0] > 0 and w[1, 0] == 0.0 and w[1, 1] == want[1, 1]
    assert np.array_equal(np.array([[1.0, 0.0]]) @ w, np.array([[1.0, 0.0]]) @ want)


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match="do not match"):
        native_panel.form_w(np.zeros((3, 2)), np.zeros(2), np.zeros(3), np.empty((3, 2)))
    with pytest.raises(ValueError, match="float64 arrays with contiguous rows"):
        native_panel.form_w(np.zeros((3, 4))[:, ::2], np.zeros(3), np.zeros(3), np.empty((3, 2)))


@pytest.fixture(params=["native", "numpy"])
def panel_route(request, monkeypatch):
    if request.param == "numpy":
        monkeypatch.setattr(scaled_product, "native_panels", lambda: False)
    return request.param


def test_both_routes_match_exact_rationals(panel_route):
    n = 5
    lam = [Fraction(1, 2), Fraction(3, 4)]
    kernels = [exact_kernel(n, Fraction(1, 3), Fraction(1)), exact_kernel(n, Fraction(1, 2), Fraction(3))]
    block = nx.AlibiStack.build([0.5, 0.75], [[math.log(3.0)], [math.log(2.0)]], [[0.0], [math.log(3.0)]])
    for t in (3, 8, 61, 1000):
        row = periodic_profile(lam, kernels, t)
        got = Power().profile(PeriodicStack.build(block, t), n)
        assert np.abs(got.probabilities - np.array([float(x) for x in row])).max() <= 1e-14, (panel_route, t)


def test_the_routes_agree_deep_in_extended_range(monkeypatch):
    """N = 384, T = 3 10^4 (entries near e^-17000, blocks of rows): the two routes' log p agree to the
    log-scale resolution, relative 1e-14 of |log p|."""
    stack = PeriodicStack.build(nx.AlibiStack.build([0.5], nx.alibi_slopes(8)), 30_000)
    native = Power().profile(stack, 384)
    monkeypatch.setattr(scaled_product, "native_panels", lambda: False)
    plain = Power().profile(stack, 384)
    assert not native.unresolved().any() and not plain.unresolved().any()
    assert native.log_probabilities.min() < -1e4
    diff = np.abs(native.log_probabilities - plain.log_probabilities)
    assert np.all(diff <= 1e-14 * np.maximum(1.0, np.abs(plain.log_probabilities)))
    assert abs(native.probabilities.sum() - 1.0) <= 1e-12
