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
from pathlib import Path
from typing import Any

import numpy as np

from posbias.errors import UserError
from posbias.verify import cost
from posbias.verify.claims import c1_check, hypotheses, predicate, steeper
from posbias.verify.counterexample import model_counterexample_files
from posbias.verify.kernels import alibi_kernels, dominated, engine_profile, last_row, with_layer
from posbias.verify.lazy import composite, ps, st
from posbias.verify.runner import resolve_seed, run_property
from posbias.verify.types import Property, Report, Result


def model_facts(stack, n, plan):
    """Hypotheses that hold for a model: causal, monotone layers, sum lambda, sum lambda delta.
    Returns (facts, kernels, self_w): kernels the dense (T, N, N) A^(t) (None where the plan
    does not form them), self_w the (T, N) self-weights A^(t)[i, i] (None where the mask is not
    causal and the kernels were not formed), computed one layer at a time."""
    from posbias.numerics.stack import AlibiStack
    from posbias.theorem import orders

    alibi = isinstance(stack, AlibiStack)
    lambdas = np.asarray(stack.lambdas, np.float64)
    if alibi:
        causal = bool(stack.causal(n))
    else:  # layer by layer: no (T, N, N) temporaries
        causal = all(bool(np.all(np.abs(np.triu(k, 1)) <= 1e-12)) for k in stack.kernels)
    kernels = (alibi_kernels(stack, n) if alibi else stack.kernels) if plan.dense_kernels else None
    if kernels is not None:
        monotone = [bool(orders.is_monotone(k)) for k in kernels]
        self_w = np.diagonal(kernels, axis1=1, axis2=2)
    else:
        monotone = None  # by C3(a) for causal ALiBi; not formed at this size
        self_w = self_weights(stack, n) if causal else None
    delta = None if self_w is None else 1 - self_w.min(axis=1)
    facts = {
        "kind": "alibi" if alibi else "kernels",
        "num_layers": int(len(lambdas)),
        "num_tokens": int(n),
        "causal": causal,
        "monotone_layers": None if monotone is None else all(monotone),
        "non_monotone_layers": None if monotone is None else [t for t, ok in enumerate(monotone) if not ok],
        "sum_lambda": float(lambdas.sum()),
        "sum_lambda_delta": None if delta is None else float((lambdas * delta).sum()),
        "max_lambda_delta": None if delta is None else float((lambdas * delta).max()),
    }
    if monotone is None and alibi and causal:
        facts["monotone_layers"] = True
        facts["monotone_note"] = f"by C3(a) (causal ALiBi); not formed: {plan.dense_kernels_reason}"
    return facts, kernels, self_w


def self_weights(stack, n) -> np.ndarray:
    """(T, N) self-weights A^(t)[i, i] of an ALiBi stack in closed form, one layer at a time (the
    XLA arrays hold H x N, not T x H x N)."""
    from posbias import numerics as nx
    from posbias.numerics.stack import AlibiStack

    out = np.empty((stack.num_layers, n))
    for t in range(stack.num_layers):
        layer = AlibiStack.build(
            stack.lambdas[t : t + 1],
            stack.slopes[t : t + 1],
            stack.diagonal[t : t + 1],
            stack.head_weights[t : t + 1],
            stack.temperature,
            stack.mask,
        )
        out[t] = np.asarray(nx.kernel_diagonals(layer, n), np.float64)[0]
    return out


def plan_for(stack, n, *, profile: str, examples: int | None):
    """The cost plan (``posbias.verify.cost.plan_model``) of ``verify_model(stack, n)``."""
    from posbias.numerics import Structured
    from posbias.numerics.stack import AlibiStack

    alibi = isinstance(stack, AlibiStack)
    heads = stack.num_heads if alibi else 1
    causal = bool(stack.causal(n)) if alibi else True  # kernels: planned as causal (the larger plan)
    engine = Structured().memory_bytes(stack.num_layers, heads, n) if alibi else 0
    return cost.plan_model(
        kind="alibi" if alibi else "kernels",
        layers=stack.num_layers,
        heads=heads,
        tokens=n,
        causal=causal,
        examples=cost.examples_per_property(profile, examples),
        engine_bytes=engine,
    )


