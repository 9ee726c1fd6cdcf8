"""What a measurement measures, and its accumulation over batches: lambda_t, kernels, content, influence.

The definitions every backend computes (``posbias.measure.backend``: the model ``posbias train`` writes,
Hugging Face folders and GGUF files in JAX, transformers), for S sequences of N tokens, in float64 by
default (``jax.enable_x64`` scoped to the call; a float32 measurement says so in its ``precision``):

* lambda_t (THEORY.md Notation; the paper's definition): per position i of a sequence
  r_i = ||a_t,i|| / (||x_t,i|| + ||a_t,i||), a_t the attention sub-layer's output after W_O
  and x_t the block input (the denominator clamped at 1e-10, as the paper's code does);
  lambda_t = the mean of r over positions and sequences. ``lambda_std`` is the paper's
  spread: the (population) standard deviation over sequences of each sequence's mean over
  positions; ``lambda_std_positions`` the standard deviation over all (sequence, position).
* kernels: the data-set mean of every head's attention weights, (T, H, N, N), and their
  head average A^(t) (uniform head weights, as the model averages heads), (T, N, N).
* content: the data-set mean of the raw content logits q_i . k_j (ALiBi not included),
  per layer and head, fitted by least squares with THEORY.md's content model b + d [i = j]
  on the entries the softmax reads (a decoder's causal entries j <= i, an encoder's every
  entry): b = mean of the off-diagonal entries read, d = mean of the diagonal - b, and
  R^2 = 1 - SS_res / SS_tot over the entries read. Reported raw and times the softmax's
  scale s_t of layer t (the scale the softmax sees: 1/sqrt(d_head) for the model trained
  here; R^2 is the same for both).
* value-norm-weighted kernels (``value_weighted``) and the residual-norm kernels (``residual_norm_kernel``):
  two context-mixing kernel families beside the attention weights, where a backend captures them.
* lambda per position (``lambda_positions``, (T, N)): the mean over sequences of r_t,i, position by
  position, where lambda_t averages over positions too; and the MLP-as-self ratios (``lambda_self``,
  ``attention_share``): ||a_t,i|| / (||x_t,i|| + ||a_t,i|| + ||m_t,i||) with m_t the MLP's output, the
  attention's share when the MLP's output is counted as the position's own (where a backend captures it).
* influence (THEORY.md "Comparing with measured influence"): ||d p_top1 / d e_j||_2, the
  gradient of the model's top-1 next-byte probability at the last position (the top byte
  held fixed) with respect to the input embedding e_j of position j; by ``jax.grad``
  vmapped over sequences, in batches sized to a memory budget; averaged over sequences
  and normalised to sum 1.

The probabilities and content logits are summed over each batch on the device
(``batch_capture``): the host receives one (T, H, N, N) sum per batch, never B copies, and
adds it to float64 accumulators.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posbias.errors import UserError
from posbias.runtime.progress import within

DENOMINATOR_FLOOR = 1e-10
IG_MAX_ERROR = 0.05
"""The largest relative completeness error of integrated gradients a measurement accepts
(``posbias.measure.influence``)."""


class MeasureError(UserError):
    """Bad measurement input: one line."""


@dataclass(frozen=True)
class ContentFit:
    """Per layer and head (T, H): background b, diagonal excess d (raw q.k and times the softmax's scale s_t), R^2."""

    background_raw: np.ndarray
    diagonal_raw: np.ndarray
    background_scaled: np.ndarray
    diagonal_scaled: np.ndarray
    r2: np.ndarray


@dataclass(frozen=True)
class Measurement:
    """What ``measure`` returns; every array float64 (or the float32 of a float32 measurement)."""

    num_tokens: int
    samples: int
    precision: str
    slopes: np.ndarray  # (H,)
    lambdas: np.ndarray  # (T,)
    lambda_std: np.ndarray  # (T,) over sequences of per-sequence means (the paper's)
    lambda_std_positions: np.ndarray  # (T,) over all (sequence, position)
    lambda_per_sequence: np.ndarray  # (S, T)
    kernels_per_head: np.ndarray  # (T, H, N, N)
    kernels: np.ndarray  # (T, N, N)
    content_mean: np.ndarray  # (T, H, N, N) raw q.k, mean over sequences
    content: ContentFit
    grad_norms: np.ndarray | None  # (S, N) ||d p_top1 / d e_j|| (None when not asked)
    influence: np.ndarray | None  # (N,) mean over sequences, normalised to sum 1
    batch: int
    kernels_value: np.ndarray | None = None  # (T, N, N) value-norm-weighted head-mean kernels (``value_weighted``)
    kernels_norm: np.ndarray | None = None  # (T, N, N) residual-norm kernels (``residual_norm_kernel``)
    value_norms: np.ndarray | None = None  # (T, H, N) ||W_O^h v_hj||, mean over sequences
    scales: np.ndarray | None = None  # (T,) the softmax's factor s_t on the raw q.k of layer t
    causal: bool = True  # the softmax's mask: causal (j <= i) or full
    logits_note: str = ""  # why scales * content - slopes (i - j) on that mask is not what the
    # softmax sees ("" when it is; posbias.fit.bias then refuses)
    scores: dict | None = None  # name -> (S, N) scores of every influence measure (posbias.measure.influence)
    lambda_positions: np.ndarray | None = None  # (T, N) r_t,i per position i, mean over sequences
    lambda_self: np.ndarray | None = None  # (T, N) the MLP-as-self ratios (``attention_share``), mean over sequences
    ig_error: np.ndarray | None = None  # (S,) integrated gradients' relative completeness error


def content_fit(mean_logits: np.ndarray, scales, *, causal: bool = True) -> ContentFit:
    """Fit b + d [i = j] to (T, H, N, N) mean logits by least squares on the entries the softmax
    reads (``causal``: j <= i; else all), one layer at a time (module docstring); ``scales`` (T,)
    the softmax's factor s_t per layer. With N = 1 there is no off-diagonal entry: b = 0 and d
    is the diagonal."""
    t, h, n, _ = mean_logits.shape
    scales = np.asarray(scales, np.float64)
    if scales.shape != (t,):
        raise MeasureError(f"content_fit: expected {t} per-layer softmax scales, got shape {scales.shape}")
    diag = np.eye(n, dtype=bool)
    read = np.tril(np.ones((n, n), bool)) if causal else np.ones((n, n), bool)
    off = read & ~diag
    b, d, r2 = np.zeros((t, h)), np.zeros((t, h)), np.ones((t, h))
    for layer in range(t):  # (H, N, N) temporaries, whatever T is
        logits = mean_logits[layer]
        if n > 1:
            b[layer] = logits[:, off].mean(axis=-1)
        d[layer] = logits[:, diag].mean(axis=-1) - b[layer]
        values = logits[:, read]
        fitted = (b[layer][:, None, None] + d[layer][:, None, None] * diag)[:, read]
        resid = ((values - fitted) ** 2).sum(axis=-1)
        total = ((values - values.mean(axis=-1, keepdims=True)) ** 2).sum(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            r2[layer] = np.where(total > 0, 1.0 - resid / np.where(total > 0, total, 1.0), 1.0)
    return ContentFit(b, d, b * scales[:, None], d * scales[:, None], r2)


def batch_capture(one):
    """jit: (params, (B, N) ids) -> lambda means (B, T), lambda sums of squares (B, T), the batch's sums of the
    probabilities and of the raw content logits (T, H, N, N), and the dict of the batch's sums of the further
    per-sequence arrays (``EXTRAS``), reduced on the device; ``one(params, ids)`` returns one sequence's
    (T,), (T,), (T, H, N, N), (T, H, N, N), dict (``captured``)."""
    import jax

    return jax.jit(lambda params, ids: batch_sums(jax.vmap(one, in_axes=(None, 0))(params, ids)))


def batch_sums(stacked: tuple) -> tuple:
    """The B sequences' ``captured`` tuples, stacked along a leading axis, as ``batch_capture`` returns them:
    the lambda means and sums of squares kept per sequence (B, T), the rest summed over the batch."""
    lam, lam_sq, probs, content, extras = stacked
    return lam, lam_sq, probs.sum(axis=0), content.sum(axis=0), {k: v.sum(axis=0) for k, v in extras.items()}


CAPTURED = ("x", "a", "probs", "content", "value_norms", "kernels_norm", "lambda_self")
"""What a forward's capture scans out per layer, in this order (``capture_dict``)."""


def capture_dict(per_layer: tuple) -> dict:
    """A forward's stacked per-layer capture (block inputs, attention outputs, probabilities, raw content
    logits, value norms, residual-norm kernels, MLP-as-self ratios) as the dict ``captured`` reads."""
    return dict(zip(CAPTURED, per_layer, strict=True))


def captured(cap: dict) -> tuple:
    """One sequence's capture for ``batch_capture`` from a forward's captured dict (block inputs ``x``, attention
    outputs ``a``, ``probs``, ``content``, ``value_norms``, and ``kernels_norm`` and ``lambda_self`` where the
    forward forms them): lambda means and sums of squares (T,), the probabilities and the raw content logits
    (T, H, N, N), and a dict of the further per-sequence arrays the batch sums by name (``EXTRAS``): the
    value-weighted kernels, the value norms, the per-position ratios r_t,i (``attention_share``), and the
    residual-norm kernels (T, N, N) (``residual_norm_kernel``) and the MLP-as-self ratios (T, N)
    (``attention_share``) where the forward forms them."""
    r = attention_share(cap["x"], cap["a"])  # (T, N)
    extras = {
        "kernels_value": value_weighted(cap["probs"], cap["value_norms"]),
        "value_norms": cap["value_norms"],
        "lambda_positions": r,
    }
    extras.update({name: cap[name] for name in ("kernels_norm", "lambda_self") if name in cap})
    return r.mean(axis=-1), (r**2).sum(axis=-1), cap["probs"], cap["content"], extras


EXTRAS = ("kernels_value", "value_norms", "lambda_positions", "kernels_norm", "lambda_self")
"""The per-sequence arrays a capture may add, summed over sequences by name (``captured``): the
value-norm-weighted head-mean kernels (T, N, N), the value norms (T, H, N), the mixing ratios r_t,i per
position (T, N), the residual-norm kernels (T, N, N) and the MLP-as-self ratios (T, N)."""


def attention_share(residual, attention, mlp=None):
    """(..., N) the attention's share of a block's update at each position, from the parts (..., N, D) of the
    stream it is added to: r = ||a_i|| / (||x_i|| + ||a_i||), the paper's ratio (module docstring; ``mlp`` None),
    or, with the MLP's output m counted as the position's own, ||a_i|| / (||x_i|| + ||a_i|| + ||m_i||), never
    above r (x and a then in the frame of the stream m is added to: a norm between them folded in by the
    caller). The denominator is clamped at ``DENOMINATOR_FLOOR``."""
    import jax.numpy as jnp

    an = jnp.linalg.norm(attention, axis=-1)
    total = jnp.linalg.norm(residual, axis=-1) + an
    if mlp is not None:
        total = total + jnp.linalg.norm(mlp, axis=-1)
    return an / jnp.maximum(total, DENOMINATOR_FLOOR)


def value_weighted(probs, value_norms):
    """The value-norm-weighted head-mean kernel of one sequence (Kobayashi et al. 2020, "Attention is not
    only a weight"): per head K_hij = A_hij n_hj / sum_j' A_hij' n_hj', n_hj = ||W_O^h v_hj|| (no bias),
    then the mean over heads; (T, H, N, N) probabilities and (T, H, N) norms -> (T, N, N). A row whose
    weights are all zero (every value read has norm 0) would divide by zero: it is 0/0 = NaN, which the
    measurement refuses rather than hides."""
    w = probs * value_norms[..., None, :]
    return (w / w.sum(axis=-1, keepdims=True)).mean(axis=-3)


def residual_norm_kernel(probs, values, residual):
    """The norm-based context-mixing kernel of one layer and sequence, the residual folded in: (H, N, N)
    attention weights A, (H, N, D) per-head values after the output projection u_hj = W_O^h v_hj (no output
    bias), (N, D) the residual r_i that the attention output is added to -> (N, N) K with
    K_ij = ||z_ij|| / sum_j' ||z_ij'||, z_ij = [i = j] r_i + sum_h A_hij u_hj: token j's share of the block
    output y_i = r_i + sum_j sum_h A_hij u_hj (the output bias, belonging to no token, left out).

    Taken from Kobayashi et al. 2021 ("Incorporating residual and normalization layers into analysis of
    masked language models") and Modarressi et al. 2022 ("GlobEnc"): decompose the attention block's output
    into per-token vectors, the residual on the diagonal, and measure each by its norm; as they do for a
    LayerNorm after the residual sum (post-LN), the caller folds the norm's linear part into u and r (gain
    times the centring; the 1/sigma_i of row i cancels in the row's normalisation). Where it differs: GlobEnc
    also folds the block's second norm and the feed-forward's residual (its kernel spans the whole encoder
    layer), and ALTI (Ferrando et al. 2022) weighs z_ij by the L1 proximity max(0, ||y_i||_1 - ||y_i -
    z_ij||_1) instead of the L2 norm; here the kernel covers the attention sub-layer with its residual only
    (the MLP is position-wise and not a mixing step), in L2, for pre-norm blocks (the norm then sits inside
    u, before the values) and post-norm blocks alike. It already contains the residual, so its rollout takes
    lambda_t = 1: P = K^(T-1) ... K^(0).

    Computed without forming the (N, N, D) vectors: ||sum_h A_hij u_hj||^2 = sum_{h,h'} A_hij A_h'ij G_jhh'
    with the Gram matrices G_j = (u_hj . u_h'j) (N H^2 numbers), plus on the diagonal ||r_i||^2 +
    2 sum_h A_hii (r_i . u_hi). Floating point: the squared norm is a sum of terms of either sign, so its
    relative error is about eps (||r_i|| + sum_h A_hij ||u_hj||)^2 / ||z_ij||^2: exact to ~1e-12 in float64
    unless the contributions nearly cancel; negative round-off below 0 is clipped. A row whose norms are all 0
    gives 0/0 = NaN, which the measurement refuses."""
    import jax.numpy as jnp

    gram = jnp.einsum("hjd,gjd->jhg", values, values)
    squared = jnp.einsum("hij,gij,jhg->ij", probs, probs, gram)
    diagonal = jnp.einsum("id,id->i", residual, residual) + 2 * jnp.einsum(
        "hi,hid,id->i", jnp.diagonal(probs, axis1=-2, axis2=-1), values, residual
    )
    n = probs.shape[-1]
    squared = squared + jnp.zeros((n, n), squared.dtype).at[jnp.arange(n), jnp.arange(n)].set(diagonal)
    norms = jnp.sqrt(jnp.maximum(squared, 0))
    return norms / norms.sum(axis=-1, keepdims=True)


def batches(sequences: np.ndarray, batch: int):
    """Consecutive chunks of ``batch`` sequences (the last may be shorter: it compiles once more,
    and no padding row enters the device-side sums)."""
    for i in range(0, len(sequences), batch):
        yield sequences[i : i + batch]


class _Totals:
    """The host's running sums of the capture over batches (``accumulate``): float64, allocated at the first batch."""

    def __init__(self, samples: int):
        self.samples = samples
        self.lam_seq = self.lam_sq = self.probs = self.content = None
        self.extras: dict[str, np.ndarray] = {}

    def add(self, batch_captured: tuple, at: int) -> None:
        """Add one batch's ``batch_capture`` tuple, its sequences starting at ``at``."""
        lm, lsq, pr, co, extra = batch_captured
        if self.lam_seq is None:
            self.lam_seq, self.lam_sq = np.zeros((self.samples, lm.shape[1])), np.zeros(lm.shape[1])
            self.probs, self.content = np.zeros(pr.shape), np.zeros(co.shape)
            self.extras = {name: np.zeros(np.shape(e)) for name, e in extra.items()}
        for name, e in extra.items():
            self.extras[name] += np.asarray(e)
        self.lam_seq[at : at + len(lm)] = np.asarray(lm, np.float64)
        self.lam_sq += np.asarray(lsq, np.float64).sum(axis=0)
        self.probs += np.asarray(pr)  # in place: float64 += the compute dtype, no float64 copy
        self.content += np.asarray(co)


def accumulate(
    capture,
    grad_fn,
    params,
    sequences: np.ndarray,
    *,
    batch: int,
    precision: str,
    slopes: np.ndarray,
    scales,
    causal: bool = True,
    progress=None,
) -> Measurement:
    """The model-independent part of a measurement: run ``capture`` (and ``grad_fn`` when not None)
    over (S, N) sequences in batches of ``batch`` and reduce to a ``Measurement`` (module docstring).
    ``capture(params, (B, N))`` is a ``batch_capture``: per-sequence lambda means and sums of squares
    (B, T), the batch's sums of probabilities and raw content logits (T, H, N, N); ``capture`` None
    when ``grad_fn``'s forward captures too and returns that tuple under "capture" (one forward for both:
    ``posbias.measure.influence.batch_fn``'s ``capture``);
    ``grad_fn(params, (B, N))`` the (B, N) gradient norms, or name -> (B, N) scores of every influence measure
    asked ("grad" among them) and "ig_error" -> (B,) (``posbias.measure.influence``), kept as ``scores`` and
    ``ig_error``; a measurement whose completeness error exceeds ``IG_MAX_ERROR`` is refused. The capture's
    fifth value is a dict of further sums by name (``EXTRAS``: each that a backend forms), whose means over
    sequences become the ``Measurement``'s fields of the same names. ``scales``
    (T,) and ``causal`` are the softmax's per-layer scale and mask, for ``content_fit``. The host holds two
    (T, H, N, N) float64 sums and one batch's sum while adding it. Call it under the precision's ``jax.enable_x64``."""
    import jax.numpy as jnp

    if capture is None and grad_fn is None:
        raise ValueError("accumulate: no capture: pass capture, or a grad_fn whose forward captures")
    s, n = sequences.shape
    totals = _Totals(s)
    scores: dict[str, np.ndarray] = {}
    done = 0
    for chunk in batches(sequences, batch):
        k = len(chunk)
        ids = jnp.asarray(chunk)
        if capture is not None:  # added (and its device sums released) before the gradient runs
            totals.add(capture(params, ids), done)
        if grad_fn is not None:
            report = None if progress is None else (lambda f, at=done, k=k: progress(at + f * k, s))
            with within(report):  # integrated gradients move the bar node by node within the batch
                result = grad_fn(params, ids)
            result = dict(result) if isinstance(result, dict) else {"grad": result}
            if capture is None:  # one forward served both (posbias.measure.influence.batch_fn's capture)
                totals.add(result.pop("capture"), done)
            for name, values in result.items():
                if name not in scores:
                    scores[name] = np.zeros((s, *np.shape(values)[1:]))
                scores[name][done : done + k] = np.asarray(values, np.float64)
            del result
        done += k
        if progress is not None:
            progress(done, s)
    lam_seq, lam_sq, probs_sum, content_sum, sums = (
        totals.lam_seq,
        totals.lam_sq,
        totals.probs,
        totals.content,
        totals.extras,
    )
    x64 = precision == "float64"
    out_dtype = np.float64 if x64 else np.float32
    lambdas = lam_seq.mean(axis=0)
    probs_sum /= s
    per_head = probs_sum.astype(out_dtype, copy=False)
    content_sum /= s
    influence = grad_fn is not None
    ig_error = scores.pop("ig_error", None)
    norms = scores["grad"] if influence else np.zeros((s, n))
    mean_norms = norms.mean(axis=0)
    for total in sums.values():
        total /= s
    if "kernels_value" in sums and not np.all(np.isfinite(sums["kernels_value"])):
        raise MeasureError("value-weighted kernels: a row's values all have norm 0 (0/0) on these sequences")
    if "kernels_norm" in sums and not np.all(np.isfinite(sums["kernels_norm"])):
        raise MeasureError("residual-norm kernels: a row's contributions all have norm 0 (0/0) on these sequences")
    if influence and not (np.all(np.isfinite(mean_norms)) and mean_norms.sum() > 0):
        raise MeasureError("influence: the gradients of p_top1 are zero or not finite on these sequences")
    if ig_error is not None and not np.all(np.isfinite(ig_error)):
        raise MeasureError(
            "integrated gradients: not finite on sequence "
            f"{int(np.argmin(np.isfinite(ig_error)))} (a gradient along the path is NaN or infinite; at the zero "
            "baseline a model whose first operation on the embeddings is a norm layer without bias is "
            "singular: use --baseline mean)"
        )
    if ig_error is not None and not np.all(ig_error <= IG_MAX_ERROR):
        worst = int(np.argmax(ig_error))
        raise MeasureError(
            f"integrated gradients: completeness is off by {ig_error[worst]:.3g} of f(x) - f(baseline) on sequence "
            f"{worst} (at most {IG_MAX_ERROR} accepted): raise --ig-steps"
        )
    return Measurement(
        num_tokens=n,
        samples=s,
        precision=precision,
        slopes=np.asarray(slopes, np.float64),
        lambdas=lambdas,
        lambda_std=lam_seq.std(axis=0),
        lambda_std_positions=np.sqrt(np.maximum(lam_sq / (s * n) - lambdas**2, 0.0)),
        lambda_per_sequence=lam_seq,
        kernels_per_head=per_head,
        kernels=per_head.mean(axis=1, dtype=np.float64).astype(out_dtype),
        content_mean=content_sum,
        content=content_fit(content_sum, scales, causal=causal),
        grad_norms=norms if influence else None,
        influence=mean_norms / mean_norms.sum() if influence else None,
        batch=batch,
        kernels_value=sums["kernels_value"].astype(out_dtype) if "kernels_value" in sums else None,
        value_norms=sums.get("value_norms"),
        kernels_norm=sums["kernels_norm"].astype(out_dtype) if "kernels_norm" in sums else None,
        lambda_positions=sums.get("lambda_positions"),
        lambda_self=sums.get("lambda_self"),
        scales=np.asarray(scales, np.float64),
        causal=bool(causal),
        scores=scores if influence else None,
        ig_error=ig_error,
    )
