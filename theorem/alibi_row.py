"""Row i of the ALiBi + diagonal-content kernel in closed form (C3(a), C4(b)).

Causal logits d [i = j] - m (i - j), masked row softmax, r = e^{-m} (m >= 0):

    Z_i      = e^d + sum_{g=1}^{i} r^g = e^d + (r - r^{i+1}) / (1 - r)      (r != 1; e^d + i at r = 1)
    A[i, j]  = r^{i-j} / Z_i  (j < i),   A[i, i] = e^d / Z_i = alpha_i(d),   0 (j > i)
    F_i(k)   = r^{i-k} (1 - r^{k+1}) / (1 - r^{i+1})   (d = 0, k <= i)
    E_i      = sum_j j A[i, j] = i - (sum_{g=1}^{i} g r^g) / Z_i,
               sum_{g=1}^{i} g r^g = r (1 - (i+1) r^i + i r^{i+1}) / (1 - r)^2.

Each closed form is derived from the defining sum with SymPy's ``Sum.doit`` and
checked to equal the stated form by ``simplify(derived - stated) == 0``.

Examples
--------
>>> row_vector(2, m=0, d=0)
[1/3, 1/3, 1/3]
>>> closed_forms_agree().holds
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mpmath
import sympy as sp

from posbias.theorem.certificate import Check, certificate, check
from posbias.theorem.derivation import Derivation, Result
from posbias.theorem.params import Params, param
from posbias.theorem.sympy_types import as_expr, sum_of, summed

NAME = "alibi-row"
MAX_ROW = 4096  # the row's closed forms are substituted, never expanded, above EXPANDED_ROWS: linear work in i
EXPANDED_ROWS = 12  # rows up to this are shown as factored polynomials in r (the defining sums, expanded)
MAX_LOGIT = 700.0  # |m|, |d| at most this: e^{±700} is still a float64 (e^710 overflows)
VALUE_DPS = 30  # the row's values are computed in mpmath with this many digits, then rounded to float64
LIMITS = (
    f"--row <= {MAX_ROW} (rows above {EXPANDED_ROWS} are shown by their closed forms, not expanded; "
    f"the values take O(i) work), 0 <= --slope <= {MAX_LOGIT:g} and |--diag| <= {MAX_LOGIT:g} (e^±700 stays "
    f"within float64); values in mpmath with {VALUE_DPS} digits; about 2 s at --row {MAX_ROW}"
)

i, j, k, g = sp.symbols("i j k g", integer=True, nonnegative=True)
r = sp.Symbol("r", positive=True)
m = sp.Symbol("m", nonnegative=True)
d = sp.Symbol("d", real=True)
D = sp.exp(d)


def generic(expr: sp.Basic) -> sp.Expr:
    """The r != 1 branch of a Piecewise produced by Sum.doit."""
    folded = sp.piecewise_fold(expr)
    if isinstance(folded, sp.Piecewise):
        return next(as_expr(pair.args[0]) for pair in folded.args if pair.args[1] == sp.true)
    return as_expr(folded)


# Stated closed forms (the docstring, line for line).
Z_SUM = D + sp.Sum(r**g, (g, 1, i))
Z = D + (r - r ** (i + 1)) / (1 - r)
ALPHA = D / Z_SUM
F_STATED = r ** (i - k) * (1 - r ** (k + 1)) / (1 - r ** (i + 1))
MOMENT_STATED = r * (1 - (i + 1) * r**i + i * r ** (i + 1)) / (1 - r) ** 2
E_STATED = i - MOMENT_STATED / Z


def derived_normaliser() -> sp.Expr:
    """Z_i = e^d + sum_{g=1}^{i} r^g from SymPy's Sum.doit (generic branch r != 1; C3(a), C4(b))."""
    return D + generic(summed(r**g, (g, 1, i)))


def derived_cdf() -> sp.Expr:
    """F_i(k) at d = 0 from its definition sum_{j<=k} r^{i-j} / sum_{j<=i} r^{i-j}."""
    return generic(summed(r ** (i - j), (j, 0, k)) / summed(r ** (i - j), (j, 0, i)))


def derived_expectation() -> sp.Expr:
    """E_i = i A[i,i] + sum_{g=1}^{i} (i - g) r^g / Z_i, from the definition."""
    past = generic(summed((i - g) * r**g, (g, 1, i)))
    return (i * D + past) / derived_normaliser()


