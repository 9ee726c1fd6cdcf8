"""Graded shape measures (issue 10 section 5): thirds, middle-mass ratio, dip depth, lost in the middle."""

from fractions import Fraction as F

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import posbias.numerics as nx
from posbias.numerics.shape import log_middle_measures, lost_in_middle, middle_mass_ratio, thirds


@given(st.integers(0, 10_000))
def test_thirds_partition_by_position(n):
    a, b, c = thirds(n)
    assert (a.start, a.stop, b.stop, c.stop) == (0, b.start, c.start, n)
    for j in range(max(0, n - 50), n):  # membership by the defining inequalities j < N/3, j < 2N/3
        part = 0 if 3 * j < n else 1 if 3 * j < 2 * n else 2
        assert j in range(*(a, b, c)[part].indices(n))


def test_hand_computed_cases():
    # N = 6: thirds {0, 1}, {2, 3}, {4, 5}; middle share 2/6 = 1/3
    p = [F(3, 10), F(1, 10), F(1, 20), F(1, 20), F(1, 10), F(2, 5)]
    assert middle_mass_ratio(p) == F(1, 10) / F(1, 3) == F(3, 10)
    assert lost_in_middle(p) is True
    flat = [F(1, 6)] * 6
    assert middle_mass_ratio(flat) == 1 and lost_in_middle(flat) is False
    primacy = [F(1, 2), F(1, 4), F(1, 8), F(1, 16), F(1, 32), F(1, 32)]
    assert lost_in_middle(primacy) is False  # the middle third gets more than the last
    assert middle_mass_ratio([1.0, 2.0]) is None and lost_in_middle([1.0]) is None


def test_numpy_and_fraction_routes_agree():
    rng = np.random.default_rng(0)
    for n in (3, 4, 5, 17, 256):
        q = rng.integers(1, 100, n)
        exact = [F(int(x), int(q.sum())) for x in q]
        assert abs(middle_mass_ratio(q / q.sum()) - float(middle_mass_ratio(exact))) < 1e-12
        assert lost_in_middle(q / q.sum()) == lost_in_middle(exact)
        log_ratio, lost = log_middle_measures(np.log(q) - 7.0)  # any normalisation
        assert abs(np.exp(log_ratio) - float(middle_mass_ratio(exact))) < 1e-12 and lost == lost_in_middle(exact)


@pytest.mark.parametrize("layers,lam,d", [(70, 0.05, 0.0), (32, 0.5, 0.0), (8, 0.9, 3.0)])
def test_summary_measures_against_dense(layers, lam, d):
    """Summary's graded measures against the same quantities read off the dense route's profile."""
    n = 96
    stack = nx.AlibiStack.build([lam] * layers, nx.alibi_slopes(8), d)
    p = nx.profile(stack, n, engine="dense").probabilities
    assert abs(p.sum() - 1) < 1e-12
    s = nx.summarize(nx.profile(stack, n), stack)
    k = int(np.argmin(p))
    assert s.argmin == k and s.argmin_relative == pytest.approx(k / (n - 1), abs=0)
    assert s.dip_depth == pytest.approx(min(p[0], p[-1]) / p[k], rel=1e-10)
    assert s.log_dip_depth == pytest.approx(np.log(min(p[0], p[-1]) / p[k]), abs=1e-10)
    middle = p[32:64]  # N = 96: j in [32, 64)
    assert s.middle_mass_ratio == pytest.approx(middle.sum() / (32 / 96), rel=1e-10)
    thirds_mass = p[:32].sum(), middle.sum(), p[64:].sum()
    expected = bool(
        middle.sum() / (1 / 3) < 0.5 and thirds_mass[1] < thirds_mass[0] and thirds_mass[1] < thirds_mass[2]
    )
    assert s.lost_in_middle is expected


def test_dip_depth_from_log_space_beyond_float64():
    """Attention-only at depth: p_min far below 1e-308, the dip depth still finite in log space."""
    stack = nx.AlibiStack.build([1.0] * 700, [0.5, 0.05])
    s = nx.summarize(nx.profile(stack, 2048), stack)
    assert s.log_p_min < -800 and s.log_dip_depth is not None and np.isfinite(s.log_dip_depth)
    assert s.log_dip_depth == pytest.approx(min(s.log_p_first, s.log_p_last) - s.log_p_min, abs=0)
    assert s.dip_depth is None or s.log_dip_depth < 700
    middle = slice(683, 1366)  # N = 2048: j in [2048/3, 4096/3)
    logp = nx.profile(stack, 2048).log_probabilities
    expected = np.logaddexp.reduce(logp[middle]) - np.logaddexp.reduce(logp) + np.log(2048 / 683)
    assert s.log_middle_mass_ratio == pytest.approx(expected, rel=1e-12) and expected < -200
