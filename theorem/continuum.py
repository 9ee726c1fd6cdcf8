"""Large-N limit of the uniform causal rollout under constant λ: a profile density on (0, 1].

THEORY.md, "An exact closed form" (with C6). Read p as the random walk of the
Notation section: each of the T layers jumps with probability λ, and a jump from
token i lands uniformly on {0, ..., i}, so the position fraction x = j/N is multiplied
by a uniform U on (0, 1). After K ~ Binomial(T, λ) jumps x = U_1 ⋯ U_K and -ln x is
Gamma(K, 1). The limit law ν has an atom (1-λ)^T at x = 1 and the density

    f(x) = Σ_{k=1}^{T} C(T,k) λ^k (1-λ)^{T-k} (-ln x)^{k-1} / (k-1)!     on (0, 1),

so p(xN) ≈ (1-λ)^T [x = 1] + f(x)/N. This is more than a limit: ν's moments are
∫ x^k dν = (1 - λ + λ/(k+1))^T = μ_k, the Hausdorff moments of theorem.hausdorff, hence
for every N exactly

    p(j) = ∫ C(N-1, j) x^j (1-x)^{N-1-j} dν(x)     (a binomial mixture over ν),

and N p(j) is f averaged over a Beta(j+1, N-j) window of width O(1/sqrt N): on any
fixed window x ∈ [w, 1-w] the error |N p(j) - f(j/N)| is O(1/N). Near x = 0, f has a
(-ln x)^{T-1} singularity and the error there does not vanish as N grows.

Examples
--------
>>> round(density(0.5, 1, 0.5), 12)  # T = 1: one possible jump, uniform landing
0.5
>>> e = continuum_error(64, 4, 0.5); e.window_max > continuum_error(128, 4, 0.5).window_max
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import sympy as sp

from posbias.theorem.certificate import Check, certificate, check
from posbias.theorem.cesaro_exact import exact_profile
from posbias.theorem.derivation import Derivation, DeriveError, Result
from posbias.theorem.params import Params, param

MAX_COST = 1024**3 * 64  # N^3 T of the larger exact evaluation (at 2N): about two seconds
X = sp.Symbol("x", positive=True)


def density(x: float, num_layers: int, lam: float) -> float:
    """f(x) = Σ_{k=1}^T C(T,k) λ^k (1-λ)^{T-k} (-ln x)^{k-1}/(k-1)! for 0 < x <= 1 (all terms >= 0)."""
    s = -math.log(x)
    try:
        return math.fsum(
            math.comb(num_layers, k) * lam**k * (1 - lam) ** (num_layers - k) * s ** (k - 1) / math.factorial(k - 1)
            for k in range(1, num_layers + 1)
        )
    except OverflowError:  # a term's pieces leave float64 (tiny λ, large T): the same terms in log space
        return math.fsum(_log_terms(s, num_layers, lam))


def _log_terms(s: float, num_layers: int, lam: float):
    """The terms of ``density`` as exp(log C(T,k) + k log λ + (T-k) log(1-λ) + (k-1) log s - log (k-1)!)."""
    for k in range(1, num_layers + 1):
        if lam == 0 or (lam == 1 and k < num_layers) or (s == 0 and k > 1):
            continue
        log_term = (
            math.log(math.comb(num_layers, k))
            + k * math.log(lam)
            - math.lgamma(k)
            + ((num_layers - k) * math.log1p(-lam) if k < num_layers else 0.0)
            + ((k - 1) * math.log(s) if k > 1 else 0.0)
        )
        yield math.exp(log_term)


def density_expr(num_layers: int, lam) -> sp.Expr:
    """f as a SymPy expression in ``X`` (x > 0)."""
    return sp.Add(
        *[
            sp.binomial(num_layers, k)
            * lam**k
            * (1 - lam) ** (num_layers - k)
            * (-sp.log(X)) ** (k - 1)
            / sp.factorial(k - 1)
            for k in range(1, num_layers + 1)
        ]
    )


def jax_density(num_layers: int, lam) -> Callable:
    """f(x) as a JAX function of x (``sympy.lambdify(..., modules="jax")``; JAX imported on call)."""
    return sp.lambdify(X, density_expr(num_layers, lam), modules="jax")


@dataclass(frozen=True)
class ContinuumError:
    """Distance between N p(j) (exact) and f(j/N) for one N."""

    tokens: int
    window: float
    window_max: float  # max |N p(j) - f(j/N)| over x_j = j/N in [w, 1-w]
    window_argmax: int
    interior_max: float  # max over 1 <= j <= N-2 (dominated by the singularity at x -> 0)
    interior_argmax: int
    atom_error: float  # |p(N-1) - (1-λ)^T|, O(1/N)
    l1: float  # Σ_{1<=j<=N-2} |p(j) - f(j/N)/N| + |p(N-1) - (1-λ)^T - f(1 - 1/N)/N|, j = 0 excluded


def continuum_error(num_tokens: int, num_layers: int, lam, window: float = 0.1) -> ContinuumError:
    """Compare the exact profile (theorem.cesaro_exact) with the continuum limit at x_j = j/N."""
    n = num_tokens
    lam_q = Fraction(str(lam)) if isinstance(lam, float) else Fraction(lam)
    lam_f = float(lam_q)
    p = exact_profile([lam_q] * num_layers, n).floats()
    atom = float((1 - lam_q) ** num_layers)
    f = [density(j / n, num_layers, lam_f) if j > 0 else math.inf for j in range(n)]
    err = [abs(n * p[j] - f[j]) for j in range(n)]
    interior = range(1, n - 1)
    in_window = [j for j in interior if window <= j / n <= 1 - window]
    j_w = max(in_window, key=lambda j: err[j]) if in_window else -1
    j_i = max(interior, key=lambda j: err[j]) if n > 2 else -1
    l1 = math.fsum(abs(p[j] - f[j] / n) for j in interior) + abs(p[-1] - atom - f[-1] / n)
    return ContinuumError(
        n,
        window,
        err[j_w] if j_w >= 0 else math.nan,
        j_w,
        err[j_i] if j_i >= 0 else math.nan,
        j_i,
        abs(p[-1] - atom),
        l1,
    )


# -------------------------------------------------------------------------- certificates
@certificate("continuum:moments")
def moments_are_cesaro(max_layers: int = 5) -> Check:
    """ν's moments: ∫ x^k (-ln x)^m/m! dx = (k+1)^-(m+1) and (1-λ)^T + ∫ x^k f = μ_k (symbolic k, λ)."""
    s, k, lam = sp.Symbol("s", positive=True), sp.Symbol("k", positive=True), sp.Symbol("lambda")
    # ∫_0^1 x^k (-ln x)^m / m! dx = ∫_0^∞ e^{-(k+1)s} s^m / m! ds  (x = e^{-s})  = (k+1)^{-(m+1)}
    gamma_ok = all(
        sp.simplify(sp.integrate(sp.exp(-(k + 1) * s) * s**m / sp.factorial(m), (s, 0, sp.oo)) * (k + 1) ** (m + 1))
        == 1
        for m in range(max_layers)
    )
    moments_ok = all(
        sp.simplify(
            (1 - lam) ** t
            + sum(sp.binomial(t, m) * lam**m * (1 - lam) ** (t - m) / (k + 1) ** m for m in range(1, t + 1))
            - (1 - lam * k / (k + 1)) ** t
        )
        == 0
        for t in range(1, max_layers + 1)
    )
    return check(
        bool(gamma_ok and moments_ok),
        f"∫ x^k (-ln x)^m/m! dx = (k+1)^-(m+1) (m < {max_layers}) and (1-λ)^T + ∫ x^k f = "
        f"(1 - λk/(k+1))^T = μ_k (T <= {max_layers}, symbolic k, λ): ν has the Cesàro moments",
    )


