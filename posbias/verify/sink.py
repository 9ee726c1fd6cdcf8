"""Properties of C8 (the attention sink as diagonal content, docs/theory.md "Claims beyond THEORY.md") on
generated kernels, and its necessity search. S_K is ``posbias.numerics.sink_transform.sink_to_diagonal``;
the claims' predicates (``posbias.theorem.sink_predicates``) build their references densely:

=============================  ========================================================================
``C8(a)``                      masked logits (causal, window, prefix or full mask) and any sink set:
                               S_K(softmax) is row-stochastic, respects the mask and is the softmax of
                               the logits with K masked and the diagonal raised (``numpy.logaddexp``)
``C8(b)``                      p ≼ p_S: any causal stack with a sink set {0, ..., k-1}, or stochastically
                               monotone layers with any sink set
``C8(c)``                      any causal stack and sink set leaving a position outside: P_S has no mass
                               on K outside K's rows, and C5(c)'s sandwich holds on the rest
``C8(b) w/o monotonicity``     (search) exact causal layers, a sink set that is not {0, ..., k-1}:
                               p_S sits earlier than p somewhere
=============================  ========================================================================
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from posbias.theorem.orders import cdf
from posbias.verify.claims import explain_dominance, hypotheses, predicate
from posbias.verify.display import show
from posbias.verify.kernels import last_row
from posbias.verify.lazy import composite, ps, st
from posbias.verify.types import Property


@composite
def _sinks(draw, n: int, *, initial: bool | None = None):
    """A sink set of {0, ..., n-1}: ``initial`` True {0, ..., k-1}; False any set that is not one (n >= 2);
    None any non-empty set. Shrinks toward {0}."""
    if initial:
        return list(range(draw(st.integers(1, n))))
    keys = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n)))
    if initial is False and keys == list(range(len(keys))):
        keys = [k + 1 for k in keys if k + 1 < n] or [n - 1]
    return keys


@composite
def _c8a_case(draw, sizes):
    from posbias.numerics.masks import allowed

    n = draw(st.integers(1, min(sizes.max_dense_tokens, ps.EXPLICIT_MAX)))
    logits = np.array(
        draw(st.lists(st.one_of(st.integers(-3, 3).map(float), st.floats(-30.0, 30.0)), min_size=n * n, max_size=n * n))
    ).reshape(n, n)
    mask = allowed(draw(ps.masks(max_tokens=n)), n)
    return {"weights": np.exp(logits - logits.max()), "sinks": draw(_sinks(n)), "mask": mask}


def _c8a_check(weights, sinks, mask):
    return predicate("C8(a)")(weights, sinks, mask)


@composite
def _c8b_case(draw, sizes):
    """Half the cases any causal stack with an initial-segment sink set, half monotone layers with any set."""
    monotone = draw(st.booleans())
    kernels, lambdas = draw(
        ps.kernel_stacks(
            kind="monotone" if monotone else "causal",
            max_tokens=sizes.max_dense_tokens,
            max_layers=sizes.max_dense_layers,
        )
    )
    n = kernels.shape[-1]
    return {"kernels": kernels, "lambdas": lambdas, "sinks": draw(_sinks(n, initial=None if monotone else True))}


def c8b_check(kernels, lambdas, sinks):
    """C8(b): p ≼ p_S."""
    return predicate("C8(b)")(ps.as_float(kernels), ps.as_float(lambdas), sinks)


def _exact_last_row(kernels, lambdas, sinks=None) -> np.ndarray:
    """The last row of the product (of the transformed kernels with ``sinks``) as Fractions, through
    ``theorem.exact`` (SymPy rationals)."""
    import sympy as sp

    from posbias.theorem.exact import exact_profile
    from posbias.theorem.sink_certificates import moved

    mats = [sp.Matrix([[sp.Rational(x.numerator, x.denominator) for x in row] for row in k]) for k in kernels]
    if sinks is not None:
        mats = [moved(m, sinks) for m in mats]
    lams = [sp.Rational(Fraction(x).numerator, Fraction(x).denominator) for x in lambdas]
    return np.array([Fraction(int(x.p), int(x.q)) for x in exact_profile(mats, lams)], dtype=object)


def c8b_explain(kernels, lambdas, sinks):
    """p and p_S (exact Fractions where the example is) and the CDF gap."""
    from posbias.numerics.sink_transform import sink_to_diagonal

    if np.asarray(kernels).dtype == object:
        p, q = _exact_last_row(kernels, lambdas), _exact_last_row(kernels, lambdas, list(sinks))
    else:
        p = last_row(kernels, lambdas)
        q = last_row(sink_to_diagonal(kernels, sinks), lambdas)
    return f"K = {list(sinks)}\np = {show(p).strip()}\np_S = {show(q).strip()}\n" + explain_dominance("p", "p_S")(p, q)


def _c8b_target(kernels, lambdas, sinks):
    """max over k of F_(p_S)(k) - F_p(k): positive exactly where p ≼ p_S fails."""
    from posbias.numerics.sink_transform import sink_to_diagonal

    k, lam = ps.as_float(kernels), ps.as_float(lambdas)
    gaps = cdf(last_row(k, lam)) - cdf(last_row(sink_to_diagonal(k, sinks), lam))
    return -float(gaps.min())


@composite
def _c8b_search_case(draw):
    """Exact causal layers on 3-4 tokens, 2-3 layers, lambdas k/8, a sink set that is not an initial segment."""
    n = draw(st.integers(3, 4))
    t = draw(st.integers(2, 3))
    kernels = np.stack([draw(ps.causal_kernels(n, exact=True)) for _ in range(t)])
    return {
        "kernels": kernels,
        "lambdas": draw(ps.lambda_schedules(t, exact=True)),
        "sinks": draw(_sinks(n, initial=False)),
    }


@composite
def _c8c_case(draw, sizes):
    """Any causal stack on 2 or more tokens and a sink set leaving at least one position outside."""
    n = draw(st.integers(2, max(2, sizes.max_dense_tokens)))
    kernels, lambdas = draw(ps.kernel_stacks(n=n, max_layers=sizes.max_dense_layers))
    sinks = draw(_sinks(n))
    return {"kernels": kernels, "lambdas": lambdas, "sinks": sinks[:-1] if len(sinks) == n else sinks}


def _c8c_check(kernels, lambdas, sinks):
    from posbias.numerics.sink_transform import sink_to_diagonal
    from posbias.theorem import orders

    moved_product = orders.rollout(sink_to_diagonal(kernels, sinks), lambdas)
    return predicate("C8(c)")(moved_product, kernels, lambdas, sinks)


def sink_properties() -> list[Property]:
    """C8(a), C8(b), C8(c) (expected to hold), then the C8(b) necessity search."""
    return [
        Property("C8(a)", "C8(a)", hypotheses("C8(a)"), _c8a_case, _c8a_check),
        Property("C8(b)", "C8(b)", hypotheses("C8(b)"), _c8b_case, c8b_check, explain=c8b_explain),
        Property("C8(c)", "C8(c)", hypotheses("C8(c)"), _c8c_case, _c8c_check),
        Property(
            "C8(b) w/o monotonicity",
            "C8(b)",
            ("every A^(t) causal row-stochastic", "K not {0, ..., k-1}"),
            lambda z: _c8b_search_case(),
            c8b_check,
            "counterexample",
            dropped="at every layer A^(t) or S_K(A^(t)) stochastically monotone",
            explain=c8b_explain,
            examples=8,
            target=_c8b_target,
        ),
    ]
