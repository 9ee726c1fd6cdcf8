"""Symbolic queries on a relative positional bias b(g) (THEORY.md C7): ``derive monotone|row|order --bias``.

With w(g) = e^{b(g)} (w(0) also carries e^d) and W(n) = sum_{g=0}^{n} w(g):

* ``row_forms``: W(n) and F_i(k) = 1 - W(i - k - 1)/W(i) (C7(a)) in closed form where SymPy sums
  them (geometric for ALiBi b = -m g; for w(g) = c (a g + beta)^{-s}, as Kerple-log's
  (1 + r2 g)^{-r1}, the Hurwitz form a^{-s} (zeta(s, beta/a) - zeta(s, n + 1 + beta/a)) valid for
  s != 1, which is the generalised harmonic number H_{n+1}^{(s)} when beta = a), otherwise as Sums;
* ``monotone``: C7(b), the kernel is stochastically monotone on N tokens iff W is log-concave on
  {0, ..., N-1}. Verdict (``theorem.dichotomy_analysis.Verdict``-style three values, ``Answer``):
  PROVED for every N and every parameter in range when b(g+1) - b(g) <= 0 (or b'(x) <= 0, x >= 1)
  is decided for every g >= 1 under the ranges (sufficient, with any d: W(n)^2 - W(n-1) W(n+1) =
  W(n-1)(w(n) - w(n+1)) + w(n)^2); REFUTED with the smallest N = n + 2 and n where
  W(n)^2 < W(n-1) W(n+1) at rational parameter values (signs certified by interval arithmetic,
  exact for a weights table); UNDECIDED with the reason. Plus the exact check of every N <= up_to;
* ``order``: C7(c), rows under ``bias`` sit later than under ``than`` (A_than(i,.) ≼ A_bias(i,.)) when
  w_bias/w_than = e^{b - b0} is non-increasing in g >= 0 (proved the same way); refuted by the
  smallest row i and k where F_bias,i(k) > F_than,i(k) (certified); otherwise undecided.

Sign decisions: an expression is <= 0 for every parameter in range when, after
``bias_expr.substitute_ranges`` (every parameter over a non-negative u), SymPy's assumptions decide
it, or its numerator/denominator are polynomials with coefficients of one sign each; sin/cos terms
are replaced by their worst case +-|coefficient| first (a sufficient condition, reported as such).

Examples
--------
>>> from posbias.theorem.bias_expr import parse_bias, parse_ranges
>>> b = parse_bias("-m*g", "demo")
>>> monotone(b, parse_ranges(None, b.names, "demo"), up_to=8).verdict
<Answer.PROVED: 'proved'>
>>> t = parse_bias("weights:1,0.1,0.1,5", "demo")
>>> ans = monotone(t, {}, up_to=8)
>>> ans.verdict, ans.witness["N"], ans.witness["n"]
(<Answer.REFUTED: 'refuted'>, 4, 2)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import sympy as sp

from posbias.theorem.bias_expr import (
    IV_DPS,
    Bias,
    G,
    NotCertified,
    describe_ranges,
    grid_points,
    ivdps,
    sign,
    substitute_ranges,
    weights_iv,
)
from posbias.theorem.sympy_types import as_expr, summed

X = sp.Symbol("x", real=True)  # continuous distance for derivatives
Y = sp.Symbol("y", nonnegative=True)
N_ = sp.Symbol("n", integer=True, nonnegative=True)
I_, K_ = sp.symbols("i k", integer=True, nonnegative=True)
MAX_UP_TO = 256


class Answer(enum.Enum):
    """Three-valued answer to a C7 query (as ``dichotomy_analysis.Verdict`` for C5)."""

    PROVED = "proved"
    REFUTED = "refuted"
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class Query:
    """verdict; reason: one line why; proof: the decided inequality (text) when PROVED; witness: the
    counterexample (N, n or row/k, rational parameters, certified values) when REFUTED; checked: the
    exact check up to ``up_to`` (points, first failure or None); region: a sufficient condition found
    when it is not decided for the whole range."""

    verdict: Answer
    reason: str
    proof: str = ""
    witness: dict[str, Any] | None = None
    checked: dict[str, Any] = field(default_factory=dict)
    region: str = ""


# --------------------------------------------------------------------------------- signs
def _poly_sign(expr: sp.Expr, gens) -> int | None:
    """-1 if expr <= 0 for every gens >= 0 by coefficient signs of numerator / denominator, +1 if >= 0."""
    num, den = sp.fraction(sp.together(expr))
    try:
        pn, pd = sp.Poly(sp.expand(num), *gens), sp.Poly(sp.expand(den), *gens)
    except (sp.PolynomialError, sp.GeneratorsNeeded):
        return None
    if not gens:
        return None

    def one_sign(p):
        cs = [c for c in p.coeffs() if c != 0]
        if not cs or not all(c.is_number for c in cs):
            return None
        if all(c > 0 for c in cs):
            return 1
        if all(c < 0 for c in cs):
            return -1
        return None

    sn, sd = one_sign(pn), one_sign(pd)
    if sn is None or sd is None:
        return None
    return sn * sd


def _trig_worst(expr: sp.Expr) -> tuple[sp.Expr, bool] | None:
    """An upper bound of expr with every sin/cos term c * f(.) replaced by |c| (c free of trig, its sign
    known); (bound, replaced_any), or None when a coefficient's sign is unknown."""
    expr = sp.expand(expr)
    terms = sp.Add.make_args(expr)
    out, replaced = sp.Integer(0), False
    for term in terms:
        trig = [f for f in sp.Mul.make_args(term) if isinstance(f, (sp.sin, sp.cos))]
        if not trig:
            if term.has(sp.sin, sp.cos):
                return None
            out += term
            continue
        coeff = sp.Mul(*[f for f in sp.Mul.make_args(term) if not isinstance(f, (sp.sin, sp.cos))])
        if coeff.has(sp.sin, sp.cos):
            return None
        if coeff.is_nonnegative:
            out += coeff
        elif coeff.is_nonpositive:
            out -= coeff
        else:
            return None
        replaced = True
    return out, replaced


