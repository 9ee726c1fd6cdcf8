"""The built-in **necessity searches**: a claim with one hypothesis dropped, where
hypothesis's own engine (``hypothesis.find``) must find a case where the conclusion
fails, and shrink it to a few exact numbers (THEORY.md C1-C6):

=================================  =====================================================
necessity search                   dropped hypothesis
=================================  =====================================================
``C1 w/o causality``               K causal (K may read later tokens)
``C2(b) w/o monotonicity``         every A^(t) stochastically monotone
``C3(c) w/ non-monotone layer``    every layer ALiBi (a layer below is any causal kernel)
``C4(a) w/ non-constant shift``    b constant along the row
``C6 old: steep => monotone``      the withdrawn statement "a steep slope (r = e^-m
                                   <= 1/5) makes the profile monotone" (THEORY.md C6)
``C6 U-shapes exist``              (existence: a U-shaped profile at depth >= 2)
=================================  =====================================================

The searches draw exact cases (integer-weight rows, vertices e_j, r = 1/k, lambda = k/8)
and steer with ``hypothesis.target`` where failures are rare (C2(b), C6), so the shrunk
counterexample is a few exact Fractions that the explanation turns into a negative CDF gap.

>>> from fractions import Fraction
>>> p = c6_old_profile(8, Fraction(1, 5), 8, Fraction(3, 4))
>>> [round(float(x), 4) for x in p[-3:]]     # THEORY.md C6: a hump just before the end
[0.2136, 0.3078, 0.2725]
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from posbias.theorem.orders import cdf
from posbias.verify.claims import (
    alibi_artifact,
    c1_check,
    c1_explain,
    c2b_case,
    c2b_check,
    c2b_explain,
    c4a_check,
    dense_sizes,
    explain_dominance,
    kernel_and_mu,
    logits_case,
    predicate,
)
from posbias.verify.display import show
from posbias.verify.kernels import engine_profile, exact_alibi, last_row
from posbias.verify.lazy import composite, ps, st
from posbias.verify.types import Property


def _c2b_target(kernels, lambdas, layer, new_lambda):
    """max over k < N-1 of F_p(k) - F_p'(k), p' the profile with the raised lambda: positive exactly
    where p' ≼ p fails (C2(b)'s conclusion)."""
    more = ps.as_float(lambdas).copy()
    more[layer] = float(new_lambda)
    k = ps.as_float(kernels)
    gaps = cdf(last_row(k, more)) - cdf(last_row(k, ps.as_float(lambdas)))
    return -float(gaps[:-1].min()) if len(gaps) > 1 else 0.0


def _c2b_artifacts(kernels, lambdas, layer, new_lambda):
    more = ps.as_float(lambdas).copy()
    more[layer] = float(new_lambda)
    k = ps.as_float(kernels)
    return {"before": ("kernels", k, ps.as_float(lambdas), True), "after": ("kernels", k, more, True)}


@composite
def _c3c_mixed_case(draw):
    """Layers below the ALiBi layer (>= 1) and above it (>= 0) are any causal kernels; the ALiBi
    layer (r = 1/k, d = 0) gets a steeper r = 1/k'. Shrinks toward one layer below, none above."""
    n = draw(st.integers(2, 5))
    below, above = draw(st.integers(1, 3)), draw(st.integers(0, 2))
    k = draw(st.integers(1, 6))
    k_steep = draw(st.integers(k + 1, 8))
    lower = [draw(ps.causal_kernels(n, exact=True)) for _ in range(below)]
    upper = [draw(ps.causal_kernels(n, exact=True)) for _ in range(above)]
    lambdas = draw(ps.lambda_schedules(below + 1 + above, exact=True))
    flat = np.stack(lower + [exact_alibi(Fraction(1, k), n)] + upper)
    steep = np.stack(lower + [exact_alibi(Fraction(1, k_steep), n)] + upper)
    return {
        "flat": flat,
        "steep": steep,
        "lambdas": lambdas,
        "layer": below,
        "r_flat": Fraction(1, k),
        "r_steep": Fraction(1, k_steep),
    }


def _c3c_mixed_check(flat, steep, lambdas, layer, r_flat, r_steep):
    return predicate("C3(c)")(ps.as_float(last_row(flat, lambdas)), ps.as_float(last_row(steep, lambdas)))


def _c3c_mixed_explain(flat, steep, lambdas, layer, r_flat, r_steep):
    p, q = last_row(flat, lambdas), last_row(steep, lambdas)
    from posbias.theorem import orders

    bad = [t for t in range(len(flat)) if not orders.is_monotone(ps.as_float(flat[t]))]
    return (
        f"layer {layer}: ALiBi r = {r_flat} -> steeper r = {r_steep}; non-monotone layer(s) {bad}\n"
        f"p(flat) = {show(p).strip()}\np(steep) = {show(q).strip()}\n" + explain_dominance("p_flat", "p_steep")(p, q)
    )


def _c3c_mixed_artifacts(flat, steep, lambdas, layer, r_flat, r_steep):
    lam = ps.as_float(lambdas)
    return {"flat": ("kernels", ps.as_float(flat), lam, True), "steep": ("kernels", ps.as_float(steep), lam, True)}


