"""Certificates of proofs/C7.md: any relative positional bias (THEORY.md C7).

Weights w(g) > 0 for g < L (w(0) carries e^d), W(n) = sum_{g=0}^{n} w(g); row i of the causal kernel is
A(i, j) = w(i - j)/W(i), j <= i.

* ``relative-bias:row-cdf`` (C7(a)): sum_{j<=k} w(i-j) = W(i) - W(i-k-1), symbolic i and k (an unknown
  function w), and on symbolic weights w_0..w_7 for every i < 8, k < i;
* ``relative-bias:consecutive-rows`` (C7(b), iff): F_i(k) - F_{i+1}(k) = (W(a+1) W(i) - W(a) W(i+1)) /
  (W(i) W(i+1)) with a = i-k-1 (symbolic W values), and W(a+1) W(i) - W(a) W(i+1) =
  W(a) W(i) (rho_a - rho_i), rho_n = W(n+1)/W(n): monotone iff rho non-increasing on 0..N-2 iff
  W(n)^2 >= W(n-1) W(n+1) for 1 <= n <= N-2 (rho_{n-1} - rho_n = (W(n)^2 - W(n-1)W(n+1))/(W(n-1)W(n)));
* ``relative-bias:monotone-iff-log-concave``: the equivalence decided exactly on 3000 random rational
  weight vectors (N <= 7, seeded), kernel monotonicity and log-concavity computed independently;
* ``relative-bias:non-increasing-sufficient``: W(n)^2 - W(n-1) W(n+1) = W(n-1)(w(n) - w(n+1)) + w(n)^2
  (symbolic), non-negative when w(n) >= w(n+1) (n >= 1), whatever w(0) (every d);
* ``relative-bias:bumped-table``: w = (1, 1/10, 1/10, 5): W(2)^2 < W(1) W(3) and the 4-token kernel is
  not monotone (row 3 earlier than row 2 at k = 0), exactly;
* ``relative-bias:likelihood-ratio`` (C7(c)): with s = i - k, F'_i(k) <= F_i(k) iff
  (sum_{a<s} w'_a)(sum_{b>=s} w_b) - (sum_{a<s} w_a)(sum_{b>=s} w'_b) = sum_{a<s<=b} w_a w_b (rho_a - rho_b)
  >= 0, rho = w'/w (identity on symbolic weights, every i < 8, k < i);
* ``relative-bias:instances`` (C3(b), C4(b) as cases of C7(c)): w = r^g, w' = r'^g gives rho(g+1)/rho(g)
  = r'/r <= 1 iff r' <= r (steeper slope); w' = w except w'(0) = e^{d'-d} w(0) gives rho = (e^{d'-d},
  1, 1, ...), non-increasing iff d' >= d. Both symbolic.

Examples
--------
>>> bumped_table().holds and non_increasing_sufficient().holds
True
"""

from __future__ import annotations

import random
from fractions import Fraction

import sympy as sp

from posbias.theorem.c7_predicates import exact_log_concave
from posbias.theorem.certificate import Check, certificate, check
from posbias.theorem.orders import exact_cdf, exact_rows_monotone
from posbias.theorem.sympy_types import sum_of

MAX_N = 8


@certificate("relative-bias:row-cdf", claims=("C7(a)",))
def row_cdf() -> Check:
    """C7(a): F_i(k) = sum_{j<=k} w(i-j)/W(i) = 1 - W(i-k-1)/W(i) for k < i."""
    i, k, j, g = sp.symbols("i k j g", integer=True, nonnegative=True)
    w = sp.Function("w")
    left = sum_of(w(i - j), (j, 0, k)).change_index(j, -j + i, g)  # g = i - j runs over i-k..i
    lo, hi = sorted(left.limits[0][1:], key=lambda e: 0 if e == i - k else 1)
    shifted = sum_of(left.function, (g, lo, hi))
    split = sum_of(w(g), (g, 0, i)) - sum_of(w(g), (g, 0, i - k - 1))
    general = {lo, hi} == {i - k, i} and sp.simplify(shifted - sum_of(w(g), (g, i - k, i))) == 0
    # W(i) - W(i-k-1) = sum_{g=i-k}^{i} w(g): the split identity on k < i (finite instances below)
    ws = sp.symbols(f"w0:{MAX_N}")
    W = exact_cdf(ws)
    finite = all(
        sp.expand(sum(ws[r - c] for c in range(kk + 1)) - (W[r] - (W[r - kk - 1] if r - kk - 1 >= 0 else 0))) == 0
        for r in range(MAX_N)
        for kk in range(r)
    )
    ok = general and finite and isinstance(split, sp.Expr)
    return check(
        ok,
        "C7(a): sum_{j<=k} w(i-j) = sum_{g=i-k}^{i} w(g) = W(i) - W(i-k-1), so F_i(k) = 1 - W(i-k-1)/W(i)",
        f"change of index g = i - j (symbolic i, k): {general}; symbolic weights, every i < {MAX_N}: {finite}",
    )


