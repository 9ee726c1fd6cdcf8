"""Properties of THEORY.md C7 (any relative positional bias) on generated biases, and the necessity
search for C2(b) with a non-log-concave bias. Kernels are built here from the weights w(g) directly
(dense NumPy or exact Fractions), independently of the engines:

=============================  ========================================================================
``C7(a)``                      the masked softmax of b(i - j) + d [i = j] has row CDFs 1 - W(i-k-1)/W(i)
``C7(b)``                      exact rationals: the dense kernel is stochastically monotone iff W is
                               log-concave (and the float predicate agrees)
``C7(c)``                      w' = w rho with rho non-increasing: rows under w' sit later, and over a
                               monotone layer below the profile sits later too
``C2(b) w/ non-log-concave``   (search) layers whose kernels come from bias tables w(g); one is not
                               log-concave; more residual share gives an *earlier* profile somewhere
=============================  ========================================================================
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from posbias.theorem.c7_predicates import exact_log_concave
from posbias.theorem.orders import cdf, exact_rows_monotone
from posbias.verify.claims import c2b_check, c2b_explain, hypotheses, predicate
from posbias.verify.kernels import last_row
from posbias.verify.lazy import composite, ps, st
from posbias.verify.types import Property


def softmax_bias_kernel(bias: np.ndarray, diag: float, n: int) -> np.ndarray:
    """Causal masked softmax of b(i - j) + d [i = j] (float64), formed from the logits."""
    dist = np.arange(n)[:, None] - np.arange(n)[None, :]
    logits = np.where(dist >= 0, np.asarray(bias)[np.clip(dist, 0, n - 1)] + diag * (dist == 0), -np.inf)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def exact_bias_kernel(ws) -> np.ndarray:
    """A(i, j) = w(i - j) / W(i) for j <= i as Fractions (object array)."""
    n = len(ws)
    out = np.empty((n, n), dtype=object)
    out[...] = Fraction(0)
    for i in range(n):
        total = sum(ws[: i + 1], Fraction(0))
        for j in range(i + 1):
            out[i, j] = Fraction(ws[i - j]) / total
    return out


def exact_monotone(kernel) -> bool:
    """Rows' CDFs non-increasing in i, exactly (Fractions): ``orders.exact_rows_monotone``."""
    return exact_rows_monotone(list(kernel))


@composite
def _c7a_case(draw, sizes):
    n = draw(st.integers(1, sizes.max_dense_tokens))
    bias = np.array(
        draw(st.lists(st.one_of(st.integers(-4, 4).map(float), st.floats(-20.0, 5.0)), min_size=n, max_size=n))
    )
    return {"bias": bias, "diag": draw(st.one_of(st.just(0.0), st.floats(-5.0, 5.0))), "n": n}


def _c7a_check(bias, diag, n):
    weights = np.exp(bias - bias.max())
    weights[0] *= np.exp(diag)
    return predicate("C7(a)")(softmax_bias_kernel(bias, diag, n), weights)


@composite
def _exact_weights(draw, min_n=2, max_n=7):
    n = draw(st.integers(min_n, max_n))
    return [Fraction(draw(st.integers(1, 12)), draw(st.integers(1, 12))) for _ in range(n)]


def _c7b_check(ws):
    kernel = exact_bias_kernel(ws)
    exact = exact_monotone(kernel) == exact_log_concave(ws)
    return exact and predicate("C7(b)")(ps.as_float(kernel), ps.as_float(ws))


def _c7b_explain(ws):
    return (
        f"w = {[str(x) for x in ws]}: kernel monotone {exact_monotone(exact_bias_kernel(ws))}, "
        f"W log-concave {exact_log_concave(ws)}"
    )


@composite
def _c7c_case(draw, sizes):
    """w non-increasing on g >= 1 (so both kernels are monotone), rho non-increasing, a monotone layer below."""
    n = draw(st.integers(2, sizes.max_dense_tokens))
    tail = sorted((draw(st.floats(0.01, 1.0)) for _ in range(n - 1)), reverse=True)
    w = np.array([draw(st.floats(0.05, 5.0))] + tail)
    rho = np.array(sorted((draw(st.floats(0.05, 1.0)) for _ in range(n)), reverse=True))
    below = np.array([1.0] + sorted((draw(st.floats(0.01, 1.0)) for _ in range(n - 1)), reverse=True))
    lambdas = np.array([draw(st.floats(0.0, 1.0)), draw(st.floats(0.0, 1.0))])
    return {"w": w, "rho": rho, "below": below, "lambdas": lambdas}


