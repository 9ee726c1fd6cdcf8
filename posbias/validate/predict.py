"""The paper's predictions and their scores against measured influence (``posbias validate``; THEORY.md,
"Comparing with measured influence"): the model trained here (``posbias train``) or a
Hugging Face checkpoint folder (``posbias.hf``: BERT, BLOOM, Falcon, GPT-2, MPT).

For each sequence length N, on held-out text, the measured influence profile (d) is
compared with four predictions:

(a) attention-only rollout: lambda_t = 1, the model's ALiBi slopes, no content (C1, C3);
(b) residual-aware rollout: the measured lambda_t, no content (C2);
(c) (b) plus the measured content diagonal d, as the softmax sees it: s_t d_raw with s_t
    the layer's logit scale (``ContentFit.diagonal_scaled``; 1/sqrt(d_head) by default) (C4);
(d) measured influence ||d p_top1 / d e_j|| (posbias.lm.measure, posbias.hf.measure);
(e) the rollout of the measured, data-set-averaged kernels with the measured lambda_t;
(i) the rollout of the relative bias fitted to the measured pre-softmax logits, with the measured
    lambda_t (``posbias.validate.panels``, ``posbias.fit.bias``).

The slopes are those the softmax sees (``posbias.hf.forward.slopes`` for checkpoints): zero
for learned absolute positions, where (a) and (b) are rollouts of the mask alone. Decoders
use the causal mask; encoders (``Spec.causal`` false) the full mask, every token reading
every token (bidirectional ALiBi is -m |i - j|, posbias.numerics.masks). The profile is the
last row of the rollout, p = e_{N-1}^T R^(T-1) ... R^(0).

Each of (a), (b), (c), (e) is scored against (d) by W1 on positions / (N - 1), Spearman's
rho and total variation (posbias.distances). Nothing here tunes a prediction to (d): (a)-(c)
use architecture and measured lambda / content only, as in the paper.
"""

from __future__ import annotations

import numpy as np

from posbias.errors import UserError
from posbias.validate.panels import PANELS as VARIANT_PANELS
from posbias.validate.panels import PAPER_PANELS

PANELS = {**PAPER_PANELS, **VARIANT_PANELS}
PREDICTIONS = ("a", "b", "c", "e")


def predictions(measurement, slopes: np.ndarray, *, causal: bool = True) -> dict[str, np.ndarray]:
    """Profiles (a), (b), (c), (e) for one measurement (module docstring), float64, each summing to 1.

    ``causal`` false: the full mask for (a)-(c) and kernels not required to be lower triangular
    for (e). The content diagonal of (c) is the measurement's ``content.diagonal_scaled`` (s_t d_raw).
    Kernel rows are renormalised in float64 (a float32 measurement sums to 1 only within ~1e-6)."""
    import posbias.numerics as nx
    from posbias.numerics.masks import Causal, Full

    m = measurement
    n, t = m.num_tokens, len(m.lambdas)
    mask = Causal() if causal else Full()
    kernels = np.asarray(m.kernels, np.float64)
    kernels = kernels / kernels.sum(axis=-1, keepdims=True)
    out = {
        "a": nx.profile(nx.AlibiStack.build(np.ones(t), slopes, mask=mask), n),
        "b": nx.profile(nx.AlibiStack.build(m.lambdas, slopes, mask=mask), n),
        "c": nx.profile(nx.AlibiStack.build(m.lambdas, slopes, m.content.diagonal_scaled, mask=mask), n),
        "e": nx.profile(nx.KernelStack.build(kernels, m.lambdas, causal=causal)),
    }
    profiles = {}
    for key, prof in out.items():
        p = prof.probabilities / prof.probabilities.sum()
        if abs(prof.probabilities.sum() - 1) > 1e-9 or prof.unresolved().any():
            raise UserError(f"panel ({key}): the profile is not determined in float64 at N = {n}")
        profiles[key] = p
    return profiles


def score(measured: np.ndarray, profiles: dict[str, np.ndarray]) -> dict[str, dict]:
    """W1 / (N - 1), Spearman and total variation of each prediction against ``measured``."""
    from posbias.distances import spearman, total_variation, w1

    return {
        k: {"w1": w1(measured, p), "spearman": spearman(measured, p), "tv": total_variation(measured, p)}
        for k, p in profiles.items()
    }


def prediction_notes(backend) -> tuple[str, ...]:
    """What a reader of report.md must know about how (a)-(c) and (e) relate to this model's positions and
    mask (``posbias.measure.backend.Backend``'s ``positions``, ``windows_note`` and ``causal``)."""
    mask = "causal mask" if backend.causal else "full mask"
    notes = ()
    if backend.positions == "rotary":
        notes += (
            f"Rotary positions (RoPE): the positional term is not a separable slope, so the ALiBi "
            f"prediction does not apply: (a) and (b) are pure {mask} rollouts (slopes 0, as for learned "
            f"positions); the rotation lives in the content logits (the full pre-softmax q.k), so it reaches "
            f"(c) only through the measured content diagonal and (e) through the measured kernels.",
        )
        if backend.windows_note:
            notes += (
                f"{backend.windows_note}: (a)-(c) use the full {mask}; (e) uses the measured (windowed) kernels.",
            )
    elif backend.positions in ("learned", "unknown"):
        kind = "Learned absolute positions" if backend.positions == "learned" else "Rotary or learned positions"
        notes += (
            f"{kind}: no ALiBi term (slopes 0), so (a) and (b) are pure {mask} rollouts; the position "
            f"signal lives in the content logits, so it reaches (c) only through the measured content "
            f"diagonal and (e) through the measured kernels.",
        )
    if not backend.causal:
        notes += (
            "Encoder: every token reads every token; (a)-(c) and (e) use the full mask and the profile is "
            "the last position's row"
            + (" (ALiBi in (a)-(c): the symmetric -m |i - j|)." if backend.positions == "alibi" else "."),
        )
    return notes


def validate_bytes(layers: int, n: int) -> int:
    """What validate holds beyond a measurement at N (``posbias.hf.memory.host_bytes``): the float64
    kernels, their renormalised copy and the (e) rollout's stack, 3 x 8 T N^2."""
    return 3 * 8 * layers * n * n