@certificate("continuum:total-mass")
def total_mass(max_layers: int = 5) -> Check:
    """ν is a probability law: ∫_0^1 f + (1-λ)^T = 1 (symbolic λ, T <= max_layers)."""
    lam = sp.Symbol("lambda")
    s = sp.Symbol("s", positive=True)
    ok = all(
        sp.simplify(
            sp.integrate(density_expr(t, lam).subs(X, sp.exp(-s)) * sp.exp(-s), (s, 0, sp.oo)) + (1 - lam) ** t - 1
        )
        == 0
        for t in range(1, max_layers + 1)
    )
    return check(bool(ok), f"∫_0^1 f + (1-λ)^T = 1 for T = 1..{max_layers}, symbolic λ")


THREE_TENTHS = sp.Rational(3, 10)  # binomial_mixture's default lambda, built once (an immutable SymPy number)


@certificate("continuum:binomial-mixture")
def binomial_mixture(n: int = 6, num_layers: int = 3, lam=THREE_TENTHS) -> Check:
    """p(j) = ∫ C(N-1,j) x^j (1-x)^(N-1-j) dν exactly, against the exact Cesàro profile."""
    f = density_expr(num_layers, lam)
    got = [sp.integrate(sp.binomial(n - 1, j) * X**j * (1 - X) ** (n - 1 - j) * f, (X, 0, 1)) for j in range(n)]
    got[-1] += (1 - lam) ** num_layers
    want = exact_profile([Fraction(str(lam))] * num_layers, n).fractions()
    ok = [Fraction(int(g.p), int(g.q)) if g.is_Rational else None for g in got] == want
    return check(
        ok,
        f"p(j) = ∫ C(N-1,j) x^j (1-x)^(N-1-j) dν exactly (N = {n}, T = {num_layers}, λ = {lam}; "
        "SymPy integrals vs the exact Cesàro profile)",
    )


