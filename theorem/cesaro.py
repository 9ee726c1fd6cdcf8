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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import sympy as sp

from posbias.numerics import schedules
from posbias.numerics.shape import u_shape
from posbias.theorem.certificate import Check, certificate, check, registered
from posbias.theorem.derivation import Derivation, DeriveError, Result
from posbias.theorem.params import Params, param

MAX_TOKENS = 4096
MAX_LAYERS = 4096  # T; the λ_t are built in O(T) Fraction / mpmath steps, never a SymPy call per layer
MAX_COST = 1024**3 * 64  # limit on N^3 T (kept for continuum-profile, which evaluates constant λ only)
MAX_WORK = 2 * 10**9  # word operations (estimated_work): about 3 s; N = 1024, T = 64, λ = 1/2 needs 1.6e9
LIMITS = (f"--tokens <= {MAX_TOKENS}, --layers <= {MAX_LAYERS}, and at most 2e9 big-integer word operations, "
          "estimated from the parameters before anything is built (the common denominator has T bits(lcm(1..N)) "
          "plus the bits of every λ_t's denominator; a geometric q = a/b adds t bits(b) at layer t); about 3 s at "
          "the limit (N = 1024, T = 64, λ = 1/2 fits); decimals in a schedule: at most 60 digits, exponents within ±60")
ROUND_DIGITS = 40  # irrational λ_t are rounded to this many decimals (error bound reported)


# ----------------------------------------------------------------------------- schedules
@dataclass(frozen=True)
class ExactSchedule:
    """λ_0..λ_{T-1} as exact fractions; ``rounded`` counts layers rounded to ROUND_DIGITS decimals."""

    spec: str  # the schedule's canonical spec (posbias.numerics.schedules)
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


DEFAULT_LAYERS = 32  # T when --layers is not given (custom schedules: their length)


def _formula(schedule: schedules.Schedule) -> str:
    t = sp.Symbol("t", integer=True, nonnegative=True)
    if isinstance(schedule, schedules.Custom):
        return "λ_t given layer by layer"
    if isinstance(schedule, schedules.PowerDecay):
        lam0, beta = (sp.Rational(repr(float(x))) for x in (schedule.lambda_0, schedule.beta))
        return f"λ_t = ({lam0})/(t+1)^({beta})"
    return f"λ_t = {schedule.symbolic(t)}"


def exact_schedule(schedule: schedules.Schedule, num_layers: int | None = None) -> ExactSchedule:
    """λ_0..λ_{T-1} of ``schedule`` as exact fractions, from its symbolic view (parameters read as the
    decimals they were written as: 0.3 -> 3/10); irrational values are rounded to ROUND_DIGITS
    decimals and counted in ``rounded``. T = ``num_layers``, else the custom length, else 32.

    >>> exact_schedule(schedules.parse("power_decay:0.5,1"), 3).lambdas
    (Fraction(1, 2), Fraction(1, 4), Fraction(1, 6))
    """
    spec = schedule.spec
    if isinstance(schedule, schedules.Custom):
        if num_layers is not None and num_layers != len(schedule.lambdas):
            raise DeriveError(
                f"--schedule {spec!r}: {len(schedule.lambdas)} values but --layers {num_layers}; expected equal"
            )
        num_layers = len(schedule.lambdas)
    t_count = DEFAULT_LAYERS if num_layers is None else num_layers
    if t_count > MAX_LAYERS:
        raise DeriveError(f"--layers {t_count}: expected at most {MAX_LAYERS}")
    values, rounded = _layer_values(schedule, t_count)
    for layer, v in enumerate(values):
        if not 0 <= v <= 1:
            raise DeriveError(f"--schedule {spec!r}: λ_{layer} = {v} lies outside [0, 1]; expected 0 <= λ_t <= 1")
    return ExactSchedule(spec, _formula(schedule), tuple(values), rounded)


def _dec(x: float) -> Fraction:
    return Fraction(repr(float(x)))


def _integer_root(x: int, q: int) -> int | None:
    """The integer r with r^q = x, if there is one (x >= 1)."""
    if x == 1:
        return 1
    if q > x.bit_length():  # 2^q > x: no integer q-th root above 1
        return None
    r = round(x ** (1.0 / q))
    for c in (r - 1, r, r + 1):
        if c >= 1 and c**q == x:
            return c
    return None


