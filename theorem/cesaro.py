"""``posbias derive cesaro-rollout``: the exact profile of uniform causal (Cesàro) attention.

THEORY.md, "An exact closed form" (with C2(c), C5 and C6). The rollout of T layers
(1 - λ_t) I + λ_t C, C[i, j] = 1/(i+1) for j <= i, is P = H(mu) with the Hausdorff moments
mu_k = prod_t (1 - λ_t k/(k+1)) (posbias.theorem.hausdorff), so

    p(j) = P[N-1, j] = C(N-1, j) sum_{i=0}^{N-1-j} (-1)^i C(N-1-j, i) mu_{j+i}.

Corollaries: layer order does not matter (mu is symmetric in the λ_t);
p(N-1) = mu_{N-1} = prod_t (1 - λ_t (N-1)/N) (C2(c)); as T -> oo, mu_k -> 0 for every
k >= 1 iff sum_t λ_t = oo, so p -> e_0 (collapse, C5(c)) iff the λ_t are not summable,
otherwise p -> H(mu^oo) with mu^oo_k >= exp(-k sum_t λ_t) > 0.

The λ_t are exact fractions (posbias.theorem.cesaro_schedule) and p is evaluated in integers
(posbias.theorem.cesaro_exact); the result's floats are the correctly rounded float64 values of
the exact p(j). A query whose estimated work exceeds ``MAX_WORK`` is refused before anything is
built; ``--certify`` also runs posbias.theorem.cesaro_certificates.

Examples
--------
>>> compute(CesaroParams(tokens=3, layers=1)).data["profile_exact"]
['1/6', '1/6', '2/3']
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from posbias.numerics import schedules
from posbias.numerics.shape import u_shape
from posbias.theorem import cesaro_certificates
from posbias.theorem.certificate import registered
from posbias.theorem.cesaro_exact import MAX_TOKENS, estimated_work, exact_profile, moment_parts
from posbias.theorem.cesaro_schedule import DEFAULT_LAYERS, MAX_LAYERS, ROUND_DIGITS, exact_schedule, layer_count
from posbias.theorem.derivation import Derivation, DeriveError, Result
from posbias.theorem.params import Params, param

MAX_WORK = 2 * 10**9  # word operations (estimated_work): about 3 s; N = 1024, T = 64, λ = 1/2 needs 1.6e9
LIMITS = (
    f"--tokens <= {MAX_TOKENS}, --layers <= {MAX_LAYERS}, and at most 2e9 big-integer word operations, "
    "estimated from the parameters before anything is built (the common denominator has T bits(lcm(1..N)) "
    "plus the bits of every λ_t's denominator; a geometric q = a/b adds t bits(b) at layer t); about 3 s at "
    "the limit (N = 1024, T = 64, λ = 1/2 fits); decimals in a schedule: at most 60 digits, exponents within ±60"
)


def _parse_bounded(spec: str) -> schedules.Schedule:
    """``schedules.parse`` after checking every number against theorem.expr_guard's literal limits."""
    from posbias.theorem.expr_guard import exact_number

    _, _, args = spec.partition(":")
    for a in args.split(","):
        if a.strip():
            exact_number(a, f"--schedule {spec!r}")
    return schedules.parse(spec)


@dataclass(frozen=True)
class CesaroParams(Params):
    """Sequence length, depth and λ schedule of the exact Cesàro rollout."""

    name = "cesaro-rollout"
    tokens: int = param(64, meaning="the number of tokens N", example="128", minimum=1, maximum=MAX_TOKENS)
    layers: int | None = param(
        None,
        meaning="the number of layers T",
        example="8",
        minimum=0,
        maximum=MAX_LAYERS,
        default_text=f"{DEFAULT_LAYERS}; a custom schedule: its length",
    )
    schedule: schedules.Schedule = param(
        schedules.Constant(0.5),
        convert=_parse_bounded,
        metavar="SCHEDULE",
        example="power_decay:0.9,1",
        meaning="the λ schedule: constant:L, power_decay:L0,BETA, geometric:L0,Q or custom:L0,L1,...",
    )
    certify: bool = param(False, meaning="also run the certificates behind the closed form", example="--certify")


def _fmt(x: float) -> str:
    return f"{x:.10g}"


def compute(params: CesaroParams = CesaroParams()) -> Result:
    """The exact profile p = e_{N-1} H(mu) of T Cesàro layers (THEORY.md 'An exact closed form'), its
    minimum and shape (C6) and last-token atom (C2(c)); the certificates when ``certify``."""
    n = params.tokens
    work, bits = estimated_work(params.schedule, n, params.layers)
    if work > MAX_WORK:
        t_est = layer_count(params.schedule, params.layers)
        raise DeriveError(
            f"cesaro-rollout: --tokens {n} --layers {t_est} --schedule {params.schedule.spec}: the "
            f"exact evaluation needs about {work:.3g} word operations (denominator of {bits} bits); "
            f"expected at most {MAX_WORK:.0e}"
        )
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

    exactness = (
        "exact"
        if not sched.rounded
        else f"exact for λ_t rounded to {ROUND_DIGITS} decimals in {sched.rounded} layers; "
        f"l1 distance to the true profile <= {float(sched.rounding_bound):.1e}"
    )
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
        for name, cert in registered([cesaro_certificates.__name__]).items():
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
