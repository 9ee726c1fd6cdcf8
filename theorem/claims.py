"""The claim registry: C1-C7, the Cesàro closed form (THEORY.md, Claims) and C8 (the attention sink as
diagonal content: docs/theory.md, "Claims beyond THEORY.md"), each once.

A ``Claim`` carries its label, statement (plain text and LaTeX), hypotheses, a
numeric predicate on numpy arrays for property tests, and the proof file in
``proofs/``. The certificates that check its proof steps are not listed here:
each certificate names the claims it serves where it is declared
(``@certificate(name, claims=...)``, posbias.theorem.certificate), and
``Claim.certificates`` reads them from ``certificate_registry()``, which imports
the modules in ``CERTIFICATE_MODULES`` lazily (so this module loads without them
and without JAX). Each statement and predicate is itself checked by
``posbias.theorem.statements``: the key formula against THEORY.md, the predicate on exact
hand-derived instances (``posbias proofs --check`` runs both).

Examples
--------
>>> CLAIMS["C1"].proof
'proofs/C1.md'
>>> CLAIMS["C1"].certificates
('drift:causal-cdf-identity',)
>>> import numpy as np
>>> CLAIMS["C1"].predicate(np.array([[1.0, 0.0], [0.5, 0.5]]), np.array([0.0, 1.0]))
True
>>> CLAIMS["C6"].predicate(np.array([0.3, 0.1, 0.6]))
True
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from posbias.numerics.shape import u_shape
from posbias.theorem import c7_predicates, orders, sink_predicates
from posbias.theorem.certificate import Check, registered

CERTIFICATE_MODULES = (
    "posbias.theorem.softmax_shift",
    "posbias.theorem.alibi_row",
    "posbias.theorem.monotone",
    "posbias.theorem.drift",
    "posbias.theorem.diagonal_product",
    "posbias.theorem.shape",
    "posbias.theorem.cesaro_certificates",
    "posbias.theorem.dichotomy_certificates",
    "posbias.theorem.continuum",
    "posbias.theorem.c7_certificates",
    "posbias.theorem.sink_certificates",
)


@dataclass(frozen=True)
class Claim:
    """label: e.g. "C2(a)"; statement / latex: the claim; hypotheses: when it holds;
    predicate: numeric check on numpy arrays (signature in ``predicate_args``); proof: path
    of the proof file; status: "proved" or "partly observed" (C6)."""

    label: str
    title: str
    statement: str
    latex: str
    hypotheses: tuple[str, ...]
    predicate: Callable[..., bool]
    predicate_args: str
    proof: str
    status: str = "proved"

    @property
    def certificates(self) -> tuple[str, ...]:
        """Registry names of the certificates declared with this claim's label."""
        return tuple(name for name, labels in certificate_registry().claims.items() if self.label in labels)

    def check(self) -> list[Check]:
        """Run this claim's certificates."""
        return [run_certificate(name) for name in self.certificates]


# ----------------------------------------------------------------------------- predicates
TOL = 1e-10


def _c1(kernel, mu, tol=TOL) -> bool:
    """mu K ≼ mu (K causal row-stochastic)."""
    return orders.dominated(np.asarray(mu) @ np.asarray(kernel), mu, tol)


def _c2a(kernel, mu, lam, lam_hi=None, tol=TOL) -> bool:
    """mu A ≼ mu R_lam ≼ mu, F_{mu R} = (1-lam) F_mu + lam F_{mu A}; mu R_{lam_hi} ≼ mu R_lam if lam_hi >= lam."""
    mu = np.asarray(mu, dtype=np.float64)
    mua = mu @ kernel
    mur = mu @ orders.residual(kernel, lam)
    ok = orders.dominated(mua, mur, tol) and orders.dominated(mur, mu, tol)
    ok = ok and np.allclose(orders.cdf(mur), (1 - lam) * orders.cdf(mu) + lam * orders.cdf(mua), atol=tol)
    if lam_hi is not None:
        ok = ok and orders.dominated(mu @ orders.residual(kernel, lam_hi), mur, tol)
    return bool(ok)


def _last_row(kernels, lambdas):
    return orders.rollout(np.asarray(kernels), np.asarray(lambdas))[-1]


