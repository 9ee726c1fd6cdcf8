"""C8: the attention sink as diagonal content. Certificates for the transform S_K and what it does to
profiles and to the infinite-depth dichotomy (proofs/C8.md).

For a sink set K of key positions, S_K moves, in every row i outside K, the row's mass on the keys of K to
its diagonal (rows in K unchanged); ``posbias.numerics.sink_transform`` computes it in float64, ``moved``
here in any exact arithmetic (SymPy symbols, Fractions). The certificates:

* ``sink:row-sums-and-mask`` (C8(a)): S_K keeps every row sum and a causal kernel causal, and zeroes the
  columns of K outside K's rows (symbolic entries, every sink set, N <= 5);
* ``sink:softmax-identity`` (C8(a)): for weights w_ij = e^{s_ij} > 0, S_K(w / sum w) is the row softmax of
  the weights w' with w'_ik = 0 (k in K) and w'_ii = w_ii + sum_{k in K} w_ik: the sink becomes the raised
  diagonal logit log(e^{s_ii} + sum_K e^{s_ik}) = s_ii + log(1 + sum_K e^{s_ik - s_ii}) >= s_ii, a
  content diagonal (symbolic, every sink set, N <= 4);
* ``sink:row-order`` (C8(b)): for a causal kernel and i outside K, F_{A(i,.)}(k) - F_{S_K(A)(i,.)}(k) =
  sum_{j in K, j <= k} A_ij >= 0 for k < i (and 0 for k >= i): every row sits later after the transform
  (symbolic, every sink set, N <= 6); a full (bidirectional) mask breaks it (row 0 with a later sink);
* ``sink:initial-segment-paths`` (C8(b)): for K = {0, ..., k0 - 1} the entries P_S[i, j] - P[i, j] with
  i, j outside K are polynomials with non-negative coefficients in the (non-negative) entries, lambda_t
  and 1 - lambda_t: the transformed stack puts at least as much on every position outside K (symbolic,
  N <= 4, T <= 2);
* ``sink:counterexample`` (C8(b)): without monotonicity and with a sink that is not an initial segment the
  profile can move earlier (exact, N = 3, K = {1});
* ``sink:sinks-unreachable`` (C8(c)): with every layer transformed, P_S[i, k] = 0 for i outside K and k in
  K at every depth, and P_S restricted to J = the positions outside K is the product of the restricted
  residual kernels, each causal and row-stochastic on J (symbolic, N <= 4, T <= 3, every sink set).

Exact throughout (SymPy ``expand`` to 0, coefficient signs, Fractions); no floating point.

Examples
--------
>>> moved(sp.Matrix([[1, 0], [sp.Rational(1, 3), sp.Rational(2, 3)]]), [0])
Matrix([
[1, 0],
[0, 1]])
>>> counterexample().holds
True
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations

import sympy as sp

from posbias.theorem.certificate import Check, certificate, check
from posbias.theorem.drift import causal_kernel
from posbias.theorem.exact import exact_monotone, exact_profile
from posbias.theorem.orders import exact_cdf, exact_dominated
from posbias.theorem.sympy_types import as_expr


def moved(kernel: sp.Matrix, sinks: Iterable[int]) -> sp.Matrix:
    """S_K of a square matrix in its entries' own arithmetic: in every row i outside K the entries of the
    keys of K added to the diagonal and set to 0; the rows in K unchanged."""
    keys = sorted(set(sinks))
    out = sp.Matrix(kernel)
    n = out.rows
    for i in range(n):
        if i in keys:
            continue
        out[i, i] = out[i, i] + sum((kernel[i, k] for k in keys if k != i), sp.Integer(0))
        for k in keys:
            out[i, k] = 0
    return out


def sink_sets(n: int, *, proper: bool = False):
    """Every non-empty sink set of {0, ..., n-1} (``proper``: leaving at least one position outside)."""
    top = n - 1 if proper else n
    for size in range(1, top + 1):
        yield from combinations(range(n), size)


def _full_kernel(n: int) -> sp.Matrix:
    """Symbolic row-stochastic n x n kernel with every entry allowed (diagonal = 1 - the others)."""
    rows = []
    for a in range(n):
        free = [sp.Symbol(f"F{a}_{b}") for b in range(n) if b != a]
        row = free[:a] + [1 - sum(free)] + free[a:]
        rows.append(row)
    return sp.Matrix(rows)


@certificate("sink:row-sums-and-mask", claims=("C8(a)",))
def row_sums_and_mask(max_tokens: int = 5) -> Check:
    """S_K keeps row sums (causal kernels N <= max_tokens, full kernels N <= 4), keeps causal kernels causal
    and zeroes K's columns outside K's rows, for every sink set."""
    ok, cases = True, 0
    for n in range(1, max_tokens + 1):
        for kind, kernel in (("causal", causal_kernel(n)), ("full", _full_kernel(n) if n <= 4 else None)):
            if kernel is None:
                continue
            for keys in sink_sets(n):
                s = moved(kernel, keys)
                cases += 1
                ok = ok and all(sp.expand(sum(s.row(i)) - 1) == 0 for i in range(n))
                ok = ok and all(s[i, k] == 0 for i in range(n) if i not in keys for k in keys)
                ok = ok and all(s.row(i) == kernel.row(i) for i in keys)
                if kind == "causal":
                    ok = ok and all(s[i, j] == 0 for i in range(n) for j in range(i + 1, n))
    return check(
        ok,
        f"C8(a): S_K is row-stochastic, keeps causality, zeroes K's columns outside K (symbolic, {cases} "
        f"(kernel, sink set) cases, N <= {max_tokens})",
    )


def _normalised(weights: sp.Matrix) -> sp.Matrix:
    """Each row divided by its sum (the row softmax of the logits log w)."""
    return sp.Matrix([[x / sum(weights.row(a)) for x in weights.row(a)] for a in range(weights.rows)])


@certificate("sink:softmax-identity", claims=("C8(a)",))
def softmax_identity(max_tokens: int = 4) -> Check:
    """S_K(w / sum w) = w' / sum w' with w'_ik = 0, w'_ii = w_ii + sum_K w_ik (symbolic w > 0), and the raised
    diagonal logit's excess log(1 + sum_K e^{s_ik - s_ii}) >= 0."""
    ok, cases = True, 0
    for n in range(1, max_tokens + 1):
        w = sp.Matrix(n, n, lambda a, b: sp.Symbol(f"w{a}_{b}", positive=True))
        kernel = _normalised(w)
        for keys in sink_sets(n):
            cases += 1
            raised = moved(w, keys)  # the same move on the weights: w'_ii = w_ii + sum_K w_ik
            target = _normalised(raised)
            ok = ok and all(sp.simplify(x) == 0 for x in moved(kernel, keys) - target)
            ok = ok and all(sp.expand(sum(raised.row(a)) - sum(w.row(a))) == 0 for a in range(n))
    s_ii = sp.Symbol("s_ii", real=True)
    s_k = sp.symbols("s_k0:3", real=True)
    logit = sp.log(sp.exp(s_ii) + sum(sp.exp(x) for x in s_k))
    excess = sp.log(1 + sum(sp.exp(x - s_ii) for x in s_k))
    same = sp.simplify(sp.expand_log(sp.exp(logit - s_ii - excess), force=True)) == 1
    positive = sp.Add(*(sp.exp(x - s_ii) for x in s_k)).is_positive  # the excess's argument minus 1
    return check(
        ok and same and bool(positive),
        f"C8(a): S_K(softmax(s)) = softmax(s') with K masked and s'_ii = log(e^(s_ii) + sum_K e^(s_ik)) "
        f"(symbolic weights, {cases} cases, N <= {max_tokens}); the diagonal excess log(1 + sum_K e^(s_ik - s_ii)) > 0",
        "the normaliser is unchanged: sum_j w'_ij = sum_j w_ij",
    )


