"""theorem.continuum: the large-N limit of the Cesàro rollout under constant λ (THEORY.md closed form, C6).

Independent routes: mpmath quadrature of the limit law (its moments and its binomial
mixture) against theorem.cesaro_exact's integer evaluator.
"""

import math
from fractions import Fraction

import mpmath
import pytest

from posbias.theorem import cesaro_exact, continuum
from posbias.theorem.claims import certificate_registry
from posbias.theorem.continuum import ContinuumParams
from posbias.theorem.derivation import DeriveError


def test_density_moments_are_the_cesaro_moments():
    t, lam = 6, 0.3
    with mpmath.workdps(30):
        for k in (0, 1, 3, 10):
            integral = mpmath.quad(lambda x, k=k: x**k * continuum.density(float(x), t, lam), [0, 0.5, 1])
            want = float(cesaro_exact.moment_fraction(k, [Fraction(3, 10)] * t))
            assert float(integral) + (1 - lam) ** t == pytest.approx(want, rel=1e-12)


def test_exact_profile_is_the_binomial_mixture_of_the_limit_law():
    n, t, lam = 40, 5, 0.3
    p = cesaro_exact.exact_profile([Fraction(3, 10)] * t, n).floats()
    with mpmath.workdps(30):
        for j in (0, 1, 7, 20, 38, 39):
            mix = mpmath.quad(
                lambda x, j=j: (
                    math.comb(n - 1, j) * x**j * (1 - x) ** (n - 1 - j) * continuum.density(float(x), t, lam)
                ),
                [0, 0.25, 0.5, 0.75, 1],
            )
            atom = (1 - lam) ** t if j == n - 1 else 0.0
            assert float(mix) + atom == pytest.approx(p[j], rel=1e-9)


def test_window_error_decreases_like_one_over_n():
    errs = [continuum.continuum_error(n, 6, Fraction(2, 5)) for n in (64, 128, 256, 512)]
    for a, b in zip(errs, errs[1:]):
        assert b.window_max < a.window_max
        assert 0.4 < b.window_max / a.window_max < 0.6
        assert b.atom_error < a.atom_error
    assert errs[-1].window_max < 0.01


def test_interior_max_is_dominated_by_the_log_singularity():
    e = continuum.continuum_error(256, 8, Fraction(3, 10))
    assert e.interior_argmax == 1 and e.interior_max > 10 * e.window_max


def test_derivation_reports_errors_at_n_and_2n():
    r = continuum.compute(ContinuumParams(tokens=128, layers=8, lam=Fraction(3, 10)))
    d = r.data
    assert [e["tokens"] for e in d["errors"]] == [128, 256]
    assert d["errors"][1]["window_max"] < d["errors"][0]["window_max"]
    assert d["atom"] == pytest.approx(0.7**8)
    direct = continuum.continuum_error(256, 8, Fraction(3, 10))
    assert d["errors"][1]["window_max"] == direct.window_max
    assert "(-ln x)" in r.text and r"\ln x" in r.latex


def test_certificates_hold():
    certs = {n: c for n, c in certificate_registry().certificates.items() if n.startswith("continuum:")}
    assert set(certs) == {"continuum:moments", "continuum:total-mass", "continuum:binomial-mixture"}
    for name, check in certs.items():
        c = check()
        assert c.name == name and c.holds, (name, c.detail)


@pytest.mark.parametrize(
    "args",
    [
        ["--lam", "1.5"],
        ["--lam", "x"],
        ["--tokens", "4"],
        ["--tokens", "4096"],
        ["--window", "0.6"],
        ["--layers", "0"],
        ["--bogus"],
    ],
)
def test_bad_input_raises_one_line_derive_error(args):
    with pytest.raises(DeriveError) as info:
        continuum.compute(continuum.DERIVATION.parse(args))
    assert "\n" not in str(info.value)


def test_jax_density_matches_float_density_and_exact_profile():
    """The lambdified (JAX) density equals the float formula, and N p(j) approaches it
    (exact Cesàro profile at N = 512, window [0.1, 0.9])."""
    from fractions import Fraction

    import numpy as np

    from posbias.theorem.cesaro_exact import exact_profile
    from posbias.theorem.continuum import density, jax_density

    f = jax_density(6, 0.3)
    xs = np.linspace(0.05, 1.0, 40)
    assert np.allclose(np.asarray(f(xs)), [density(x, 6, 0.3) for x in xs], rtol=1e-13, atol=0)
    n = 512
    p = np.array(exact_profile([Fraction(3, 10)] * 6, n).floats())
    j = np.arange(int(0.1 * n), int(0.9 * n))
    assert np.max(np.abs(n * p[j] - np.asarray(f(j / n)))) < 0.02
