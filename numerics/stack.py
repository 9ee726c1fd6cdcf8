"""Parameters of an ALiBi + content attention stack (THEORY.md, Notation).

Head h of layer t has logits  b + d_th [i = j] - m_th |i - j|  over the allowed
positions, divided by the softmax temperature tau; the layer kernel is the
head average A^(t) = sum_h w_th softmax_h. The background b cancels in every
row (C4(a)), so the stack stores only the diagonal excess d.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import numpy as np

from posbias.numerics.masks import Causal, Mask


@dataclass(frozen=True)
class AlibiStack:
    """T layers of H heads. Arrays are float64 numpy arrays of shape (T,) or (T, H).

    lambdas:      (T,)   mixing coefficients in [0, 1]
    slopes:       (T, H) ALiBi slopes m >= 0
    diagonal:     (T, H) content diagonal excess d (background already cancelled)
    head_weights: (T, H) non-negative, each row summing to 1
    temperature:  softmax temperature tau > 0 (logits are divided by it)
    mask:         which positions a token may read
    """

    lambdas: np.ndarray
    slopes: np.ndarray
    diagonal: np.ndarray
    head_weights: np.ndarray
    temperature: float = 1.0
    mask: Mask = field(default_factory=Causal)

    @property
    def num_layers(self) -> int:
        return int(np.shape(self.lambdas)[0])

    @property
    def num_heads(self) -> int:
        return int(np.shape(self.slopes)[1])

    @staticmethod
    def build(lambdas, slopes, diagonal=0.0, head_weights=None, temperature=1.0, mask=None):
        """Broadcast inputs to (T, H) and normalise head weights.

        ``slopes``, ``diagonal`` and ``head_weights`` may be scalars, (H,) vectors
        (the same for every layer) or (T, H) / (1, H) / (T, 1) arrays.
        """
        lambdas = np.asarray(lambdas, dtype=np.float64).reshape(-1)
        t = lambdas.shape[0]
        slopes = np.atleast_2d(np.asarray(slopes, dtype=np.float64))
        h = slopes.shape[1]
        slopes = _per_layer_head(slopes, t, h)
        diagonal = _per_layer_head(diagonal, t, h)
        if head_weights is None:
            head_weights = np.full((t, h), 1.0 / h)
        else:
            head_weights = _per_layer_head(head_weights, t, h)
            head_weights = head_weights / head_weights.sum(axis=1, keepdims=True)
        return AlibiStack(
            lambdas=lambdas,
            slopes=slopes,
            diagonal=diagonal,
            head_weights=head_weights,
            temperature=float(temperature),
            mask=mask if mask is not None else Causal(),
        )

    def scaled(self):
        """(slopes / tau, diagonal / tau): the temperature folded into the logits."""
        return self.slopes / self.temperature, self.diagonal / self.temperature


jax.tree_util.register_dataclass(
    AlibiStack,
    data_fields=["lambdas", "slopes", "diagonal", "head_weights", "temperature"],
    meta_fields=["mask"],
)


def _per_layer_head(x, num_layers: int, num_heads: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 2:
        x = x.reshape(1, -1)
    return np.array(np.broadcast_to(x, (num_layers, num_heads)))