@certificate("sink:row-order", claims=("C8(b)",))
def row_order(max_tokens: int = 6) -> Check:
    """For causal A and i outside K: F_{A(i,.)}(k) - F_{S_K(A)(i,.)}(k) = sum_{j in K, j <= k} A_ij (k < i),
    0 (k >= i). And a full kernel's row 0 with sink {1} moves earlier (the causal mask is needed)."""
    ok, cases = True, 0
    for n in range(1, max_tokens + 1):
        kernel = causal_kernel(n)
        for keys in sink_sets(n):
            s = moved(kernel, keys)
            for i in (a for a in range(n) if a not in keys):
                cases += 1
                fa, fs = exact_cdf(list(kernel.row(i))), exact_cdf(list(s.row(i)))
                for k in range(n):
                    want = sum((kernel[i, j] for j in keys if j <= k), sp.Integer(0)) if k < i else 0
                    ok = ok and sp.expand(fa[k] - fs[k] - want) == 0
    half = sp.Rational(1, 2)
    full = sp.Matrix([[half, half], [half, half]])
    s_full = moved(full, [1])
    broken = exact_dominated(list(s_full.row(0)), list(full.row(0))) and s_full.row(0) != full.row(0)
    return check(
        ok and broken,
        f"C8(b): for causal A every row outside K sits later under S_K: F_A(i)(k) - F_S(i)(k) = sum_(j in K, "
        f"j <= k) A_ij >= 0 (symbolic, {cases} rows, N <= {max_tokens}); under a full mask row 0 with sink {{1}} "
        "moves earlier",
        f"full mask: row 0 {list(full.row(0))} -> {list(s_full.row(0))}",
    )


