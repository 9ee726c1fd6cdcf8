"""Statement instances: small hand-derived cases of each claim, decided exactly.

``INSTANCES[label]`` are positive and negative cases, each with the truth value the claim's
statement (THEORY.md, Claims) gives it. The data are exact fractions; ``exact_truth`` re-decides
each case in rational arithmetic with code of its own (no NumPy, no predicate; the orders through
posbias.theorem.orders' exact CDF), and ``instance_check`` requires the claim's predicate, called
on the float64 copy (its documented ``predicate_args``), to return the same value. The float64
copies are correctly rounded; the predicates' tolerances (1e-10) exceed the rounding of these
small cases by far.

Examples
--------
>>> exact_truth("C6", Instance((_vec([F(1, 2), F(1, 10), F(2, 5)]),), True, "U-shape"))
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from math import prod
from typing import Any

import numpy as np

from posbias.theorem.certificate import Check
from posbias.theorem.orders import exact_cdf, exact_dominated

F = Fraction
HALF, THIRD, QUARTER = F(1, 2), F(1, 3), F(1, 4)


@dataclass(frozen=True)
class Instance:
    """A hand-derived case of a claim: ``args`` / ``kwargs`` as exact Fractions (nested lists for
    vectors and matrices, None allowed), ``expected`` the truth value the statement gives it, ``why``
    the hand derivation in one line."""

    args: tuple
    expected: bool
    why: str
    kwargs: dict[str, Any] = field(default_factory=dict)


def _mat(rows) -> list[list[Fraction]]:
    return [[F(x) for x in row] for row in rows]


def _vec(xs) -> list[Fraction]:
    return [F(x) for x in xs]


def _vecmat(v, k):
    return [sum((v[i] * k[i][j] for i in range(len(v))), F(0)) for j in range(len(k[0]))]


def _matmul(a, b):
    return [_vecmat(row, b) for row in a]


def _residual(k, lam):
    n = len(k)
    return [[(1 - lam) * (i == j) + lam * k[i][j] for j in range(n)] for i in range(n)]


def _rollout(kernels, lambdas):
    """P = R^(T-1) ... R^(0) in Fractions (kernels[t] is layer t)."""
    n = len(kernels[0])
    p = [[F(int(i == j)) for j in range(n)] for i in range(n)]
    for k, lam in zip(kernels, lambdas):
        p = _matmul(_residual(k, lam), p)
    return p


def _monotone(k) -> bool:
    return all(exact_dominated(k[i], k[i + 1]) for i in range(len(k) - 1))


# Small exact kernels (rows of the ALiBi + content kernel A[i, j] = r^{i-j}/Z_i, A[i, i] = e^d/Z_i).
UNIFORM2 = _mat([[1, 0], [HALF, HALF]])  # r = 1, d = 0, N = 2
UNIFORM3 = _mat([[1, 0, 0], [HALF, HALF, 0], [THIRD, THIRD, THIRD]])  # r = 1, d = 0, N = 3
ALIBI_HALF3 = _mat([[1, 0, 0], [THIRD, F(2, 3), 0], [F(1, 7), F(2, 7), F(4, 7)]])  # r = 1/2, d = 0: Z_2 = 7/4
CONTENT2 = _mat([[1, 0], [QUARTER, F(3, 4)]])  # r = 1, e^d = 3
NOT_MONOTONE3 = _mat([[1, 0, 0], [0, 1, 0], [1, 0, 0]])  # row 2 sits earlier than row 1
TOP3 = _mat([[1, 0, 0], [1, 0, 0], [0, 1, 0]])
ANTICAUSAL2 = _mat([[0, 1], [0, 1]])
P_UNIFORM2 = _mat([[1, 0], [F(7, 16), F(9, 16)]])  # (R_{1/2})^2, R_{1/2} = [[1, 0], [1/4, 3/4]]


def two_token(lambdas) -> list[list[Fraction]]:
    """P for N = 2 uniform layers: P[1, 1] = prod_t (1 - lambda_t / 2), P[1, 0] = 1 - P[1, 1]."""
    stay = prod((1 - lam / 2 for lam in lambdas), start=F(1))
    return [[F(1), F(0)], [1 - stay, stay]]


CONSTANT = [HALF] * 64  # sum = 32: divergent in the limit; (3/4)^64 < 1e-7 already
SUMMABLE = [F(1, 2 ** (t + 1)) for t in range(64)]  # sum < 1: P[1, 1] >= prod (1 - 2^-(t+2)) > 1/2


def bias_kernel_exact(ws) -> list[list[Fraction]]:
    """A(i, j) = w(i-j)/W(i), j <= i, in Fractions (C7)."""
    n = len(ws)
    return [[F(ws[i - j]) / sum(ws[: i + 1], F(0)) if j <= i else F(0) for j in range(n)] for i in range(n)]


GEOMETRIC3 = _vec([1, HALF, QUARTER])  # w = 2^-g: ALiBi with m = ln 2
BUMPED4 = _vec([1, F(1, 10), F(1, 10), 5])  # THEORY.md C7(b): not log-concave at n = 2
FLAT3 = _vec([1, 1, 1])


def sink_moved(k, sinks) -> list[list[Fraction]]:
    """S_K in Fractions (C8): rows outside K put their mass on K onto the diagonal."""
    n = len(k)
    out = [list(row) for row in k]
    for i in range(n):
        if i in sinks:
            continue
        out[i][i] += sum((k[i][j] for j in sinks), F(0))
        for j in sinks:
            out[i][j] = F(0)
    return out


SINK_TOP3 = _mat([[1, 0, 0], [0, 1, 0], [0, 1, 0]])  # C8(b)'s counterexample, layer 1: token 2 reads the sink 1
P_S_UNIFORM3 = _mat([[1, 0, 0], [0, 1, 0], [0, F(11, 36), F(25, 36)]])  # two layers of S_{0}(UNIFORM3), lambda 1/2
P_UNIFORM3 = _mat([[1, 0, 0], [F(7, 16), F(9, 16), 0], [F(23, 72), F(17, 72), F(32, 72)]])

INSTANCES: dict[str, tuple[Instance, ...]] = {
    "C1": (
        Instance((UNIFORM2, _vec([0, 1])), True, "mu K = [1/2, 1/2]: F = [1/2, 1] >= F_mu = [0, 1]"),
        Instance(
            (UNIFORM3, _vec([THIRD] * 3)), True, "mu K = [11/18, 5/18, 1/9]: F = [11/18, 8/9, 1] >= [1/3, 2/3, 1]"
        ),
        Instance((ANTICAUSAL2, _vec([1, 0])), False, "not causal: mu K = [0, 1], F = [0, 1] < F_mu = [1, 1]"),
    ),
    "C2(a)": (
        Instance(
            (UNIFORM2, _vec([0, 1]), HALF, F(1)),
            True,
            "mu A = [1/2, 1/2], mu R = [1/4, 3/4], mu: F = [1/2, 1] >= [1/4, 1] >= [0, 1]; lam_hi = 1 gives mu A",
        ),
        Instance((ANTICAUSAL2, _vec([1, 0]), HALF), False, "not causal: mu A = [0, 1] is later than mu R = [1/2, 1/2]"),
        Instance(
            (UNIFORM2, _vec([0, 1]), F(1), F(0)),
            False,
            "lam_hi = 0 < lam = 1: mu R_0 = mu = [0, 1] is not earlier than mu R_1 = [1/2, 1/2]",
        ),
    ),
    "C2(b)": (
        Instance(
            ([UNIFORM2, UNIFORM2], _vec([HALF, HALF]), 0, F(1)),
            True,
            "p(1) = (3/4)^2 = 9/16 becomes (3/4)(1/2) = 3/8: more attention, earlier p",
        ),
        Instance(
            ([NOT_MONOTONE3, TOP3], _vec([1, QUARTER]), 1, F(3, 4)),
            False,
            "A^(0) not monotone: p = (1 - lam_1) e_0 + lam_1 e_1 moves later as lam_1 grows",
        ),
    ),
    "C2(c)": (
        Instance((P_UNIFORM2[1], [UNIFORM2, UNIFORM2], _vec([HALF, HALF])), True, "p(1) = 9/16 = (1 - (1/2)(1/2))^2"),
        Instance((_vec([HALF, HALF]), [UNIFORM2, UNIFORM2], _vec([HALF, HALF])), False, "p(1) = 1/2 != 9/16"),
    ),
    "C3(a)": (
        Instance((ALIBI_HALF3,), True, "row CDFs [1,1,1], [1/3,1,1], [1/7,3/7,1] decrease in i"),
        Instance((UNIFORM3,), True, "row CDFs [1,1,1], [1/2,1,1], [1/3,2/3,1] decrease in i"),
        Instance((NOT_MONOTONE3,), False, "row 2 = e_0 sits earlier than row 1 = e_1"),
    ),
    "C3(b)": (
        Instance(
            (UNIFORM3, ALIBI_HALF3), True, "r = 1 -> 1/2: row 1 F(0) 1/2 >= 1/3; row 2 F = [1/3, 2/3] >= [1/7, 3/7]"
        ),
        Instance((ALIBI_HALF3, UNIFORM3), False, "reversed: the flatter kernel's rows are earlier, not later"),
    ),
    "C3(c)": (
        Instance(
            (_vec([THIRD] * 3), _vec([F(1, 7), F(2, 7), F(4, 7)])),
            True,
            "T = 1, lambda = 1: p = last rows; F = [1/3, 2/3] >= [1/7, 3/7]",
        ),
        Instance((_vec([F(1, 7), F(2, 7), F(4, 7)]), _vec([THIRD] * 3)), False, "reversed"),
    ),
    "C4(a)": (
        Instance((_mat([[0, 0], [1, 2]]), _vec([5, -1])), True, "one constant per row cancels"),
        Instance(
            (_mat([[0, 0], [1, 2]]), _mat([[0, 1], [0, 0]])),
            False,
            "row 0 shifted by [0, 1]: softmax [1/2, 1/2] becomes [1/(1+e), e/(1+e)]",
        ),
        Instance(
            (_mat([[0, 0], [1, 2]]), _mat([[3, 9], [4, 4]])),
            True,
            "masked: row 0 sees only column 0, where the shift is the constant 3",
            {"mask": [[True, False], [True, True]]},
        ),
    ),
    "C4(b)": (
        Instance(
            (UNIFORM2, CONTENT2, UNIFORM2[1], CONTENT2[1]),
            True,
            "e^d 1 -> 3: row 1 [1/2, 1/2] -> [1/4, 3/4], self-weight 1/2 -> 3/4; T = 1, lambda = 1 profiles likewise",
        ),
        Instance((CONTENT2, UNIFORM2), False, "reversed: lowering d moves row 1 earlier"),
    ),
    "C5(a)": (
        Instance(
            (P_UNIFORM2, [UNIFORM2, UNIFORM2], _vec([HALF, HALF])),
            True,
            "diag P = [1, 9/16] = prod_t (1 - lambda_t (1 - A_ii)) >= (1 - (1/2)(1/2))^2 = 9/16",
        ),
        Instance(
            (_mat([[1, 0], [HALF, HALF]]), [UNIFORM2, UNIFORM2], _vec([HALF, HALF])), False, "P[1, 1] = 1/2 != 9/16"
        ),
    ),
    "C5(b)": (
        Instance(
            (P_UNIFORM2, [UNIFORM2, UNIFORM2], _vec([HALF, HALF])), True, "P[i, 0] in {1, 7/16} >= 1 - (3/4)^2 = 7/16"
        ),
        Instance(
            (_mat([[1, 0], [QUARTER, F(3, 4)]]), [UNIFORM2, UNIFORM2], _vec([HALF, HALF])),
            False,
            "P[1, 0] = 1/4 < 7/16",
        ),
    ),
    "C5(c)": (
        Instance(
            (two_token(CONSTANT), [UNIFORM2] * 64, CONSTANT),
            True,
            "eps = 1/2, lambda = 1/2 (sum diverges): 1 - P[1, 0] = (3/4)^64, collapse under way",
        ),
        Instance(
            (two_token(SUMMABLE), [UNIFORM2] * 64, SUMMABLE),
            True,
            "eps = 1/2, lambda_t = 2^-(t+1) (summable): P[1, 1] = prod (1 - 2^-(t+2)) > 1/2, no collapse",
        ),
        Instance(
            (_mat([[1, 0], [HALF, HALF]]), [UNIFORM2] * 64, CONSTANT),
            False,
            "no collapse under a divergent schedule: 1 - P[1, 0] = 1/2 > (3/4)^64",
        ),
        Instance(
            (_mat([[1, 0], [1, 0]]), [UNIFORM2] * 64, SUMMABLE),
            False,
            "collapse under a summable schedule: P[1, 1] = 0 < prod (1 - lambda_t / 2)",
        ),
    ),
    "C6": (
        Instance(
            (_vec([F(23, 72), F(17, 72), F(32, 72)]),),
            True,
            "N = 3, m = 0, T = 2, lambda = 1/2: mu = (1, 9/16, 4/9), p = [23, 17, 32]/72, interior minimum",
        ),
        Instance(
            (_vec([F(1, 6), F(1, 6), F(2, 3)]),),
            False,
            "depth 1 (N = 3, m = 0, lambda = 1/2): p = [1/6, 1/6, 2/3], no interior point below p(0)",
        ),
        Instance((_vec([F(1, 10), F(3, 10), F(2, 5), F(1, 5)]),), False, "a hump, not a U: the minimum is p(0)"),
    ),
    "C7(a)": (
        Instance(
            (ALIBI_HALF3, GEOMETRIC3), True, "w = (1, 1/2, 1/4): row 2 = [1/7, 2/7, 4/7], F_2(0) = 1 - W(1)/W(2) = 1/7"
        ),
        Instance(
            (bias_kernel_exact(BUMPED4), BUMPED4),
            True,
            "row 3 = [5, 1/10, 1/10, 1]/(31/5): F_3(0) = 1 - W(2)/W(3) = 25/31",
        ),
        Instance((UNIFORM3, GEOMETRIC3), False, "uniform rows are not w(i-j)/W(i) for w = 2^-g: F_2(0) = 1/3 != 1/7"),
    ),
    "C7(b)": (
        Instance(
            (bias_kernel_exact(BUMPED4), BUMPED4), True, "both fail: W(2)^2 = 36/25 < W(1)W(3) = 341/50, row 3 earlier"
        ),
        Instance((ALIBI_HALF3, GEOMETRIC3), True, "both hold: W = (1, 3/2, 7/4), 9/4 >= 7/4; ALiBi is monotone"),
        Instance((UNIFORM3, BUMPED4), False, "a monotone kernel paired with a non-log-concave W"),
    ),
    "C7(c)": (
        Instance(
            (bias_kernel_exact(FLAT3), bias_kernel_exact(GEOMETRIC3)),
            True,
            "w' / w = 2^-g non-increasing: row 2 F = [1/3, 2/3] >= [1/7, 3/7]",
        ),
        Instance((bias_kernel_exact(GEOMETRIC3), bias_kernel_exact(FLAT3)), False, "reversed: w'/w = 2^g increases"),
    ),
    "C8(a)": (
        Instance(
            (_mat([[1, 0, 0], [1, 1, 0], [1, 2, 1]]), [0]),
            True,
            "row 2 = [1/4, 1/2, 1/4] -> [0, 1/2, 1/2] = softmax of weights [0, 2, 1 + 1]; row 1 -> e_1",
            {"mask": [[True, False, False], [True, True, False], [True, True, True]]},
        ),
        Instance(
            (_mat([[1, 1, 1], [1, 1, 1], [1, 1, 1]]), [0, 2]),
            True,
            "full mask, K = {0, 2}: row 1 = [1/3, 1/3, 1/3] -> e_1; rows 0 and 2 unchanged",
        ),
        Instance(
            (_mat([[1, 0], [1, 1]]), [0]),
            False,
            "the mask forbids row 1's diagonal: row 1 = e_0 moves to the masked entry (1, 1)",
            {"mask": [[True, False], [True, False]]},
        ),
    ),
    "C8(b)": (
        Instance(
            ([UNIFORM3, UNIFORM3], _vec([HALF, HALF]), [0]),
            True,
            "K = {0}: p = [23, 17, 32]/72, p_S = [0, 11/36, 25/36]: F = [23/72, 40/72] >= [0, 22/72]",
        ),
        Instance(
            ([ALIBI_HALF3, ALIBI_HALF3], _vec([HALF, HALF]), [1]),
            True,
            "K = {1}, monotone layers: S_{1} rows e_0, [1/3, 2/3, 0], [1/7, 0, 6/7] stay monotone",
        ),
        Instance(
            ([NOT_MONOTONE3, SINK_TOP3], _vec([1, 1]), [1]),
            False,
            "K = {1}, A^(0) not monotone: p = e_1 (2 -> sink 1, stays) but p_S = e_0 (2 stays, then -> 0)",
        ),
    ),
    "C8(c)": (
        Instance(
            (P_S_UNIFORM3, [UNIFORM3, UNIFORM3], _vec([HALF, HALF]), [0]),
            True,
            "J = {1, 2}, eps = 1/3: (2/3)^2 = 4/9 <= P_S[2, 2] = 25/36 <= 1 - P_S[2, 1] = 25/36 <= (5/6)^2",
        ),
        Instance(
            (P_UNIFORM3, [UNIFORM3, UNIFORM3], _vec([HALF, HALF]), [0]),
            False,
            "the untransformed P: P[2, 0] = 23/72 != 0, mass on the sink",
        ),
        Instance(
            (_mat([[1, 0, 0], [0, 1, 0], [0, F(2, 3), F(1, 3)]]), [UNIFORM3, UNIFORM3], _vec([HALF, HALF]), [0]),
            False,
            "P_S[2, 2] = 1/3 below the lower bound (2/3)^2 = 4/9",
        ),
    ),
    "cesaro": (
        Instance(
            (_vec([F(1, 6), F(1, 6), F(2, 3)]), _vec([HALF])),
            True,
            "N = 3, lambda = 1/2: mu = (1, 3/4, 2/3), p = [1 - 3/2 + 2/3, 2 (3/4 - 2/3), 2/3]",
        ),
        Instance(
            (_vec([F(23, 72), F(17, 72), F(32, 72)]), _vec([HALF, HALF])),
            True,
            "N = 3, lambda = (1/2, 1/2): mu = (1, 9/16, 4/9)",
        ),
        Instance(
            (_vec([F(1, 6), F(1, 6), F(2, 3)]), _vec([HALF, HALF])), False, "the depth-1 profile is not the depth-2 one"
        ),
    ),
}


# Exact deciders, one per claim: Fractions only, written from the statements, sharing no code with
# the predicates in theorem.claims.
def _t_c1(k, mu, **_):
    return exact_dominated(_vecmat(mu, k), mu)


def _t_c2a(a, mu, lam, lam_hi=None, **_):
    mua, mur = _vecmat(mu, a), _vecmat(mu, _residual(a, lam))
    ok = exact_dominated(mua, mur) and exact_dominated(mur, mu)
    return ok and (lam_hi is None or exact_dominated(_vecmat(mu, _residual(a, lam_hi)), mur))


def _t_c2b(kernels, lambdas, layer, new_lambda, **_):
    more = list(lambdas)
    more[layer] = new_lambda
    return exact_dominated(_rollout(kernels, more)[-1], _rollout(kernels, lambdas)[-1])


def _t_c2c(p, kernels, lambdas, **_):
    return p[-1] == prod((1 - lam * (1 - k[-1][-1]) for k, lam in zip(kernels, lambdas)), start=F(1))


def _t_c3a(k, **_):
    return _monotone(k)


def _t_rows(flat, steep, **_):
    return all(exact_dominated(a, b) for a, b in zip(flat, steep))


def _t_c3c(p_flat, p_steep, **_):
    return exact_dominated(p_flat, p_steep)


def _t_c4a(logits, background, mask=None, **_):
    n_rows, n_cols = len(logits), len(logits[0])
    allowed = mask or [[True] * n_cols for _ in range(n_rows)]
    if not isinstance(background[0], list):
        return True  # one constant per row
    return all(len({background[i][j] for j in range(n_cols) if allowed[i][j]}) <= 1 for i in range(n_rows))


def _t_c4b(low, high, p_low=None, p_high=None, **_):
    if (p_low is None) != (p_high is None):
        raise ValueError("C4(b): give both p_low and p_high, or neither")
    ok = _t_rows(low, high) and all(high[i][i] >= low[i][i] for i in range(len(low)))
    return ok and (p_low is None or p_high is None or exact_dominated(p_low, p_high))


def _diag_product(kernels, lambdas, i):
    return prod((1 - lam * (1 - k[i][i]) for k, lam in zip(kernels, lambdas)), start=F(1))


def _t_c5a(p, kernels, lambdas, **_):
    n = len(p)
    bound = prod((1 - lam * (1 - min(k[i][i] for i in range(n))) for k, lam in zip(kernels, lambdas)), start=F(1))
    return all(p[i][i] == _diag_product(kernels, lambdas, i) and p[i][i] >= bound for i in range(n))


def _t_c5b(p, kernels, lambdas, **_):
    eps = [min(row[0] for row in k) for k in kernels]
    return all(row[0] >= 1 - prod((1 - lam * e for lam, e in zip(lambdas, eps)), start=F(1)) for row in p)


def _t_c5c(p, kernels, lambdas, **_):
    eps = [min(k[i][j] for i in range(len(k)) for j in range(i + 1)) for k in kernels]
    lower = prod((1 - lam * (1 - e) for lam, e in zip(lambdas, eps)), start=F(1))
    upper = prod((1 - lam * e for lam, e in zip(lambdas, eps)), start=F(1))
    return all(lower <= p[i][i] <= 1 - p[i][0] <= upper for i in range(1, len(p)))


def _t_c6(p, **_):
    if len(p) < 3:
        return False
    low = min(p[1:-1])
    return low < p[0] and low < p[-1]


def _t_cesaro(p, lambdas, **_):
    n = len(p)
    cesaro = [[F(1, i + 1) if j <= i else F(0) for j in range(n)] for i in range(n)]
    return list(p) == _rollout([cesaro] * len(lambdas), lambdas)[-1]


def _t_c7a(k, ws, **_):
    cum = exact_cdf(ws, F(0))
    want = lambda i, c: 1 - cum[i - c - 1] / cum[i] if c < i else F(1)  # noqa: E731
    return all(exact_cdf(k[i], F(0))[c] == want(i, c) for i in range(len(k)) for c in range(len(k)))


def _t_c7b(k, ws, **_):
    cum = exact_cdf(ws, F(0))
    concave = all(cum[n] ** 2 >= cum[n - 1] * cum[n + 1] for n in range(1, len(ws) - 1))
    return _monotone(k) == concave


def _softmax_weights(w, mask):
    """Row-normalised allowed weights (Fractions)."""
    rows = []
    for i, row in enumerate(w):
        kept = [x if mask[i][j] else F(0) for j, x in enumerate(row)]
        total = sum(kept, F(0))
        rows.append([x / total for x in kept])
    return rows


def _t_c8a(w, sinks, mask=None, **_):
    n = len(w)
    mask = mask or [[True] * n for _ in range(n)]
    moved = sink_moved(_softmax_weights(w, mask), sinks)
    raised = [[w[i][j] if mask[i][j] else F(0) for j in range(n)] for i in range(n)]
    raised = sink_moved(raised, sinks)  # weights: w'_ii = w_ii + sum_K w_ik, w'_ik = 0
    target = [[x / sum(row, F(0)) for x in row] for row in raised]
    stochastic = all(sum(row, F(0)) == 1 for row in moved)
    respects = all(moved[i][j] == 0 for i in range(n) for j in range(n) if not mask[i][j])
    return stochastic and respects and moved == target


def _t_c8b(kernels, lambdas, sinks, **_):
    moved = [sink_moved(k, sinks) for k in kernels]
    return exact_dominated(_rollout(kernels, lambdas)[-1], _rollout(moved, lambdas)[-1])


def _t_c8c(p, kernels, lambdas, sinks, **_):
    rest = [i for i in range(len(p)) if i not in sinks]
    if not rest or any(p[i][k] != 0 for i in rest for k in sinks):
        return False
    eps = [min(k[i][j] for i in rest for j in rest if j <= i) for k in kernels]
    lower = prod((1 - lam * (1 - e) for lam, e in zip(lambdas, eps)), start=F(1))
    upper = prod((1 - lam * e for lam, e in zip(lambdas, eps)), start=F(1))
    return all(lower <= p[i][i] <= 1 - p[i][rest[0]] <= upper for i in rest[1:])


_DECIDERS: dict[str, Callable[..., bool]] = {
    "C1": _t_c1,
    "C2(a)": _t_c2a,
    "C2(b)": _t_c2b,
    "C2(c)": _t_c2c,
    "C3(a)": _t_c3a,
    "C3(b)": _t_rows,
    "C3(c)": _t_c3c,
    "C4(a)": _t_c4a,
    "C4(b)": _t_c4b,
    "C5(a)": _t_c5a,
    "C5(b)": _t_c5b,
    "C5(c)": _t_c5c,
    "C6": _t_c6,
    "cesaro": _t_cesaro,
    "C7(a)": _t_c7a,
    "C7(b)": _t_c7b,
    "C7(c)": _t_rows,
    "C8(a)": _t_c8a,
    "C8(b)": _t_c8b,
    "C8(c)": _t_c8c,
}


def exact_truth(label: str, instance: Instance) -> bool:
    """The truth value of ``instance`` under claim ``label``'s statement, decided in exact arithmetic."""
    return bool(_DECIDERS[label](*instance.args, **instance.kwargs))