def nonpositive(expr: sp.Expr, gens) -> tuple[bool, str]:
    """Whether ``expr`` <= 0 for every non-negative value of ``gens`` (and of any other symbol it has, by
    its assumptions); (decided, how)."""
    expr = sp.simplify(expr)
    if expr.is_nonpositive:
        return True, "sign from the symbols' assumptions"
    if _poly_sign(expr, tuple(s for s in gens if s in expr.free_symbols) or tuple(expr.free_symbols)) == -1:
        return True, "numerator and denominator are polynomials with coefficients of one sign"
    worst = _trig_worst(expr)
    if worst is not None and worst[1]:
        bound = sp.simplify(worst[0])
        if bound.is_nonpositive or _poly_sign(bound, tuple(bound.free_symbols)) == -1:
            return True, f"every sin/cos replaced by its worst case: {bound} <= 0"
    return False, ""


def _decreasing(diff_at: sp.Expr, deriv: sp.Expr | None, bias_like: Bias, ranges, start: int) -> tuple[bool, str]:
    """Is a function h with h(g+1) - h(g) = ``diff_at`` (an expression in G) non-increasing on g >= start,
    for every parameter in range? Tries the difference (g = start + y) and the derivative (x = start + y)."""
    tries = [("difference", diff_at.subs(G, start + Y))]
    if deriv is not None:
        tries.append(("derivative", deriv.subs(X, start + Y)))
    for kind, e in tries:
        if e.has(sp.Derivative, sp.Subs):
            continue
        sub, fresh = substitute_ranges(e, bias_like, ranges)
        ok, how = nonpositive(sub, (Y, *fresh))
        if ok:
            return True, f"{kind} {sp.simplify(e)} <= 0 for g >= {start} and every parameter in range ({how})"
    return False, ""