def _product(kernels: list[sp.Matrix], lams, stays) -> sp.Matrix:
    """R^(T-1) ... R^(0), R^(t) = stay_t I + lambda_t A^(t) (stay_t standing for 1 - lambda_t)."""
    n = kernels[0].rows
    p = sp.eye(n)
    for a, lm, st in zip(kernels, lams, stays):
        p = (st * sp.eye(n) + lm * a) * p
    return p


def _free_kernel(t: int, n: int) -> sp.Matrix:
    """A^(t) causal with independent non-negative entries (row sums not imposed: the inequality is about signs)."""
    return sp.Matrix(n, n, lambda a, b: sp.Symbol(f"a{t}_{a}{b}", nonnegative=True) if b <= a else 0)


@certificate("sink:initial-segment-paths", claims=("C8(b)",))
def initial_segment_paths(max_tokens: int = 4, max_layers: int = 2) -> Check:
    """K = {0..k0-1}: P_S[i, j] - P[i, j] (i, j >= k0) has only non-negative coefficients as a polynomial in the
    entries, lambda_t and stay_t = 1 - lambda_t (all >= 0), N <= max_tokens, T <= max_layers."""
    ok, cases = True, 0
    for n in range(2, max_tokens + 1):
        for t in range(1, max_layers + 1):
            kernels = [_free_kernel(s, n) for s in range(t)]
            lams = sp.symbols(f"lambda0:{t}", nonnegative=True)
            stays = sp.symbols(f"stay0:{t}", nonnegative=True)
            p = _product(kernels, lams, stays)
            for k0 in range(1, n):
                keys = list(range(k0))
                ps = _product([moved(a, keys) for a in kernels], lams, stays)
                for i in range(k0, n):
                    for j in range(k0, i + 1):
                        cases += 1
                        gain = sp.expand(as_expr(ps[i, j]) - as_expr(p[i, j]))
                        diff = sp.Poly(gain, *sorted(ps.free_symbols | p.free_symbols, key=str))
                        ok = ok and all(c >= 0 for c in diff.coeffs())
    return check(
        ok,
        f"C8(b): with an initial-segment sink set, P_S[i, j] >= P[i, j] for i, j outside K (coefficients >= 0, "
        f"{cases} entries, N <= {max_tokens}, T <= {max_layers}); so F_p(k) >= F_(p_S)(k): p ≼ p_S",
        "F_(p_S)(k) = 0 for k < k0 (N - 1 outside K); for k >= k0, 1 - F(k) sums p(j) over j > k, all outside K",
    )