def _c2b(kernels, lambdas, layer, new_lambda, tol=TOL) -> bool:
    """Raising lambda_layer to new_lambda >= lambdas[layer] gives p_new ≼ p (monotone causal kernels)."""
    more = np.array(lambdas, dtype=np.float64)
    more[layer] = new_lambda
    return orders.dominated(_last_row(kernels, more), _last_row(kernels, lambdas), tol)


def _c2c(p, kernels, lambdas, tol=TOL) -> bool:
    """p(N-1) = prod_t (1 - lambda_t (1 - A^(t)[N-1, N-1]))."""
    kernels = np.asarray(kernels)
    atom = np.prod(1 - np.asarray(lambdas) * (1 - kernels[:, -1, -1]))
    return bool(abs(np.asarray(p)[-1] - atom) <= tol)


def _c3b(flat, steep, tol=TOL) -> bool:
    """Row-wise flat(i, ·) ≼ steep(i, ·) (slope of `steep` >= slope of `flat`)."""
    return orders.rows_dominated(flat, steep, tol)


def _c3c(p_flat, p_steep, tol=TOL) -> bool:
    """p with the flatter slope ≼ p with the steeper slope."""
    return orders.dominated(p_flat, p_steep, tol)


def _c4a(logits, background, mask=None, tol=TOL) -> bool:
    """Masked row softmax of logits + background equals that of logits. ``background`` is one
    value per row (shape logits.shape[:-1]) or a full array of logits' shape (then the claim
    needs it constant along each row, and the predicate is False otherwise)."""
    logits = np.asarray(logits, dtype=np.float64)
    mask = np.ones_like(logits, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)

    def softmax(x):
        x = np.where(mask, x, -np.inf)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    bg = np.asarray(background, dtype=np.float64)
    shifted = logits + (bg if bg.shape == logits.shape else bg[..., None])
    return bool(np.allclose(softmax(shifted), softmax(logits), atol=tol))


def _c4b(low, high, p_low=None, p_high=None, tol=TOL) -> bool:
    """d_low <= d_high: rows low(i,·) ≼ high(i,·), self-weights non-decreasing, and p_low ≼ p_high if given."""
    ok = orders.rows_dominated(low, high, tol) and bool(np.all(np.diagonal(high) >= np.diagonal(low) - tol))
    if (p_low is None) != (p_high is None):
        raise ValueError("C4(b): give both p_low and p_high, or neither")
    if p_low is not None and p_high is not None:
        ok = ok and orders.dominated(p_low, p_high, tol)
    return bool(ok)


def _c5a(pmat, kernels, lambdas, tol=TOL) -> bool:
    """diag P = prod_t (1 - lambda_t (1 - A^(t)_ii)) >= prod_t (1 - lambda_t delta_t)."""
    kernels, lambdas = np.asarray(kernels), np.asarray(lambdas)
    diag = np.prod(1 - lambdas[:, None] * (1 - np.diagonal(kernels, axis1=1, axis2=2)), axis=0)
    delta = 1 - np.diagonal(kernels, axis1=1, axis2=2).min(axis=1)
    bound = np.prod(1 - lambdas * delta)
    return bool(np.allclose(np.diagonal(pmat), diag, atol=tol) and np.all(np.diagonal(pmat) >= bound - tol))


def _c5b(pmat, kernels, lambdas, tol=TOL) -> bool:
    """min_i P[i, 0] >= 1 - prod_t (1 - lambda_t eps_t), eps_t = min_i A^(t)[i, 0]."""
    eps = np.asarray(kernels)[:, :, 0].min(axis=1)
    return bool(np.all(np.asarray(pmat)[:, 0] >= 1 - np.prod(1 - np.asarray(lambdas) * eps) - tol))


def _c5c(pmat, kernels, lambdas, tol=TOL) -> bool:
    """Sandwich for i >= 1, eps_t = min allowed entry of A^(t) (causal):
    prod_t (1 - lambda_t (1 - eps_t)) <= P[i,i] <= 1 - P[i,0] <= prod_t (1 - lambda_t eps_t)."""
    kernels, lambdas, pmat = np.asarray(kernels), np.asarray(lambdas), np.asarray(pmat)
    n = kernels.shape[-1]
    low = np.tril(np.ones((n, n), dtype=bool))
    eps = np.where(low, kernels, np.inf).min(axis=(1, 2))
    lower = np.prod(1 - lambdas * (1 - eps))
    upper = np.prod(1 - lambdas * eps)
    d = np.diagonal(pmat)[1:]
    off = 1 - pmat[1:, 0]
    return bool(np.all(d >= lower - tol) and np.all(d <= off + tol) and np.all(off <= upper + tol))