# ---------------------------------------------------------------------------- derivation
@dataclass(frozen=True)
class ContinuumParams(Params):
    """Sequence length, depth, constant λ and comparison window of the continuum check."""

    name = "continuum-profile"
    tokens: int = param(
        256, meaning="the number of tokens N (the exact profile is evaluated at N and 2N)", example="128", minimum=8
    )
    layers: int = param(8, meaning="the number of layers T", example="6", minimum=1, maximum=256)
    lam: Fraction = param(
        Fraction(3, 10), meaning="the constant mixing coefficient λ (exact)", example="0.3", minimum=0, maximum=1
    )
    window: Fraction = param(Fraction(1, 10), meaning="compare on x_j = j/N in [W, 1 - W], 0 < W < 1/2", example="0.2")

    def __post_init__(self):
        super().__post_init__()
        if not 0 < self.window < Fraction(1, 2):
            raise DeriveError(f"continuum-profile: --window {self.window}: expected 0 < W < 1/2")
        n, t = self.tokens, self.layers
        if (2 * n) ** 3 * t > MAX_COST:
            raise DeriveError(
                f"continuum-profile: --tokens {n} --layers {t}: expected N >= 8 and (2N)^3 T <= "
                f"{MAX_COST} (the exact profile is evaluated at N and 2N)"
            )


