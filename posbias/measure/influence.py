"""Influence measures: how much each input position j feeds the next-token prediction at the last position
(THEORY.md, "Comparing with measured influence"), one non-negative score per position and sequence, each a
function of the input token embeddings e (N, D) through the model's forward.

With p(e) the next-token distribution at the last position, t the top-1 token of the unperturbed input
(held fixed: every measure asks about the same prediction), f(e) = p_t(e) and g_j = df/de_j:

* ``grad``: ||g_j||_2, the gradient norm (the paper's measure; always measured: panel (d) of validate);
* ``gradxinput``: |e_j . g_j|, gradient times input (Shrikumar et al. 2016; Kindermans et al. 2016: the
  first-order Taylor term of f along e_j);
* ``gradxinput-norm``: ||e_j * g_j||_2, its elementwise-product norm variant;
* ``ig``: integrated gradients (Sundararajan et al. 2017, "Axiomatic attribution for deep networks") along
  the straight path from the baseline b to e, a_j = (e_j - b_j) . integral_0^1 g_j(b + a (e - b)) da, by
  the error-guided trapezoid rule of ``posbias.measure.integrated`` with K intervals (K + 1 gradients, the
  nodes bisected where the rule's error is largest); the score is |a_j|. Completeness,
  sum_j a_j = f(e) - f(b), holds as K -> infinity; its relative error
  |sum_j a_j - (f(e) - f(b))| / |f(e) - f(b)| is kept per sequence (``ig_error``) and a measurement whose
  largest error exceeds ``IG_MAX_ERROR`` is refused (raise --ig-steps);
* ``occlusion-logp``: |log f(e) - log f(e^(j))|, e^(j) the input with e_j replaced by b_j (one forward per
  position);
* ``occlusion-kl``: KL(p(e) || p(e^(j))) of the whole next-token distribution.

From the zero baseline, a model whose first operation on the embeddings is a norm layer (RMSNorm, or a
LayerNorm with no position embedding added to the input) has a path that turns sharply near the baseline:
the norm of a e_j stays near e_j's direction until a falls below about sqrt(eps) / rms(e_j), so f changes
over a tiny stretch of the path that a rule resolves only with many nodes there, and the completeness check
refuses runs that do not (the mean baseline avoids the singular point).

``occlusion`` on the command line asks for both occlusion measures. The baseline b is the zero embedding
(``zero``, default) or, at every position, the mean of the model's token-embedding table (``mean``). Each
measure becomes a profile over positions: the mean over sequences of the scores, normalised to sum 1, with
its standard error over sequences on the same scale (``profile``).

An encoder without a language-model head (BERT) has no next-token distribution. Its output is y(e), the final
hidden state (D,) at the last position; ``grad`` there is the Frobenius norm ||dy/de_j||_F
(``posbias.hf.measure``), and the other gradient measures and ``ig`` take for f the component of y along the
unit direction u = y(x) / ||y(x)|| of the unperturbed output, held fixed (as the top-1 token is held fixed
above): f(e) = u . y(e). The two occlusions have no meaning without a distribution; ``occlusion-shift``
takes their place, ||y(e) - y(e^(j))||_2 / ||y(e)||_2, how far occluding position j moves the output, relative
to its length (one forward per position). ``occlusion-shift`` applies to encoders only.

Floating point: in float64 every score is exact to ~1e-12 relative; the KL divergence is
sum_v p_v (log p_v - log q_v) on log-softmax values (no 0 log 0: p_v = 0 contributes 0). In float32 the
gradient-based scores carry ~1e-6 relative error and an occlusion that changes f by less than ~1e-7 reads
as 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posbias.measure import integrated
from posbias.measure.quantities import IG_MAX_ERROR, MeasureError  # noqa: F401 (IG_MAX_ERROR: documented here)

GRADIENT = ("grad", "gradxinput", "gradxinput-norm")
OCCLUSION = ("occlusion-logp", "occlusion-kl")
LANGUAGE_MODEL = (*GRADIENT, "ig", *OCCLUSION)
"""The measures of a model with a next-token distribution."""
ENCODER_ONLY = ("occlusion-shift",)
"""The measure of an encoder without a language-model head that stands in for the two occlusions."""
MEASURES = (*LANGUAGE_MODEL, *ENCODER_ONLY)
"""Every measure's name, in the order of influence.csv's columns."""
ALIASES = {"occlusion": OCCLUSION, "all": LANGUAGE_MODEL}
BASELINES = ("zero", "mean")
DEFAULT_IG_STEPS = 64


@dataclass(frozen=True)
class Influence:
    """Which measures to compute and how: ``measures`` (names of ``MEASURES``; ``grad`` is always among them),
    ``ig_steps`` K, the intervals of integrated gradients' rule, ``baseline`` of integrated gradients and occlusion."""

    measures: tuple[str, ...] = ("grad",)
    ig_steps: int = DEFAULT_IG_STEPS
    baseline: str = "zero"

    def __post_init__(self):
        unknown = [m for m in self.measures if m not in MEASURES]
        if unknown:
            raise MeasureError(
                f"--influence: unknown measure {unknown[0]!r}; expected a comma-separated list of "
                f"{', '.join(MEASURES)}, occlusion (both occlusion measures) or all"
            )
        if "grad" not in self.measures:
            object.__setattr__(self, "measures", ("grad", *self.measures))
        object.__setattr__(self, "measures", tuple(m for m in MEASURES if m in self.measures))
        if isinstance(self.ig_steps, bool) or not isinstance(self.ig_steps, int) or self.ig_steps < 1:
            raise MeasureError(f"--ig-steps: expected a positive integer, got {self.ig_steps!r}")
        if self.baseline not in BASELINES:
            raise MeasureError(f"--baseline: expected one of {', '.join(BASELINES)}, got {self.baseline!r}")

    @property
    def extra(self) -> tuple[str, ...]:
        """The measures beyond the gradient norm."""
        return tuple(m for m in self.measures if m != "grad")