def _c7c_check(w, rho, below, lambdas):
    from posbias.theorem import orders
    from posbias.theorem.c7_predicates import bias_kernel

    n = len(w)
    k, k_later, k_below = bias_kernel(w, n), bias_kernel(w * rho, n), bias_kernel(below, n)
    rows = predicate("C7(c)")(k, k_later)
    p = last_row(np.stack([k_below, k]), lambdas)
    p_later = last_row(np.stack([k_below, k_later]), lambdas)
    return rows and orders.dominated(p, p_later, 1e-10)


@composite
def _bias_stack_case(draw):
    """2-3 layers, each the kernel of a bias table w(g) (w(0) in {1, 6, 2}, w(g >= 1) in {1, 0, 6, 3}) on 3-4
    tokens, exact lambdas k/8; raising one lambda. Shrinks toward flat tables (w = 1) and the top layer."""
    n = draw(st.integers(3, 4))
    t = draw(st.integers(2, 3))
    tables = [
        [Fraction(draw(st.sampled_from([1, 6, 2])))]
        + [Fraction(draw(st.sampled_from([1, 0, 6, 3]))) for _ in range(n - 1)]
        for _ in range(t)
    ]
    kernels = np.stack([exact_bias_kernel(ws) for ws in tables])
    lambdas = np.array([Fraction(draw(st.integers(0, 8)), 8) for _ in range(t)], dtype=object)
    layer = t - 1 - draw(st.integers(0, t - 1))
    new = Fraction(min(8, int(lambdas[layer] * 8) + draw(st.integers(1, 8))), 8)
    return {"kernels": kernels, "lambdas": lambdas, "layer": layer, "new_lambda": new, "tables": tables}


def _bias_stack_check(kernels, lambdas, layer, new_lambda, tables):
    return c2b_check(kernels, lambdas, layer, new_lambda)


def _bias_stack_target(kernels, lambdas, layer, new_lambda, tables):
    more = ps.as_float(lambdas).copy()
    more[layer] = float(new_lambda)
    k = ps.as_float(kernels)
    gaps = cdf(last_row(k, more)) - cdf(last_row(k, ps.as_float(lambdas)))
    return -float(gaps[:-1].min())


def _bias_stack_explain(kernels, lambdas, layer, new_lambda, tables):
    bad = [t for t, ws in enumerate(tables) if not exact_log_concave(ws)]
    head = "; ".join(f"layer {t}: w = ({', '.join(str(x) for x in ws)})" for t, ws in enumerate(tables))
    return f"{head}; not log-concave: layer(s) {bad}\n" + c2b_explain(kernels, lambdas, layer, new_lambda)


def c7_properties() -> list[Property]:
    """C7(a), C7(b), C7(c) (expected to hold), then the C2(b) necessity search with bias tables."""
    return [
        Property("C7(a)", "C7(a)", hypotheses("C7(a)"), _c7a_case, _c7a_check),
        Property(
            "C7(b)",
            "C7(b)",
            hypotheses("C7(b)"),
            lambda z: _exact_weights().map(lambda ws: {"ws": ws}),
            _c7b_check,
            explain=_c7b_explain,
        ),
        Property("C7(c)", "C7(c)", hypotheses("C7(c)") + ("a monotone layer below",), _c7c_case, _c7c_check),
        Property(
            "C2(b) w/ non-log-concave bias",
            "C2(b)",
            ("every layer the causal kernel of a bias table w(g)", "lambdas k/8"),
            lambda z: _bias_stack_case(),
            _bias_stack_check,
            "counterexample",
            dropped="every W log-concave (C7(b): every A^(t) stochastically monotone)",
            explain=_bias_stack_explain,
            examples=8,
            target=_bias_stack_target,
        ),
    ]