def _c4a_explain(logits, background, mask):
    def softmax(x):
        x = np.where(mask, x, -np.inf)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    diff = np.abs(softmax(logits + background) - softmax(logits))
    i, j = np.unravel_index(np.argmax(diff), diff.shape)
    return (
        f"softmax(x + b)[{i}, {j}] = {softmax(logits + background)[i, j]:.6g} but softmax(x)[{i}, {j}] = "
        f"{softmax(logits)[i, j]:.6g}: b varies along row {i} ({show(background[i]).strip()})"
    )


STEEP_R_MAX = Fraction(1, 5)


@composite
def _c6_old_case(draw):
    k = draw(st.integers(5, 10))  # r = 1/k <= 1/5: the steep slopes of the withdrawn statement
    return {
        "n": draw(st.integers(1, 12)),
        "r": Fraction(1, k),
        "layers": draw(st.integers(1, 12)),
        "lam": Fraction(draw(st.integers(0, 8)), 8),
    }


def c6_old_profile(n: int, r: Fraction, layers: int, lam: Fraction) -> np.ndarray:
    """Exact profile (Fractions) of T = ``layers`` identical one-head causal ALiBi layers with
    r = e^{-m}, d = 0, constant lambda (the setting of the withdrawn C6 statement)."""
    a = exact_alibi(Fraction(r), n)
    return last_row(np.stack([a] * layers), [Fraction(lam)] * layers)


def _monotone_seq(p) -> bool:
    """p non-decreasing or non-increasing (exact on Fractions)."""
    d = [p[j + 1] - p[j] for j in range(len(p) - 1)]
    return all(x >= 0 for x in d) or all(x <= 0 for x in d)


def _c6_old_check(n, r, layers, lam):
    return _monotone_seq(c6_old_profile(n, r, layers, lam))


def _c6_old_target(n, r, layers, lam):
    """p(N-2) - p(N-1): positive at a hump just before the end (the profile is not monotone)."""
    p = ps.as_float(c6_old_profile(n, r, layers, lam))
    return float(p[-2] - p[-1]) if n >= 2 else 0.0


def _c6_old_explain(n, r, layers, lam):
    p = c6_old_profile(n, r, layers, lam)
    j = next(j for j in range(1, n - 1) if (p[j] - p[j - 1]) * (p[j + 1] - p[j]) < 0)
    return (
        f"N = {n}, r = e^-m = {r} (m = ln {1 / r} = {math.log(1 / r):.4f}), d = 0, T = {layers}, lambda = {lam}\n"
        f"p = {show(p).strip()}\n  ~ [{', '.join(f'{float(x):.4f}' for x in p)}]\n"
        f"p({j - 1}), p({j}), p({j + 1}) = {p[j - 1]}, {p[j]}, {p[j + 1]}: not monotone at j = {j}"
    )


def _c6_old_artifacts(n, r, layers, lam):
    from posbias.numerics.stack import AlibiStack

    return {"stack": ("alibi", AlibiStack.build([float(lam)] * layers, [math.log(1 / r)]), n)}


def _c6_u_check(stack, n):
    return not predicate("C6")(engine_profile(stack, n))


def necessity_searches() -> list[Property]:
    """The searches of the table above, in that order."""
    return [
        Property(
            "C1 w/o causality",
            "C1",
            ("K row-stochastic", "mu a distribution"),
            lambda z: kernel_and_mu(z, kind="any", exact=True, max_tokens=4),
            c1_check,
            "counterexample",
            dropped="K causal",
            explain=c1_explain,
        ),
        Property(
            "C2(b) w/o monotonicity",
            "C2(b)",
            ("every A^(t) causal row-stochastic",),
            lambda z: c2b_case(z, kind="causal", exact=True),
            c2b_check,
            "counterexample",
            dropped="every A^(t) stochastically monotone",
            explain=c2b_explain,
            artifacts=_c2b_artifacts,
            examples=8,
            target=_c2b_target,
        ),
        Property(
            "C3(c) w/ non-monotone layer",
            "C3(c)",
            ("causal mask", "steeper slope at an ALiBi layer", "other layers any causal kernel"),
            _c3c_mixed_case(),
            _c3c_mixed_check,
            "counterexample",
            dropped="every layer ALiBi (monotone)",
            explain=_c3c_mixed_explain,
            artifacts=_c3c_mixed_artifacts,
        ),
        Property(
            "C4(a) w/ non-constant shift",
            "C4(a)",
            ("any masked logits",),
            lambda z: logits_case(z, row_constant=False),
            c4a_check,
            "counterexample",
            dropped="b constant along the row",
            explain=_c4a_explain,
        ),
        Property(
            "C6 old: steep => monotone",
            "C6",
            ("one head, causal, d = 0", "r = e^-m <= 1/5", "constant lambda"),
            _c6_old_case(),
            _c6_old_check,
            "counterexample",
            statement="(withdrawn) a steep slope makes the profile monotone",
            dropped="(statement withdrawn: THEORY.md C6)",
            explain=_c6_old_explain,
            artifacts=_c6_old_artifacts,
            examples=8,
            target=_c6_old_target,
        ),
        Property(
            "C6 U-shapes exist",
            "C6",
            ("ALiBi + content stacks, causal", "T >= 2"),
            lambda z: (
                ps.alibi_cases(dense_sizes(z), mask_kinds=("causal",), min_tokens=3)
                .filter(lambda c: c[0].num_layers >= 2)
                .map(lambda c: {"stack": c[0], "n": c[1]})
            ),
            _c6_u_check,
            "counterexample",
            statement="some profile at depth >= 2 is U-shaped",
            dropped="(existence)",
            artifacts=alibi_artifact,
        ),
    ]
