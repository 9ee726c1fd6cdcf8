"""A relative positional bias b(g) on distances g >= 0, its parameter ranges, and certified evaluation (C7).

THEORY.md C7: head logits b(i - j) + d [i = j] over the causal past, weights w(g) = e^{b(g)} (w(0) also
carries e^d) and cumulative weights W(n) = sum_{g=0}^{n} w(g). This module is the input side of the
``derive monotone|row|order --bias`` queries (``posbias.theorem.relative_bias``):

* ``parse_bias(text, where)``: either an expression in ``g`` with parameters (through the project's safe
  parser ``theorem.expr_guard.parse``; the parser's variable ``t`` is refused, ``g`` becomes the integer
  distance), or ``weights:W0,W1,...`` -- a table of exact non-negative rational weights w(0..L-1), zero
  beyond L (a window of length L). The spellings of ``posbias rollout --bias`` are read too, so one
  formula works in every command: ``expr:EXPR[;NAME=VALUE,...]`` (the values substituted exactly) and
  the closed families ``alibi:M`` (-M g), ``kerple-log:R1,R2`` (-R1 log(1 + R2 g)) and
  ``kerple-power:R1,R2`` (-R1 g^R2) with exact rational numbers; the table families (``table``,
  ``window-table``, ``t5``) are refused with what to write instead;
* ``parse_ranges(text, names, where)``: "m>=0, 0<=a<=2, c<=1"; a parameter not named is assumed >= 0;
* ``parse_point(text, bias, where)``: "m=1/2, a=3": exact rational parameter values, inside the ranges;
* ``substitute_ranges``: the parameters rewritten over non-negative symbols (m >= lo: m = lo + u;
  m <= hi: m = hi - u; lo <= m <= hi: m = lo + (hi - lo)/(1 + u)), so that "for every value in range"
  becomes "for every u >= 0", which SymPy's sign assumptions and coefficient signs can decide;
* ``weights_iv(bias, point, n, diag)``: w(0..n) at a rational point as mpmath intervals (``iv``) that
  are guaranteed to contain the exact values (outward rounding at ``IV_DPS`` digits); Fractions for a
  table (exact). Signs decided from these intervals are certified; an interval that contains 0 decides
  nothing (the caller says "undecided").

Examples
--------
>>> b = parse_bias("-m*g", "demo")
>>> b.expr, [p.name for p in b.params]
(-g*m, ['m'])
>>> parse_ranges("0<=m<=2", ("m",), "demo")
{'m': (Fraction(0, 1), Fraction(2, 1))}
>>> parse_bias("kerple-log:1,0.5", "demo").expr
-log(g/2 + 1)
>>> parse_bias("expr:-m*g;m=1/4", "demo").expr
-g/4
>>> t = parse_bias("weights:1,0.1,0.1,5", "demo")
>>> [str(x) for x in t.table]
['1', '1/10', '1/10', '5']
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import mpmath
import sympy as sp
from mpmath import iv

from posbias.theorem.bounded_eval import T
from posbias.theorem.errors import DeriveError
from posbias.theorem.expr_guard import exact_number, parse
from posbias.theorem.sympy_types import as_expr, as_symbol

G = sp.Symbol("g", integer=True, nonnegative=True)  # the distance i - j
IV_DPS = 50  # digits of the interval evaluation
MAX_TABLE = 256  # entries of a weights table
MAX_PARAMS = 4
EXPECTED = (
    "expected an expression in g such as -m*g or -r1*log(1 + r2*g), expr:EXPR[;NAME=VALUE,...], "
    "alibi:M, kerple-log:R1,R2, kerple-power:R1,R2, or weights:1,0.1,0.1,5"
)
# posbias rollout's closed families as formulas in g ({0}, {1}: the spec's numbers)
FAMILIES = {
    "alibi": ("-({0})*g", 1),
    "kerple-log": ("-({0})*log(1 + ({1})*g)", 2),
    "kerple-power": ("-({0})*g**({1})", 2),
}
TABLE_FAMILIES = ("table", "window-table", "t5", "t5-bidirectional")
_FAMILY_PREFIX = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_-]*)\s*:")  # "alibi:", "wave:"; a formula has no "name:"


def family_name(spec: str) -> str | None:
    """The family name a bias spec starts with ("alibi" in "alibi:0.5"); None for a bare formula.
    The one reading of the prefix for ``derive --bias`` and ``posbias.bias_spec`` (rollout's --bias)."""
    match = _FAMILY_PREFIX.match(spec)
    return match.group(1) if match else None


def named_values(assignments: str, where: str, number: Callable[[str, str], Any]) -> dict[str, Any]:
    """``NAME=VALUE,...`` (the part after ``;`` in ``EXPR;NAME=VALUE,...``) as a dict, each value read by
    ``number(name, text)``; a ValueError from it, an item without ``=`` or a name, or a name given twice is refused
    in one line (DeriveError). Shared with ``posbias.bias_spec``, which reads the values as floats."""
    out: dict[str, Any] = {}
    for item in filter(None, (a.strip() for a in assignments.split(","))):
        name, eq, value = item.partition("=")
        name = name.strip()
        try:
            parsed = number(name, value) if eq and name else None
        except ValueError:
            parsed = None
        if parsed is None:
            raise DeriveError(f"{where}: parameter {item!r} is not NAME=NUMBER")
        if name in out:
            raise DeriveError(f"{where}: parameter {name} given twice; expected each NAME=VALUE once")
        out[name] = parsed
    return out


@dataclass(frozen=True)
class Bias:
    """text: as given; expr: b(g) (None for a table); params: its parameter symbols (sorted by name);
    table: exact weights w(0..L-1) (zero beyond), or None for an expression."""

    text: str
    expr: sp.Expr | None
    params: tuple[sp.Symbol, ...]
    table: tuple[Fraction, ...] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def weight_expr(self) -> sp.Expr:
        """w(g) = e^{b(g)} (simplified powers: e^{-r1 log(1 + r2 g)} = (1 + r2 g)^{-r1})."""
        if self.expr is None:
            raise ValueError("a weights table has no expression")
        factors = []
        for term in sp.Add.make_args(sp.expand(self.expr)):
            logs = [f for f in sp.Mul.make_args(term) if isinstance(f, sp.log)]
            if len(logs) == 1:
                factors.append(logs[0].args[0] ** sp.Mul(*[f for f in sp.Mul.make_args(term) if f is not logs[0]]))
            else:
                factors.append(sp.exp(term))
        return sp.Mul(*factors)


def parse_bias(text: str, where: str) -> Bias:
    """``text`` as a Bias (see the module docstring); a one-line DeriveError otherwise."""
    src = text.strip()
    if src.startswith("weights:"):
        return Bias(src, None, (), _table(src[len("weights:") :], where))
    family = family_name(src)
    if family is not None:
        return _family_bias(src, family, src.partition(":")[2], where)
    return _formula(src, src, where)


def _formula(src: str, text: str, where: str, values: dict[str, Fraction] | None = None) -> Bias:
    """A formula in g (``src``), its named parameters replaced by exact ``values``."""
    if re.search(r"(?<![A-Za-z0-9_])t(?![A-Za-z0-9_])", src):
        raise DeriveError(f"{where}: {text!r} uses t; a bias is a function of the distance g; {EXPECTED}")
    expr = parse(src, where, positive_names=False, expected=EXPECTED)
    ghost = sp.Symbol("g", real=True)
    expr = expr.subs(ghost, G)
    if expr.has(T):
        raise DeriveError(f"{where}: {text!r} uses t; {EXPECTED}")
    if values:
        named = {as_symbol(s).name: s for s in expr.free_symbols if s != G}
        unknown = sorted(set(values) - set(named))
        if unknown:
            raise DeriveError(f"{where}: {text!r}: {', '.join(unknown)} does not appear in the expression")
        expr = expr.subs({named[k]: sp.Rational(v.numerator, v.denominator) for k, v in values.items()})
        if expr.has(sp.zoo, sp.nan, sp.oo, -sp.oo, sp.I):
            raise DeriveError(f"{where}: {text!r} is not a finite real expression at the values given; {EXPECTED}")
    params = tuple(sorted((as_symbol(s) for s in expr.free_symbols if s != G), key=lambda s: s.name))
    if len(params) > MAX_PARAMS:
        raise DeriveError(f"{where}: {text!r} has {len(params)} parameters; at most {MAX_PARAMS} are supported")
    return Bias(text, expr, params)


def _family_bias(src: str, kind: str, args: str, where: str) -> Bias:
    """``expr:...`` and the closed families of posbias rollout's --bias (module docstring)."""
    if kind == "expr":
        body, _, assignments = args.partition(";")
        values = named_values(assignments, where, lambda name, v: exact_number(v, f"{where}: parameter {name}"))
        return _formula(body.strip(), src, where, values)
    if kind in TABLE_FAMILIES:
        raise DeriveError(
            f"{where}: {src!r}: a {kind} bias has no formula for derive; give its weights w(g) = e^b(g) as "
            "exact numbers (weights:W0,W1,...) or a formula in g"
        )
    if kind not in FAMILIES:
        raise DeriveError(f"{where}: {src!r}: unknown bias {kind!r}; {EXPECTED}")
    form, count = FAMILIES[kind]
    numbers = [exact_number(a, f"{where}: {kind} number {k + 1}") for k, a in enumerate(args.split(","))]
    if len(numbers) != count:
        raise DeriveError(f"{where}: {src!r}: {kind} takes {count} number(s), got {len(numbers)}; {EXPECTED}")
    formula = form.format(*(f"{x.numerator}/{x.denominator}" for x in numbers))
    return _formula(formula, src, where)


def _table(body: str, where: str) -> tuple[Fraction, ...]:
    items = [x for x in body.split(",")]
    if not body.strip() or len(items) > MAX_TABLE:
        raise DeriveError(
            f"{where}: weights: expects 1 to {MAX_TABLE} comma-separated numbers, e.g. weights:1,0.1,0.1,5"
        )
    out = tuple(exact_number(x, f"{where}: weights entry {a}") for a, x in enumerate(items))
    bad = [a for a, x in enumerate(out) if x < 0]
    if bad:
        raise DeriveError(f"{where}: weights entry {bad[0]} is {out[bad[0]]}; expected weights >= 0")
    if out[0] <= 0:
        raise DeriveError(f"{where}: weights entry 0 is {out[0]}; expected w(0) > 0 (every row reads its own token)")
    return out


_BOUND = re.compile(
    r"^\s*(?:(?P<lo>[^<>=]+?)\s*<=\s*)?(?P<name>[A-Za-z][A-Za-z0-9_]*)"
    r"\s*(?:(?P<op><=|>=)\s*(?P<v>[^<>=]+?))?\s*$"
)


def parse_ranges(
    text: str | None, names: tuple[str, ...], where: str
) -> dict[str, tuple[Fraction | None, Fraction | None]]:
    """name -> (lo, hi) (None: unbounded) from "m>=0, 0<=a<=2, c<=1"; a name not given gets (0, None)."""
    out: dict[str, tuple[Fraction | None, Fraction | None]] = {}
    for part in [p for p in re.split(r"[,;]", text or "") if p.strip()]:
        m = _BOUND.match(part)
        if not m or (m.group("lo") is None and m.group("op") is None) or (m.group("lo") and m.group("op") == ">="):
            raise DeriveError(f"{where}: {part.strip()!r} is not a range; expected NAME>=LO, NAME<=HI or LO<=NAME<=HI")
        name = m.group("name")
        if name not in names:
            raise DeriveError(
                f"{where}: {name!r} is not a parameter of the bias (parameters: {', '.join(names) or 'none'})"
            )
        lo = exact_number(m.group("lo"), f"{where}: lower bound of {name}") if m.group("lo") else None
        hi = None
        if m.group("op") == ">=":
            lo = exact_number(m.group("v"), f"{where}: lower bound of {name}")
        elif m.group("op") == "<=":
            hi = exact_number(m.group("v"), f"{where}: upper bound of {name}")
        if lo is not None and hi is not None and lo > hi:
            raise DeriveError(f"{where}: the range of {name} is empty ({lo} > {hi})")
        if name in out:
            raise DeriveError(f"{where}: {name} has two ranges; give one, e.g. 0<=a<=2")
        out[name] = (lo, hi)
    for name in names:
        out.setdefault(name, (Fraction(0), None))
    return out


def describe_ranges(ranges) -> str:
    """'m >= 0, 0 <= a <= 2' (or 'no parameters')."""
    parts = []
    for name, (lo, hi) in ranges.items():
        if lo is not None and hi is not None:
            parts.append(f"{lo} <= {name} <= {hi}")
        elif lo is not None:
            parts.append(f"{name} >= {lo}")
        elif hi is not None:
            parts.append(f"{name} <= {hi}")
        else:
            parts.append(f"{name} real")
    return ", ".join(parts) or "no parameters"


def parse_point(text: str, bias: Bias, ranges, where: str) -> dict[str, Fraction]:
    """{name: value} from "m=1/2, a=3": every parameter given once, each inside its range."""
    out: dict[str, Fraction] = {}
    for part in [p for p in re.split(r"[,;]", text) if p.strip()]:
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq or name not in bias.names:
            raise DeriveError(
                f"{where}: {part.strip()!r}: expected NAME=VALUE with NAME one of {', '.join(bias.names) or '(none)'}"
            )
        out[name] = exact_number(value, f"{where}: value of {name}")
    missing = [n for n in bias.names if n not in out]
    if missing:
        raise DeriveError(
            f"{where}: no value for {', '.join(missing)}; expected every parameter, e.g. {missing[0]}=1/2"
        )
    for name, v in out.items():
        lo, hi = ranges[name]
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise DeriveError(f"{where}: {name}={v} is outside its range ({describe_ranges({name: (lo, hi)})})")
    return out


def grid_points(bias: Bias, ranges, limit: int = 81) -> list[dict[str, Fraction]]:
    """Rational sample points inside the ranges (each axis: the bounds and a few values between or
    beyond them), at most ``limit`` points, in a fixed order (deterministic)."""
    axes = []
    for name in bias.names:
        lo, hi = ranges[name]
        if lo is not None and hi is not None:
            vals = sorted({lo, hi, (lo + hi) / 2})
        elif lo is not None:
            vals = [lo, lo + Fraction(1, 2), lo + 2]
        elif hi is not None:
            vals = [hi - 2, hi - Fraction(1, 2), hi]
        else:
            vals = [Fraction(-1), Fraction(0), Fraction(1)]
        axes.append((name, vals))
    points: list[dict[str, Fraction]] = [{}]
    for name, vals in axes:
        points = [dict(p, **{name: v}) for p in points for v in vals]
    return points[:limit]


def substitute_ranges(expr: sp.Expr, bias: Bias, ranges) -> tuple[sp.Expr, tuple[sp.Symbol, ...]]:
    """``expr`` with each parameter written over a fresh non-negative symbol u_name covering its range
    (see the module docstring); returns the new expression and the fresh symbols."""
    subs, fresh = {}, []
    for p in bias.params:
        lo, hi = ranges[p.name]
        u = sp.Symbol(f"u_{p.name}", nonnegative=True)
        if lo is not None and hi is not None:
            subs[p] = sp.Rational(lo) + sp.Rational(hi - lo) / (1 + u) if hi > lo else sp.Rational(lo)
        elif lo is not None:
            subs[p] = sp.Rational(lo) + u
        elif hi is not None:
            subs[p] = sp.Rational(hi) - u
        else:
            u = sp.Symbol(f"u_{p.name}", real=True)
            subs[p] = u
        fresh.append(u)
    return as_expr(expr.xreplace(subs)), tuple(fresh)


# ------------------------------------------------------------------------ certified values
@contextlib.contextmanager
def ivdps(dps: int):
    """Interval arithmetic at ``dps`` digits inside the block (mpmath's iv context has no workdps)."""
    old = iv.dps
    iv.dps = dps
    try:
        yield
    finally:
        iv.dps = old


# An mpmath interval (a value of iv.mpf): mpmath makes that class per context at run time and sets its
# arithmetic unannotated, so pyright can name neither; Any is the honest type.
Interval = Any


class NotCertified(ArithmeticError):
    """The interval evaluation cannot give a real enclosure here (unknown function, pole, complex)."""


def _iv_ratio(num: int, den: int) -> Interval:
    """num/den as an mpmath interval (the outward-rounded quotient of two exact integers)."""
    # mpmath sets ivmpf's / at run time, unannotated: pyright cannot see it
    return iv.mpf(num) / iv.mpf(den)  # pyright: ignore[reportOperatorIssue]


def _iv(e: sp.Basic, env: dict) -> Interval:  # noqa: C901 - one branch per node type
    if e in env:
        return env[e]
    if isinstance(e, sp.Rational):
        return _iv_ratio(int(e.p), int(e.q))
    if e is sp.pi:
        return iv.pi
    if e is sp.E:
        return iv.e
    if isinstance(e, sp.Add):
        out = iv.mpf(0)
        for a in e.args:
            out = out + _iv(a, env)
        return out
    if isinstance(e, sp.Mul):
        out = iv.mpf(1)
        for a in e.args:
            out = out * _iv(a, env)
        return out
    if isinstance(e, sp.Pow):
        base = _iv(e.base, env)
        if e.exp.is_Integer:
            n = int(e.exp)
            if n < 0 and base.a <= 0 <= base.b:
                raise NotCertified("pole")
            return base**n
        if base.a == 0 and base.b == 0:  # 0^x: 0 for x > 0, 1 for x = 0 (SymPy's convention)
            ex = _iv(e.exp, env)
            if ex.a > 0:
                return iv.mpf(0)
            if ex.a == 0 and ex.b == 0:
                return iv.mpf(1)
            raise NotCertified("0 to a power that may be negative")
        if base.a <= 0:
            raise NotCertified("non-positive base with a non-integer exponent")
        # mpmath adds iv.log to the context at run time
        return iv.exp(_iv(e.exp, env) * iv.log(base))  # pyright: ignore[reportAttributeAccessIssue]
    if isinstance(e, sp.exp):
        return iv.exp(_iv(e.args[0], env))
    if isinstance(e, sp.log):
        x = _iv(e.args[0], env)
        if x.a <= 0:
            raise NotCertified("log of a non-positive value")
        # mpmath adds iv.log to the context at run time
        return iv.log(x)  # pyright: ignore[reportAttributeAccessIssue]
    if isinstance(e, sp.cos):
        return iv.cos(_iv(e.args[0], env))
    if isinstance(e, sp.sin):
        return iv.sin(_iv(e.args[0], env))
    if isinstance(e, sp.Abs):
        x = _iv(e.args[0], env)
        lo, hi = x.a, x.b
        if lo >= 0:
            return x
        if hi <= 0:
            return -x
        # mpmath: [a, b] is an interval; ivmpf.__new__ is unannotated
        return iv.mpf([0, max(-lo, hi)])  # pyright: ignore[reportArgumentType]
    raise NotCertified(f"no certified evaluation of {type(e).__name__}")


def weights_iv(bias: Bias, point: dict[str, Fraction], n: int, diag: Fraction = Fraction(0)) -> list:
    """[w(0), ..., w(n)] at ``point`` with w(0) carrying e^diag: Fractions for a table (exact; then
    ``diag`` must be 0), mpmath intervals enclosing the exact values for an expression."""
    if bias.table is not None:
        if diag != 0:
            raise DeriveError("a weights table already carries w(0); give --diag 0 (put e^d into the first weight)")
        return [bias.table[g] if g < len(bias.table) else Fraction(0) for g in range(n + 1)]
    expr = bias.expr
    assert expr is not None  # a Bias without a table is an expression
    with ivdps(IV_DPS):
        env = {p: _iv_ratio(int(point[p.name].numerator), int(point[p.name].denominator)) for p in bias.params}
        out = []
        for g in range(n + 1):
            env[G] = iv.mpf(g)
            b = _iv(expr, env)
            if g == 0 and diag != 0:
                b = b + _iv_ratio(int(diag.numerator), int(diag.denominator))
            if not (mpmath.isfinite(b.a) and mpmath.isfinite(b.b)):
                raise NotCertified(f"b({g}) is not finite")
            out.append(iv.exp(b))
        return out


def sign(x) -> int | None:
    """+1 / -1 / 0 for a Fraction; for an interval +1 or -1 when it excludes 0, else None (undecided)."""
    if isinstance(x, Fraction):
        return (x > 0) - (x < 0)
    if x.a > 0:
        return 1
    if x.b < 0:
        return -1
    return None


def show(x, digits: int = 6) -> str:
    """A Fraction exactly; an interval as its midpoint to ``digits`` digits with its width bound."""
    if isinstance(x, Fraction):
        return str(x)
    return str(mpmath.nstr(mpmath.mpf(x.mid), digits))
