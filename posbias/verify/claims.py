"""The built-in properties expected to **hold**: one per claim of
``posbias.theorem.claims.CLAIMS``, each a hypothesis strategy drawing the claim's
hypotheses (posbias.verify.strategies) and a check calling the claim's registered predicate
(THEORY.md C1-C6 and the Cesàro closed form):

=======  =================================================================================
C1       mu K ≼ mu for causal row-stochastic K (drawn K and mu)
C2(a)    mu A ≼ mu R_lambda ≼ mu, and mu R_lambda is ≼-decreasing in lambda (one layer)
C2(b)    raising one lambda_t gives a ≼-earlier p (stochastically monotone layers)
C2(c)    p(N-1) = prod_t (1 - lambda_t (1 - A^(t)[N-1, N-1])) (engine against NumPy kernels)
C3(a)    a causal ALiBi kernel (slope m >= 0) is stochastically monotone
C3(b)    m <= m' gives row-wise A^(m)(i, .) ≼ A^(m')(i, .) (NumPy kernels)
C3(c)    a steeper slope at one layer gives a ≼-later p (the engine)
C4(a)    a row-constant logit shift b cancels in the masked softmax
C4(b)    a larger diagonal d at one layer gives ≼-later kernel rows and p
C5(a-c)  the diagonal of P, collapse onto token 0, the dichotomy (dense rollout)
C6       at depth 1 no profile is U-shaped (the engine)
cesaro   the engine's p equals the exact Hausdorff closed form (uniform causal attention)
=======  =================================================================================

The case builders and checks shared with the necessity searches (``posbias.verify.searches``)
and with model mode (``posbias.verify.model``) are public here: ``predicate`` and
``hypotheses`` (a claim's entry in the registry), ``kernel_and_mu``, ``c2b_case``,
``logits_case``, ``steeper``, and their checks and explanations.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np

from posbias.theorem.orders import cdf_gap
from posbias.verify.display import frac, show
from posbias.verify.kernels import alibi_kernels, alibi_layer_kernel, engine_profile, last_row, with_layer
from posbias.verify.lazy import composite, ps, st
from posbias.verify.types import Property


def predicate(label: str):
    """The registered predicate of claim ``label`` (posbias.theorem.claims.CLAIMS)."""
    from posbias.theorem.claims import CLAIMS

    return CLAIMS[label].predicate


def hypotheses(label: str) -> tuple[str, ...]:
    """The hypotheses of claim ``label``, as the registry states them."""
    from posbias.theorem.claims import CLAIMS

    return tuple(CLAIMS[label].hypotheses)


@composite
def kernel_and_mu(draw, sizes, *, kind="causal", exact=False, max_tokens=None):
    """{"K": a causal (kind="causal") or any row-stochastic N x N kernel, "mu": a distribution on N
    tokens}; exact=True draws Fractions (integer-weight rows)."""
    n = draw(st.integers(1, max_tokens or sizes.max_tokens))
    make = ps.causal_kernels if kind == "causal" else ps.stochastic_kernels
    return {"K": draw(make(n, exact=exact)), "mu": draw(ps.distributions(n, exact=exact))}


def c1_check(K, mu):
    """C1: mu K ≼ mu."""
    return predicate("C1")(ps.as_float(K), ps.as_float(mu))


def explain_dominance(lo_name, hi_name):
    """``explain(lo, hi)``: the smallest CDF gap F_lo(k) - F_hi(k) and whether lo ≼ hi fails there."""

    def explain(lo, hi) -> str:
        k, gap = cdf_gap(lo, hi)
        return (
            f"F_{lo_name}({k}) - F_{hi_name}({k}) = {frac(gap)} < 0: {lo_name} ≼ {hi_name} fails at k = {k}"
            if gap < 0
            else f"F_{lo_name} >= F_{hi_name} everywhere (min gap {frac(gap)} at k = {k})"
        )

    return explain


def c1_explain(K, mu):
    """The CDF gap of mu K against mu (negative where C1 fails)."""
    return explain_dominance("muK", "mu")(mu @ K, mu)


@composite
def _c2a_case(draw, sizes):
    ex = draw(kernel_and_mu(sizes))
    lam = draw(st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0)))
    ex.update(lam=lam, lam_hi=lam + (1.0 - lam) * draw(st.floats(0.0, 1.0)))
    return ex


def _c2a_check(K, mu, lam, lam_hi):
    return predicate("C2(a)")(K, mu, lam, lam_hi)


@composite
def c2b_case(draw, sizes, *, kind="monotone", exact=False):
    """{"kernels", "lambdas", "layer", "new_lambda" >= lambdas[layer]}: monotone layers (kind), or with
    exact=True 3-4 token causal Fraction kernels and lambdas k/8 (the C2(b) necessity search)."""
    if exact:  # the search: N >= 3 and T >= 2 (2 x 2 causal kernels and one layer cannot fail, C2(a))
        n = draw(st.integers(3, 4))
        t = draw(st.integers(2, 3))
        kernels = np.stack([draw(ps.causal_kernels(n, exact=True)) for _ in range(t)])
        lambdas = draw(ps.lambda_schedules(t, exact=True))
    else:
        kernels, lambdas = draw(
            ps.kernel_stacks(kind=kind, max_tokens=sizes.max_dense_tokens, max_layers=sizes.max_dense_layers)
        )
    layer = len(lambdas) - 1 - draw(st.integers(0, len(lambdas) - 1))  # shrinks toward the top layer
    old = lambdas[layer]
    if exact:
        new = Fraction(min(8, int(old * 8) + draw(st.integers(1, 8))), 8)  # lambdas are k/8
    else:
        new = old + (1.0 - old) * draw(st.floats(0.0, 1.0))
    return {"kernels": kernels, "lambdas": lambdas, "layer": layer, "new_lambda": new}


def c2b_check(kernels, lambdas, layer, new_lambda):
    """C2(b): raising lambda_layer to new_lambda moves p earlier: p(new) ≼ p(old)."""
    return predicate("C2(b)")(ps.as_float(kernels), ps.as_float(lambdas), layer, float(new_lambda))


def c2b_explain(kernels, lambdas, layer, new_lambda):
    """p before and after, exact where the example is, and the CDF gap."""
    more = np.array(lambdas, dtype=object if np.asarray(lambdas).dtype == object else np.float64)
    more[layer] = new_lambda
    p, q = last_row(kernels, lambdas), last_row(kernels, more)
    return f"p = {show(p).strip()}\np' (lambda_{layer} = {frac(new_lambda)}) = {show(q).strip()}\n" + explain_dominance(
        "p'", "p"
    )(q, p)


@composite
def _c2c_case(draw, sizes):
    if draw(st.booleans()):
        stack, n = draw(ps.alibi_cases(dense_sizes(sizes), mask_kinds=ps.CAUSAL_MASKS))
        return {"stack": stack, "n": n}
    kernels, lambdas = draw(ps.kernel_stacks(max_tokens=sizes.max_dense_tokens, max_layers=sizes.max_dense_layers))
    return {"kernels": kernels, "lambdas": lambdas}


def dense_sizes(sizes):
    """``sizes`` with the token bound of the dense routes."""
    return replace(sizes, max_tokens=sizes.max_dense_tokens)


def _c2c_check(stack=None, n=None, kernels=None, lambdas=None):
    if stack is not None:  # p from the structured engine, kernels from NumPy
        return predicate("C2(c)")(engine_profile(stack, n), alibi_kernels(stack, n), stack.lambdas)
    return predicate("C2(c)")(last_row(kernels, lambdas), kernels, lambdas)


def _c3a_check(stack, n):
    return predicate("C3(a)")(alibi_layer_kernel(stack, 0, n))


@composite
def steeper(draw, stack, layer, what="slopes"):
    """Layer ``layer``'s slopes (what="slopes") or diagonal (what="diagonal") plus a non-negative
    increment per head."""
    h = stack.num_heads
    inc = np.array(
        draw(
            st.lists(
                st.one_of(st.just(0.0), st.sampled_from([0.5, 1.0, 30.0]), st.floats(0.0, 8.0)), min_size=h, max_size=h
            )
        )
    )
    base = (stack.slopes if what == "slopes" else stack.diagonal)[layer]
    return base + inc


@composite
def _layer_change_case(draw, sizes, what, *, max_tokens=None):
    stack, n = draw(
        ps.alibi_cases(replace(sizes, max_tokens=max_tokens or sizes.max_tokens), mask_kinds=ps.CAUSAL_MASKS)
    )
    layer = draw(st.integers(0, stack.num_layers - 1))
    return {"stack": stack, "n": n, "layer": layer, "new": draw(steeper(stack, layer, what))}


def _c3b_check(stack, n, layer, new):
    return predicate("C3(b)")(alibi_layer_kernel(stack, layer, n), alibi_layer_kernel(stack, layer, n, slopes=new))


def _c3c_check(stack, n, layer, new):
    return predicate("C3(c)")(engine_profile(stack, n), engine_profile(with_layer(stack, layer, slopes=new), n))


def _c3c_artifacts(stack, n, layer, new):
    return {"flat": ("alibi", stack, n), "steep": ("alibi", with_layer(stack, layer, slopes=new), n)}


def _c4b_check(stack, n, layer, new):
    high = with_layer(stack, layer, diagonal=new)
    return predicate("C4(b)")(
        alibi_layer_kernel(stack, layer, n),
        alibi_layer_kernel(stack, layer, n, diagonal=new),
        engine_profile(stack, n),
        engine_profile(high, n),
    )


@composite
def logits_case(draw, sizes, *, row_constant=True):
    """{"logits": N x N, "background": row-constant (N,) or (row_constant=False) any N x N shift, "mask"}."""
    from posbias.numerics.masks import allowed

    n = draw(st.integers(1, min(sizes.max_dense_tokens, ps.EXPLICIT_MAX)))
    logits = np.array(
        draw(st.lists(st.one_of(st.integers(-3, 3).map(float), st.floats(-30.0, 30.0)), min_size=n * n, max_size=n * n))
    ).reshape(n, n)
    mask = allowed(draw(ps.masks(max_tokens=n)), n)
    if row_constant:
        background = np.array(
            draw(st.lists(st.one_of(st.integers(-3, 3).map(float), st.floats(-100.0, 100.0)), min_size=n, max_size=n))
        )
    else:
        background = np.array(
            draw(st.lists(st.integers(-3, 3), min_size=n * n, max_size=n * n)), dtype=np.float64
        ).reshape(n, n)
    return {"logits": logits, "background": background, "mask": mask}


def c4a_check(logits, background, mask):
    """C4(a): softmax(x + b) = softmax(x) under the mask."""
    return predicate("C4(a)")(logits, background, mask)


@composite
def _dense_stack_case(draw, sizes, kind="causal"):
    kernels, lambdas = draw(
        ps.kernel_stacks(kind=kind, max_tokens=sizes.max_dense_tokens, max_layers=sizes.max_dense_layers)
    )
    return {"kernels": kernels, "lambdas": lambdas}


def _c5_check(label):
    def check(kernels, lambdas):
        from posbias.theorem import orders

        return predicate(label)(orders.rollout(kernels, lambdas), kernels, lambdas)

    return check


def _c6_depth1_check(stack, n):
    return not predicate("C6")(engine_profile(stack, n))


@composite
def _cesaro_case(draw, sizes):
    from posbias.numerics.stack import AlibiStack

    lambdas = draw(ps.lambda_schedules(max_layers=sizes.max_layers, exact=True))
    n = draw(st.integers(1, min(sizes.max_tokens, 128)))
    return {"stack": AlibiStack.build(ps.as_float(lambdas), [0.0]), "n": n, "lambdas": lambdas}


def _cesaro_check(stack, n, lambdas):
    return predicate("cesaro")(engine_profile(stack, n), list(lambdas))


def alibi_artifact(stack, n, **_):
    """The example's AlibiStack as a rollout YAML."""
    return {"stack": ("alibi", stack, n)}