@certificate("alibi-row:closed-forms", claims=("C3(a)", "C4(b)"))
def closed_forms_agree() -> Check:
    """Symbolic, general i and k: Z_i, F_i(k) and E_i derived from their sums equal the stated forms."""
    dz = sp.simplify(derived_normaliser() - Z)
    df = sp.simplify(derived_cdf() - F_STATED)
    de = sp.simplify(derived_expectation() - E_STATED)
    ok = dz == 0 and df == 0 and de == 0
    return check(
        ok,
        "Z_i (geometric sum), F_i(k) (d = 0) and E_i derived from their defining sums equal the closed forms, general "
        "i, k, r != 1",
        f"differences: Z {dz}, F {df}, E {de}",
    )


def entry(row: int, col: int, m_val=m, d_val=d) -> sp.Expr:
    """A[row, col] for concrete indices, symbolic (or substituted) m and d."""
    rr = sp.exp(-m_val)
    z = sp.exp(d_val) + sum(rr**gg for gg in range(1, row + 1))
    if col > row:
        return sp.Integer(0)
    return (sp.exp(d_val) if col == row else rr ** (row - col)) / z


def row_values(row: int, slope: float, diag: float) -> list[float]:
    """[A[row, 0], ..., A[row, row]] in float64 for numeric m, d: r^(row-j) / Z and e^d / Z computed in
    mpmath (``VALUE_DPS`` digits), O(row) work; |m|, |d| <= MAX_LOGIT keep every term representable."""
    with mpmath.workdps(VALUE_DPS):
        rr, dd = mpmath.exp(-mpmath.mpf(slope)), mpmath.exp(mpmath.mpf(diag))
        powers = [rr**g for g in range(row + 1)]  # r^0 .. r^row
        z = dd + mpmath.fsum(powers[1:])
        return [float(powers[row - c] / z) for c in range(row)] + [float(dd / z)]


def row_vector(row: int, m=m, d=d) -> list[sp.Expr]:
    """[A[row, 0], ..., A[row, row]] (the causal support) for concrete row."""
    return [sp.simplify(entry(row, c, m, d)) for c in range(row + 1)]


def cdf_closed(row: int, m_val=m) -> list[sp.Expr]:
    """F_row(k), k = 0..row, from the closed form (d = 0; r = e^{-m}, m > 0)."""
    return [F_STATED.subs({i: row, k: kk, r: sp.exp(-m_val)}) for kk in range(row + 1)]


def self_weight(row: int, m_val=m, d_val=d) -> sp.Expr:
    """alpha_row(d) = e^d / (e^d + sum_{g=1}^{row} e^{-m g})."""
    return as_expr(ALPHA.subs(i, row).doit().subs({r: sp.exp(-m_val), d: d_val}))


def expected_position(row: int, m_val=m, d_val=d) -> sp.Expr:
    """E_row from the closed form (valid for m > 0)."""
    return E_STATED.subs({i: row, r: sp.exp(-m_val), d: d_val})


@dataclass(frozen=True)
class AlibiRowParams(Params):
    """Which row, slope and content diagonal to show; each left out stays symbolic."""

    name = NAME
    row: int | None = param(
        None, meaning="the row i of the kernel", example="3", minimum=0, maximum=MAX_ROW, default_text="symbolic i"
    )
    slope: float | None = param(
        None,
        meaning="the ALiBi slope m >= 0 (r = e^-m)",
        example="0.5",
        minimum=0.0,
        maximum=MAX_LOGIT,
        default_text="symbolic m",
    )
    diag: float | None = param(
        None,
        meaning="the content diagonal d (self-logit excess)",
        example="-1",
        minimum=-MAX_LOGIT,
        maximum=MAX_LOGIT,
        default_text="symbolic d",
    )


def _at_r1(expr_sum: sp.Expr) -> sp.Expr:
    """The r = 1 (m = 0) value of a defining sum."""
    return sp.simplify(expr_sum.subs(r, 1).doit())