def sufficient_region(expr: sp.Expr, bias_like: Bias, ranges) -> str:
    """A condition on the parameters under which the sin/cos worst case of ``expr`` (g >= 1) is <= 0
    (each parameter signed by its range), or "" when there is none to state."""
    signed = {}
    for p in bias_like.params:
        lo, hi = ranges[p.name]
        if lo is not None and lo >= 0:
            signed[p] = sp.Symbol(p.name, nonnegative=True)
        elif hi is not None and hi <= 0:
            signed[p] = sp.Symbol(p.name, nonpositive=True)
    worst = _trig_worst(sp.expand(expr.xreplace(signed)))
    if not bias_like.params or worst is None or not worst[1] or worst[0].has(Y, X, G):
        return ""
    return f"{sp.simplify(worst[0])} <= 0"


# ------------------------------------------------------------------------------ closed forms
def cumulative(bias: Bias) -> sp.Expr:
    """W(n) = sum_{g=0}^{n} w(g), in closed form where SymPy (or the Hurwitz rule) sums it."""
    if bias.table is not None:
        terms = [sp.Rational(x.numerator, x.denominator) for x in bias.table]
        return sp.Piecewise(*[(sum(terms[: a + 1]), sp.Eq(N_, a)) for a in range(len(terms) - 1)], (sum(terms), True))
    w = bias.weight_expr()
    closed = summed(w, (G, 0, N_))
    if not closed.has(sp.Sum):
        return closed
    hurwitz = _hurwitz(w)
    return hurwitz if hurwitz is not None else closed


def _hurwitz(w: sp.Expr) -> sp.Expr | None:
    """sum_{g=0}^{n} c (a g + beta)^{-s} = c a^{-s} (zeta(s, q) - zeta(s, n + 1 + q)), q = beta / a (s != 1);
    the generalised harmonic number c a^{-s} H_{n+1}^{(s)} when q = 1; None if w is not of that form."""
    coeff, base_pow = sp.S.One, None
    for f in sp.Mul.make_args(w):
        if isinstance(f, sp.Pow) and f.base.has(G):
            base_pow = f
        elif f.has(G):
            return None
        else:
            coeff *= f
    if base_pow is None:
        return None
    poly = sp.Poly(base_pow.base, G) if base_pow.base.is_polynomial(G) else None
    if poly is None or poly.degree() != 1:
        return None
    a, beta = poly.all_coeffs()
    s = -base_pow.exp
    q = sp.simplify(beta / a)
    if q == 1:
        return coeff * a ** (-s) * sp.harmonic(N_ + 1, s)
    return coeff * a ** (-s) * (sp.zeta(s, q) - sp.zeta(s, N_ + 1 + q))


@dataclass(frozen=True)
class RowForms:
    """w(g), W(n) and F_i(k) (k < i) as SymPy expressions; closed: W has no unevaluated Sum."""

    weight: sp.Expr
    W: sp.Expr
    F: sp.Expr
    closed: bool


def row_forms(bias: Bias) -> RowForms:
    """C7(a): F_i(k) = 1 - W(i - k - 1)/W(i) for k < i, with W from ``cumulative``."""
    w = sp.Function("w")(G) if bias.table is not None else bias.weight_expr()
    W = cumulative(bias)
    F = 1 - as_expr(W.subs(N_, I_ - K_ - 1)) / as_expr(W.subs(N_, I_))
    return RowForms(w, W, F, not W.has(sp.Sum))


# -------------------------------------------------------------------------- exact checks
def _gaps_logconcave(w: list) -> list:
    """W(n)^2 - W(n-1) W(n+1) for n = 1 .. len(w) - 2 (exact or interval, as w), evaluated as
    W(n-1)(w(n) - w(n+1)) + w(n)^2 (the identity of ``relative-bias:non-increasing-sufficient``), which
    avoids the cancellation of the two products when the tail weights are tiny."""
    W, acc = [], w[0] * 0
    for x in w:
        acc = acc + x
        W.append(acc)
    return [W[n - 1] * (w[n] - w[n + 1]) + w[n] * w[n] for n in range(1, len(w) - 1)]