def _as_float(value):
    """Fractions -> float64 arrays (nested lists -> ndarray); bools, ints and None as they are."""
    if value is None or isinstance(value, (bool, int)) and not isinstance(value, Fraction):
        return value
    if isinstance(value, Fraction):
        return float(value)
    arr = np.array(value, dtype=object)
    return arr.astype(bool) if arr.size and isinstance(arr.flat[0], bool) else arr.astype(np.float64)


def instance_check(claim) -> Check:
    """Every instance of the claim: its expected value equals the exact decision and the claim's
    predicate (on float64 copies) returns it."""
    label = claim.label
    name = f"statement:{label}"
    cases = INSTANCES.get(label, ())
    if not any(c.expected for c in cases) or all(c.expected for c in cases):
        return Check(name, False, f"{label}: needs positive and negative instances in theorem.statements.INSTANCES")
    bad = []
    for n, case in enumerate(cases):
        exact = exact_truth(label, case)
        try:
            got = claim.predicate(
                *(_as_float(a) for a in case.args), **{k: _as_float(v) for k, v in case.kwargs.items()}
            )
        except Exception as err:  # a crashing predicate does not decide the case
            got = f"raised {type(err).__name__}"
        decided = isinstance(got, (bool, np.bool_)) and bool(got) == case.expected
        if exact != case.expected or not decided:
            bad.append(f"#{n} ({case.why}): expected {case.expected}, exact {exact}, predicate {got}")
    return Check(
        name, not bad, f"{label}: predicate decides {len(cases)} exact instances as the statement does", "; ".join(bad)
    )
