"""The power engine's extended range with a log scale per block of rows and column
(numerics/power.py) where one scale per column cannot hold the entries of B^(2^k): against the
exact extended-range per-layer scan, exact rationals, a log-space power of the kernels' closed
form, and C2(c)'s closed form at T = 10^9; unresolved entries are reported, never guessed; and
``auto`` re-runs what the power route leaves unresolved when the extended scan is cheap."""

import math
from fractions import Fraction

import numpy as np
import pytest

import posbias.numerics as nx
from posbias.numerics import power, scaled, scaled_product
from posbias.numerics.auto import Auto
from posbias.numerics.masks import Full
from posbias.numerics.periodic import PeriodicStack
from posbias.numerics.power import Power
from posbias.numerics.structured import Structured
from tests.exact_rollout import exact_kernel, log_power_row, periodic_profile


def _one_scale_per_column(monkeypatch):
    """Blocks as tall as the matrix: one log scale per column, the scaling before blocks of rows."""
    monkeypatch.setattr(scaled, "SPAN_BUDGET", math.inf)


def _blocks_of(monkeypatch, rows):
    """Blocks of ``rows`` rows at every squaring, whatever the entries span."""
    monkeypatch.setattr(scaled, "MIN_ROWS", rows)  # block_rows' smallest height
    monkeypatch.setattr(power, "MIN_ROWS", rows)  # the block's first height
    monkeypatch.setattr(scaled, "SPAN_BUDGET", -1.0)


def test_blocks_of_rows_resolve_what_one_scale_per_column_cannot(monkeypatch):
    # N = 512, T = 3 10^4, 8 ALiBi heads: p(N-1) = e^-17760; the per-column engine resolved only p(0)
    n, t = 512, 30_000
    stack = PeriodicStack.build(nx.AlibiStack.build([0.5], nx.alibi_slopes(8)), t)
    exact = Structured(extended=True).profile(stack.expand(), n).log_probabilities  # per-layer, block floating point
    assert np.all(np.isfinite(exact)) and exact.min() < -1e4
    got = Power().profile(stack, n)
    assert got.extended_range and not got.unresolved().any()
    np.testing.assert_allclose(got.log_probabilities, exact, rtol=1e-13, atol=1e-11)
    assert "blocks of" in got.notes[0] and "unresolved" not in got.notes[0]

    _one_scale_per_column(monkeypatch)
    coarse = Power().profile(stack, n).log_probabilities
    lost = ~np.isfinite(coarse)
    assert lost.sum() > n // 2  # columns of B^(2^k) span more than float64's range: reported lost ...
    np.testing.assert_allclose(coarse[~lost], exact[~lost], rtol=1e-13, atol=1e-11)  # ... never wrong