def check_logconcave(bias: Bias, points, up_to: int, diag: Fraction) -> dict[str, Any]:
    """For each point: the first n <= up_to - 2 where W(n)^2 - W(n-1) W(n+1) < 0 (certified), the n whose
    sign the intervals could not decide, or none. Returns {"points", "failure", "unsure"}."""
    failure, unsure = None, []
    with ivdps(IV_DPS):
        for point in points:
            try:
                w = weights_iv(bias, point, up_to - 1, diag)
            except NotCertified as err:
                unsure.append({"point": point, "why": str(err)})
                continue
            for n, gap in enumerate(_gaps_logconcave(w), start=1):
                s = sign(gap)
                if s is None:
                    unsure.append({"point": point, "n": n})
                    break
                if s < 0:
                    cand = {"point": point, "n": n, "N": n + 2, "gap": gap, "w": w[: n + 2]}
                    if failure is None or cand["N"] < failure["N"]:
                        failure = cand
                    break
    return {"points": len(points), "failure": failure, "unsure": unsure}


def _row_cdf_gap(wa: list, wb: list, i: int, k: int):
    """F_b,i(k) - F_a,i(k) with F_i(k) = 1 - W(i-k-1)/W(i)."""
    Wa = sum(wa[: i + 1], wa[0] * 0)
    Wb = sum(wb[: i + 1], wb[0] * 0)
    low_a = sum(wa[: i - k], wa[0] * 0)
    low_b = sum(wb[: i - k], wb[0] * 0)
    return low_a / Wa - low_b / Wb  # (1 - low_b/Wb) - (1 - low_a/Wa)


def than_equal(a: Bias, b: Bias, point: dict) -> bool:
    """b_a = b_b identically in g at ``point`` (SymPy, exact), so their kernels coincide."""
    if a.expr is None or b.expr is None:
        return False
    subs = {p: sp.Rational(point[p.name].numerator, point[p.name].denominator) for p in (*a.params, *b.params)}
    return sp.simplify(as_expr(a.expr.xreplace(subs)) - as_expr(b.expr.xreplace(subs))) == 0


def check_rows(later: Bias, earlier: Bias, points, up_to: int, diag: Fraction) -> dict[str, Any]:
    """For each point: the first row i < up_to and k < i with F_later,i(k) > F_earlier,i(k) (certified)."""
    failure, unsure = None, []
    with ivdps(IV_DPS):
        for point in points:
            if later.expr is not None and than_equal(later, earlier, point):
                continue  # the same bias at this point: equal rows, nothing to order
            try:
                wl = weights_iv(later, point, up_to - 1, diag)
                we = weights_iv(earlier, point, up_to - 1, diag)
            except NotCertified as err:
                unsure.append({"point": point, "why": str(err)})
                continue
            done = False
            for i in range(1, up_to):
                for k in range(i):
                    s = sign(_row_cdf_gap(we, wl, i, k))
                    if s is None:
                        unsure.append({"point": point, "i": i, "k": k})
                        done = True
                        break
                    if s > 0:
                        cand = {"point": point, "i": i, "k": k, "N": i + 1, "gap": _row_cdf_gap(we, wl, i, k)}
                        if failure is None or cand["N"] < failure["N"]:
                            failure = cand
                        done = True
                        break
                if done:
                    break
    return {"points": len(points), "failure": failure, "unsure": unsure}


