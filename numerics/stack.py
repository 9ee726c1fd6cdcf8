"""Parameters of an attention stack (THEORY.md, Notation): the input of every engine.

``AlibiStack``: head h of layer t has logits  b + d_th [i = j] - m_th |i - j|  over
the allowed positions, divided by the softmax temperature tau; the layer kernel is
the head average A^(t) = sum_h w_th softmax_h. The background b cancels in every
row (C4(a)), so the stack stores only the diagonal excess d.

``KernelStack``: measured (or any given) kernels A^(t) as dense (T, N, N) arrays.
(``posbias.numerics.boundary.Stack``: these, ``BiasStack`` and ``PeriodicStack``, what engines take.)

Both are validated where they are built (``AlibiStack.build``, ``KernelStack.build``):
an object of either type holds finite values in range, so engines never see
input they cannot represent. The plain constructors skip validation; they exist
for JAX (pytree unflattening) and for code that already holds validated arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from posbias.numerics.arrays import Kernels, PerHead, PerLayer
from posbias.numerics.kernel_checks import KernelError, validate_kernels
from posbias.numerics.masks import Causal, Full, Mask, is_lower_triangular


class StackError(ValueError):
    """A stack parameter is out of range; the message names it (and the layer / head)."""


@dataclass(frozen=True)
class AlibiStack:
    """T layers of H heads. Arrays are float64 numpy arrays of shape (T,) or (T, H).

    lambdas:      (T,)   mixing coefficients in [0, 1]
    slopes:       (T, H) ALiBi slopes m >= 0
    diagonal:     (T, H) content diagonal excess d (background already cancelled)
    head_weights: (T, H) non-negative, each row summing to 1
    temperature:  softmax temperature tau > 0 (logits are divided by it)
    mask:         which positions a token may read

    Examples
    --------
    >>> s = AlibiStack.build([0.5, 0.5], [1.0, 0.25], diagonal=2.0)
    >>> s.num_layers, s.num_heads, s.head_weights[0].tolist()
    (2, 2, [0.5, 0.5])
    >>> AlibiStack.build([1.5], [1.0])
    Traceback (most recent call last):
    ...
    posbias.numerics.stack.StackError: lambdas: layer 0 has lambda = 1.5, expected a value in [0, 1]
    """

    lambdas: PerLayer
    slopes: PerHead
    diagonal: PerHead
    head_weights: PerHead
    temperature: float = 1.0
    mask: Mask = field(default_factory=Causal)

    @property
    def num_layers(self) -> int:
        return int(np.shape(self.lambdas)[0])

    @property
    def num_heads(self) -> int:
        return int(np.shape(self.slopes)[1])

    @staticmethod
    def build(
        lambdas: ArrayLike,
        slopes: ArrayLike,
        diagonal: ArrayLike = 0.0,
        head_weights: ArrayLike | None = None,
        temperature: float = 1.0,
        mask: Mask | None = None,
    ) -> AlibiStack:
        """Validate, broadcast inputs to (T, H) and normalise head weights.

        ``slopes``, ``diagonal`` and ``head_weights`` may be scalars, (H,) vectors
        (the same for every layer) or (T, H) / (1, H) / (T, 1) arrays. Refused
        (``StackError``): lambda outside [0, 1], negative or non-finite slopes,
        non-finite diagonals, negative or non-finite head weights, a layer whose
        head weights are all zero, tau <= 0 or slopes / tau overflowing. Head
        weights are normalised as w / max(w) / sum(w / max(w)), so any finite
        positive scale (1e308 included) gives the same kernel.
        """
        lambdas = finite_array("lambdas", lambdas).reshape(-1)
        if lambdas.size == 0:
            raise StackError("lambdas: expected at least one layer, got none")
        bad = np.flatnonzero((lambdas < 0) | (lambdas > 1))
        if bad.size:
            raise StackError(f"lambdas: layer {bad[0]} has lambda = {lambdas[bad[0]]:g}, expected a value in [0, 1]")
        t = lambdas.shape[0]
        slopes = np.atleast_2d(finite_array("slopes", slopes))
        if slopes.ndim != 2:
            raise StackError(f"slopes: expected a scalar, (H,) or (T, H) array, got shape {slopes.shape}")
        h = slopes.shape[1]
        if h == 0:
            raise StackError("slopes: expected at least one head, got none")
        slopes = per_layer_head("slopes", slopes, t, h)
        _non_negative("slopes", slopes)
        diagonal = per_layer_head("diagonal", finite_array("diagonal", diagonal), t, h)
        if head_weights is None:
            weights = np.full((t, h), 1.0 / h)
        else:
            weights = per_layer_head("head_weights", finite_array("head_weights", head_weights), t, h)
            _non_negative("head_weights", weights)
            top = weights.max(axis=1, keepdims=True)
            empty = np.flatnonzero(top[:, 0] <= 0)
            if empty.size:
                raise StackError(f"head_weights: layer {empty[0]} has no positive weight, expected at least one")
            weights = weights / top  # in [0, 1]: the sum below cannot overflow
            weights = weights / weights.sum(axis=1, keepdims=True)
        temperature = float(temperature)
        if not np.isfinite(temperature) or temperature <= 0:
            raise StackError(f"temperature: expected a finite value > 0, got {temperature!r}")
        with np.errstate(over="ignore"):
            if not (np.all(np.isfinite(slopes / temperature)) and np.all(np.isfinite(diagonal / temperature))):
                raise StackError(f"temperature: {temperature!r} is too small for the slopes or diagonal (overflow)")
        return AlibiStack(lambdas, slopes, diagonal, weights, temperature, mask if mask is not None else Causal())

    def scaled(self) -> tuple[PerHead, PerHead]:
        """(slopes / tau, diagonal / tau): the temperature folded into the logits."""
        return self.slopes / self.temperature, self.diagonal / self.temperature

    def causal(self, num_tokens: int) -> bool:
        """True when every kernel of the stack is lower triangular at this N (C1, C2(c), C5(a) apply)."""
        return is_lower_triangular(self.mask, num_tokens)

    @property
    def mask_name(self) -> str:
        return self.mask.name


_REGISTERED = []


def register_pytrees() -> None:
    """Make ``AlibiStack`` a JAX pytree (its arrays are leaves, the mask is static). Called by
    every posbias module that imports JAX, so the native CPU path never imports JAX."""
    if _REGISTERED:
        return
    import jax

    jax.tree_util.register_dataclass(
        AlibiStack,
        data_fields=["lambdas", "slopes", "diagonal", "head_weights", "temperature"],
        meta_fields=["mask"],
    )
    _REGISTERED.append(True)


@dataclass(frozen=True)
class KernelStack:
    """Given kernels: (T, N, N) row-stochastic float64 ``kernels`` and (T,) ``lambdas`` in [0, 1].

    ``declared_causal``: the user says the kernels are lower triangular (checked by ``build``).
    """

    kernels: Kernels
    lambdas: PerLayer
    declared_causal: bool = False

    @property
    def num_layers(self) -> int:
        return int(self.kernels.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.kernels.shape[1])

    num_heads = None  # kernels are already head-averaged

    @property
    def mask_name(self) -> str:
        return "measured (causal)" if self.declared_causal else "measured"

    @property
    def mask(self) -> Mask:
        return Causal() if self.declared_causal else Full()

    def causal(self, num_tokens: int) -> bool:
        return self.declared_causal

    @staticmethod
    def build(kernels, lambdas, *, causal: bool = False, tol: float | None = None) -> KernelStack:
        """Validate: shape (T, N, N), finite, non-negative, rows summing to 1 within ``tol``
        (default: 1e-9 for float64 input, 1e-5 for float32), causal if declared; lambdas (T,) in [0, 1].
        Raises ``KernelError`` naming the layer and row."""
        kernels = np.asarray(kernels)
        if not np.issubdtype(kernels.dtype, np.floating):
            raise KernelError(f"kernels: expected floating-point values, got dtype {kernels.dtype}")
        if tol is None:
            tol = kernel_tolerance(kernels.dtype, kernels.shape[-1] if kernels.ndim else 1)
        kernels = kernels.astype(np.float64)
        validate_kernels(kernels, causal=causal, tol=tol)
        lambdas = np.asarray(lambdas, np.float64).reshape(-1)
        t = kernels.shape[0]
        if lambdas.shape != (t,) or not np.all(np.isfinite(lambdas)) or lambdas.min() < 0 or lambdas.max() > 1:
            raise KernelError(f"lambdas: expected {t} finite values in [0, 1], got shape {lambdas.shape}")
        return KernelStack(kernels, lambdas, causal)


def kernel_tolerance(dtype, num_tokens: int) -> float:
    """How far a stored kernel row may sum from 1: 1e-9 for float64 (or wider) values; for
    narrower floats the rounding of the stored values and of the row's own sum, 64 eps N,
    but never more than 1e-3 (a row off by more is not a stochastic row)."""
    eps = float(np.finfo(dtype).eps)
    if eps <= float(np.finfo(np.float64).eps):
        return 1e-9
    return max(1e-9, min(64 * eps * max(1, int(num_tokens)), 1e-3))


def finite_array(name: str, x) -> np.ndarray:
    try:
        x = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise StackError(f"{name}: expected numbers") from None
    bad = np.argwhere(~np.isfinite(x))
    if bad.size:
        raise StackError(f"{name}: entry {tuple(int(i) for i in bad[0])} is not finite, expected a finite number")
    return x


def _non_negative(name: str, x: np.ndarray) -> None:
    bad = np.argwhere(x < 0)
    if bad.size:
        t, h = bad[0]
        raise StackError(f"{name}: layer {t} head {h} is {x[t, h]:g}, expected a value >= 0")


def per_layer_head(name: str, x: np.ndarray, num_layers: int, num_heads: int) -> np.ndarray:
    if x.ndim < 2:
        x = x.reshape(1, -1)
    try:
        return np.array(np.broadcast_to(x, (num_layers, num_heads)))
    except ValueError:
        raise StackError(
            f"{name}: shape {x.shape} does not broadcast to (T, H) = ({num_layers}, {num_heads})"
        ) from None
