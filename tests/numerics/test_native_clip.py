"""The C kernel clips the content diagonal to |d/tau| <= 600 (numerics/native/alibi_layer.c). Where the
clip changes a profile (``structured.clip_inexact``) the kernel must not be used: the structured engine
takes its XLA path, its extended mode refuses, and ``auto`` answers through another engine. Checked on
N = 2 stacks whose profiles are known in closed form (THEORY.md, Notation): with lambda = 1 and one head,
row 1 of the attention reads itself with alpha = 1 / (1 + e^{-d} e^{-m}) and token 0 with 1 - alpha."""

import numpy as np
import pytest

import posbias.numerics as nx
from posbias.numerics import engines
from posbias.numerics.structured import Structured, clip_inexact


def _log_alpha(d: float, m: float) -> float:
    """log of 1 / (1 + e^{-d - m}), exact in float64 for any sign."""
    return -float(np.logaddexp(0.0, -d - m))


def _log_one_minus_alpha(d: float, m: float) -> float:
    return -float(np.logaddexp(0.0, d + m))


CASES = [  # (slope, diagonal): far outside the clip on either side, each by hundreds of nats
    (559.0, -2000.0),  # self-weight e^{-1441}: the clip would make it e^{-41}
    (0.0, 650.0),  # token 0 gets e^{-650}: the clip would give e^{-600}
    (0.0, 1000.0),
    (3.0, -900.0),
]


@pytest.mark.parametrize(("slope", "diagonal"), CASES)
def test_auto_and_structured_give_the_closed_form_beyond_the_clip(slope, diagonal):
    stack = nx.AlibiStack.build([1.0], [slope], diagonal=diagonal)
    expected = np.array([_log_one_minus_alpha(diagonal, slope), _log_alpha(diagonal, slope)])
    assert clip_inexact(np.array([[slope]]), np.array([[diagonal]]), np.array([[1.0]])).all()
    for engine in (engines.get("auto"), engines.get("log")):
        got = nx.profile(stack, 2, engine=engine)
        assert not got.unresolved().any(), (engine.name, got.path)
        assert np.allclose(got.log_probabilities, expected, rtol=1e-12, atol=1e-12), (engine.name, got.path)
    linear = nx.profile(stack, 2, engine=Structured())
    assert linear.path == "xla"  # not the C kernel
    representable = expected > np.log(1e-300)
    assert np.allclose(linear.log_probabilities[representable], expected[representable], rtol=1e-12, atol=1e-12)
    assert Structured(extended=True).supports(stack, 2) is not None  # extended runs only in the C kernel


def test_the_kernel_stays_where_the_clip_is_exact():
    """lambda = 1/2, d = -650, m = 1: the clip changes alpha (e^{-649} -> e^{-599}) against a
    self-weight of 1/2, and c = e^{-d} alpha by e^{-599} relatively: below float64's resolution."""
    stack = nx.AlibiStack.build([0.5], [1.0], diagonal=-650.0)
    got = nx.profile(stack, 2, engine=Structured())
    assert got.path == "native"
    alpha = np.exp(_log_alpha(-650.0, 1.0))
    assert np.allclose(got.probabilities, [0.5 * (1.0 - alpha), 0.5 + 0.5 * alpha], rtol=1e-15, atol=0.0)


@pytest.mark.parametrize(
    ("lam", "slope", "inexact"),
    [(0.5, 559.0, False), (0.5, 561.0, True), (0.99, 554.0, False), (0.99, 556.0, True), (1.0, 0.0, True)],
)
def test_the_safe_slope_moves_with_lambda(lam, slope, inexact):
    """d < -600 is exact while m < 560 + log((1 - lambda) / lambda) (560 for lambda <= 1/2):
    log(0.01 / 0.99) = -4.6."""
    got = clip_inexact(np.array([[slope]]), np.array([[-700.0]]), np.array([[lam]]))
    assert bool(got[0, 0]) is inexact


def test_a_batch_sends_only_the_clipped_stacks_elsewhere():
    bad = nx.AlibiStack.build([1.0], [0.0], diagonal=650.0)
    good = nx.AlibiStack.build([1.0], [0.0], diagonal=5.0)
    singles = [nx.profile(s, 2, engine=Structured()) for s in (bad, good)]
    batch = nx.profiles([bad, good], 2, engine=Structured())
    assert [p.path for p in batch] == ["xla", "native"]
    for one, many in zip(singles, batch):
        assert np.allclose(one.log_probabilities, many.log_probabilities, rtol=1e-13, atol=0.0)