def _positive(expr: sp.Expr, gens) -> bool:
    """Whether ``expr`` > 0 for every non-negative value of ``gens``: by SymPy's assumptions, or by
    ``_poly_sign`` (numerator and denominator of one sign each) with a finite non-zero value at 0 (their
    constant terms non-zero, so neither vanishes)."""
    expr = sp.simplify(expr)
    if expr.is_positive:
        return True
    at_zero = expr.subs(dict.fromkeys(gens, 0))
    return _poly_sign(expr, gens) == 1 and bool(at_zero.is_finite) and at_zero != 0


def where_undefined(bias_like: Bias, exprs, ranges) -> str:
    """ "" when every expression has a value for every g >= 0 and parameter in range, else the caveat a
    verdict carries: a denominator or a logarithm's argument that holds a parameter and is not shown
    positive on the range (``-g/a`` at a = 0) may leave b without a value, and a bias without a value is
    no kernel, so the verdict is for the parameters where b is defined."""
    params, parts = set(bias_like.params), []
    for expr in exprs:
        den = sp.fraction(sp.together(expr))[1]
        for what, e in [(f"{den} = 0", den)] + [(f"{lg.args[0]} <= 0", lg.args[0]) for lg in expr.atoms(sp.log)]:
            if not (e.free_symbols & params):
                continue
            sub, fresh = substitute_ranges(e.subs(G, Y), bias_like, ranges)
            gens = tuple(x for x in (Y, *fresh) if x in sub.free_symbols)
            if not (_positive(sub, gens) or _positive(-sub, gens) and what.endswith("= 0")):
                parts.append(what)
    if not parts:
        return ""
    return f"; b is undefined where {' or '.join(dict.fromkeys(parts))}: for the parameters where it is defined"


# -------------------------------------------------------------------------------- queries
def _points(bias: Bias, ranges, at: dict | None) -> list[dict]:
    return [at] if at is not None else grid_points(bias, ranges)


def monotone(bias: Bias, ranges, up_to: int = 32, at: dict | None = None, diag: Fraction = Fraction(0)) -> Query:
    """C7(b) for ``bias`` over ``ranges`` (see the module docstring); ``at``: check only this point."""
    points = [{}] if bias.table is not None else _points(bias, ranges, at)
    if bias.table is not None:  # exact, every N: beyond the table W is constant and the gaps are W(L-1)w(L-1)... >= 0
        up = max(up_to, len(bias.table) + 2)
        checked = check_logconcave(bias, points, up, Fraction(0))
        fail = checked["failure"]
        if fail is not None:
            return Query(
                Answer.REFUTED,
                f"W(n)^2 < W(n-1) W(n+1) at n = {fail['n']} (exact rationals)",
                witness=fail,
                checked=checked,
            )
        return Query(
            Answer.PROVED,
            f"W is log-concave on {{0, ..., {len(bias.table) - 1}}} (exact) and constant "
            "beyond (w = 0 there, a window), so for every N",
            proof="exact check of every n",
            checked=checked,
        )
    checked = check_logconcave(bias, points, up_to, diag)
    expr = bias.expr
    assert expr is not None  # a bias without a table is an expression
    diff = sp.simplify(expr.subs(G, G + 1) - expr)
    deriv = sp.diff(expr.subs(G, X), X)
    ok, how = _decreasing(diff, deriv, bias, ranges, 1)
    fail = checked["failure"]
    if ok:
        if fail is not None:  # cannot happen if both routes are right: refuse to answer
            raise ArithmeticError(f"proof and exact check disagree at {fail['point']}, n = {fail['n']}")
        return Query(
            Answer.PROVED,
            "b is non-increasing on g >= 1 for every parameter in range "
            f"({describe_ranges(ranges)}), sufficient for log-concave W with any d (C7(b))"
            + where_undefined(bias, [expr], ranges),
            proof=how,
            checked=checked,
        )
    region = sufficient_region(deriv.subs(X, 1 + Y), bias, ranges)
    if fail is not None:
        where = ", ".join(f"{k}={v}" for k, v in fail["point"].items()) or "(no parameters)"
        return Query(
            Answer.REFUTED,
            f"at {where}: W(n)^2 < W(n-1) W(n+1) for n = {fail['n']}, so the "
            f"{fail['N']}-token kernel is not stochastically monotone (certified interval arithmetic)",
            witness=fail,
            checked=checked,
            region=region,
        )
    reason = (
        "b(g+1) - b(g) <= 0 on g >= 1 could not be decided for every parameter in range, and no "
        f"failure of log-concavity was found for N <= {up_to} at {len(points)} rational point(s)"
    )
    if checked["unsure"]:
        first = checked["unsure"][0]
        why = first.get("why") or f"the sign of the gap at n = {first.get('n')} is within the interval's width"
        reason += f" ({len(checked['unsure'])} point(s) left undecided by interval arithmetic, e.g. {why})"
    return Query(Answer.UNDECIDED, reason, checked=checked, region=region)


