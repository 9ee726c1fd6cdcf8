"""Compact stacks whose layers repeat: a block of p layers applied q times, plus r layers on top.

THEORY.md, Notation: P = R^(T-1) ... R^(0). A ``PeriodicStack`` stores the layers of one
period (``block``: an ``AlibiStack``, or a ``BiasStack`` of relative biases (C7), of p layers),
the number of repeats q and the r
remainder layers on top (``top``, the layers t = q p, ..., T - 1, which act first on the
row vector e_{N-1}^T), so T = q p + r and

    P = R_top^(r-1) ... R_top^(0) · B^q,   B = R^(p-1) ... R^(0)  (the block's own product).

When the period does not divide T the top layers are the block's first r layers (layer t
has the parameters of block layer t mod p). A time-invariant stack is a block of one layer.
Nothing here allocates T-long arrays: the aggregates the summary reports are computed
from the distinct layers and their counts (q for each block layer, 1 for each top layer):

* sum_t lambda_t,  sum_t lambda_t delta_t (C5(a)),
* the last-token atom prod_t (1 - lambda_t (1 - A^(t)[N-1, N-1])) (C2(c)) in log space,
* the diagonal P_ii = prod_t (1 - lambda_t (1 - A^(t)[i, i])) (C5(a)) in log space.

Both layer types are handled through one table of their per-layer fields
(``PER_LAYER``): slicing the top off the block and ``expand`` concatenate those fields,
everything else (the distinct biases of a ``BiasStack``, tau, the mask) is shared.

``detect`` turns an ``AlibiStack`` into this form (its minimal period, found by the prefix
function over the layers' parameter rows); ``expand`` goes back (for tests and for the
per-layer scan where that is cheaper).

Examples
--------
>>> block = AlibiStack.build([0.5], [0.5, 0.125])
>>> s = PeriodicStack.build(block, 10**9)
>>> s.num_layers, s.period, s.repeats, s.sum_lambda()
(1000000000, 1, 1000000000, 500000000.0)
>>> d = detect(AlibiStack.build([0.5, 0.2, 0.5, 0.2, 0.5], [0.5]))
>>> d.period, d.repeats, d.top.num_layers
(2, 2, 1)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.stack import AlibiStack, StackError

EXPAND_MAX_LAYERS = 10**7  # expand() refuses beyond this many layers (T-long arrays)
PER_LAYER = {
    AlibiStack: ("lambdas", "slopes", "diagonal", "head_weights"),
    BiasStack: ("lambdas", "bias_index", "diagonal", "sink", "head_weights"),
}
"""The fields of each layer type that hold one row per layer (the rest is shared by all layers)."""


@dataclass(frozen=True)
class PeriodicStack:
    """``block`` (p layers) repeated ``repeats`` = q >= 1 times, then ``top`` (r < p layers, or None).

    Layer t < q p has the parameters of block layer t mod p; layer q p + s is top layer s.
    ``block`` and ``top`` are of one type (``AlibiStack`` or ``BiasStack``) and share the mask and
    the number of heads (``build`` slices the top from the block).
    """

    block: AlibiStack | BiasStack
    repeats: int
    top: AlibiStack | BiasStack | None = None

    @staticmethod
    def build(block: AlibiStack | BiasStack, num_layers: int) -> PeriodicStack:
        """The stack of ``num_layers`` = T layers whose layer t is block layer t mod p."""
        if type(block) not in PER_LAYER:
            raise StackError(f"block: expected an AlibiStack or a BiasStack, got {type(block).__name__}")
        t, p = int(num_layers), block.num_layers
        if t < 1:
            raise StackError(f"num_layers: expected a positive integer, got {num_layers!r}")
        if t < p:
            raise StackError(f"num_layers: T = {t} is shorter than one period of {p} layers")
        q, r = divmod(t, p)
        return PeriodicStack(block, q, layer_range(block, 0, r) if r else None)

    @property
    def period(self) -> int:
        return self.block.num_layers

    @property
    def num_layers(self) -> int:
        return self.repeats * self.period + (self.top.num_layers if self.top is not None else 0)

    @property
    def num_heads(self) -> int:
        return self.block.num_heads

    @property
    def mask(self):
        return self.block.mask

    @property
    def mask_name(self) -> str:
        return self.block.mask.name

    def causal(self, num_tokens: int) -> bool:
        return self.block.causal(num_tokens)

    @property
    def is_bias(self) -> bool:
        """True when the layers carry relative biases (``BiasStack``, C7)."""
        return isinstance(self.block, BiasStack)

    def as_alibi(self, num_tokens: int) -> PeriodicStack | None:
        """A relative-bias periodic stack whose every layer is ALiBi at this N (``BiasStack.as_alibi``)
        as the ALiBi periodic stack; None otherwise (or for an ALiBi stack, which is one already)."""
        if not self.is_bias:
            return None
        parts = [s.as_alibi(num_tokens) for s in self.distinct]
        if any(a is None for a in parts):
            return None
        return PeriodicStack(parts[0], self.repeats, parts[1] if self.top is not None else None)

    @property
    def distinct(self) -> list:
        """The stacks whose layers are the distinct layers, in the order of ``counts``: block, then top."""
        return [self.block] + ([self.top] if self.top is not None else [])

    @property
    def counts(self) -> np.ndarray:
        """(p + r,) how many layers of the full stack each distinct layer stands for (q, ..., q, 1, ..., 1)."""
        r = self.top.num_layers if self.top is not None else 0
        return np.concatenate([np.full(self.period, float(self.repeats)), np.ones(r)])

    @property
    def distinct_lambdas(self) -> np.ndarray:
        """(p + r,) lambda of each distinct layer (block, then top)."""
        return np.concatenate([s.lambdas for s in self.distinct])

    def sum_lambda(self) -> float:
        """sum_t lambda_t over all T layers."""
        return float(np.dot(self.counts, self.distinct_lambdas))

    def sum_lambda_delta(self, min_self_weight: np.ndarray) -> float:
        """sum_t lambda_t delta_t, delta_t = 1 - min_i A^(t)[i, i] (C5(a)); ``min_self_weight`` per distinct layer."""
        return float(np.dot(self.counts, self.distinct_lambdas * (1.0 - np.asarray(min_self_weight))))

    def log_last_token_atom(self, last_self_weight: np.ndarray) -> float:
        """log prod_t (1 - lambda_t (1 - A^(t)[N-1, N-1])) (C2(c)), from the distinct layers' self-weights."""
        with np.errstate(divide="ignore"):
            return float(np.dot(self.counts, np.log1p(-self.distinct_lambdas * (1.0 - np.asarray(last_self_weight)))))

    def last_token_atom(self, last_self_weight: np.ndarray) -> float:
        """C2(c): p(N-1) for causal stacks (0.0 where it is below the float64 range; its log is finite)."""
        return float(np.exp(self.log_last_token_atom(last_self_weight)))

    def log_diagonal(self, self_weights: np.ndarray) -> np.ndarray:
        """(N,) log P_ii = sum_t log(1 - lambda_t (1 - A^(t)[i, i])) (C5(a)); ``self_weights`` (p + r, N)."""
        terms = np.log1p(-self.distinct_lambdas[:, None] * (1.0 - np.asarray(self_weights)))
        return self.counts @ terms

    def expand(self, max_layers: int = EXPAND_MAX_LAYERS):
        """The same stack as an ordinary AlibiStack or BiasStack with (T, H) arrays (refused beyond
        ``max_layers``)."""
        if self.num_layers > max_layers:
            raise StackError(f"expand: T = {self.num_layers} layers is more than {max_layers} (T-long arrays)")
        parts = [self.block] * self.repeats + ([self.top] if self.top is not None else [])
        arrays = {f: np.concatenate([getattr(s, f) for s in parts]) for f in PER_LAYER[type(self.block)]}
        return dataclasses.replace(self.block, **arrays)

    def compress(self, per_layer: np.ndarray) -> np.ndarray:
        """A (T, ...) per-layer array of the expanded stack -> its (p + r, ...) distinct layers."""
        per_layer = np.asarray(per_layer)
        r = self.top.num_layers if self.top is not None else 0
        return np.concatenate([per_layer[: self.period], per_layer[per_layer.shape[0] - r :]])

    def lambda_label(self, spec: str | None = None) -> str:
        """One line for a figure subtitle: the schedule, its period and sum_t lambda_t."""
        lam = self.block.lambdas
        kind = f"λ_t = {lam[0]:.3g} (constant)" if np.all(lam == lam[0]) else f"λ_t periodic, period {self.period}"
        return ", ".join(([spec] if spec else []) + [kind, f"Σλ_t = {self.sum_lambda():.4g}"])


