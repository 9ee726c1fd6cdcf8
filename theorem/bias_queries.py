"""``posbias derive monotone --bias``, ``derive row --bias``, ``derive order --bias --than`` (THEORY.md C7).

The command-line face of ``posbias.theorem.relative_bias``: typed parameters (``BiasParams``,
``OrderParams``), the text / LaTeX / JSON of each answer, and the registry entries ``ROW`` and
``ORDER`` (``monotone``'s --bias mode is ``monotone_result``, called from ``theorem.monotone``).

Examples
--------
>>> res = ROW_DERIVATION.compute(RowParams(bias="-m*g"))
>>> res.data["closed"]
True
>>> ORDER_DERIVATION.compute(OrderParams(bias="-2*m*g", than="-m*g")).data["verdict"]
'proved'
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import sympy as sp

from posbias.theorem import relative_bias as rb
from posbias.theorem.bias_domain import require_values
from posbias.theorem.bias_expr import Bias, describe_ranges, parse_bias, parse_point, parse_ranges, show
from posbias.theorem.derivation import Derivation, DeriveError, Result
from posbias.theorem.params import Params, param, parse_params

BIAS_MEANING = (
    "the bias b(g) on distances g >= 0: an expression in g with parameters (e.g. -m*g, "
    "-r1*log(1+r2*g), -r1*g^r2, -m*g+a*cos(g)), weights:W0,W1,... (exact weights, zero beyond), or as "
    "posbias rollout --bias writes it: expr:EXPR;NAME=VALUE, alibi:M, kerple-log:R1,R2, kerple-power:R1,R2"
)
RANGES_MEANING = "parameter ranges, e.g. 'm>=0, 0<=a<=2' (a parameter not named is taken >= 0)"
AT_MEANING = "check only this rational parameter point, e.g. 'm=1/2, a=3' (default: a grid inside the ranges)"
UP_TO_MEANING = "exact (certified) check of every N <= this"
DIAG_MEANING = "content diagonal d (w(0) also carries e^d) for the exact check; the proof holds for every d"

MONOTONE_EXAMPLES = """examples (C7(b), --bias mode):
  posbias derive monotone --bias "-m*g"                      ALiBi: proved for every m >= 0
  posbias derive monotone --bias "-r1*log(1+r2*g)"           Kerple-log: proved for r1, r2 >= 0
  posbias derive monotone --bias "-r1*g^r2"                  Kerple-power: proved for r1, r2 >= 0
  posbias derive monotone --bias "weights:1,0.1,0.1,5"       bumped table: refuted, N = 4, n = 2 (exact)
  posbias derive monotone --bias "-m*g+a*cos(g)"             cosine bump: refuted at a = 1/2, m = 0;
                                                             sufficient where a - m <= 0
  posbias derive monotone --bias "-m*g+a*cos(g)" --ranges "m>=1, 0<=a<=1"   ... proved there"""
ROW_EXAMPLES = """examples (C7(a)):
  posbias derive row --bias "-m*g"              geometric W(n)
  posbias derive row --bias "-r1*log(1+g)"      W(n) = H_{n+1}^{(r1)}, a generalised harmonic number
  posbias derive row --bias "-r1*log(1+r2*g)"   Hurwitz zeta form
  posbias derive row --bias "-r1*g^r2"          left as a Sum"""
ORDER_EXAMPLES = """examples (C7(c)):
  posbias derive order --bias "-2*m*g" --than "-m*g"     steeper ALiBi: rows later, proved (C3(b))
  posbias derive order --bias "-m*g" --than "-2*m*g"     refuted (certified counterexample row)
  posbias derive order --bias "-r1*log(1+g)" --than "0"  Kerple-log against uniform: proved"""


ROW_DOMAIN_CHECK = 32  # derive row has no --up-to: its formula is checked for a value at g = 0 .. 32
EXPRESSION_FLAGS = ("--bias", "--than", "--ranges", "--at")


def glue_expressions(argv) -> list[str]:
    """``--bias -m*g`` as ``--bias=-m*g`` (argparse would read a value starting with '-' as a flag)."""
    out, args = [], list(argv)
    a = 0
    while a < len(args):
        if args[a] in EXPRESSION_FLAGS and a + 1 < len(args):
            out.append(f"{args[a]}={args[a + 1]}")
            a += 2
        else:
            out.append(args[a])
            a += 1
    return out


def parser_for(params_type):
    """``parse_params`` for ``params_type`` after ``glue_expressions``."""
    return lambda argv: parse_params(params_type, glue_expressions(argv))


def _up_to():
    return param(32, meaning=UP_TO_MEANING, example="64", minimum=2, maximum=rb.MAX_UP_TO)


@dataclass(frozen=True)
class RowParams(Params):
    """``derive row``: the bias, printed as W(n) and F_i(k)."""

    name = "row"
    bias: str = param(None, meaning=BIAS_MEANING, example="-m*g", default_text="required")


@dataclass(frozen=True)
class OrderParams(Params):
    """``derive order``: do rows under --bias sit later than under --than?"""

    name = "order"
    bias: str = param(
        None, meaning=BIAS_MEANING + "; the one whose rows should sit later", example="-2*m*g", default_text="required"
    )
    than: str = param(None, meaning="the reference bias (same syntax)", example="-m*g", default_text="required")
    ranges: str | None = param(None, meaning=RANGES_MEANING, example="'m>=0'", default_text="every parameter >= 0")
    at: str | None = param(None, meaning=AT_MEANING, example="'m=1/2'", default_text="a grid")
    up_to: int = _up_to()
    diag: Fraction = param(Fraction(0), meaning=DIAG_MEANING, example="1/2")


def _setup(text: str, ranges_text, at_text, where: str, up_to: int, also: Bias | None = None):
    """The bias (with a value at every distance: ``bias_domain``), the ranges and the --at point."""
    bias = parse_bias(text, f"{where}: --bias")
    require_values(bias, f"{where}: --bias", up_to)
    names = tuple(sorted(set(bias.names) | set(also.names if also else ())))
    ranges = parse_ranges(ranges_text, names, f"{where}: --ranges")
    joint = rb.joint(bias, also) if also is not None else bias
    at = parse_point(at_text, joint, ranges, f"{where}: --at") if at_text else None
    return bias, ranges, at


def _witness_text(q: rb.Query) -> list[str]:
    w = q.witness
    if not w:
        return []
    point = ", ".join(f"{k} = {v}" for k, v in w["point"].items()) or "(no parameters)"
    lines = [
        f"  witness: {point}; N = {w['N']}" + (f", n = {w['n']}" if "n" in w else f", row i = {w['i']}, k = {w['k']}")
    ]
    if "w" in w:
        lines.append("  weights w(0..N-1) = " + ", ".join(show(x) for x in w["w"]))
        lines.append(f"  W(n)^2 - W(n-1) W(n+1) = {show(w['gap'])} < 0")
    else:
        lines.append(f"  F_bias,i(k) - F_than,i(k) = {show(w['gap'])} > 0")
    return lines


def _json_witness(q: rb.Query):
    if not q.witness:
        return None
    out = {k: (str(v) if not isinstance(v, (int, dict)) else v) for k, v in q.witness.items() if k != "w"}
    out["point"] = {k: str(v) for k, v in q.witness["point"].items()}
    out["gap"] = show(q.witness["gap"], 17)
    return out


def _result(name: str, head: list[str], q: rb.Query, up_to: int, latex: str, extra: dict) -> Result:
    lines = head + [f"verdict: {q.verdict.value}: {q.reason}"]
    if q.proof:
        lines.append(f"  proof: {q.proof}")
    lines += _witness_text(q)
    if q.region:
        lines.append(f"  sufficient (b non-increasing on g >= 1) where {q.region}")
    c = q.checked
    lines.append(
        f"exact check, every N <= {up_to}, {c.get('points', 0)} rational point(s): "
        + ("a failure (above)" if c.get("failure") else "no failure")
        + (f"; {len(c['unsure'])} point(s) undecided by interval arithmetic" if c.get("unsure") else "")
    )
    data = {
        "verdict": q.verdict.value,
        "reason": q.reason,
        "proof": q.proof,
        "region": q.region,
        "witness": _json_witness(q),
        "up_to": up_to,
        "points": c.get("points", 0),
        "undecided_points": len(c.get("unsure", [])),
        **extra,
    }
    return Result(name, "\n".join(lines), latex, data)


@dataclass(frozen=True)
class MonotoneBias:
    """The --bias mode of ``derive monotone`` (fields copied from ``theorem.monotone.MonotoneParams``)."""

    bias: str
    ranges: str | None
    at: str | None
    up_to: int
    diag: Fraction


def monotone_result(p: MonotoneBias) -> Result:
    """C7(b) on the bias: proved / refuted / undecided, and the exact check of every N <= up_to."""
    bias, ranges, at = _setup(p.bias, p.ranges, p.at, "monotone", p.up_to)
    if bias.table is not None and p.diag != 0:
        raise DeriveError("monotone: --diag: a weights table already carries w(0); put e^d into the first weight")
    q = rb.monotone(bias, ranges, p.up_to, at, p.diag)
    head = [
        f"bias b(g) = {bias.expr if bias.expr is not None else bias.text}; weights w(g) = e^(b(g)), "
        f"W(n) = sum_(g<=n) w(g); ranges: {describe_ranges(ranges)}",
        "C7(b): the N-token kernel is stochastically monotone iff W(n)^2 >= W(n-1) W(n+1), 1 <= n <= N-2",
    ]
    latex = r"W(n)^2 \ge W(n-1)\,W(n+1)\ (1 \le n \le N-2) \iff \text{stochastically monotone}"
    return _result(
        "monotone", head, q, p.up_to, latex, {"claims": ["C7(b)"], "bias": bias.text, "ranges": describe_ranges(ranges)}
    )


def row_compute(p: RowParams) -> Result:
    """C7(a): W(n) and F_i(k) = 1 - W(i-k-1)/W(i) (k < i), closed where SymPy sums them."""
    bias = parse_bias(p.bias, "row: --bias")
    require_values(bias, "row: --bias", ROW_DOMAIN_CHECK)
    forms = rb.row_forms(bias)
    lines = [
        f"bias b(g) = {bias.expr if bias.expr is not None else bias.text}",
        f"w(g) = {forms.weight}",
        f"W(n) = {forms.W}" + ("" if forms.closed else "   (no closed form found: left as a sum)"),
        f"F_i(k) = {forms.F}   (k < i; F_i(k) = 1 for k >= i)   [C7(a)]",
    ]
    if forms.W.has(sp.zeta) and not forms.W.has(sp.harmonic):
        lines.append("  (Hurwitz zeta form, valid for exponent != 1)")
    latex = rf"W(n) = {sp.latex(forms.W)},\quad F_i(k) = {sp.latex(forms.F)}"
    data = {
        "claims": ["C7(a)"],
        "weight": str(forms.weight),
        "W": str(forms.W),
        "F": str(forms.F),
        "closed": forms.closed,
    }
    return Result("row", "\n".join(lines), latex, data)


def order_compute(p: OrderParams) -> Result:
    """C7(c): rows under --bias later than under --than, proved / refuted / undecided."""
    than = parse_bias(p.than, "order: --than")
    require_values(than, "order: --than", p.up_to)
    bias, ranges, at = _setup(p.bias, p.ranges, p.at, "order", p.up_to, also=than)
    if (bias.table is not None or than.table is not None) and p.diag != 0:
        raise DeriveError("order: --diag: a weights table already carries w(0); give --diag 0")
    q = rb.order(bias, than, ranges, p.up_to, at, p.diag)
    head = [
        f"--bias b(g) = {bias.expr if bias.expr is not None else bias.text};  "
        f"--than b0(g) = {than.expr if than.expr is not None else than.text}; ranges: {describe_ranges(ranges)}",
        "C7(c): w/w0 non-increasing in g => A_b0(i,.) ≼ A_b(i,.) for every row (rows under --bias sit later)",
    ]
    latex = r"\frac{w(g)}{w_0(g)} \downarrow \Rightarrow A_{0}(i,\cdot) \preceq A(i,\cdot)"
    return _result("order", head, q, p.up_to, latex, {"claims": ["C7(c)"], "bias": bias.text, "than": than.text})


LIMITS = (
    f"--up-to <= {rb.MAX_UP_TO} tokens; at most 81 grid points and 4 parameters; expressions within "
    "theorem.expr_guard's limits (200 characters, 80 nodes); interval arithmetic at 50 digits"
)

ROW_DERIVATION = Derivation(
    name="row",
    summary="W(n) and the row CDF F_i(k) = 1 - W(i-k-1)/W(i) of any relative bias b(g) (C7(a))",
    claims=("C7(a)",),
    params=RowParams,
    compute=row_compute,
    parse=parser_for(RowParams),
    limits=LIMITS,
    examples=ROW_EXAMPLES,
)

ORDER_DERIVATION = Derivation(
    name="order",
    summary="likelihood-ratio order of two biases: do rows under --bias sit later? (C7(c))",
    claims=("C7(c)",),
    params=OrderParams,
    compute=order_compute,
    parse=parser_for(OrderParams),
    limits=LIMITS,
    examples=ORDER_EXAMPLES,
)

DERIVATION = ROW_DERIVATION  # the registry reads one DERIVATION per module; ORDER is in bias_order
