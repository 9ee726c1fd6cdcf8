"""benchmarks/power_spans.py (issue 21, goal 2): its span measures on matrices whose spans are known by
hand, and the script end to end on a small model."""

import numpy as np
import pytest

from tests.benchmark_scripts import load, run_for_json

SPANS = load("power_spans.py")
N = 16


def _distance(s: float) -> np.ndarray:
    """log M[i, j] = -s |i - j|: linear in (i, j) off the diagonal, so every tile off the diagonal is
    a row factor times a column factor; a diagonal tile of b holds 0 on its diagonal and -(b - 1) s in
    its corners."""
    i = np.arange(N)
    return -s * np.abs(i[:, None] - i[None, :]).astype(float)


@pytest.mark.parametrize("b", [2, 4, 8])
def test_the_distance_matrix_spans_by_hand(b):
    tiles = SPANS.tiles(_distance(3.0), b)
    # the fit reaches the bound: a diagonal tile's corners force (b - 1) s whatever the scales
    assert SPANS.fitted_span(tiles) == pytest.approx(3.0 * (b - 1), abs=1e-12)
    assert SPANS.span_at_least(tiles) == pytest.approx(3.0 * (b - 1), abs=1e-12)
    # blocks of b rows with a scale per column: a column inside a block runs from 0 on the diagonal to
    # -(b - 1) s at the block's far row
    blocks = _distance(2.0).reshape(N // b, b, N)
    assert SPANS.fitted_span(blocks, row_scales=False) == pytest.approx(2.0 * (b - 1), abs=1e-12)


def test_a_product_of_row_and_column_factors_has_no_span_left():
    rng = np.random.default_rng(1)
    log_m = rng.normal(scale=400.0, size=N)[:, None] + rng.normal(scale=400.0, size=N)[None, :]
    assert SPANS.fitted_span(log_m[None]) == pytest.approx(0.0, abs=1e-9)
    assert SPANS.fitted_span(SPANS.tiles(log_m, 4)) == pytest.approx(0.0, abs=1e-9)
    log_m[np.triu_indices(N, 1)] = -np.inf  # zeros (the causal support) take no part in a bound
    assert SPANS.span_at_least(log_m[None]) == pytest.approx(0.0, abs=1e-9)


def _brute_force_bound(m: np.ndarray) -> float:
    """max |L_ij - L_il - L_kj + L_kl| / 2 over every pair of rows and of columns, all four finite."""
    best = 0.0
    rows, cols = m.shape
    for i in range(rows):
        for k in range(rows):
            for j in range(cols):
                for col in range(cols):
                    four = (m[i, j], m[i, col], m[k, j], m[k, col])
                    if all(np.isfinite(four)):
                        best = max(best, abs(four[0] - four[1] - four[2] + four[3]) / 2.0)
    return best


@pytest.mark.parametrize("seed", range(5))
def test_the_lower_bound_is_every_cross_and_lies_below_what_the_fit_achieves(seed):
    rng = np.random.default_rng(seed)
    m = rng.normal(scale=50.0, size=(3, 7, 6))
    m[rng.random(m.shape) < 0.2] = -np.inf
    bound = SPANS.span_at_least(m, references=6)  # every column a reference: every cross
    assert bound == pytest.approx(max(_brute_force_bound(g) for g in m), abs=1e-9)
    assert bound <= SPANS.fitted_span(m) + 1e-9


def test_the_script_end_to_end(tmp_path):
    r = run_for_json("power_spans.py", "--tokens", "128", "--layers", "4096", "--heads", "4", cwd=tmp_path)
    assert r["unresolved"] == 0 and [p["power"] for p in r["powers"]] == [f"2^{k}" for k in range(13)]
    for p in r["powers"]:
        for fitted in ("residual_span", "tile_64", "tile_128", "block_64_row_scales"):
            assert p[f"{fitted}_at_least"] <= p[fitted] + 1e-9  # a bound below what scales achieved
        # one scale per column is a special case of row and column scales
        assert p["residual_span_at_least"] <= p["column_span"] + 1e-9
        assert p["block_64_row_scales_at_least"] <= p["block_64"] + 1e-9