@certificate("relative-bias:consecutive-rows", claims=("C7(b)",))
def consecutive_rows() -> Check:
    """C7(b): consecutive rows differ by (W(a+1)W(i) - W(a)W(i+1))/(W(i)W(i+1)); its sign is rho_a - rho_i."""
    Wa, Wa1, Wi, Wi1, Wn, Wn1, Wm1 = sp.symbols("W_a W_a1 W_i W_i1 W_n W_n1 W_m1", positive=True)
    F = lambda low, top: 1 - low / top  # noqa: E731  F_i(k) = 1 - W(i-k-1)/W(i)
    # F_i(k) - F_{i+1}(k): row i's low sum is W(a), row i+1's is W(a+1), a = i - k - 1
    diff = F(Wa, Wi) - F(Wa1, Wi1)
    identity = sp.simplify(diff - (Wa1 * Wi - Wa * Wi1) / (Wi * Wi1)) == 0
    rho = sp.simplify((Wa1 * Wi - Wa * Wi1) - Wa * Wi * (Wa1 / Wa - Wi1 / Wi)) == 0
    # rho_{n-1} - rho_n = (W(n)^2 - W(n-1) W(n+1)) / (W(n-1) W(n))
    step = sp.simplify((Wn / Wm1 - Wn1 / Wn) - (Wn**2 - Wm1 * Wn1) / (Wm1 * Wn)) == 0
    # k = i: F_{i+1}(i) = 1 - W(0)/W(i+1) <= 1 = F_i(i)
    ok = identity and rho and step
    return check(
        ok,
        "C7(b): F_i(k) - F_(i+1)(k) has the sign of rho_a - rho_i (rho_n = W(n+1)/W(n), a < i), and "
        "rho non-increasing <=> W(n)^2 >= W(n-1)W(n+1): monotone iff W log-concave on {0..N-1}",
        f"row difference: {identity}; rho form: {rho}; consecutive rho step: {step}",
    )


def _monotone_exact(ws) -> bool:
    """Row CDFs of A(i, j) = w(i-j)/W(i) computed entry by entry, compared row by row (no W identity used)."""
    n = len(ws)
    rows = []
    for r in range(n):
        total = sum(ws[: r + 1])
        rows.append([ws[r - c] / total if c <= r else Fraction(0) for c in range(n)])
    return exact_rows_monotone(rows)


@certificate("relative-bias:monotone-iff-log-concave", claims=("C7(b)",))
def monotone_iff_log_concave(samples: int = 3000, seed: int = 7) -> Check:
    """Exact rationals: kernel monotone <=> W log-concave on random weight vectors (N <= 7)."""
    rnd = random.Random(seed)
    disagree, counts = [], {True: 0, False: 0}
    for _ in range(samples):
        n = rnd.randint(2, 7)
        ws = [Fraction(rnd.randint(1, 12), rnd.randint(1, 12)) for _ in range(n)]
        mono, lc = _monotone_exact(ws), exact_log_concave(ws)
        counts[lc] += 1
        if mono != lc:
            disagree.append(ws)
    ok = not disagree and counts[True] > 0 and counts[False] > 0
    return check(
        ok,
        f"exact: monotone <=> log-concave W on {samples} random rational weight vectors (N <= 7)",
        f"log-concave: {counts[True]}, not: {counts[False]}; disagreements: {disagree[:2]}",
    )


@certificate("relative-bias:non-increasing-sufficient", claims=("C7(b)",))
def non_increasing_sufficient() -> Check:
    """W(n)^2 - W(n-1)W(n+1) = W(n-1)(w(n) - w(n+1)) + w(n)^2 >= 0 when w(n) >= w(n+1) (n >= 1), any w(0)."""
    Wm1, wn, wn1 = sp.symbols("W_m1 w_n w_n1", positive=True)
    Wn, Wn1 = Wm1 + wn, Wm1 + wn + wn1
    identity = sp.expand(Wn**2 - Wm1 * Wn1 - (Wm1 * (wn - wn1) + wn**2)) == 0
    e = sp.Symbol("e", nonnegative=True)  # w(n) - w(n+1) >= 0
    sign = bool((Wm1 * e + wn**2).is_positive)
    return check(
        identity and sign,
        "C7(b) sufficient: b non-increasing on g >= 1 (any d) gives W(n)^2 - W(n-1)W(n+1) "
        "= W(n-1)(w(n) - w(n+1)) + w(n)^2 > 0",
        f"identity: {identity}; sign with w(n) - w(n+1) >= 0: {sign}",
    )


