"""Exact rollout profile of uniform causal (Cesàro) attention under any λ schedule.

THEORY.md, "An exact closed form" (with C2(c) and C5). The Cesàro kernel
C[i, j] = 1/(i+1) for j <= i is the Hausdorff matrix of the moment sequence 1/(k+1),
the identity is the Hausdorff matrix of 1, where

    H(mu)[i, j] = C(i, j) sum_{m=0}^{i-j} (-1)^m C(i-j, m) mu_{j+m}     (j <= i), 0 otherwise.

H is linear in mu and H(a) H(b) = H(a b) (pointwise product), so every layer
(1 - λ_t) I + λ_t C = H(1 - λ_t k/(k+1)) and the rollout is

    P = H(mu),   mu_k = prod_t (1 - λ_t k/(k+1)),
    p(j) = P[N-1, j] = C(N-1, j) sum_{i=0}^{N-1-j} (-1)^i C(N-1-j, i) mu_{j+i}.

Corollaries: layer order does not matter (mu is symmetric in the λ_t);
p(N-1) = mu_{N-1} = prod_t (1 - λ_t (N-1)/N) (C2(c)); as T -> oo, mu_k -> 0 for every
k >= 1 iff sum_t λ_t = oo, so p -> e_0 (collapse, C5(c)) iff the λ_t are not summable,
otherwise p -> H(mu^oo) with mu^oo_k >= exp(-k sum_t λ_t) > 0.

The alternating sum cancels catastrophically in floating point (its terms are of size
2^(N-1) mu_j, its value can be 1e-12), so ``exact_profile`` evaluates it in integer
arithmetic over one common denominator: exact, about two seconds at N = 1024, T = 64.

Examples
--------
>>> from fractions import Fraction
>>> exact_profile([Fraction(1, 2)], 3).fractions()
[Fraction(1, 6), Fraction(1, 6), Fraction(2, 3)]
>>> exact_profile([Fraction(3, 10)] * 4, 5).denominator_bits > 0
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Sequence

import sympy as sp

from posbias.theorem.certificate import Cert
from posbias.theorem.params import ArgParser, exact_number
from posbias.theorem.derivation import Derivation, DeriveError, Result

MAX_TOKENS = 4096
MAX_COST = 1024**3 * 64  # limit on N^3 T: the exact evaluation takes about 2.5 s at N = 1024, T = 64
ROUND_DIGITS = 40  # irrational λ_t are rounded to this many decimals (error bound reported)


# ----------------------------------------------------------------------------- schedules
@dataclass(frozen=True)
class ExactSchedule:
    """λ_0..λ_{T-1} as exact fractions; ``rounded`` counts layers rounded to ROUND_DIGITS decimals."""

    spec: str
    formula: str
    lambdas: tuple[Fraction, ...]
    rounded: int

    @property
    def rounding_bound(self) -> Fraction:
        """Bound on the l1 distance between the profile of ``lambdas`` and of the true schedule.

        e_{N-1} P is a product of row-stochastic matrices; changing λ_t by ε changes
        R^(t) by ε (C - I), whose rows have l1 norm < 2, so ||Δp||_1 <= 2 Σ_t |Δλ_t|.
        """
        return Fraction(2 * self.rounded, 10**ROUND_DIGITS)


def _to_fraction(x: sp.Rational) -> Fraction:
    return Fraction(int(x.p), int(x.q))


def parse_schedule(spec: str, num_layers: int | None) -> ExactSchedule:
    """``constant:L``, ``power_decay:L0,BETA`` (λ_t = L0/(t+1)^BETA) or ``custom:L0,L1,...``."""
    expected = "expected constant:L, power_decay:L0,BETA or custom:L0,L1,..."
    kind, sep, rest = spec.partition(":")
    if not sep or not rest.strip():
        raise DeriveError(f"--schedule {spec!r}: {expected}")
    numbers = [exact_number(a, f"--schedule {spec!r}") for a in rest.split(",")]
    rounded = 0
    if kind == "custom":
        if num_layers is not None and num_layers != len(numbers):
            raise DeriveError(
                f"--schedule {spec!r}: {len(numbers)} values but --layers {num_layers}; expected equal"
            )
        values = numbers
        formula = "λ_t given layer by layer"
    else:
        t_count = 32 if num_layers is None else num_layers
        if kind == "constant" and len(numbers) == 1:
            values = [numbers[0]] * t_count
            formula = f"λ_t = {numbers[0]}"
        elif kind == "power_decay" and len(numbers) == 2:
            lam0, beta = numbers
            values = []
            for t in range(t_count):
                v = lam0 * sp.Integer(t + 1) ** (-beta)
                if not v.is_Rational:
                    v = sp.Rational((v * 10**ROUND_DIGITS).evalf(ROUND_DIGITS + 20).round(), 10**ROUND_DIGITS)
                    rounded += 1
                values.append(v)
            formula = f"λ_t = ({lam0})/(t+1)^({beta})"
        else:
            raise DeriveError(f"--schedule {spec!r}: {expected}")
    for t, v in enumerate(values):
        if not 0 <= v <= 1:
            raise DeriveError(f"--schedule {spec!r}: λ_{t} = {v} lies outside [0, 1]; expected 0 <= λ_t <= 1")
    return ExactSchedule(spec, formula, tuple(_to_fraction(v) for v in values), rounded)


# ------------------------------------------------------------------------ exact evaluator
@dataclass(frozen=True)
class ExactProfile:
    """p(j) = numerators[j] / denominator exactly (one common denominator, not reduced)."""

    numerators: tuple[int, ...]
    denominator: int

    @property
    def denominator_bits(self) -> int:
        return self.denominator.bit_length()

    def fractions(self) -> list[Fraction]:
        return [Fraction(n, self.denominator) for n in self.numerators]

    def floats(self) -> list[float]:
        """Correctly rounded float64 values (Python's int / int rounds correctly)."""
        return [n / self.denominator for n in self.numerators]


def moment_fraction(k: int, lambdas: Sequence[Fraction]) -> Fraction:
    """mu_k = prod_t (1 - λ_t k/(k+1)) as an exact fraction."""
    out = Fraction(1)
    for lam in lambdas:
        out *= 1 - Fraction(lam) * Fraction(k, k + 1)
    return out


def exact_profile(lambdas: Sequence[Fraction | int], num_tokens: int) -> ExactProfile:
    """The last row of P = H(mu) exactly, in O(N^2) big-integer subtractions.

    With λ_t = a_t/b_t, 1 - λ_t k/(k+1) = (b_t (k+1) - a_t k) / (b_t (k+1)), so over the
    common denominator D = (prod_t b_t) lcm(1..N)^T every mu_k is an integer M_k. The
    alternating sum is an (N-1-j)-th backward difference: with (Δm)_k = m_k - m_{k+1},
    p(j) = C(N-1, j) (Δ^{N-1-j} M)_j / D, and (Δ^r M)_{N-1-r} is the last entry of
    row r of the difference table.
    """
    n = int(num_tokens)
    if n < 1:
        raise ValueError(f"num_tokens = {n}; expected >= 1")
    lams = [Fraction(x) for x in lambdas]
    for t, lam in enumerate(lams):
        if not 0 <= lam <= 1:
            raise ValueError(f"λ_{t} = {lam} outside [0, 1]")
    common_b = math.prod(lam.denominator for lam in lams)
    lcm = math.lcm(*range(1, n + 1))
    num_layers = len(lams)
    row = []
    for k in range(n):
        top = math.prod(lam.denominator * (k + 1) - lam.numerator * k for lam in lams)
        row.append(top * (lcm // (k + 1)) ** num_layers)
    denominator = common_b * lcm**num_layers
    edge = [0] * n  # edge[r] = (Δ^r M)_{N-1-r}
    edge[0] = row[-1]
    for r in range(1, n):
        row = [row[k] - row[k + 1] for k in range(n - r)]
        edge[r] = row[-1]
    numerators = tuple(math.comb(n - 1, j) * edge[n - 1 - j] for j in range(n))
    return ExactProfile(numerators, denominator)


# ------------------------------------------------------------------ symbolic expressions
def hausdorff_matrix(moments: Sequence) -> sp.Matrix:
    """H(mu) of size N = len(moments): H[i, j] = C(i,j) Σ_m (-1)^m C(i-j,m) mu_{j+m}, j <= i."""
    n = len(moments)
    mu = [sp.sympify(m) for m in moments]

    def entry(i, j):
        if j > i:
            return sp.Integer(0)
        return sp.binomial(i, j) * sum(
            (-1) ** m * sp.binomial(i - j, m) * mu[j + m] for m in range(i - j + 1)
        )

    return sp.Matrix(n, n, entry)


def cesaro_matrix(num_tokens: int) -> sp.Matrix:
    """C[i, j] = 1/(i+1) for j <= i, else 0."""
    return sp.Matrix(num_tokens, num_tokens, lambda i, j: sp.Rational(1, i + 1) if j <= i else 0)


def layer_moment(k, lam):
    """The moment sequence of (1 - λ) I + λ C: 1 - λ k/(k+1)."""
    return 1 - lam * sp.Rational(k, k + 1) if isinstance(k, int) else 1 - lam * k / (k + 1)


def moment_expr(k, lambdas: Sequence) -> sp.Expr:
    """mu_k = prod_t (1 - λ_t k/(k+1)) as a SymPy expression in the given λ's."""
    return sp.Mul(*[layer_moment(k, lam) for lam in lambdas])


def profile_exprs(num_tokens: int, lambdas: Sequence) -> list[sp.Expr]:
    """[p(0), ..., p(N-1)] as SymPy expressions (unexpanded closed form) in the λ's."""
    n = num_tokens
    mu = [moment_expr(k, lambdas) for k in range(n)]
    return [
        sp.binomial(n - 1, j) * sp.Add(*[(-1) ** i * sp.binomial(n - 1 - j, i) * mu[j + i] for i in range(n - j)])
        for j in range(n)
    ]


def jax_profile(num_tokens: int, num_layers: int) -> Callable:
    """``f(lambdas[T]) -> p[N]``: the closed form lambdified with ``modules="jax"``.

    Float64 evaluation of the alternating sum is only trustworthy for small N
    (cancellation of terms of size 2^(N-1)); use ``exact_profile`` otherwise.
    """
    import jax.numpy as jnp

    syms = sp.symbols(f"lambda_0:{num_layers}")
    f = sp.lambdify([syms], profile_exprs(num_tokens, syms), modules="jax")
    return lambda lambdas: jnp.stack(jnp.broadcast_arrays(*f(lambdas)))


def jax_moments(num_tokens: int, num_layers: int) -> Callable:
    """``f(lambdas[T]) -> mu[N]`` lambdified with ``modules="jax"``."""
    import jax.numpy as jnp

    syms = sp.symbols(f"lambda_0:{num_layers}")
    f = sp.lambdify([syms], [moment_expr(k, syms) for k in range(num_tokens)], modules="jax")
    return lambda lambdas: jnp.stack(jnp.broadcast_arrays(*f(lambdas)))


# -------------------------------------------------------------------------- certificates
def _is_zero_matrix(m: sp.Matrix) -> bool:
    return all(sp.expand(sp.together(e)) == 0 for e in m)


def _cert_cesaro_is_hausdorff(max_n: int = 8) -> Cert:
    ok = all(
        hausdorff_matrix([sp.Rational(1, k + 1) for k in range(n)]) == cesaro_matrix(n)
        and hausdorff_matrix([1] * n) == sp.eye(n)
        for n in range(1, max_n + 1)
    )
    return Cert("cesaro:hausdorff-of-cesaro", ok,
                f"H(1/(k+1)) = C and H(1) = I exactly for N = 1..{max_n}")


def _cert_product_rule(max_n: int = 6) -> Cert:
    ok = True
    for n in range(1, max_n + 1):
        a = sp.symbols(f"a0:{n}")
        b = sp.symbols(f"b0:{n}")
        ab = [a[k] * b[k] for k in range(n)]
        ok &= _is_zero_matrix(hausdorff_matrix(a) * hausdorff_matrix(b) - hausdorff_matrix(ab))
    return Cert("cesaro:hausdorff-product-rule", bool(ok),
                f"H(a) H(b) = H(a·b) for symbolic sequences a, b, N = 1..{max_n} (hence H's commute)")


def _cert_layer(max_n: int = 6) -> Cert:
    lam = sp.Symbol("lambda")
    ok = all(
        _is_zero_matrix((1 - lam) * sp.eye(n) + lam * cesaro_matrix(n)
                        - hausdorff_matrix([layer_moment(k, lam) for k in range(n)]))
        for n in range(1, max_n + 1)
    )
    return Cert("cesaro:residual-layer", ok,
                f"(1-λ) I + λ C = H(1 - λ k/(k+1)) for symbolic λ, N = 1..{max_n}")


def _cert_rollout(max_n: int = 5, num_layers: int = 3) -> Cert:
    lams = sp.symbols(f"lambda_0:{num_layers}")
    ok = True
    for n in range(1, max_n + 1):
        p = sp.eye(n)
        for lam in lams:  # P = R^(T-1) ... R^(0)
            p = ((1 - lam) * sp.eye(n) + lam * cesaro_matrix(n)) * p
        ok &= _is_zero_matrix(p - hausdorff_matrix([moment_expr(k, lams) for k in range(n)]))
        ok &= _is_zero_matrix(p[n - 1, :] - sp.Matrix([profile_exprs(n, lams)]))
    return Cert("cesaro:rollout-closed-form", bool(ok),
                f"R^(2) R^(1) R^(0) = H(mu), mu_k = Π_t (1 - λ_t k/(k+1)), and its last row is the "
                f"p(j) formula, symbolic λ_0..λ_{num_layers - 1}, N = 1..{max_n}")


def _cert_layer_order(n: int = 6) -> Cert:
    l0, l1 = sp.symbols("lambda_0 lambda_1")
    r0 = (1 - l0) * sp.eye(n) + l0 * cesaro_matrix(n)
    r1 = (1 - l1) * sp.eye(n) + l1 * cesaro_matrix(n)
    ok = _is_zero_matrix(r0 * r1 - r1 * r0)
    return Cert("cesaro:layer-order-irrelevant", ok,
                f"R(λ_0) R(λ_1) = R(λ_1) R(λ_0) symbolically (N = {n}); in general mu is symmetric in λ_t")


def _cert_collapse(max_n: int = 8) -> Cert:
    lam, m = sp.Symbol("lambda", nonnegative=True), sp.Symbol("m", nonnegative=True)
    k = m + 1  # k >= 1
    x = lam * k / (k + 1)
    # λ/2 <= λk/(k+1) <= λ for k >= 1: both gaps are nonnegative.
    sandwich = bool(sp.factor(x - lam / 2).is_nonnegative and sp.factor(lam - x).is_nonnegative)
    # collapse moments (1, 0, 0, ...) give the point mass at token 0.
    point_mass = all(
        list(hausdorff_matrix([1] + [0] * (n - 1))[n - 1, :]) == [1] + [0] * (n - 1)
        for n in range(1, max_n + 1)
    )
    return Cert("cesaro:collapse-iff-divergence", sandwich and point_mass,
                "for k >= 1, λ_t/2 <= λ_t k/(k+1) <= λ_t (so mu_k -> 0 iff Σλ_t = ∞ by the product bounds "
                "1-x <= e^{-x}, 1-x >= e^{-x/(1-x)} of theorem.dichotomy), and H(1,0,...,0) has last row "
                f"e_0 (N = 1..{max_n}): collapse p -> e_0 iff Σλ_t = ∞ (C5(c))")


def _cert_exact_vs_matrix(n: int = 7) -> Cert:
    lams = [Fraction(1, 3), Fraction(7, 10), Fraction(1, 1), Fraction(0), Fraction(2, 9)]
    cm = cesaro_matrix(n)
    p = sp.eye(n)
    for lam in lams:
        q = sp.Rational(lam.numerator, lam.denominator)
        p = ((1 - q) * sp.eye(n) + q * cm) * p
    want = [Fraction(int(v.p), int(v.q)) for v in p[n - 1, :]]
    got = exact_profile(lams, n).fractions()
    return Cert("cesaro:integer-evaluator", got == want,
                f"the integer difference-table evaluator equals the exact matrix product (N = {n}, "
                f"λ = {', '.join(map(str, lams))})")


def certificates() -> dict[str, Callable[[], Cert]]:
    """The checks behind the closed form, by name (each returns a ``Cert``)."""
    return {
        "cesaro:hausdorff-of-cesaro": _cert_cesaro_is_hausdorff,
        "cesaro:hausdorff-product-rule": _cert_product_rule,
        "cesaro:residual-layer": _cert_layer,
        "cesaro:rollout-closed-form": _cert_rollout,
        "cesaro:layer-order-irrelevant": _cert_layer_order,
        "cesaro:collapse-iff-divergence": _cert_collapse,
        "cesaro:integer-evaluator": _cert_exact_vs_matrix,
    }


# ---------------------------------------------------------------------------- derivation
USAGE = ("posbias derive cesaro-rollout [--tokens N (default 64)] [--layers T (default 32; custom: its length)] "
         "[--schedule constant:L | power_decay:L0,BETA | custom:L0,L1,... (default constant:0.5)] [--certify]")


def _parser() -> ArgParser:
    p = ArgParser("cesaro-rollout")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--schedule", default="constant:0.5")
    p.add_argument("--certify", action="store_true")
    return p


def _fmt(x: float) -> str:
    return f"{x:.10g}"


def run(args: list[str]) -> Result:
    ns = _parser().parse(args)
    n = ns.tokens
    if not 1 <= n <= MAX_TOKENS:
        raise DeriveError(f"cesaro-rollout: --tokens {n}; expected 1 <= N <= {MAX_TOKENS}")
    if ns.layers is not None and ns.layers < 0:
        raise DeriveError(f"cesaro-rollout: --layers {ns.layers}; expected T >= 0")
    sched = parse_schedule(ns.schedule, ns.layers)
    t_count = len(sched.lambdas)
    if n**3 * max(t_count, 1) > MAX_COST:
        raise DeriveError(f"cesaro-rollout: --tokens {n} --layers {t_count}; expected N^3 T <= 1024^3 * 64 "
                          "(the exact evaluation costs about N^3 T)")
    prof = exact_profile(sched.lambdas, n)
    if sum(prof.numerators) != prof.denominator:
        raise AssertionError("exact profile does not sum to 1")  # mu_0 = 1 makes this an identity
    p = prof.floats()
    j_min = min(range(n), key=lambda j: (prof.numerators[j], j))
    interior = 0 < j_min < n - 1
    u_shape = interior and p[0] > p[j_min] and p[-1] > p[j_min]
    lam_sum = sum(sched.lambdas, Fraction(0))
    last_atom = moment_fraction(n - 1, sched.lambdas)
    assert last_atom * prof.denominator == prof.numerators[-1]  # C2(c): p(N-1) = mu_{N-1}

    exactness = ("exact" if not sched.rounded else
                 f"exact for λ_t rounded to {ROUND_DIGITS} decimals in {sched.rounded} layers; "
                 f"l1 distance to the true profile <= {float(sched.rounding_bound):.1e}")
    shown = list(range(n)) if n <= 16 else sorted({0, 1, 2, 3, 4, j_min, n - 5, n - 4, n - 3, n - 2, n - 1})
    lines = [
        f"cesaro-rollout: uniform causal attention C[i,j] = 1/(i+1) (j <= i), N = {n}, T = {t_count}",
        f"schedule {sched.spec}: {sched.formula}; Σ_t λ_t = {_fmt(float(lam_sum))}",
        "closed form (THEORY.md 'An exact closed form'): P = H(mu), mu_k = Π_t (1 - λ_t k/(k+1)),",
        "  p(j) = C(N-1,j) Σ_{i=0}^{N-1-j} (-1)^i C(N-1-j,i) mu_{j+i}",
        f"evaluation: integer difference table over one common denominator ({prof.denominator_bits} bits), "
        f"{exactness}; Σ_j p(j) = 1 exactly",
        f"p(0)   = {_fmt(p[0])}",
        f"p(N-1) = mu_(N-1) = Π_t (1 - λ_t (N-1)/N) = {_fmt(p[-1])}   (C2(c))",
        f"min p  = {_fmt(p[j_min])} at j = {j_min}; interior: {'yes' if interior else 'no'}; "
        f"U-shape: {'yes' if u_shape else 'no'}   (C6)",
        "corollaries: layer order is irrelevant (mu is symmetric in λ_t); as T -> ∞, p -> e_0 iff "
        "Σ_t λ_t = ∞ (C5(c)), else p -> H(mu^∞)",
        "   j  p(j)",
    ]
    lines += [f"{j:>4}  {_fmt(p[j])}" for j in shown]
    certs = {}
    if ns.certify:
        for name, check in certificates().items():
            c = check()
            certs[name] = {"holds": c.holds, "detail": c.detail}
            lines.append(f"[{'ok' if c.holds else 'FAILS'}] {name}: {c.detail}")
    latex = (
        r"p(j)=\binom{N-1}{j}\sum_{i=0}^{N-1-j}(-1)^i\binom{N-1-j}{i}\mu_{j+i},\qquad "
        r"\mu_k=\prod_{t=0}^{T-1}\Bigl(1-\lambda_t\frac{k}{k+1}\Bigr)"
        + f"\\quad(N={n},\\ T={t_count}):\\ p(0)={_fmt(p[0])},\\ p(N-1)={_fmt(p[-1])},\\ "
        + f"\\min_j p(j)=p({j_min})={_fmt(p[j_min])}"
    )
    data = {
        "tokens": n,
        "layers": t_count,
        "schedule": sched.spec,
        "lambdas": [float(x) for x in sched.lambdas],
        "lambda_sum": float(lam_sum),
        "rounded_layers": sched.rounded,
        "rounding_l1_bound": float(sched.rounding_bound),
        "profile": p,
        "p0": p[0],
        "p_last": p[-1],
        "argmin": j_min,
        "min": p[j_min],
        "interior_min": interior,
        "u_shape": u_shape,
        "denominator_bits": prof.denominator_bits,
        "certificates": certs,
    }
    if prof.denominator_bits <= 256:
        data["profile_exact"] = [str(f) for f in prof.fractions()]
    return Result("cesaro-rollout", "\n".join(lines), latex, data)


DERIVATION = Derivation(
    name="cesaro-rollout",
    summary="exact profile of uniform causal attention under any λ schedule (Hausdorff moments)",
    claims=("C2", "C5", "C6"),
    usage=USAGE,
    run=run,
)