# Defining sums (general r, including r = 1).
SUMS = {
    "Z_i": Z_SUM,
    "alpha_i": ALPHA,
    "F_i(k) (d=0)": sum_of(r ** (i - j), (j, 0, k)) / sum_of(r ** (i - j), (j, 0, i)),
    "E_i": (i * D + sp.Sum((i - g) * r**g, (g, 1, i))) / Z_SUM,
}
CLOSED = {"Z_i": Z, "alpha_i": D / Z, "F_i(k) (d=0)": F_STATED, "E_i": E_STATED}


def compute(params: AlibiRowParams = AlibiRowParams()) -> Result:
    """Z_i, alpha_i(d), F_i(k) and E_i (C3(a), C4(b)), at the given row / slope / diagonal when set;
    the row's numbers when all three are set."""
    row, slope, diag = params.row, params.slope, params.diag
    subs = {}  # d stays symbolic in the expressions (e^1 would print as SymPy's E); values below
    if row is not None:
        subs[i] = row
    verified = closed_forms_agree()

    items = {}
    for key in SUMS:
        if slope == 0:
            expr = _at_r1(SUMS[key]).subs(subs)
        elif row is not None and row <= EXPANDED_ROWS:
            expr = CLOSED[key].subs(subs) if key.startswith("F") else sp.factor(SUMS[key].subs(subs).doit())
        else:
            expr = CLOSED[key].subs(subs)
        items[key] = expr
    lines = [
        "Row i of the ALiBi + content kernel (r = e^{-m}); closed forms checked against their sums: "
        + ("yes" if verified.holds else "NO"),
        "  A[i, j] = r^(i-j) / Z_i for j < i,  A[i, i] = e^d / Z_i,  0 for j > i",
    ]
    if slope == 0:
        lines.append("  m = 0: r = 1 (uniform ALiBi), values of the defining sums at r = 1")
    lines += [f"  {key:14s} = {val}" for key, val in items.items()]
    data = {"claims": ["C3(a)", "C4(b)"], "verified": verified.holds, **{key: str(v) for key, v in items.items()}}
    if slope is not None:
        rv = math.exp(-slope)
        lines.append(f"  {'r = e^(-m)':14s} = {rv:.6g}   (m = {slope:g})")
        data["r"] = rv
    if diag is not None:
        lines.append(f"  {'d':14s} = {diag:g}")
    if row is not None and slope is not None and diag is not None:
        vals = row_values(row, slope, diag)
        lines.append(f"  {'row i':14s} = [" + ", ".join(f"{v:.6g}" for v in vals) + "]")
        lines.append(f"  {'alpha_i value':14s} = {vals[-1]:.6g}")
        lines.append(f"  {'E_i value':14s} = {sum(c * v for c, v in enumerate(vals)):.6g}")
        data["row"] = vals
        data["self_weight"] = vals[-1]
        data["expected_position"] = float(sum(c * v for c, v in enumerate(vals)))
    latex = r",\quad ".join(
        [
            r"Z_i = e^{d} + \sum_{g=1}^{i} r^{g} = " + sp.latex(items["Z_i"]),
            r"\alpha_i(d) = " + sp.latex(items["alpha_i"]),
            r"F_i(k) = " + sp.latex(items["F_i(k) (d=0)"]),
            r"\mathbb{E}_i = " + sp.latex(items["E_i"]),
        ]
    )
    return Result(NAME, "\n".join(lines), latex, data)


DERIVATION = Derivation(
    name=NAME,
    summary="row i of the ALiBi + content kernel: Z_i, A[i,j], F_i(k), alpha_i(d), expected position (C3(a), C4(b))",
    claims=("C3(a)", "C4(b)"),
    params=AlibiRowParams,
    compute=compute,
    limits=LIMITS,
)


def exact_kernel(n: int, r_val, d_exp) -> sp.Matrix:
    """The n x n ALiBi + content kernel with exact entries, given r = e^{-m} and D = e^d
    as exact numbers (choose m = log 2 for r = 1/2): A[i,j] = r^{i-j} / Z_i, A[i,i] = D / Z_i."""
    r_val, d_exp = sp.nsimplify(r_val), sp.nsimplify(d_exp)
    rows = []
    for row in range(n):
        z = d_exp + sum(r_val**gg for gg in range(1, row + 1))
        rows.append([(d_exp if c == row else r_val ** (row - c)) / z if c <= row else sp.Integer(0) for c in range(n)])
    return sp.Matrix(rows)