def compute(params: ContinuumParams = ContinuumParams()) -> Result:
    """The limit law ν = (1-λ)^T δ_1 + f(x) dx of the Cesàro rollout under constant λ and the error
    max |N p(j) - f(j/N)| on the window at N and 2N (THEORY.md closed form, C6)."""
    n, t = params.tokens, params.layers
    lam_q = params.lam
    lam = sp.Rational(lam_q.numerator, lam_q.denominator)
    window = sp.Rational(params.window.numerator, params.window.denominator)
    errs = [continuum_error(m, t, lam_q, float(window)) for m in (n, 2 * n)]
    lam_f = float(lam_q)
    atom = float((1 - lam_q) ** t)
    ratio = errs[1].window_max / errs[0].window_max if errs[0].window_max > 0 else math.nan
    xs = [0.05, 0.1, 0.25, 0.5, 0.75, 0.9]
    lines = [
        f"continuum-profile: uniform causal attention, constant λ = {lam}, T = {t}",
        "limit law ν (N → ∞): p(xN) ≈ (1-λ)^T [x = 1] + f(x)/N,",
        "  f(x) = Σ_{k=1}^{T} C(T,k) λ^k (1-λ)^{T-k} (-ln x)^{k-1}/(k-1)!",
        "  ν is the law of U_1⋯U_K, K ~ Binomial(T, λ), U_i uniform; its moments are the Cesàro μ_k,",
        "  so p(j) = ∫ C(N-1,j) x^j (1-x)^{N-1-j} dν(x) exactly for every N",
        f"atom (1-λ)^T = {atom:.10g}",
        "f(x): " + ", ".join(f"f({x:g}) = {density(x, t, lam_f):.6g}" for x in xs),
        f"error against the exact profile (theorem.cesaro), x_j = j/N, window x_j ∈ [{window}, {1 - window}]:",
        "       N   window max |N p(j) - f(x_j)|   interior max (1<=j<=N-2)   |p(N-1) - (1-λ)^T|   l1 (j >= 1)",
    ]
    for e in errs:
        lines.append(
            f"  {e.tokens:>6}   {e.window_max:>28.6g}   {e.interior_max:>12.6g} at j = {e.interior_argmax:<6}"
            f"   {e.atom_error:>18.6g}   {e.l1:.6g}"
        )
    lines.append(f"window error ratio err(2N)/err(N) = {ratio:.4f}  (O(1/N) predicts about 1/2)")
    lines.append(
        "note: f has a (-ln x)^(T-1) singularity at x = 0, so the interior max near j = 1 "
        "does not vanish as N grows; the window error does"
    )
    latex = (
        r"p(xN)\approx(1-\lambda)^T[x=1]+\frac1N\sum_{k=1}^{T}\binom{T}{k}\lambda^k(1-\lambda)^{T-k}"
        r"\frac{(-\ln x)^{k-1}}{(k-1)!}"
        + f"\\quad(\\lambda={sp.latex(lam)},\\ T={t}):\\ "
        + r"\max_{x_j\in["
        + f"{window},{1 - window}"
        + r"]}|Np(j)-f(x_j)|="
        + f"{errs[0].window_max:.4g}\\ (N={n}),\\ {errs[1].window_max:.4g}\\ (N={2 * n})"
    )
    data = {
        "lam": float(lam_q),
        "layers": t,
        "atom": atom,
        "window": [float(window), float(1 - window)],
        "density_samples": {str(x): density(x, t, lam_f) for x in xs},
        "errors": [
            {
                "tokens": e.tokens,
                "window_max": e.window_max,
                "window_argmax": e.window_argmax,
                "interior_max": e.interior_max,
                "interior_argmax": e.interior_argmax,
                "atom_error": e.atom_error,
                "l1": e.l1,
            }
            for e in errs
        ],
        "window_ratio": ratio,
    }
    return Result("continuum-profile", "\n".join(lines), latex, data)


DERIVATION = Derivation(
    name="continuum-profile",
    summary="large-N limit of the Cesàro rollout under constant λ (atom + (-ln x)-power density), with its error",
    claims=("C6",),
    params=ContinuumParams,
    compute=compute,
    limits=(
        f"--layers <= 256 and (2N)^3 T <= {MAX_COST} (1024^3 * 64; the exact profile is evaluated at N and 2N), "
        "checked before anything is built; --lam and --window exact with at most 60 digits and decimal exponents "
        "within ±60; about 4 s at the limit (N = 512, T = 64)"
    ),
)