def order(
    bias: Bias, than: Bias, ranges, up_to: int = 32, at: dict | None = None, diag: Fraction = Fraction(0)
) -> Query:
    """C7(c): do rows under ``bias`` sit later than under ``than`` (A_than(i,.) ≼ A_bias(i,.)) for every N?"""
    both = joint(bias, than)
    points = [{}] if both.table is not None or not both.params else _points(both, ranges, at)
    checked = check_rows(bias, than, points, up_to, diag)
    fail = checked["failure"]
    proved, how = False, ""
    if bias.table is None and than.table is None:
        assert bias.expr is not None and than.expr is not None  # biases without a table are expressions
        delta = sp.simplify(bias.expr - than.expr)
        diff = sp.simplify(delta.subs(G, G + 1) - delta)
        deriv = sp.diff(delta.subs(G, X), X)
        proved, how = _decreasing(diff, deriv, both, ranges, 0)
    elif bias.table is not None and than.table is not None:
        wb, wt = bias.table, than.table
        L = max(len(wb), len(wt))
        wb = list(wb) + [Fraction(0)] * (L - len(wb))
        wt = list(wt) + [Fraction(0)] * (L - len(wt))
        # w_bias/w_than non-increasing as cross products: wb(a) wt(b) >= wb(b) wt(a) for a < b
        proved = all(wb[a] * wt[b] >= wb[b] * wt[a] for a in range(L) for b in range(a + 1, L))
        how = "w_bias(a) w_than(b) >= w_bias(b) w_than(a) for every a < b (exact)"
    if proved:
        if fail is not None:
            raise ArithmeticError(f"proof and exact check disagree at {fail['point']}, row {fail['i']}")
        return Query(
            Answer.PROVED,
            "w_bias/w_than is non-increasing in g >= 0 (likelihood-ratio order), so every "
            "row under --bias sits later than under --than, every N (C7(c))"
            + where_undefined(both, [b.expr for b in (bias, than) if b.expr is not None], ranges),
            proof=how,
            checked=checked,
        )
    if fail is not None:
        where = ", ".join(f"{k}={v}" for k, v in fail["point"].items()) or "(no parameters)"
        return Query(
            Answer.REFUTED,
            f"at {where}: row i = {fail['i']} has F_bias({fail['k']}) > F_than({fail['k']}), "
            f"so the row under --bias does not sit later (N = {fail['N']}; certified)",
            witness=fail,
            checked=checked,
        )
    return Query(
        Answer.UNDECIDED,
        "the likelihood ratio w_bias/w_than could not be shown non-increasing for every "
        f"parameter in range, and no row order failure was found for N <= {up_to} at {len(points)} point(s)",
        checked=checked,
    )


def joint(a: Bias, b: Bias) -> Bias:
    """A Bias whose parameters are the union of a's and b's (for ranges and grids)."""
    params = tuple(sorted(set(a.params) | set(b.params), key=lambda s: s.name))
    return Bias(
        f"{a.text} | {b.text}",
        None if a.expr is None or b.expr is None else a.expr - b.expr,
        params,
        a.table if a.table is not None and b.table is not None else None,
    )
