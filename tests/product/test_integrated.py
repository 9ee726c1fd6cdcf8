"""The error-guided trapezoid rule of integrated gradients (posbias.measure.integrated) against closed forms.

On the path x(a) = a e from the zero baseline, f(x) = sigmoid(k (w . x - c)) has F(a) = sigmoid(k (a z - c)),
z = w . e, and s_j(a) = (e_j . w_j) k sigmoid'(k (a z - c)), so the attribution is exactly

    A_j = (e_j . w_j) (sigmoid(k (z - c)) - sigmoid(-k c)) / z,

a step of width ~1/(k z) at a = c / z: the kind of narrow feature a uniform rule misses.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit as _sigmoid

from posbias.measure.integrated import initial_intervals, integrate


def _problem(sharpness: float, seed: int = 0, batch: int = 3, n: int = 5, d: int = 4):
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(batch, n, d))
    w = rng.normal(size=(n, d))
    z = (e * w).sum(axis=(1, 2))
    c = z * rng.uniform(0.1, 0.9, size=batch)  # each sequence's step at its own a = c / z inside (0, 1)
    calls = []

    def point(alphas):
        calls.append(np.array(alphas))
        t = sharpness * (alphas * z - c)
        slope = sharpness * _sigmoid(t) * (1 - _sigmoid(t))
        return _sigmoid(t), (e * w).sum(axis=-1) * slope[:, None]

    exact = (e * w).sum(axis=-1) * ((_sigmoid(sharpness * (z - c)) - _sigmoid(-sharpness * c)) / z)[:, None]
    return point, exact, calls, c / z


def test_a_linear_path_is_integrated_exactly_with_one_interval():
    rng = np.random.default_rng(1)
    e, w = rng.normal(size=(2, 6, 3)), rng.normal(size=(6, 3))

    def point(alphas):  # f(x) = w . x: F linear in a, s constant
        return alphas * (e * w).sum(axis=(1, 2)), np.broadcast_to((e * w).sum(axis=-1), (2, 6))

    attribution, error = integrate(point, 1, 2)
    np.testing.assert_allclose(attribution, (e * w).sum(axis=-1), rtol=1e-15, atol=1e-15)
    assert np.all(error < 1e-14)


@pytest.mark.parametrize("sharpness", [3.0, 60.0])
def test_the_attribution_converges_to_the_closed_form(sharpness):
    errors = []
    for steps in (16, 64, 256):
        point, exact, calls, _ = _problem(sharpness)
        attribution, completeness = integrate(point, steps, 3)
        assert len(calls) == steps + 1  # K + 1 gradients, the budget stated
        errors.append(np.abs(attribution - exact).max() / np.abs(exact).max())
        gap = attribution.sum(axis=1)  # the completeness error is that of the sum against F(1) - F(0)
        assert np.all(completeness <= errors[-1] * np.abs(exact).max() * exact.shape[1] / np.abs(gap) + 1e-12)
    assert errors[0] > errors[1] > errors[2] and errors[2] < 1e-4, errors


def test_bisection_beats_the_uniform_trapezoid_on_a_narrow_step():
    steps, sharpness = 64, 400.0
    point, exact, _, _ = _problem(sharpness)
    attribution, _ = integrate(point, steps, 3)
    nodes = np.linspace(0, 1, steps + 1)  # the uniform trapezoid with the same K + 1 gradients
    slopes = np.stack([point(np.full(3, a))[1] for a in nodes], axis=1)
    uniform = ((slopes[:, 1:] + slopes[:, :-1]) / 2 / steps).sum(axis=1)
    adaptive_error = np.abs(attribution - exact).max()
    uniform_error = np.abs(uniform - exact).max()
    assert adaptive_error < uniform_error / 50, (adaptive_error, uniform_error)


def test_nodes_are_spent_where_the_step_is():
    point, _, calls, step_at = _problem(400.0, batch=1)
    integrate(point, 64, 1)
    start = initial_intervals(64)
    assert len(calls) == 65 and start == 32
    bisected = np.concatenate(calls[start + 1 :])  # each within three uniform intervals of the step
    assert np.all(np.abs(bisected - step_at[0]) < 3 / start), (step_at, bisected)


def test_steps_must_be_positive():
    with pytest.raises(ValueError, match="steps: expected a positive integer, got 0"):
        integrate(lambda a: (a, a[:, None]), 0, 1)