def as_influence(value) -> Influence:
    """An ``Influence`` from what a measure function accepts: an ``Influence``, or True (the gradient norm)."""
    return value if isinstance(value, Influence) else Influence()


def parse(text: str) -> tuple[str, ...]:
    """``--influence grad,ig,occlusion`` -> the measures' names (``ALIASES`` expanded), refusing an empty list."""
    names: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise MeasureError(f"--influence {text!r}: an empty name; expected e.g. grad,gradxinput,ig,occlusion")
        names.extend(ALIASES.get(part, (part,)))
    return tuple(dict.fromkeys(names))


def profile(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S, N) non-negative scores -> (the profile: the mean over sequences normalised to sum 1, its standard
    error over sequences on the same scale; NaN where S = 1). Refused when the mean is zero or not finite."""
    mean = scores.mean(axis=0)
    total = mean.sum()
    if not (np.all(np.isfinite(mean)) and total > 0):
        raise MeasureError("influence: the scores are zero or not finite on these sequences")
    s = scores.shape[0]
    sem = scores.std(axis=0, ddof=1) / np.sqrt(s) if s > 1 else np.full(mean.shape, np.nan)
    return mean / total, sem / total


def check_for(influence: Influence, *, encoder: bool, model: str = "this model") -> None:
    """Refuse, in one line, a measure the model's output does not define: the occlusions of a next-token
    distribution on an encoder without a language-model head, ``occlusion-shift`` on a language model."""
    wrong = [m for m in influence.measures if m in (OCCLUSION if encoder else ENCODER_ONLY)]
    if wrong and encoder:
        raise MeasureError(
            f"--influence {wrong[0]}: an encoder without a language-model head ({model}) has no next-token "
            "distribution; occlusion-shift (the output's displacement) takes the occlusions' place"
        )
    if wrong:
        raise MeasureError(
            f"--influence {wrong[0]}: applies to an encoder without a language-model head; {model} predicts the "
            "next token: occlusion-logp and occlusion-kl measure that"
        )


def scores_fn(
    last_logits,
    influence: Influence,
    num_tokens: int,
    *,
    occlusion_batch: int | None = None,
    embed=None,
    encoder: bool = False,
    capture=None,
):
    """One sequence's scores, for ``jax.vmap`` over a batch: (params, ids (N,)) -> name -> (N,) for every
    measure of ``influence`` but integrated gradients, for which "ig_target" holds the top-1 token (an
    encoder's u) that ``path_point`` needs. ``last_logits(params, ids,
    embedded)`` is the forward's next-token logits (V,) at the last position from embeddings (N, D) that
    replace the token-embedding lookup (``embed(params, ids)``, default ``params["embed"][ids]``); with
    ``encoder`` it is the final hidden state y (D,) there, f = u . y and "grad" is ||u . dy/de_j|| (the caller
    replaces it by the Frobenius norm; module docstring). Occlusions run ``occlusion_batch`` positions at a time
    (``jax.lax.map``; None: one at a time). ``capture(params, ids, embedded)``, where given, is the same forward
    returning (the output, the sequence's ``posbias.measure.quantities.captured`` tuple): the gradient's
    forward is then that one, and "capture" holds the tuple (the capture costs no forward of its own)."""
    import jax
    import jax.numpy as jnp

    names = influence.measures

    def one(params, ids):
        e = params["embed"][ids] if embed is None else embed(params, ids)
        # one forward and its pullback: the output, then g = df/de pulled back from df/d(output)
        if capture is None:
            logits, pullback = jax.vjp(lambda x: last_logits(params, ids, x), e)
        else:
            logits, pullback, sequence_capture = jax.vjp(lambda x: capture(params, ids, x), e, has_aux=True)
        top = jnp.argmax(logits)
        length = jnp.maximum(jnp.linalg.norm(logits), jnp.finfo(e.dtype).tiny)
        direction = logits / length  # an encoder's u (module docstring)
        if encoder:  # f = u . y: df/dy = u
            (g,) = pullback(direction)
        else:  # f = p_t = softmax(z)_t: df/dz_v = p_t ([v = t] - p_v)
            p = jax.nn.softmax(logits)
            (g,) = pullback(p[top] * (jnp.zeros_like(p).at[top].set(1) - p))
        b = _baseline(influence, params, e)
        out = {"grad": jnp.linalg.norm(g, axis=-1)}
        if capture is not None:
            out["capture"] = sequence_capture
        if "gradxinput" in names:
            out["gradxinput"] = jnp.abs((e * g).sum(axis=-1))
        if "gradxinput-norm" in names:
            out["gradxinput-norm"] = jnp.linalg.norm(e * g, axis=-1)
        if "ig" in names:  # integrated by posbias.measure.integrated from path_point's values
            out["ig_target"] = direction if encoder else top
        if "occlusion-shift" in names:

            def shift(j):
                moved = last_logits(params, ids, e.at[j].set(b[j])) - logits
                return jnp.linalg.norm(moved) / length

            out["occlusion-shift"] = jax.lax.map(shift, jnp.arange(num_tokens), batch_size=occlusion_batch)
        if set(OCCLUSION) & set(names):
            logp = jax.nn.log_softmax(logits)
            p = jnp.exp(logp)

            def occluded(j):
                logq = jax.nn.log_softmax(last_logits(params, ids, e.at[j].set(b[j])))
                kl = jnp.sum(jnp.where(p > 0, p * (logp - logq), 0.0))
                return jnp.abs(logp[top] - logq[top]), kl

            dlogp, kl = jax.lax.map(occluded, jnp.arange(num_tokens), batch_size=occlusion_batch)
            if "occlusion-logp" in names:
                out["occlusion-logp"] = dlogp
            if "occlusion-kl" in names:
                out["occlusion-kl"] = kl
        return out

    return one


def _output(last_logits, params, ids, target, encoder: bool):
    """f(e): p_target of the next-token distribution, or an encoder's u . y with u = ``target``."""
    import jax

    def f(embedded):
        if encoder:
            return last_logits(params, ids, embedded) @ target
        return jax.nn.softmax(last_logits(params, ids, embedded))[target]

    return f


def _baseline(influence: Influence, params, e):
    """The baseline embeddings b (N, D) of integrated gradients and occlusion (module docstring)."""
    import jax.numpy as jnp

    if influence.baseline == "zero":
        return jnp.zeros_like(e)
    return jnp.broadcast_to(params["embed"].mean(axis=0).astype(e.dtype), e.shape)


def path_point(last_logits, influence: Influence, *, embed=None, encoder: bool = False):
    """Integrated gradients' integrand at one point of the path x(a) = b + a (e - b), for ``jax.vmap``:
    (params, ids (N,), target, a) -> (F(a) = f(x(a)), s (N,) with s_j = (e_j - b_j) . df/de_j at x(a)), where
    ``target`` is the top-1 token (or an encoder's direction u) of ``scores_fn``'s "ig_target"
    (``posbias.measure.integrated`` integrates them)."""
    import jax

    def point(params, ids, target, alpha):
        e = params["embed"][ids] if embed is None else embed(params, ids)
        b = _baseline(influence, params, e)
        value, g = jax.value_and_grad(_output(last_logits, params, ids, target, encoder))(b + alpha * (e - b))
        return value, ((e - b) * g).sum(axis=-1)

    return point


def batch_fn(
    last_logits,
    influence: Influence,
    num_tokens: int,
    batch: int,
    embed=None,
    encoder: bool = False,
    capture=None,
):
    """(params, ids (B, N)) -> name -> (B, N) scores (and "ig_error" -> (B,)), B <= ``batch``. Without
    occlusion the sequences are vmapped (the memory of B gradients, what the batch is sized for); with it
    they run one after another, each occluding ``batch`` positions at a time, so that no more than B
    forwards are held at once either; integrated gradients' K + 1 points of the path are B gradients at a
    time (``path_point``), driven by ``posbias.measure.integrated`` on the host, so that with "ig" the function
    returned is not itself jitted. ``encoder``: ``scores_fn``'s. With ``capture`` (``scores_fn``'s) "capture"
    holds the batch's capture as ``posbias.measure.quantities.batch_capture`` returns it (summed on the device),
    for ``accumulate`` to take in place of a capture forward."""
    import jax
    import jax.numpy as jnp

    from posbias.measure.quantities import batch_sums

    check_for(influence, encoder=encoder)
    occluding = bool(set(OCCLUSION + ENCODER_ONLY) & set(influence.measures))
    one = scores_fn(
        last_logits,
        influence,
        num_tokens,
        occlusion_batch=max(1, min(batch, num_tokens)),
        embed=embed,
        encoder=encoder,
        capture=capture,
    )
    vmapped = jax.vmap(one, in_axes=(None, 0))

    def summed(params, ids):
        out = jax.lax.map(lambda row: one(params, row), ids) if occluding else vmapped(params, ids)
        return out if capture is None else {**out, "capture": batch_sums(out["capture"])}

    main = jax.jit(summed)
    if "ig" not in influence.measures:
        return main
    point = jax.jit(jax.vmap(path_point(last_logits, influence, embed=embed, encoder=encoder), in_axes=(None, 0, 0, 0)))

    def with_integrated_gradients(params, ids):
        out = dict(main(params, ids))
        target = out.pop("ig_target")
        dtype = out["grad"].dtype

        def at(alphas):
            return point(params, ids, target, jnp.asarray(alphas, dtype))

        attribution, error = integrated.integrate(at, influence.ig_steps, ids.shape[0])
        out["ig"] = np.abs(attribution)
        return {**dict(sorted(out.items())), "ig_error": error}  # sorted by name, as a jitted dict comes back

    return with_integrated_gradients