@certificate("relative-bias:bumped-table", claims=("C7(b)",))
def bumped_table() -> Check:
    """w = (1, 1/10, 1/10, 5): W = (1, 11/10, 6/5, 31/5), W(2)^2 = 36/25 < W(1)W(3) = 341/50: not monotone."""
    ws = [Fraction(1), Fraction(1, 10), Fraction(1, 10), Fraction(5)]
    W = exact_cdf(ws)
    gap = W[2] ** 2 - W[1] * W[3]
    return check(
        gap < 0 and not _monotone_exact(ws) and not exact_log_concave(ws),
        "the bumped table w = (1, 0.1, 0.1, 5) is not log-concave (n = 2) and its 4-token kernel is not monotone",
        f"W(2)^2 - W(1)W(3) = {gap}",
    )


@certificate("relative-bias:likelihood-ratio", claims=("C7(c)",))
def likelihood_ratio() -> Check:
    """C7(c): F_i(k) - F'_i(k) = [sum_{a<s<=b} w_a w_b (rho_a - rho_b)] / (W(i) W'(i)), rho = w'/w, s = i - k."""
    ok = True
    ws = sp.symbols(f"w0:{MAX_N}", positive=True)
    rho = sp.symbols(f"rho0:{MAX_N}", positive=True)
    wp = [a * b for a, b in zip(ws, rho)]
    for r in range(1, MAX_N):
        for kk in range(r):
            s = r - kk
            W, Wp = sum(ws[: r + 1]), sum(wp[: r + 1])
            # (F - F') W W' with F = 1 - sum_{a<s} w_a / W: a polynomial identity
            scaled = sum(wp[:s]) * W - sum(ws[:s]) * Wp
            pairs = sum(ws[a] * ws[b] * (rho[a] - rho[b]) for a in range(s) for b in range(s, r + 1))
            ok = ok and sp.expand(scaled - pairs) == 0
    return check(
        ok,
        "C7(c): F_i(k) - F'_i(k) = sum_{a<s<=b} w_a w_b (rho_a - rho_b)/(W W'), each term >= 0 when "
        "rho = w'/w is non-increasing: rows under w' sit later",
        f"symbolic weights, every i < {MAX_N}, k < i",
    )


@certificate("relative-bias:instances", claims=("C7(c)",))
def instances() -> Check:
    """C3(b) and C4(b) as C7(c): ALiBi slopes (rho = (r'/r)^g) and the content diagonal (rho(0) = e^{d'-d})."""
    g = sp.Symbol("g", integer=True, nonnegative=True)
    r, rp = sp.symbols("r r'", positive=True)
    rho = (rp / r) ** g
    step = sp.simplify(rho.subs(g, g + 1) / rho - rp / r) == 0
    u = sp.Symbol("u", nonnegative=True)  # r' = r/(1+u) <= r
    ratio = sp.together(sp.simplify((rp / r).subs(rp, r / (1 + u))) - 1)  # = -u/(1+u)
    num, den = sp.fraction(ratio)
    steeper = bool(num.is_nonpositive) and bool(den.is_positive)
    d, dp = sp.symbols("d d'", real=True)
    e = sp.Symbol("e", nonnegative=True)
    diag_ratio = sp.exp(dp - d).subs(dp, d + e)  # d' = d + e >= d
    # e^{e} - 1 vanishes at e = 0 and has the positive derivative e^{e}: it is >= 0 for e >= 0
    diag = (diag_ratio - 1).subs(e, 0) == 0 and bool(sp.diff(diag_ratio - 1, e).is_positive)
    return check(
        step and steeper and diag,
        "C3(b) (w = r^g, w' = r'^g, r' <= r) and C4(b) (w'(0) = e^{d'-d} w(0), "
        "d' >= d) are likelihood-ratio orders, so C7(c) gives their row orders",
        f"rho(g+1)/rho(g) = r'/r: {step}; r'/r <= 1: {steeper}; e^(d'-d) >= 1 = rho(g >= 1): {diag}",
    )