def _c6(p) -> bool:
    """u_shape (posbias.numerics.shape): argmin interior and both ends strictly above the minimum."""
    return u_shape(np.asarray(p).tolist())


def _cesaro(p, lambdas, tol=1e-9) -> bool:
    """p equals the Hausdorff closed form evaluated exactly (rational lambdas recommended)."""
    from fractions import Fraction

    from posbias.theorem.cesaro_exact import exact_profile

    exact = exact_profile([Fraction(x) for x in lambdas], len(p)).floats()
    return bool(np.allclose(np.asarray(p), exact, atol=tol, rtol=0))


# --------------------------------------------------------------------------------- claims
_CLAIMS = [
    Claim(
        "C1",
        "causal mask -> primacy drift",
        "For every causal row-stochastic K and every distribution mu: mu K ≼ mu.",
        r"\mu K \preceq \mu \quad (K \text{ causal, row-stochastic})",
        ("K row-stochastic", "K causal: K[i, j] = 0 for j > i", "mu a distribution on {0, ..., N-1}"),
        _c1,
        "(K, mu, tol)",
        "proofs/C1.md",
    ),
    Claim(
        "C2(a)",
        "residual step sits between identity and attention",
        "mu A ≼ mu R_lambda ≼ mu, and mu R_lambda is ≼-decreasing in lambda (F_{mu R_lambda} = (1-lambda) F_mu + "
        "lambda F_{mu A}).",
        r"\mu A \preceq \mu R_\lambda \preceq \mu,\quad F_{\mu R_\lambda} = (1-\lambda) F_\mu + \lambda F_{\mu A}",
        ("A causal row-stochastic", "lambda in [0, 1]"),
        _c2a,
        "(A, mu, lam, lam_hi=None, tol)",
        "proofs/C2.md",
    ),
    Claim(
        "C2(b)",
        "residual -> recency",
        "If every A^(t) is causal and stochastically monotone, p is ≼-non-increasing in each lambda_t; "
        "without monotonicity this can fail.",
        r"\lambda_t \le \lambda_t' \Rightarrow p(\lambda') \preceq p(\lambda):\ p \text{ is } "
        r"\preceq\text{-non-increasing in each } \lambda_t",
        ("every A^(t) causal row-stochastic", "every A^(t) stochastically monotone"),
        _c2b,
        "(kernels, lambdas, layer, new_lambda, tol)",
        "proofs/C2.md",
    ),
    Claim(
        "C2(c)",
        "last-token atom",
        "p(N-1) = prod_t (1 - lambda_t (1 - A^(t)[N-1, N-1])).",
        r"p(N-1) = \prod_t \bigl(1 - \lambda_t (1 - A^{(t)}[N-1, N-1])\bigr)",
        ("every A^(t) causal (lower-triangular)",),
        _c2c,
        "(p, kernels, lambdas, tol)",
        "proofs/C2.md",
    ),
    Claim(
        "C3(a)",
        "ALiBi kernel is stochastically monotone",
        "For every slope m >= 0 (and every content diagonal d) the ALiBi kernel is stochastically monotone: "
        "for k < i, F_i(k) = r^{i-k}(1 - r^{k+1})/(1 - r^{i+1}) (d = 0) is decreasing in i.",
        r"F_i(k) = r^{i-k}(1-r^{k+1}) / (1-r^{i+1}) \text{ decreasing in } i",
        ("causal mask", "m >= 0, r = e^{-m}"),
        orders.is_monotone,
        "(K, tol)",
        "proofs/C3.md",
    ),
    Claim(
        "C3(b)",
        "slopes order rows",
        "m <= m' implies A^(m)(i, ·) ≼ A^(m')(i, ·) for every row i (every d).",
        r"m \le m' \Rightarrow A^{(m)}(i,\cdot) \preceq A^{(m')}(i,\cdot)",
        ("causal mask", "0 <= m <= m'"),
        _c3b,
        "(K_flat, K_steep, tol)",
        "proofs/C3.md",
    ),
    Claim(
        "C3(c)",
        "steeper slopes give later profiles",
        "Under C2(b)'s monotonicity, steeper slopes at any layer give a ≼-later p (m_t <= m_t' at one layer, "
        "the rest fixed).",
        r"m_t \le m_t' \Rightarrow p(m) \preceq p(m'):\ \text{steeper slopes at any layer give a } "
        r"\preceq\text{-later } p",
        ("every layer an ALiBi + content kernel (monotone by C3(a))", "causal mask"),
        _c3c,
        "(p_flat, p_steep, tol)",
        "proofs/C3.md",
    ),
    Claim(
        "C4(a)",
        "background cancels",
        "A row-constant background b cancels from every masked row softmax.",
        r"\operatorname{softmax}(x + b\mathbb{1}) = \operatorname{softmax}(x)\ (b \text{ cancels})",
        ("b constant along the row",),
        _c4a,
        "(logits, background, mask=None, tol)",
        "proofs/C4.md",
    ),
    Claim(
        "C4(b)",
        "content diagonal modulates",
        "Row i of A^(m,d) is alpha_i(d) e_i + (1 - alpha_i(d)) (ALiBi on the strict past), alpha_i increasing in d; "
        "raising d moves every row later and, under monotonicity, p is ≼-non-decreasing in d.",
        r"A^{(m,d)}(i,\cdot) = \alpha_i(d) e_i + (1-\alpha_i(d)) B(i,\cdot),\ \alpha_i(d) = \frac{e^d}{e^d + "
        r"\sum_{g=1}^{i} r^g},\ "
        r"\alpha_i \text{ increasing in } d",
        ("causal mask", "m >= 0", "d <= d'"),
        _c4b,
        "(K_low_d, K_high_d, p_low=None, p_high=None, tol)",
        "proofs/C4.md",
    ),
    Claim(
        "C5(a)",
        "no collapse under summable attention",
        "P[i, i] = prod_t (1 - lambda_t (1 - A^(t)[i, i])) >= prod_t (1 - lambda_t delta_t); if sum lambda_t delta_t "
        "< oo (every lambda_t delta_t < 1) then inf_T min_i P[i, i] > 0: no collapse.",
        r"P[i, i] = \prod_t \bigl(1-\lambda_t(1-A^{(t)}[i, i])\bigr) \ge \prod_t (1-\lambda_t\delta_t)",
        ("every A^(t) lower-triangular (causal)", "lambda_t delta_t < 1"),
        _c5a,
        "(P, kernels, lambdas, tol)",
        "proofs/C5.md",
    ),
    Claim(
        "C5(b)",
        "collapse onto token 0",
        "If A^(t)[i, 0] >= eps_t for all i and sum lambda_t eps_t = oo, then P[i, 0] >= 1 - prod_t (1 - lambda_t "
        "eps_t) -> 1.",
        r"P[i, 0] \ge 1 - \prod_t (1 - \lambda_t \varepsilon_t) \to 1",
        ("every A^(t) causal row-stochastic", "A^(t)[i, 0] >= eps_t for all i"),
        _c5b,
        "(P, kernels, lambdas, tol)",
        "proofs/C5.md",
    ),
    Claim(
        "C5(c)",
        "dichotomy under uniform bounds",
        "If every allowed entry is >= eps > 0, then collapse iff sum_t lambda_t = oo (collapse: P[i, 0] -> 1 "
        "for all i).",
        r"\text{collapse} \iff \sum_t \lambda_t = \infty",
        ("every A^(t) causal row-stochastic", "every allowed entry >= eps > 0"),
        _c5c,
        "(P, kernels, lambdas, tol)",
        "proofs/C5.md",
    ),
    Claim(
        "C6",
        "finite depth: broad, often U-shaped profiles",
        "Causal mask (primacy) plus residuals (recency) give profiles whose minimum is interior for wide parameter "
        "ranges, not for all: at depth 1 no profile is U-shaped, and steep slopes do not make the profile monotone "
        "at depth: N = 8, r = 1/5, d = 0, T = 8, lambda = 3/4 gives a profile ending 0.2136, 0.3078, 0.2725 (a hump "
        "just before the end). u_shape = argmin interior and both ends above the minimum.",
        r"\arg\min_j p(j) \in \{1, \dots, N-2\},\ p(0), p(N-1) > \min_j p(j);\ "
        r"\text{a hump, not monotone, at } N = 8,\ r = 1/5,\ d = 0,\ T = 8,\ \lambda = 3/4",
        ("ALiBi + content stacks, causal mask", "parameter-dependent: see proofs/C6.md"),
        _c6,
        "(p,)",
        "proofs/C6.md",
        status="partly observed",
    ),
    Claim(
        "cesaro",
        "exact closed form for uniform causal attention",
        "For the Cesàro kernel and any lambda schedule, P = H(mu) with mu_k = prod_t (1 - lambda_t k/(k+1)) and "
        "p(j) = C(N-1, j) sum_{i=0}^{N-1-j} (-1)^i C(N-1-j, i) mu_{j+i}.",
        r"p(j) = \binom{N-1}{j} \sum_{i=0}^{N-1-j} (-1)^i \binom{N-1-j}{i} \mu_{j+i},\ "
        r"\mu_k = \prod_t \bigl(1 - \lambda_t k/(k+1)\bigr)",
        ("A^(t) = C, C[i, j] = 1/(i+1) for j <= i", "any lambda_t in [0, 1]"),
        _cesaro,
        "(p, lambdas, tol)",
        "proofs/cesaro.md",
    ),
    Claim(
        "C7(a)",
        "any relative bias: the row CDF",
        "For any bias b(g) with weights w(g) = e^{b(g)} (w(0) also carries e^d) and W(n) = sum_{g=0}^{n} w(g): "
        "F_i(k) = 1 − W(i − k − 1) / W(i) for k < i.",
        r"F_i(k) = 1 - W(i - k - 1) / W(i)\ (k < i),\ W(n) = \sum_{g=0}^{n} w(g)",
        ("causal mask", "head logits b(i - j) + d [i = j]", "w(g) = e^{b(g)} > 0"),
        c7_predicates.c7a,
        "(K, weights, tol)",
        "proofs/C7.md",
    ),
    Claim(
        "C7(b)",
        "any relative bias: monotone iff log-concave",
        "The N-token kernel is stochastically monotone iff W is log-concave on {0, ..., N-1} "
        "(W(n)^2 >= W(n-1) W(n+1)); sufficient: b non-increasing on g ≥ 1, with any d.",
        r"\text{stochastically monotone} \iff W \text{ is log-concave}:\ W(n)^2 \ge W(n-1) W(n+1)",
        ("causal mask", "w(g) = e^{b(g)} > 0 for g < N"),
        c7_predicates.c7b,
        "(K, weights, tol)",
        "proofs/C7.md",
    ),
    Claim(
        "C7(c)",
        "any relative bias: likelihood-ratio order orders rows",
        "If w′(g)/w(g) is non-increasing in g, every row under w′ sits later than under w (A(i,·) ≼ A′(i,·)); "
        "under C2(b)'s monotonicity a ≼-later p follows.",
        r"w'(g)/w(g) \text{ non-increasing} \Rightarrow A(i,\cdot) \preceq A'(i,\cdot)",
        ("causal mask", "w, w' > 0", "w'(g)/w(g) non-increasing in g"),
        c7_predicates.c7c,
        "(K, K_later, tol)",
        "proofs/C7.md",
    ),
    Claim(
        "C8(a)",
        "the sink transform is a content diagonal",
        "S_K(A), the mass of every row i outside K on the keys of K moved to its diagonal, is row-stochastic "
        "and causal whenever A is; for a softmax kernel S_K(A) is the softmax kernel with the keys of K masked "
        "and the diagonal logit raised to log(e^{s_ii} + Σ_{k∈K} e^{s_ik}), a content diagonal with excess "
        "log(1 + Σ_{k∈K} e^{s_ik − s_ii}) ≥ 0.",
        r"S_K(\operatorname{softmax}(s)) = \operatorname{softmax}(s'),\ s'_{ii} = \log(e^{s_{ii}} + "
        r"\sum_{k\in K} e^{s_{ik}}),\ s'_{ik} = -\infty\ (k \in K)",
        ("A row-stochastic (a softmax kernel for the identity)", "the mask allows every diagonal entry"),
        sink_predicates.c8a,
        "(weights, sinks, mask=None, tol)",
        "proofs/C8.md",
    ),
    Claim(
        "C8(b)",
        "the sink transform adds recency",
        "For causal A every row sits later under S_K: A(i,·) ≼ S_K(A)(i,·). Transforming every layer gives p ≼ "
        "p_S when K = {0, …, k−1} (any causal stack), or when at every layer A^(t) or S_K(A^(t)) is "
        "stochastically monotone (any K); otherwise it can fail.",
        r"A(i,\cdot) \preceq S_K(A)(i,\cdot),\ p \preceq p_S",
        (
            "every A^(t) causal row-stochastic",
            "K = {0, ..., k-1}, or at every layer A^(t) or S_K(A^(t)) stochastically monotone",
        ),
        sink_predicates.c8b,
        "(kernels, lambdas, sinks, tol)",
        "proofs/C8.md",
    ),
    Claim(
        "C8(c)",
        "no collapse onto a sink; the dichotomy moves to the first token outside K",
        "With every layer transformed, P_S[i, k] = 0 for i outside K and k in K at every depth. On J = the "
        "positions outside K, j_0 = min J, the transformed stack is a causal stack of its own; if every allowed "
        "entry of A^(t) on J is ≥ ε > 0, collapse onto j_0 ⇔ Σ λ_t = ∞.",
        r"P_S[i, k] = 0\ (i \notin K,\ k \in K);\ \text{collapse onto } j_0 \iff \sum_t \lambda_t = \infty",
        ("every A^(t) causal row-stochastic", "every allowed entry of A^(t) on J x J >= eps > 0 (for the dichotomy)"),
        sink_predicates.c8c,
        "(P_S, kernels, lambdas, sinks, tol)",
        "proofs/C8.md",
    ),
]