def _check_supported(stack) -> None:
    """Refuse (UserError, one line) a stack verify_model cannot check: its claims are stated for ALiBi
    stacks and measured kernels (a relative-bias ``BiasStack`` has neither slopes nor dense kernels)."""
    from posbias.numerics.stack import AlibiStack, KernelStack

    if not isinstance(stack, (AlibiStack, KernelStack)):
        raise UserError(
            f"verify_model: a {type(stack).__name__} is not supported; expected an AlibiStack (ALiBi slopes) "
            "or a KernelStack (measured kernels)"
        )


def verify_model(  # noqa: C901 (one block per claim; split each into a function; issue 20 §4)
    stack,
    num_tokens: int | None = None,
    *,
    profile: str = "ci",
    examples: int | None = None,
    seed: int | None = None,
    out=None,
    progress: bool = False,
) -> Report:
    """Check the claims that apply to one model (an ``AlibiStack`` at N tokens or a ``KernelStack``):
    which hypotheses hold, which claims apply, their predictions against the engine, and the
    comparative statics (raise lambda_t, a slope, a diagonal) by hypothesis over perturbations.
    The run's memory and time are estimated first (``posbias.verify.cost``) and refused beyond the
    limits; with ``out`` the folder is checked before and the files written as one set after
    (None, the default, writes no file)."""
    from posbias.numerics.stack import AlibiStack
    from posbias.verify.output import preflight, write_set

    _check_supported(stack)
    seed = resolve_seed(profile, seed)
    n = num_tokens if num_tokens is not None else stack.num_tokens
    plan = plan_for(stack, n, profile=profile, examples=examples)
    plan.check()
    if out is not None:
        preflight(out)
    alibi = isinstance(stack, AlibiStack)
    facts, kernels, self_w = model_facts(stack, n, plan)
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
        results.append(
            Result(name, claim_label, hyps, "holds", "held" if ok else "refuted", bool(ok), 1, 0, 0.0, detail=detail)
        )

    def na(name, claim_label, why):
        results.append(Result(name, claim_label, (), "holds", "n/a", True, 0, 0, 0.0, detail=why))

    causal, mono = facts["causal"], facts["monotone_layers"]
    not_causal = "the mask reads later tokens (not causal)" if alibi else "the kernels read later tokens (not causal)"
    # C2(c) and C5(a): identities in the self-weights, against the engine's p and P
    if causal:
        atom = float(np.prod(1 - lambdas * (1 - self_w[:, -1])))
        predictions["C2(c) p(N-1)"] = atom
        err = abs(p[-1] - atom)
        fixed(
            "C2(c)",
            "C2(c)",
            hypotheses("C2(c)"),
            err <= 1e-10 + 1e-9 * atom,
            f"predicted p(N-1) = {atom:.12g}, engine {p[-1]:.12g} (|diff| {err:.1e})",
        )
        diag = np.prod(1 - lambdas[:, None] * (1 - self_w), axis=0)
        bound = float(np.prod(1 - lambdas * (1 - self_w.min(axis=1))))
        predictions["C5(a) min_i P_ii >= prod(1 - lambda delta)"] = bound
        ok = bool(diag.min() >= bound - 1e-12)
        detail = f"min_i P_ii = {diag.min():.6g} >= prod_t (1 - lambda_t delta_t) = {bound:.6g}"
        if plan.dense_product:
            from posbias.theorem import orders

            pmat = orders.rollout(kernels, lambdas)
            ok = ok and bool(predicate("C5(a)")(pmat, kernels, lambdas))
            detail += "; diag P = identity (dense P)"
        else:
            detail += f"; diag P not formed: {plan.dense_product_reason}"
        fixed(
            "C5(a)", "C5(a)", hypotheses("C5(a)"), ok, detail + f"; sum lambda delta = {facts['sum_lambda_delta']:.4g}"
        )
    else:
        na("C2(c)", "C2(c)", not_causal)
        na("C5(a)", "C5(a)", not_causal)
    # C1 per layer, on drawn distributions
    if causal and kernels is not None:
        results.append(
            run_property(
                Property(
                    "C1",
                    "C1",
                    hypotheses("C1"),
                    st.tuples(st.integers(0, len(kernels) - 1), ps.distributions(n)).map(
                        lambda c: {"K": kernels[c[0]], "mu": c[1]}
                    ),
                    c1_check,
                ),
                profile=profile,
                examples=examples,
                seed=seed,
            )
        )
    else:
        na("C1", "C1", not_causal if not causal else plan.dense_kernels_reason)
    # C2(b): raise one lambda
    if causal and mono:

        @composite
        def raise_lambda(draw):
            t = draw(st.integers(0, len(lambdas) - 1))
            return {"layer": t, "new_lambda": lambdas[t] + (1 - lambdas[t]) * draw(st.floats(0.0, 1.0))}

        def c2b(layer, new_lambda):  # p(lambda') ≼ p(lambda): the engine's, or the kernels' last rows
            if alibi:
                return dominated(profile_of(with_layer(stack, layer, lam=new_lambda)), p)
            more = lambdas.copy()
            more[layer] = new_lambda
            return dominated(last_row(stack.kernels, more), p)

        results.append(
            run_property(
                Property("C2(b)", "C2(b)", hypotheses("C2(b)"), raise_lambda(), c2b),
                profile=profile,
                examples=examples,
                seed=seed,
            )
        )
    else:
        na(
            "C2(b)",
            "C2(b)",
            not_causal if not causal else f"layers {facts['non_monotone_layers']} are not stochastically monotone",
        )
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

            results.append(
                run_property(
                    Property(name, name, hypotheses(name), change(), check),
                    profile=profile,
                    examples=examples,
                    seed=seed,
                )
            )
    else:
        why = "measured kernels: no slopes or content diagonal to change" if not alibi else not_causal
        na("C3(c)", "C3(c)", why)
        na("C4(b)", "C4(b)", why)
    # C6: the shape the engine finds; depth 1 is never U-shaped
    u = bool(predicate("C6")(p))
    predictions["C6 U-shaped"] = u
    argmin = int(np.argmin(p))
    if len(lambdas) == 1:
        fixed("C6", "C6", ("T = 1",), not u, f"depth 1: predicted not U-shaped; engine: U-shaped {u}")
    else:
        results.append(
            Result(
                "C6",
                "C6",
                ("observed",),
                "holds",
                "observed",
                True,
                1,
                0,
                0.0,
                detail=f"U-shaped: {u} (argmin {argmin}, p(0) = {p[0]:.4g}, p(N-1) = {p[-1]:.4g})",
            )
        )
    # Cesàro closed form: uniform causal attention
    why = cesaro_inapplicable(stack, n, causal)
    if why is None:
        ok = bool(predicate("cesaro")(p, [Fraction(float(x)) for x in lambdas]))
        fixed("cesaro", "cesaro", hypotheses("cesaro"), ok, "engine p equals the Hausdorff closed form (exact)")
    else:
        na("cesaro", "cesaro", why)
    report = Report(results, profile, seed, model={**facts, "predictions": predictions})
    if out is not None:
        contents = {}
        for res in results:
            if res.counterexample is not None:
                files = model_counterexample_files(res)
                res.files = [Path(out) / name for name in files]
                contents.update(files)
        if contents:
            write_set(out, contents)
    return report