def claim_properties() -> list[Property]:
    """The properties expected to hold, in claim order."""
    causal_alibi = lambda z, **kw: ps.alibi_cases(z, mask_kinds=ps.CAUSAL_MASKS, **kw).map(  # noqa: E731
        lambda c: {"stack": c[0], "n": c[1]}
    )
    return [
        Property("C1", "C1", hypotheses("C1"), lambda z: kernel_and_mu(z), c1_check, explain=c1_explain),
        Property("C2(a)", "C2(a)", hypotheses("C2(a)"), _c2a_case, _c2a_check),
        Property("C2(b)", "C2(b)", hypotheses("C2(b)"), c2b_case, c2b_check, explain=c2b_explain),
        Property("C2(c)", "C2(c)", hypotheses("C2(c)"), _c2c_case, _c2c_check),
        Property("C3(a)", "C3(a)", hypotheses("C3(a)"), lambda z: causal_alibi(z, num_layers=1), _c3a_check),
        Property(
            "C3(b)",
            "C3(b)",
            hypotheses("C3(b)"),
            lambda z: _layer_change_case(z, "slopes", max_tokens=min(z.max_tokens, 256)),
            _c3b_check,
        ),
        Property(
            "C3(c)",
            "C3(c)",
            hypotheses("C3(c)"),
            lambda z: _layer_change_case(z, "slopes"),
            _c3c_check,
            artifacts=_c3c_artifacts,
        ),
        Property("C4(a)", "C4(a)", hypotheses("C4(a)"), lambda z: logits_case(z), c4a_check),
        Property(
            "C4(b)",
            "C4(b)",
            hypotheses("C4(b)"),
            lambda z: _layer_change_case(z, "diagonal", max_tokens=min(z.max_tokens, 256)),
            _c4b_check,
        ),
        Property("C5(a)", "C5(a)", hypotheses("C5(a)"), _dense_stack_case, _c5_check("C5(a)")),
        Property("C5(b)", "C5(b)", hypotheses("C5(b)"), _dense_stack_case, _c5_check("C5(b)")),
        Property("C5(c)", "C5(c)", hypotheses("C5(c)"), _dense_stack_case, _c5_check("C5(c)")),
        Property(
            "C6",
            "C6",
            ("ALiBi + content stacks, any mask", "T = 1"),
            lambda z: ps.alibi_cases(z, num_layers=1).map(lambda c: {"stack": c[0], "n": c[1]}),
            _c6_depth1_check,
            statement="at depth 1 no profile is U-shaped",
            artifacts=alibi_artifact,
        ),
        Property("cesaro", "cesaro", hypotheses("cesaro"), _cesaro_case, _cesaro_check),
    ]