def _layer_values(schedule: schedules.Schedule, t_count: int) -> tuple[list[Fraction], int]:
    """λ_0..λ_{T-1} exactly (Fractions; parameters read as the decimals they print as), irrational
    values rounded to ROUND_DIGITS decimals (from 20 more digits in mpmath); (values, rounded count)."""
    if isinstance(schedule, schedules.Custom):
        return [_dec(x) for x in schedule.lambdas], 0
    if isinstance(schedule, schedules.Constant):
        return [_dec(schedule.value)] * t_count, 0
    if isinstance(schedule, schedules.Geometric):
        lam0, q = _dec(schedule.lambda_0), _dec(schedule.q)
        out, v = [], lam0
        for _ in range(t_count):
            out.append(v)
            v *= q
        return out, 0
    if isinstance(schedule, schedules.PowerDecay):
        lam0, beta = _dec(schedule.lambda_0), _dec(schedule.beta)
        if beta.denominator == 1:
            return [lam0 / Fraction(t + 1) ** int(beta) for t in range(t_count)], 0
        import mpmath

        scale = 10**ROUND_DIGITS
        out = []
        with mpmath.workdps(ROUND_DIGITS + 20):
            b = mpmath.mpf(beta.numerator) / beta.denominator
            l0 = mpmath.mpf(lam0.numerator) / lam0.denominator
            rounded = 0
            for t in range(t_count):
                root = _integer_root(t + 1, beta.denominator)
                if root is not None:  # (t+1)^(-p/q) is rational when t+1 is a q-th power
                    out.append(lam0 / Fraction(root) ** beta.numerator)
                    continue
                out.append(Fraction(int(mpmath.nint(l0 * mpmath.power(t + 1, -b) * scale)), scale))
                rounded += 1
        return out, rounded
    t = sp.Symbol("t", integer=True, nonnegative=True)
    expr = schedule.symbolic(t)
    values, rounded = [], 0
    for layer in range(t_count):
        v = expr.subs(t, layer)
        if not v.is_Rational:
            v = sp.Rational((v * 10**ROUND_DIGITS).evalf(ROUND_DIGITS + 20).round(), 10**ROUND_DIGITS)
            rounded += 1
        values.append(_to_fraction(v))
    return values, rounded


def _layer_bits(schedule: schedules.Schedule, t_count: int) -> list[int]:
    """Upper bounds on the bits of each λ_t's denominator, from the parameters alone (nothing built)."""
    rounded = ROUND_DIGITS * 4  # a rounded λ_t: denominator 10^40 < 2^133
    if isinstance(schedule, schedules.Custom):
        return [_dec(x).denominator.bit_length() for x in schedule.lambdas]
    if isinstance(schedule, schedules.Constant):
        return [_dec(schedule.value).denominator.bit_length()] * t_count
    if isinstance(schedule, schedules.Geometric):
        b0, bq = _dec(schedule.lambda_0).denominator.bit_length(), _dec(schedule.q).denominator.bit_length()
        return [b0 + bq * t for t in range(t_count)]
    if isinstance(schedule, schedules.PowerDecay):
        beta = _dec(schedule.beta)
        b0 = _dec(schedule.lambda_0).denominator.bit_length()
        if beta.denominator == 1:
            return [b0 + int(beta) * (t + 1).bit_length() for t in range(t_count)]
        return [rounded] * t_count
    return [rounded] * t_count