COUNTEREXAMPLE = {
    "sinks": [1],
    "kernels": [[[1, 0, 0], [0, 1, 0], [1, 0, 0]], [[1, 0, 0], [0, 1, 0], [0, 1, 0]]],  # A^(0), A^(1)
    "lambdas": [1, 1],
}
"""C8(b) fails without monotonicity and with a sink set that is not an initial segment: N = 3, K = {1},
lambda = (1, 1); A^(1) sends token 2 to the sink 1, A^(0) sends token 2 to token 0 (not monotone)."""


@certificate("sink:counterexample", claims=("C8(b)",))
def counterexample() -> Check:
    """N = 3, K = {1}: p = e_1 but p_S = e_0 (earlier); A^(0) and S_K(A^(0)) are not monotone."""
    kernels = [sp.Matrix(k) for k in COUNTEREXAMPLE["kernels"]]
    lambdas = [sp.Integer(x) for x in COUNTEREXAMPLE["lambdas"]]
    sunk = [moved(k, COUNTEREXAMPLE["sinks"]) for k in kernels]
    p, p_s = exact_profile(kernels, lambdas), exact_profile(sunk, lambdas)
    earlier = exact_dominated(p_s, p) and not exact_dominated(p, p_s)
    layer0 = not exact_monotone(kernels[0]) and not exact_monotone(sunk[0])
    return check(
        earlier and layer0,
        "C8(b) needs monotonicity or an initial-segment sink set: N = 3, K = {1}, lambda = (1, 1) gives p_S "
        "strictly earlier than p (exact)",
        f"p = {[str(x) for x in p]}, p_S = {[str(x) for x in p_s]}",
    )


@certificate("sink:sinks-unreachable", claims=("C8(c)",))
def sinks_unreachable(max_tokens: int = 4, max_layers: int = 3) -> Check:
    """With every layer transformed: P_S[i, k] = 0 (i outside K, k in K), P_S[J, J] = the product of the
    restricted R_S[J, J], each causal and row-stochastic on J (symbolic, N <= max_tokens, T <= max_layers)."""
    ok, cases = True, 0
    for n in range(2, max_tokens + 1):
        for t in range(1, max_layers + 1):
            kernels = [
                causal_kernel(n).subs(
                    {sp.Symbol(f"K{a}_{b}"): sp.Symbol(f"K{s}_{a}{b}") for a in range(n) for b in range(a)}
                )
                for s in range(t)
            ]
            lams = sp.symbols(f"lambda0:{t}")
            for keys in sink_sets(n, proper=True):
                cases += 1
                rest = [a for a in range(n) if a not in keys]
                sunk = [moved(a, keys) for a in kernels]
                ps = _product(sunk, lams, [1 - lm for lm in lams])
                ok = ok and all(sp.expand(ps[i, k]) == 0 for i in rest for k in keys)
                blocks = [(1 - lm) * sp.eye(len(rest)) + lm * a.extract(rest, rest) for a, lm in zip(sunk, lams)]
                restricted = sp.eye(len(rest))
                for b in blocks:
                    restricted = b * restricted
                ok = ok and all(sp.expand(x) == 0 for x in ps.extract(rest, rest) - restricted)
                for b in blocks:
                    ok = ok and all(sp.expand(sum(b.row(a)) - 1) == 0 for a in range(len(rest)))
                    ok = ok and all(b[a, c] == 0 for a in range(len(rest)) for c in range(a + 1, len(rest)))
    return check(
        ok,
        f"C8(c): with every layer transformed no row outside K reaches K (P_S[i, k] = 0), and the block on J is a "
        f"causal stack of its own (symbolic, {cases} cases, N <= {max_tokens}, T <= {max_layers})",
        "C5 then applies on J with min J in token 0's role",
    )