CESARO_MAX_TOKENS = 512
"""The Cesàro closed form is checked in exact rationals up to this N (its cost grows as N T)."""


def cesaro_inapplicable(stack, n: int, causal: bool) -> str | None:
    """None where the Cesàro closed form applies (uniform causal attention: ALiBi, causal mask with
    no window, every slope and content diagonal 0, N <= CESARO_MAX_TOKENS), else the condition
    that fails, stated with the model's values."""
    from posbias.numerics.stack import AlibiStack

    if not isinstance(stack, AlibiStack):
        return "measured kernels: the closed form is for uniform causal ALiBi attention"
    if not causal:
        return f"not causal (mask {stack.mask.spec})"
    if stack.mask.past_window is not None:
        return f"sliding-window mask ({stack.mask.spec}): attention is not uniform over the whole past"
    if np.any(stack.slopes != 0):
        return f"not uniform: slopes up to {float(np.max(stack.slopes)):.4g} (the closed form needs slope 0)"
    if np.any(stack.diagonal != 0):
        return (
            f"not uniform: content diagonal up to {float(np.max(np.abs(stack.diagonal))):.4g} "
            "(the closed form needs d = 0)"
        )
    if n > CESARO_MAX_TOKENS:
        return (
            f"uniform causal attention, but N = {n} > {CESARO_MAX_TOKENS}: the exact closed form is checked "
            f"up to N = {CESARO_MAX_TOKENS}"
        )
    return None