def estimated_work(schedule: schedules.Schedule, num_tokens: int, num_layers: int | None) -> tuple[int, int]:
    """(word operations, bits B of the common denominator) of ``exact_profile``, bounded from the
    parameters before anything is built: per token k a product of T layer factors (4 N Σ_t ⌈B_t/64⌉
    ⌈b_t/64⌉, B_t the bits so far, b_t = bits(λ_t's denominator) + bits(N)) plus the difference table
    (N^2 ⌈B/64⌉), B = T bits(lcm(1..N)) + Σ_t b_t."""
    t_count = (len(schedule.lambdas) if isinstance(schedule, schedules.Custom)
               else DEFAULT_LAYERS if num_layers is None else num_layers)
    n = num_tokens
    if n > MAX_TOKENS or t_count > MAX_LAYERS:
        return 10**30, 10**30
    lcm_bits = math.lcm(*range(1, n + 1)).bit_length()
    layer = [b + n.bit_length() + 1 for b in _layer_bits(schedule, t_count)]
    products, so_far = 0, 0
    for b in layer:
        so_far += b
        products += -(-so_far // 64) * -(-b // 64)
    bits = t_count * lcm_bits + sum(layer) + 1
    return 4 * n * products + n * n * -(-bits // 64), bits


def parse_schedule(spec: str, num_layers: int | None = None) -> ExactSchedule:
    """``constant:L``, ``power_decay:L0,BETA`` (λ_t = L0/(t+1)^BETA), ``geometric:L0,Q`` or
    ``custom:L0,L1,...`` (posbias.numerics.schedules.parse), evaluated exactly by ``exact_schedule``."""
    return exact_schedule(_parse(spec), num_layers)


def _parse_bounded(spec: str) -> schedules.Schedule:
    """``schedules.parse`` after checking every number against theorem.expr_guard's literal limits."""
    from posbias.theorem.expr_guard import exact_number

    _, _, args = spec.partition(":")
    for a in args.split(","):
        if a.strip():
            exact_number(a, f"--schedule {spec!r}")
    return schedules.parse(spec)


def _parse(spec: str) -> schedules.Schedule:
    try:
        return schedules.parse(spec)
    except ValueError as exc:
        raise DeriveError(f"--schedule: {exc}") from None


# ------------------------------------------------------------------------ exact evaluator
@dataclass(frozen=True)
class ExactProfile:
    """p(j) = numerators[j] / denominator exactly (one common denominator, not reduced)."""

    numerators: tuple[int, ...]
    denominator: int

    @property
    def denominator_bits(self) -> int:
        """Size of the common denominator in bits (the cost of exactness)."""
        return self.denominator.bit_length()

    def fractions(self) -> list[Fraction]:
        """p(j) as exact (reduced) fractions."""
        return [Fraction(n, self.denominator) for n in self.numerators]

    def floats(self) -> list[float]:
        """Correctly rounded float64 values (Python's int / int rounds correctly)."""
        return [n / self.denominator for n in self.numerators]


def moment_parts(k: int, lambdas: Sequence[Fraction]) -> tuple[int, int]:
    """mu_k = num / den with num = Π_t (b_t (k+1) - a_t k), den = Π_t b_t (k+1) (λ_t = a_t/b_t), unreduced:
    T big-integer products and no gcd (a gcd per layer is quadratic in the bit size)."""
    num, den = 1, 1
    for lam in lambdas:
        lam = Fraction(lam)
        num *= lam.denominator * (k + 1) - lam.numerator * k
        den *= lam.denominator * (k + 1)
    return num, den


def moment_fraction(k: int, lambdas: Sequence[Fraction]) -> Fraction:
    """mu_k = prod_t (1 - λ_t k/(k+1)) as an exact fraction."""
    num, den = moment_parts(k, lambdas)
    return Fraction(num, den)


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


@certificate("cesaro:hausdorff-of-cesaro", claims=("cesaro",))
def hausdorff_of_cesaro(max_n: int = 8) -> Check:
    """C = H(1/(k+1)) for every N (symbolic j and n = i - j: C(j+n, j) sum_m (-1)^m C(n, m)/(j+m+1)
    = 1/(j+n+1), a Beta integral SymPy evaluates), and C = H(1/(k+1)), I = H(1) exactly, N <= max_n
    (step 1 of proofs/cesaro.md; H(1) = I for every N is part of cesaro:hausdorff-factorisation)."""
    j, m, n = sp.symbols("j m n", integer=True, nonnegative=True)
    entry = sp.binomial(j + n, j) * sp.Sum((-1) ** m * sp.binomial(n, m) / (j + m + 1), (m, 0, n)).doit()
    general = sp.simplify(sp.gammasimp(entry) - 1 / (j + n + 1)) == 0
    finite = all(
        hausdorff_matrix([sp.Rational(1, k + 1) for k in range(n)]) == cesaro_matrix(n)
        and hausdorff_matrix([1] * n) == sp.eye(n)
        for n in range(1, max_n + 1)
    )
    return check(general and finite,
                f"H(1/(k+1))[i, j] = 1/(i+1) for j <= i, symbolic i, j; H(1/(k+1)) = C and H(1) = I exactly for "
                f"N = 1..{max_n}")


@certificate("cesaro:hausdorff-product-rule", claims=("cesaro",))
def hausdorff_product_rule(max_n: int = 6) -> Check:
    """H(a) H(b) = H(a b) for symbolic moment sequences, N <= max_n (Hausdorff matrices commute)."""
    ok = True
    for n in range(1, max_n + 1):
        a = sp.symbols(f"a0:{n}")
        b = sp.symbols(f"b0:{n}")
        ab = [a[k] * b[k] for k in range(n)]
        ok &= _is_zero_matrix(hausdorff_matrix(a) * hausdorff_matrix(b) - hausdorff_matrix(ab))
    return check(bool(ok),
                f"H(a) H(b) = H(a·b) for symbolic sequences a, b, N = 1..{max_n} (hence H's commute)")


def signed_binomial(num_tokens: int) -> sp.Matrix:
    """Δ[i, j] = (-1)^j C(i, j) (lower-triangular, N x N); H(mu) = Δ diag(mu) Δ and Δ^2 = I."""
    return sp.Matrix(num_tokens, num_tokens, lambda i, j: (-1) ** j * sp.binomial(i, j))


@certificate("cesaro:hausdorff-factorisation", claims=("cesaro",))
def hausdorff_factorisation(max_n: int = 7) -> Check:
    """The product rule for every N, symbolic: with Δ[i, k] = (-1)^k C(i, k),
    (Δ diag(mu) Δ)[i, j] = sum_k (-1)^(k+j) C(i, k) C(k, j) mu_k (only j <= k <= i survive), and with
    k = j + m the summand is C(i, j) (-1)^m C(i-j, m) mu_{j+m}: H(mu) = Δ diag(mu) Δ, because
    C(i, j+m) C(j+m, j) = C(i, j) C(i-j, m) (symbolic i, j, m). With mu = 1, Δ^2 = H(1) and
    H(1)[i, j] = C(i, j) sum_m (-1)^m C(i-j, m) = C(i, j) (1 - 1)^(i-j) = [i = j] (symbolic n = i - j >= 1).
    Hence H(a) H(b) = Δ diag(a) Δ Δ diag(b) Δ = Δ diag(a b) Δ = H(a b), for every N.
    Cross-check: the matrix identities for N <= max_n with symbolic mu."""
    i, j, m, n = sp.symbols("i j m n", integer=True, nonnegative=True)
    mu = sp.Function("mu")
    ratio = (sp.binomial(i, j + m) * sp.binomial(j + m, j)) / (sp.binomial(i, j) * sp.binomial(i - j, m))
    binomial_identity = sp.gammasimp(sp.combsimp(ratio)) == 1
    lhs = (-1) ** (j + m) * (-1) ** j * sp.binomial(i, j + m) * sp.binomial(j + m, j) * mu(j + m)  # k = j + m
    rhs = sp.binomial(i, j) * (-1) ** m * sp.binomial(i - j, m) * mu(j + m)
    summand = sp.simplify(sp.combsimp(lhs / rhs)) == 1
    alternating = sp.simplify(sp.Sum((-1) ** m * sp.binomial(n + 1, m), (m, 0, n + 1)).doit()) == 0
    finite = True
    for size in range(1, max_n + 1):
        delta = signed_binomial(size)
        moments = sp.symbols(f"mu0:{size}")
        finite &= delta * delta == sp.eye(size)
        finite &= _is_zero_matrix(delta * sp.diag(*moments) * delta - hausdorff_matrix(moments))
    ok = binomial_identity and summand and alternating and bool(finite)
    return check(
        ok,
        "H(mu) = Δ diag(mu) Δ and Δ^2 = I for every N (symbolic i, j, m): the Hausdorff product rule "
        "H(a) H(b) = H(a b) holds for every N",
        f"C(i,j+m) C(j+m,j) = C(i,j) C(i-j,m): {binomial_identity}; summand after k = j + m: {summand}; "
        f"sum_m (-1)^m C(n+1, m) = 0: {alternating}; matrix identities N = 1..{max_n}: {bool(finite)}",
    )


@certificate("cesaro:residual-layer", claims=("cesaro",))
def residual_layer(max_n: int = 6) -> Check:
    """H is linear in its moments (entry formula, symbolic i - j = n, j, sequences a, b, weights) and
    (1 - λ) + λ/(k+1) = 1 - λ k/(k+1), so (1 - λ) I + λ C = H(1 - λ k/(k+1)) for every N; exactly for
    symbolic λ, N <= max_n."""
    lam = sp.Symbol("lambda")
    j, m, n, k = sp.symbols("j m n k", integer=True, nonnegative=True)
    a_seq, b_seq = sp.Function("a"), sp.Function("b")
    alpha, beta = sp.symbols("alpha beta")
    h_entry = lambda f: sp.binomial(j + n, j) * sp.Sum((-1) ** m * sp.binomial(n, m) * f(j + m), (m, 0, n))  # noqa: E731
    linear = sp.simplify(h_entry(lambda q: alpha * a_seq(q) + beta * b_seq(q))
                         - alpha * h_entry(a_seq) - beta * h_entry(b_seq)) == 0
    moment = sp.simplify((1 - lam) + lam / (k + 1) - layer_moment(k, lam)) == 0
    ok = linear and moment and all(
        _is_zero_matrix((1 - lam) * sp.eye(n) + lam * cesaro_matrix(n)
                        - hausdorff_matrix([layer_moment(k, lam) for k in range(n)]))
        for n in range(1, max_n + 1)
    )
    return check(ok,
                f"H is linear in its moments and (1-λ)·1 + λ/(k+1) = 1 - λk/(k+1) (symbolic); "
                f"(1-λ) I + λ C = H(1 - λ k/(k+1)) for symbolic λ, N = 1..{max_n}")


@certificate("cesaro:rollout-closed-form", claims=("cesaro",))
def rollout_closed_form(max_n: int = 5, num_layers: int = 3) -> Check:
    """P = H(mu), mu_k = Π_t (1 - λ_t k/(k+1)), and its last row is the p(j) formula (symbolic λ)."""
    lams = sp.symbols(f"lambda_0:{num_layers}")
    ok = True
    for n in range(1, max_n + 1):
        p = sp.eye(n)
        for lam in lams:  # P = R^(T-1) ... R^(0)
            p = ((1 - lam) * sp.eye(n) + lam * cesaro_matrix(n)) * p
        ok &= _is_zero_matrix(p - hausdorff_matrix([moment_expr(k, lams) for k in range(n)]))
        ok &= _is_zero_matrix(p[n - 1, :] - sp.Matrix([profile_exprs(n, lams)]))
    return check(bool(ok),
                f"R^(2) R^(1) R^(0) = H(mu), mu_k = Π_t (1 - λ_t k/(k+1)), and its last row is the "
                f"p(j) formula, symbolic λ_0..λ_{num_layers - 1}, N = 1..{max_n}")


@certificate("cesaro:layer-order-irrelevant", claims=("cesaro",))
def layer_order_irrelevant(n: int = 6) -> Check:
    """R(λ_0) R(λ_1) = R(λ_1) R(λ_0) symbolically: layer order does not matter."""
    l0, l1 = sp.symbols("lambda_0 lambda_1")
    r0 = (1 - l0) * sp.eye(n) + l0 * cesaro_matrix(n)
    r1 = (1 - l1) * sp.eye(n) + l1 * cesaro_matrix(n)
    ok = _is_zero_matrix(r0 * r1 - r1 * r0)
    return check(ok,
                f"R(λ_0) R(λ_1) = R(λ_1) R(λ_0) symbolically (N = {n}); in general mu is symmetric in λ_t")


@certificate("cesaro:collapse-iff-divergence", claims=("cesaro",))
def collapse_iff_divergence(max_n: int = 8) -> Check:
    """λ/2 <= λ k/(k+1) <= λ for k >= 1 (mu_k -> 0 iff Σλ_t = ∞), and H(1, 0, ..., 0) has last row e_0 (C5(c))."""
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
    return check(sandwich and point_mass,
                "for k >= 1, λ_t/2 <= λ_t k/(k+1) <= λ_t (so mu_k -> 0 iff Σλ_t = ∞ by the product bounds "
                "1-x <= e^{-x}, 1-x >= e^{-x/(1-x)} of theorem.dichotomy_certificates), and H(1,0,...,0) has last row "
                f"e_0 (N = 1..{max_n}): collapse p -> e_0 iff Σλ_t = ∞ (C5(c))")


@certificate("cesaro:integer-evaluator", claims=("cesaro",))
def integer_evaluator(n: int = 7) -> Check:
    """``exact_profile`` (integer difference table) equals the exact matrix product for five λ."""
    lams = [Fraction(1, 3), Fraction(7, 10), Fraction(1, 1), Fraction(0), Fraction(2, 9)]
    cm = cesaro_matrix(n)
    p = sp.eye(n)
    for lam in lams:
        q = sp.Rational(lam.numerator, lam.denominator)
        p = ((1 - q) * sp.eye(n) + q * cm) * p
    want = [Fraction(int(v.p), int(v.q)) for v in p[n - 1, :]]
    got = exact_profile(lams, n).fractions()
    return check(got == want,
                f"the integer difference-table evaluator equals the exact matrix product (N = {n}, "
                f"λ = {', '.join(map(str, lams))})")


# ---------------------------------------------------------------------------- derivation
@dataclass(frozen=True)
class CesaroParams(Params):
    """Sequence length, depth and λ schedule of the exact Cesàro rollout."""

    name = "cesaro-rollout"
    tokens: int = param(64, meaning="the number of tokens N", example="128", minimum=1, maximum=MAX_TOKENS)
    layers: int | None = param(None, meaning="the number of layers T", example="8", minimum=0, maximum=MAX_LAYERS,
                               default_text=f"{DEFAULT_LAYERS}; a custom schedule: its length")
    schedule: schedules.Schedule = param(
        schedules.Constant(0.5), convert=_parse_bounded, metavar="SCHEDULE", example="power_decay:0.9,1",
        meaning="the λ schedule: constant:L, power_decay:L0,BETA, geometric:L0,Q or custom:L0,L1,...")
    certify: bool = param(False, meaning="also run the certificates behind the closed form", example="--certify")


def _fmt(x: float) -> str:
    return f"{x:.10g}"


def compute(params: CesaroParams = CesaroParams()) -> Result:
    """The exact profile p = e_{N-1} H(mu) of T Cesàro layers (THEORY.md 'An exact closed form'), its
    minimum and shape (C6) and last-token atom (C2(c)); the certificates when ``certify``."""
    n = params.tokens
    work, bits = estimated_work(params.schedule, n, params.layers)
    if work > MAX_WORK:
        t_est = len(params.schedule.lambdas) if isinstance(params.schedule, schedules.Custom) else (
            DEFAULT_LAYERS if params.layers is None else params.layers)
        raise DeriveError(f"cesaro-rollout: --tokens {n} --layers {t_est} --schedule {params.schedule.spec}: the "
                          f"exact evaluation needs about {work:.3g} word operations (denominator of {bits} bits); "
                          f"expected at most {MAX_WORK:.0e}")
    sched = exact_schedule(params.schedule, params.layers)
    t_count = len(sched.lambdas)
    prof = exact_profile(sched.lambdas, n)
    if sum(prof.numerators) != prof.denominator:
        raise AssertionError("exact profile does not sum to 1")  # mu_0 = 1 makes this an identity
    p = prof.floats()
    j_min = min(range(n), key=lambda j: (prof.numerators[j], j))
    interior = 0 < j_min < n - 1
    u_shaped = u_shape(prof.numerators)  # one common denominator: the numerators order like p
    lam_sum = sum(sched.lambdas, Fraction(0))
    atom_num, atom_den = moment_parts(n - 1, sched.lambdas)
    assert atom_num * prof.denominator == prof.numerators[-1] * atom_den  # C2(c): p(N-1) = mu_{N-1}

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
        f"U-shape: {'yes' if u_shaped else 'no'}   (C6)",
        "corollaries: layer order is irrelevant (mu is symmetric in λ_t); as T -> ∞, p -> e_0 iff "
        "Σ_t λ_t = ∞ (C5(c)), else p -> H(mu^∞)",
        "   j  p(j)",
    ]
    lines += [f"{j:>4}  {_fmt(p[j])}" for j in shown]
    certs = {}
    if params.certify:
        for name, cert in registered([__name__]).items():
            c = cert.run()
            certs[name] = {"holds": c.holds, "detail": c.description}
            lines.append(f"[{'ok' if c.holds else 'FAILS'}] {name}: {c.description}")
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
        "u_shape": u_shaped,
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
    params=CesaroParams,
    compute=compute,
    limits=LIMITS,
)
