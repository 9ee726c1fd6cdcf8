"""A stack whose heads carry any relative positional bias (THEORY.md, C7): the input of the bias engines.

Head h of layer t has logits, over the positions its mask allows,

    ( b_th(i - j) + d_th [i = j] + s_th [j = 0] ) / tau,

b_th a ``posbias.numerics.bias.Bias`` (past side for j <= i, future side for j > i), d the
content diagonal, s the first-token ("sink") term; the layer kernel is the head average
A^(t) = sum_h w_th softmax_h. The stack stores the distinct biases once (``biases``) and a
(T, H) index into them, so its size does not depend on N.

``BiasStack.as_alibi()`` recognises an ALiBi stack (every bias -m |i - j| with m >= 0, every
sink 0; a constant b(0) offset cancels in each row, C4(a)) and returns the ``AlibiStack``
that the structured O(T H N) engine computes.

Examples
--------
>>> from posbias.numerics.bias import Bias, Alibi, KerpleLog
>>> s = BiasStack.build([0.5, 0.5], [Bias(KerpleLog(1.0, 2.0)), Bias(Alibi(0.25))], sink=1.0)
>>> s.num_layers, s.num_heads, s.bias_index.tolist(), s.as_alibi() is None
(2, 2, [[0, 1], [0, 1]], True)
>>> BiasStack.build([1.0], Bias(Alibi(0.5)), diagonal=2.0).as_alibi().slopes.tolist()
[[0.5]]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from posbias.numerics.arrays import PerHead, PerLayer
from posbias.numerics.bias import Bias
from posbias.numerics.masks import Causal, Mask, is_lower_triangular
from posbias.numerics.stack import AlibiStack, StackError, finite_array, per_layer_head

LOGIT_LIMIT = 1e300  # |logit / tau| above this is treated as overflow (differences would overflow)


@dataclass(frozen=True)
class BiasStack:
    """T layers of H heads with relative biases.

    lambdas:      (T,)   mixing coefficients in [0, 1]
    biases:       the distinct ``Bias`` objects of the stack
    bias_index:   (T, H) int64, head h of layer t uses ``biases[bias_index[t, h]]``
    diagonal:     (T, H) content diagonal d
    sink:         (T, H) first-token term s (logit of j = 0 raised by s; 0: no sink)
    head_weights: (T, H) non-negative, each row summing to 1
    temperature:  tau > 0 (every logit is divided by it)
    mask:         which positions a token may read
    """

    lambdas: PerLayer
    biases: tuple[Bias, ...]
    bias_index: PerHead  # int64
    diagonal: PerHead
    sink: PerHead
    head_weights: PerHead
    temperature: float = 1.0
    mask: Mask = field(default_factory=Causal)

    @property
    def num_layers(self) -> int:
        return int(np.shape(self.lambdas)[0])

    @property
    def num_heads(self) -> int:
        return int(np.shape(self.bias_index)[1])

    @property
    def mask_name(self) -> str:
        return self.mask.name

    def causal(self, num_tokens: int) -> bool:
        """True when every kernel of the stack is lower triangular at this N."""
        return is_lower_triangular(self.mask, num_tokens)

    @staticmethod
    def build(lambdas, biases, diagonal=0.0, sink=0.0, head_weights=None, temperature=1.0, mask=None) -> BiasStack:
        """Validate and broadcast to (T, H).

        ``biases``: one ``Bias`` (every head of every layer), a sequence of H (per head, the same
        in every layer) or T sequences of H. ``diagonal``, ``sink``, ``head_weights``: scalars,
        (H,) or (T, H) arrays, as for ``AlibiStack.build``. Refused (``StackError``, one line
        naming what and where): lambda outside [0, 1], no layers, no heads, anything but a
        ``Bias`` as a bias, non-finite numbers, negative head weights or a layer without a
        positive one, tau <= 0 or d / tau, s / tau overflowing. The bias values themselves are
        checked when an engine evaluates them at its N (``Bias.values``, ``BiasStack.tables``).
        """
        base = AlibiStack.build(lambdas, 0.0, head_weights=None, temperature=temperature, mask=mask)
        t = base.num_layers
        rows = _bias_rows(biases, t)
        h = len(rows[0])
        distinct: dict[Bias, int] = {}
        index = np.array([[distinct.setdefault(b, len(distinct)) for b in row] for row in rows], dtype=np.int64)
        diagonal = per_layer_head("diagonal", finite_array("diagonal", np.atleast_1d(diagonal)), t, h)
        sink = per_layer_head("sink", finite_array("sink", np.atleast_1d(sink)), t, h)
        weights = AlibiStack.build(base.lambdas, np.zeros((t, h)), head_weights=head_weights).head_weights
        tau = base.temperature
        with np.errstate(over="ignore"):
            for name, values in (("diagonal", diagonal), ("sink", sink)):
                bad = ~(np.abs(values / tau) <= LOGIT_LIMIT)
                if bad.any():
                    t0, h0 = (int(k) for k in np.argwhere(bad)[0])
                    raise StackError(
                        f"{name}: layer {t0} head {h0}: {float(values[t0, h0]):g} / temperature "
                        f"{float(tau):g} overflows the logits (expected |{name} / temperature| <= {LOGIT_LIMIT:g})"
                    )
        return BiasStack(base.lambdas, tuple(distinct), index, diagonal, sink, weights, tau, base.mask)

    def tables(self, num_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """(past, future) logit tables (U, N) of the distinct biases divided by tau: row u holds
        b_u(g) / tau at g = 0 .. N-1 (-inf where a window gives no weight). Refused: values that
        are not finite (``Bias.values``) or overflow after the temperature."""
        past, future = [], []
        for bias in self.biases:
            p, f = bias.values(num_tokens)
            past.append(p)
            future.append(f)
        out = []
        for side, values in (("past", np.stack(past)), ("future", np.stack(future))):
            with np.errstate(over="ignore"):
                table = values / self.temperature
            bad = np.isfinite(values) & ~(np.abs(table) <= LOGIT_LIMIT)
            if bad.any():
                u, g = (int(k) for k in np.argwhere(bad)[0])
                raise StackError(
                    f"temperature: bias {self.biases[u].spec!r} {side} b({g}) / tau = "
                    f"{float(table[u, g]):g} overflows (tau = {float(self.temperature):g}; expected "
                    f"|b / tau| <= {LOGIT_LIMIT:g})"
                )
            out.append(table)
        return out[0], out[1]

    def as_alibi(self, num_tokens: int | None = None) -> AlibiStack | None:
        """The same stack as an ``AlibiStack`` when every head is ALiBi (b = -m |i - j|, m >= 0) and
        every sink is 0, else None. With ``num_tokens``, a bias that is linear on the distances
        0 .. num_tokens-1 counts as ALiBi too (``Bias.alibi_slope_at``: Kerple-power with r2 = 1,
        constants, linear tables and expressions); without it only ``Alibi`` sides do."""
        if num_tokens is None:
            slopes = [b.alibi_slope for b in self.biases]
        else:
            slopes = [b.alibi_slope_at(num_tokens) for b in self.biases]
        if any(m is None for m in slopes) or np.any(self.sink != 0):
            return None
        return AlibiStack.build(
            self.lambdas,
            np.asarray(slopes)[self.bias_index],
            self.diagonal,
            self.head_weights,
            self.temperature,
            self.mask,
        )


def _bias_rows(biases, num_layers: int) -> list[list[Bias]]:
    """``biases`` as T rows of H ``Bias`` objects (see ``BiasStack.build``)."""
    if isinstance(biases, Bias):
        rows = [[biases]]
    else:
        try:
            items = list(biases)
        except TypeError:
            raise StackError(
                f"biases: expected a Bias, H of them or T rows of H, got {type(biases).__name__}"
            ) from None
        if not items:
            raise StackError("biases: expected at least one head, got none")
        if any(isinstance(b, Bias) for b in items):
            rows = [items]  # one row of heads (the same in every layer)
        else:
            rows = []
            for t, row in enumerate(items):
                try:
                    rows.append(list(row))
                except TypeError:
                    raise StackError(f"biases: layer {t} is a {type(row).__name__}, expected H Bias objects") from None
    for t, row in enumerate(rows):
        if not row:
            raise StackError(f"biases: layer {t} has no heads, expected at least one")
        for h, b in enumerate(row):
            if not isinstance(b, Bias):
                raise StackError(f"biases: layer {t} head {h} is a {type(b).__name__}, expected a Bias")
    if len({len(r) for r in rows}) != 1:
        raise StackError(f"biases: layers have different head counts {sorted({len(r) for r in rows})}")
    if len(rows) == 1:
        rows = rows * num_layers
    if len(rows) != num_layers:
        raise StackError(f"biases: {len(rows)} rows of heads for {num_layers} layers, expected 1 or {num_layers}")
    return rows