def _index(claims: list[Claim]) -> dict[str, Claim]:
    """label -> Claim; a label listed twice is an error naming it."""
    out: dict[str, Claim] = {}
    for claim in claims:
        if claim.label in out:
            raise ValueError(f"claim {claim.label!r} is listed twice")
        out[claim.label] = claim
    return out


CLAIMS: dict[str, Claim] = _index(_CLAIMS)


# ---------------------------------------------------------------------------- certificates
@dataclass(frozen=True)
class Registry:
    """certificates: name -> zero-argument callable returning a ``Check``; missing: module ->
    why it could not be loaded; claims: name -> the claim labels the certificate serves."""

    certificates: dict[str, Callable[[], Check]]
    missing: dict[str, str]
    claims: dict[str, tuple[str, ...]] = field(default_factory=dict)


def certificate_registry(modules: tuple[str, ...] = CERTIFICATE_MODULES) -> Registry:
    """Every certificate declared (``@certificate``) in ``modules``, imported lazily, in module
    order. A certificate that names a claim label not in ``CLAIMS`` is an error."""
    missing: dict[str, str] = {}
    for mod in modules:
        try:
            importlib.import_module(mod)
        except ImportError as err:
            missing[mod] = f"cannot import: {err}"
    found = registered(modules)
    for name, cert in found.items():
        unknown = [label for label in cert.claims if label not in CLAIMS]
        if unknown:
            raise ValueError(
                f"certificate {name!r} names unknown claim(s) {', '.join(unknown)}; "
                f"expected labels from {', '.join(CLAIMS)}"
            )
    return Registry({n: c.run for n, c in found.items()}, missing, {n: c.claims for n, c in found.items()})


def run_certificate(name: str, registry: Registry | None = None) -> Check:
    """Run one certificate by name; an unknown name, an exception or a result that is not a
    ``Check`` is a failing Check."""
    reg = registry if registry is not None else certificate_registry()
    if name not in reg.certificates:
        return Check(name, False, "no such certificate in the registry")
    try:
        result = reg.certificates[name]()
    except Exception as err:  # a crashing certificate does not hold
        return Check(name, False, f"raised {type(err).__name__}: {err}")
    if not isinstance(result, Check):
        return Check(name, False, f"returned {type(result).__name__}, expected a Check")
    return result


def claims_citing(name: str) -> list[str]:
    """Labels of the claims whose certificates include ``name``."""
    return list(certificate_registry().claims.get(name, ()))
