"""Model mode: the claims that apply to one model (``verify_model(stack, N)``;
``posbias verify --stack CONFIG`` or ``--kernels FILE``).

``model_facts`` states which hypotheses hold for the model (causal? every layer
stochastically monotone? sum_t lambda_t delta_t with delta_t = 1 - min_i A^(t)[i, i]?);
``verify_model`` checks what the applicable claims predict against the engine:

* C2(c) last-token atom p(N-1) = prod_t (1 - lambda_t (1 - A^(t)[N-1, N-1]));
* C5(a) min_i P[i, i] >= prod_t (1 - lambda_t delta_t) (and the dense diagonal identity);
* C1 on each layer's kernel and drawn distributions;
* C2(b), C3(c), C4(b): raise one lambda_t, one layer's slopes, one layer's diagonal, and
  compare the engine's profiles in the order ≼ (hypothesis draws the perturbations);
* C6: the shape the engine finds (depth 1 is never U-shaped);
* the Cesàro closed form for uniform causal attention (slope 0, d = 0).

A claim whose hypotheses fail for the model is reported ``n/a`` with the reason.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from posbias.verify.claims import c1_check, hypotheses, predicate, steeper
from posbias.verify.counterexample import write_model_counterexample
from posbias.verify.kernels import alibi_kernels, dominated, engine_profile, last_row, with_layer
from posbias.verify.lazy import composite, ps, st
from posbias.verify.runner import resolve_seed, run_property
from posbias.verify.types import Property, Report, Result


def model_facts(stack, n):
    """Hypotheses that hold for a model: causal, monotone layers, sum lambda, sum lambda delta.
    Returns (facts, kernels, self_w): kernels the dense (T, N, N) A^(t) (None where too large to
    form), self_w the (T, N) self-weights A^(t)[i, i] (None where the mask is not causal and the
    kernels were not formed)."""
    from posbias.numerics.stack import AlibiStack
    from posbias.theorem import orders

    alibi = isinstance(stack, AlibiStack)
    lambdas = np.asarray(stack.lambdas, np.float64)
    causal = bool(stack.causal(n)) if alibi else bool(np.all(np.abs(np.triu(stack.kernels, 1)) <= 1e-12))
    dense_ok = (not alibi) or stack.num_layers * stack.num_heads * n * n <= 4e7
    kernels = (alibi_kernels(stack, n) if alibi else stack.kernels) if dense_ok else None
    if kernels is not None:
        monotone = [bool(orders.is_monotone(k)) for k in kernels]
        self_w = np.diagonal(kernels, axis1=1, axis2=2)
    else:
        from posbias import numerics as nx

        monotone = None  # by C3(a) for causal ALiBi; not formed at this size
        self_w = np.asarray(nx.kernel_diagonals(stack, n), np.float64) if causal else None
    delta = None if self_w is None else 1 - self_w.min(axis=1)
    facts = {
        "kind": "alibi" if alibi else "kernels", "num_layers": int(len(lambdas)), "num_tokens": int(n),
        "causal": causal,
        "monotone_layers": None if monotone is None else all(monotone),
        "non_monotone_layers": None if monotone is None else [t for t, ok in enumerate(monotone) if not ok],
        "sum_lambda": float(lambdas.sum()),
        "sum_lambda_delta": None if delta is None else float((lambdas * delta).sum()),
        "max_lambda_delta": None if delta is None else float((lambdas * delta).max()),
    }
    if monotone is None and alibi and causal:
        facts["monotone_layers"] = True
        facts["monotone_note"] = "by C3(a) (causal ALiBi); kernels too large to form here"
    return facts, kernels, self_w


def verify_model(stack, num_tokens: int | None = None, *, profile: str = "ci", examples: int | None = None,
                 seed: int | None = None, out=None, progress: bool = False) -> Report:
    """Check the claims that apply to one model (an ``AlibiStack`` at N tokens or a ``KernelStack``):
    which hypotheses hold, which claims apply, their predictions against the engine, and the
    comparative statics (raise lambda_t, a slope, a diagonal) by hypothesis over perturbations."""
    from posbias.numerics.stack import AlibiStack

    seed = resolve_seed(profile, seed)
    n = num_tokens if num_tokens is not None else stack.num_tokens
    alibi = isinstance(stack, AlibiStack)
    facts, kernels, self_w = model_facts(stack, n)
    lambdas = np.asarray(stack.lambdas, np.float64)
    if alibi:
        p = engine_profile(stack, n)
        profile_of = lambda s: engine_profile(s, n)  # noqa: E731
    else:
        p = last_row(stack.kernels, lambdas)
        profile_of = None
    results: list[Result] = []
    predictions: dict[str, Any] = {}

    def fixed(name, claim_label, hyps, ok, detail):
        results.append(Result(name, claim_label, hyps, "holds", "held" if ok else "refuted", bool(ok), 1, 0, 0.0,
                              detail=detail))

    def na(name, claim_label, why):
        results.append(Result(name, claim_label, (), "holds", "n/a", True, 0, 0, 0.0, detail=why))

    causal, mono = facts["causal"], facts["monotone_layers"]
    # C2(c) and C5(a): identities in the self-weights, against the engine's p and P
    if causal and self_w is not None:
        atom = float(np.prod(1 - lambdas * (1 - self_w[:, -1])))
        predictions["C2(c) p(N-1)"] = atom
        err = abs(p[-1] - atom)
        fixed("C2(c)", "C2(c)", hypotheses("C2(c)"), err <= 1e-10 + 1e-9 * atom,
              f"predicted p(N-1) = {atom:.12g}, engine {p[-1]:.12g} (|diff| {err:.1e})")
        diag = np.prod(1 - lambdas[:, None] * (1 - self_w), axis=0)
        bound = float(np.prod(1 - lambdas * (1 - self_w.min(axis=1))))
        predictions["C5(a) min_i P_ii >= prod(1 - lambda delta)"] = bound
        ok = bool(diag.min() >= bound - 1e-12)
        detail = f"min_i P_ii = {diag.min():.6g} >= prod_t (1 - lambda_t delta_t) = {bound:.6g}"
        if kernels is not None:
            from posbias.theorem import orders

            pmat = orders.rollout(kernels, lambdas)
            ok = ok and bool(predicate("C5(a)")(pmat, kernels, lambdas))
            detail += "; diag P = identity (dense P)"
        fixed("C5(a)", "C5(a)", hypotheses("C5(a)"), ok, detail + f"; sum lambda delta = {facts['sum_lambda_delta']:.4g}")
    else:
        why = "mask reads later tokens (not causal)" if not causal else "kernels too large to form"
        na("C2(c)", "C2(c)", why)
        na("C5(a)", "C5(a)", why)
    # C1 per layer, on drawn distributions
    if causal and kernels is not None and n <= 2048:
        results.append(run_property(Property(
            "C1", "C1", hypotheses("C1"), st.tuples(st.integers(0, len(kernels) - 1), ps.distributions(n)).map(
                lambda c: {"K": kernels[c[0]], "mu": c[1]}), c1_check), profile=profile, examples=examples,
            seed=seed))
    else:
        na("C1", "C1", "not causal" if not causal else "kernels too large to form")
    # C2(b): raise one lambda
    if causal and mono:
        @composite
        def raise_lambda(draw):
            t = draw(st.integers(0, len(lambdas) - 1))
            return {"layer": t, "new_lambda": lambdas[t] + (1 - lambdas[t]) * draw(st.floats(0.0, 1.0))}

        def c2b(layer, new_lambda):
            if alibi:  # p(lambda') ≼ p(lambda), p from the engine
                return dominated(profile_of(with_layer(stack, layer, lam=new_lambda)), p)
            return predicate("C2(b)")(stack.kernels, lambdas, layer, new_lambda)

        results.append(run_property(Property("C2(b)", "C2(b)", hypotheses("C2(b)"), raise_lambda(), c2b),
                                    profile=profile, examples=examples, seed=seed))
    else:
        na("C2(b)", "C2(b)", "not causal" if not causal else f"layers {facts['non_monotone_layers']} not monotone")
    # C3(c), C4(b): steeper slope / larger diagonal at one layer (ALiBi, causal)
    if alibi and causal:
        for name, what in (("C3(c)", "slopes"), ("C4(b)", "diagonal")):
            @composite
            def change(draw, what=what):
                t = draw(st.integers(0, stack.num_layers - 1))
                return {"layer": t, "new": draw(steeper(stack, t, what))}

            def check(layer, new, what=what, label=name):
                q = profile_of(with_layer(stack, layer, **{what: new}))
                return predicate("C3(c)")(p, q) if label == "C3(c)" else dominated(p, q)

            results.append(run_property(Property(name, name, hypotheses(name), change(), check), profile=profile,
                                        examples=examples, seed=seed))
    else:
        na("C3(c)", "C3(c)", "not an ALiBi stack" if not alibi else "not causal")
        na("C4(b)", "C4(b)", "not an ALiBi stack" if not alibi else "not causal")
    # C6: the shape the engine finds; depth 1 is never U-shaped
    u = bool(predicate("C6")(p))
    predictions["C6 U-shaped"] = u
    argmin = int(np.argmin(p))
    if len(lambdas) == 1:
        fixed("C6", "C6", ("T = 1",), not u, f"depth 1: predicted not U-shaped; engine: U-shaped {u}")
    else:
        results.append(Result("C6", "C6", ("observed",), "holds", "observed", True, 1, 0, 0.0,
                              detail=f"U-shaped: {u} (argmin {argmin}, p(0) = {p[0]:.4g}, p(N-1) = {p[-1]:.4g})"))
    # Cesàro closed form: uniform causal attention
    if alibi and causal and stack.mask.past_window is None and np.all(stack.slopes == 0) and \
            np.all(stack.diagonal == 0) and n <= 512:
        ok = bool(predicate("cesaro")(p, [Fraction(float(x)) for x in lambdas]))
        fixed("cesaro", "cesaro", hypotheses("cesaro"), ok, "engine p equals the Hausdorff closed form (exact)")
    else:
        na("cesaro", "cesaro", "not uniform causal attention (slope 0, d = 0)")
    if out is not None:
        for res in results:
            if res.counterexample is not None:
                res.files = [write_model_counterexample(res, out)]
    return Report(results, profile, seed, model={**facts, "predictions": predictions})