def test_a_billion_layers_against_the_closed_form_and_log_space_squaring(monkeypatch):
    n, t, lam = 256, 10**9, 0.5
    block = nx.AlibiStack.build([lam], nx.alibi_slopes(32))
    stack = PeriodicStack.build(block, t)
    prof = Power().profile(stack, n)
    assert prof.extended_range and not prof.unresolved().any()
    assert abs(prof.probabilities[0] - 1.0) <= 1e-12  # C5(b)/(c): collapse onto token 0
    a_last = nx.kernel_diagonals(block, n)[0, -1]  # C2(c): log p(N-1) = T log(1 - lambda (1 - A[N-1, N-1]))
    atom = t * math.log1p(-lam * (1.0 - a_last))
    assert abs(prof.log_probabilities[-1] - atom) <= 1e-12 * abs(atom)
    with np.errstate(divide="ignore"):
        reference = log_power_row(np.log(np.asarray(nx.dense_rollout(block, n)[0])), t)
    np.testing.assert_allclose(prof.log_probabilities, reference, rtol=1e-13, atol=1e-12)

    _one_scale_per_column(monkeypatch)
    coarse = Power().profile(stack, n).log_probabilities
    lost = ~np.isfinite(coarse)
    assert lost.sum() > n // 2
    np.testing.assert_allclose(coarse[~lost], reference[~lost], rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("rows", [2, 4])
def test_small_blocks_match_exact_rationals(monkeypatch, rows):
    _blocks_of(monkeypatch, rows)  # N = 5: blocks of 2 or 4 rows, the last one short
    n = 5
    lam = [Fraction(1, 2), Fraction(3, 4)]
    kernels = [exact_kernel(n, Fraction(1, 3), Fraction(1)), exact_kernel(n, Fraction(1, 2), Fraction(3))]
    block = nx.AlibiStack.build([0.5, 0.75], [[math.log(3.0)], [math.log(2.0)]], [[0.0], [math.log(3.0)]])
    for t in (3, 8, 61):
        row = periodic_profile(lam, kernels, t)
        got = Power().profile(PeriodicStack.build(block, t), n)
        assert np.abs(got.probabilities - np.array([float(x) for x in row])).max() <= 1e-14, (rows, t)


@pytest.mark.parametrize("mask", [None, Full()], ids=["causal", "full"])
def test_small_blocks_match_the_plain_scan(monkeypatch, mask):
    _blocks_of(monkeypatch, 4)  # N = 22: five blocks of 4 rows and one of 2
    n = 22
    rng = np.random.default_rng(5)
    block = nx.AlibiStack.build(
        rng.uniform(0.2, 0.95, 2),
        rng.uniform(0.0, 1.5, (2, 3)),
        rng.normal(0.0, 1.5, (2, 3)),
        rng.uniform(0.1, 1.0, (2, 3)),
        mask=mask,
    )
    for t in (5, 64, 1001):
        stack = PeriodicStack.build(block, t)
        got = Power().profile(stack, n)
        reference = nx.profile(stack.expand(), n, engine="structured")
        assert np.abs(got.probabilities - reference.probabilities).max() <= 1e-12, t
        assert "blocks of 4 rows" in got.notes[0]


def test_reblocking_keeps_every_entry_and_charges_what_it_flushes():
    rng = np.random.default_rng(1)
    n = 40
    log_m = rng.uniform(-30.0, 0.0, (n, n)) - 25.0 * np.arange(n)[:, None]  # rows fall 25 nats each: e^-1005
    log_m[np.triu_indices(n, 1)] = -np.inf
    scale = log_m.reshape(5, 8, n).max(axis=1)  # blocks of 8 rows (175 + 30 nats each)
    kept = np.isfinite(log_m)
    with np.errstate(invalid="ignore"):
        mant = np.where(kept, np.exp(log_m - np.repeat(scale, 8, axis=0)), 0.0)
    m = scaled.Scaled(mant, scale, np.full((5, n), -np.inf), 8)
    fine = scaled.reblock(m, 2, causal=True)
    np.testing.assert_allclose(scaled.log_entries(fine)[kept], log_m[kept], rtol=1e-14, atol=1e-12)
    assert np.all(fine.mant.reshape(20, 2, n).max(axis=1)[np.isfinite(fine.scale)] == 1.0)
    coarse = scaled.reblock(fine, 32, causal=True)  # a block of 32 rows spans 800 nats: its lowest rows flush
    flushed = kept & (coarse.mant == 0)
    assert flushed.any() and not flushed[32:].any()
    for i, j in zip(*np.nonzero(flushed)):  # every flushed entry lies under its block-column's loss bound
        assert log_m[i, j] <= coarse.err[i // 32, j]
    held = kept & (coarse.mant > 0)
    np.testing.assert_allclose(scaled.log_entries(coarse)[held], log_m[held], rtol=1e-14, atol=1e-12)
    assert np.all(np.isneginf(coarse.err[1]))  # rows 32..39 span 205 nats: nothing flushed there


def _steep_log_block(n, slope, lam):
    """log of the block R = (1 - lambda) I + lambda A for one causal head of slope m, no content:
    A[i, j] = e^{-m (i - j)} / sum_{d <= i} e^{-m d} in closed form, far below 1e-308 too."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    log_norm = np.log(np.cumsum(np.exp(-slope * np.arange(n))))
    with np.errstate(divide="ignore"):
        log_a = np.where(j <= i, -slope * (i - j) - log_norm[:, None], -np.inf)
        log_r = np.where(j < i, math.log(lam) + log_a, -np.inf)
    log_r[np.diag_indices(n)] = np.log1p(-lam * (1.0 - np.exp(np.diag(log_a))))
    return log_r


def test_lost_kernel_entries_are_reported_never_guessed():
    # slope 50: kernel entries more than 14 tokens apart underflow float64 in the block product
    n, t, slope = 48, 1000, 50.0
    stack = PeriodicStack.build(nx.AlibiStack.build([0.5], [slope]), t)
    exact = log_power_row(_steep_log_block(n, slope, 0.5), t)
    got = Power().profile(stack, n).log_probabilities
    resolved = np.isfinite(got)
    np.testing.assert_allclose(got[resolved], exact[resolved], rtol=1e-13, atol=1e-11)
    assert (~resolved).any()  # entries the lost kernel entries could change are unresolved ...
    assert resolved[exact > -550.0].all()  # ... and every entry above e^-550 is resolved


def test_auto_reruns_unresolved_entries_on_the_extended_scan_when_it_is_cheap():
    n, t, slope = 48, 1000, 50.0
    stack = PeriodicStack.build(nx.AlibiStack.build([0.5], [slope]), t)
    exact = log_power_row(_steep_log_block(n, slope, 0.5), t)
    prof = nx.profile(stack, n)
    assert (prof.engine, prof.path) == ("structured", "native-extended") and not prof.unresolved().any()
    assert any("re-ran on the per-layer scan with extended range" in note for note in prof.notes)
    np.testing.assert_allclose(prof.log_probabilities, exact, rtol=1e-12, atol=1e-9)
    kept = Auto(periodic_retry_seconds=1e-6).profile(stack, n)  # the retry estimated above the limit
    assert kept.engine == "power" and kept.unresolved().any()
    assert any("not re-run (the extended-range scan is estimated" in note for note in kept.notes)


def _scaled_lower(rng, n, rows, lost=()):
    """(stored Scaled, true matrix): a random lower-triangular matrix in blocks of ``rows``, with the
    entries ``lost`` set to 0 in the stored one and bounded by its loss bound."""
    true = np.tril(rng.uniform(0.05, 1.0, (n, n)))
    stored = true.copy()
    err = np.full((-(-n // rows), n), -np.inf)
    for i, j in lost:
        stored[i, j] = 0.0
        err[i // rows, j] = max(err[i // rows, j], math.log(true[i, j]))
    m = scaled.scaled(stored, 1e-300, causal=True, rows=rows)
    return scaled.Scaled(m.mant, m.scale, np.maximum(m.err, err), rows), true


@pytest.mark.parametrize("lose", ["x", "y", "both"])
def test_product_bound_covers_what_either_factor_lost(lose):
    rng = np.random.default_rng(3)
    n, rows = 24, 8
    lost = [(10, 3), (17, 16), (23, 0), (9, 9)]
    x, x_true = _scaled_lower(rng, n, rows, lost if lose != "y" else ())
    y, y_true = _scaled_lower(rng, n, rows, lost if lose != "x" else ())
    z = scaled_product.multiply(x, y, scaled.log_entries(y), causal=True)
    value = np.exp(scaled.log_entries(z))
    exact = x_true @ y_true
    bound = np.exp(np.repeat(z.err, rows, axis=0))
    gap = np.abs(exact - value) - 1e-14 * exact
    assert np.all(gap[np.tril_indices(n)] <= bound[np.tril_indices(n)])
    assert gap.max() > 1e-3  # the lost entries did change the product


def test_vector_bound_covers_what_the_vector_and_the_matrix_lost():
    rng = np.random.default_rng(4)
    n, rows = 24, 8
    m, m_true = _scaled_lower(rng, n, rows, [(20, 5), (12, 12), (23, 17)])
    v_true = rng.uniform(0.1, 1.0, n)
    v = v_true.copy()
    v[[4, 19]] = 0.0
    with np.errstate(divide="ignore"):
        logv, errv = np.log(v), np.where(v == 0.0, np.log(v_true), -np.inf)
    logw, lost = scaled_product.vector_times(logv, errv, m, scaled.log_entries(m), causal=True)
    exact = v_true @ m_true
    gap = np.abs(exact - np.exp(logw)) - 1e-14 * exact
    assert np.all(gap <= np.exp(lost)) and gap.max() > 1e-3