def layer_range(stack, start: int, stop: int):
    """Layers start..stop-1 of an AlibiStack or BiasStack (its validated per-layer arrays, sliced)."""
    return dataclasses.replace(stack, **{f: getattr(stack, f)[start:stop] for f in PER_LAYER[type(stack)]})


def minimal_period(rows: np.ndarray) -> int:
    """The least p >= 1 with rows[t] == rows[t - p] for all t >= p (prefix function, O(T))."""
    rows = np.ascontiguousarray(rows)
    _, ids = np.unique(rows.reshape(rows.shape[0], -1), axis=0, return_inverse=True)
    ids = ids.reshape(-1).tolist()
    pi = [0] * len(ids)
    k = 0
    for i in range(1, len(ids)):
        while k and ids[i] != ids[k]:
            k = pi[k - 1]
        if ids[i] == ids[k]:
            k += 1
        pi[i] = k
    return len(ids) - pi[-1]


def detect(stack: AlibiStack) -> PeriodicStack:
    """The compact form of ``stack``: its minimal period of layers (exact equality of lambda,
    slopes, diagonal and head weights), repeated, with the remainder on top. A stack
    without repetition comes back as one block repeated once."""
    rows = np.concatenate([stack.lambdas[:, None], stack.slopes, stack.diagonal, stack.head_weights], axis=1)
    p = minimal_period(rows)
    return PeriodicStack.build(layer_range(stack, 0, p), stack.num_layers)
