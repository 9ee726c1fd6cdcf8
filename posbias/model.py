"""A model: an ALiBi + content stack and the context length it is read at.

``build_model`` makes one from a few numbers (what ``posbias rollout --layers ...``
does); ``posbias.config.load`` makes the same object from a reference YAML file.
Its methods are the questions researchers ask of it (THEORY.md labels):

* ``profile()``: p = e_{N-1}^T R^(T-1) ... R^(0), with the ``auto`` engine choice
  and its extended-range fallback (Notation; C1-C6 are statements about p);
* ``summary()``: p(0), p(N-1), the minimum, U-shape (C6), entropy, Σλ, Σλδ (C5(a)),
  the last-token atom (C2(c));
* ``diagonal()``: P_ii = prod_t (1 - lambda_t (1 - A^(t)_ii)) (C5(a), causal masks);
* ``matrix()``: the full P by dense products (N <= 8192).

Deep stacks whose layers repeat are kept compact (``posbias.numerics.periodic``): a
constant schedule at T >= ``COMPACT_FROM_LAYERS`` (with slopes, content and head weights
the same in every layer), or ``periodic=True`` with ``custom:L0,...,L(p-1)`` giving one
period, builds a ``PeriodicStack`` (the block of p layers, how often it repeats, the
remainder on top) without any (T, H) array; its profile comes from the power engine
(O(N^3 log T), THEORY.md Notation), so T = 10^9 is an ordinary request.

Examples
--------
>>> m = build_model(layers=4, heads=8, tokens=32, schedule="constant:0.5")
>>> m.stack.num_layers, m.stack.num_heads, m.num_tokens
(4, 8, 32)
>>> s = m.summary()
>>> bool(s.argmin is not None and abs(m.profile().probabilities.sum() - 1) < 1e-12)
True
>>> deep = build_model(layers=10**9, heads=8, tokens=16, schedule="constant:0.5")
>>> type(deep.stack).__name__, deep.stack.num_layers, deep.stack.period
('PeriodicStack', 1000000000, 1)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from posbias.errors import UserError

COMPACT_FROM_LAYERS = 100_000  # constant schedules from this depth build a compact PeriodicStack


class ModelError(UserError):
    """A model parameter is out of range; one line naming it."""


@dataclass(frozen=True)
class Model:
    """stack: the AlibiStack; num_tokens: N; source: the config path or "flags";
    warnings: what the user should be told (e.g. clipped lambdas); overrides: the
    config fields replaced by flags."""

    stack: object
    num_tokens: int
    source: str = "flags"
    warnings: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    save_dir: str | None = None
    schedule: str | None = field(default=None)

    def profile(self, engine="auto", *, precision: str = "float64"):
        """The ``Profile`` (raw engine output, with the engine and path that ran)."""
        from posbias import numerics as nx

        return nx.profile(
            self.stack, self.num_tokens, engine=engine, dtype=np.float64 if precision == "float64" else np.float32
        )

    def run(self, engine="auto", *, precision="float64", full_matrix=False, diagonal=False, show_progress=False):
        """Everything ``posbias rollout`` reports: a ``RunResult`` (renormalised profile, Summary, extras)."""
        from dataclasses import replace

        from posbias.rollout import run_stack

        compact = _is_compact(self.stack)
        if compact and full_matrix:
            raise ModelError(
                f"--full: the dense P of a compact periodic stack (T = {self.stack.num_layers}) "
                "is not formed; its profile comes from the power engine"
            )
        if compact and diagonal and not self.stack.causal(self.num_tokens):
            raise ModelError(
                f"--diagonal: the identity P_ii = prod_t (1 - lambda_t (1 - A_ii)) needs "
                f"lower-triangular kernels; mask {self.stack.mask_name} reads later tokens"
            )
        result = run_stack(
            self.stack,
            self.num_tokens,
            engine=engine,
            precision=precision,
            full_matrix=full_matrix,
            diagonal=diagonal,
            show_progress=show_progress,
        )
        provenance = {"source": self.source}
        if self.schedule:  # a long custom list is in the source file already
            provenance["schedule"] = self.schedule if len(self.schedule) <= 64 else self.schedule.split(":")[0]
        if compact:
            provenance["period"] = self.stack.period
        if self.overrides:
            provenance["overrides"] = list(self.overrides)
        return replace(result, summary=result.summary.with_provenance(**provenance))

    def summary(self, engine="auto"):
        """The ``Summary`` of the profile (extremes from log p where entries underflow)."""
        return self.run(engine).summary

    def diagonal(self) -> np.ndarray:
        """(N,) P_ii by the identity prod_t (1 - lambda_t (1 - A^(t)_ii)) (C5(a)); causal masks only."""
        if not self.stack.causal(self.num_tokens):
            raise ModelError(
                f"diagonal: the identity needs lower-triangular kernels; mask {self.stack.mask.name} "
                "reads later tokens (use matrix())"
            )
        return np.exp(self.log_diagonal())

    def log_diagonal(self) -> np.ndarray:
        """(N,) log P_ii (C5(a)), finite far below the float64 range (compact periodic stacks too)."""
        from posbias.diagonal import log_diagonal

        return log_diagonal(self.stack, self.num_tokens)

    def matrix(self) -> np.ndarray:
        """(N, N) P = R^(T-1) ... R^(0) by dense products (N <= 8192)."""
        from posbias import numerics as nx

        if _is_compact(self.stack):
            raise ModelError(
                f"matrix: the dense P of a compact periodic stack (T = {self.stack.num_layers}) is not formed"
            )
        reason = nx.Dense().supports(self.stack, self.num_tokens)
        if reason:
            raise ModelError(f"matrix: {reason}")
        return np.asarray(nx.dense_rollout(self.stack, self.num_tokens)[0])


def _is_compact(stack) -> bool:
    from posbias.numerics.periodic import PeriodicStack

    return isinstance(stack, PeriodicStack)


def _from_spec(what: str, spec, parse):
    """``parse(spec)`` for a spec string (its ValueError becomes one ModelError line), else spec as is."""
    if not isinstance(spec, str):
        return spec
    try:
        return parse(spec)
    except ValueError as exc:
        raise ModelError(f"{what}: {exc}") from None


def parse_schedule(spec):
    """A schedule object from a spec string (``constant:L``, ``power_decay:L0,BETA``,
    ``geometric:L0,Q``, ``custom:L0,L1,...``) or a schedule object as is."""
    from posbias.numerics import schedules

    return _from_spec("schedule", spec, schedules.parse)


def parse_mask(spec):
    """A mask from ``causal``, ``full``, ``window:W``, ``prefix:K``, or a mask object as is."""
    from posbias.numerics import masks

    return _from_spec("mask", spec, masks.parse)


def check_size(num_layers: int, num_heads: int) -> None:
    """Refuse, before allocating, a stack whose parameter arrays alone exceed the memory limit."""
    from posbias.numerics import budget

    reason = budget.check(
        f"a stack of T = {num_layers} layers and H = {num_heads} heads", budget.stack_bytes(num_layers, num_heads)
    )
    if reason:
        raise ModelError(reason)


def lambdas_of(schedule, num_layers: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """Evaluate a schedule over T layers, clipped to [0, 1], with a warning naming clipped layers."""
    from posbias.numerics import schedules
    from posbias.numerics.schedules import clip_warning

    try:
        lambdas, clipped = schedules.evaluate(schedule, num_layers)
    except ValueError as exc:
        raise ModelError(f"schedule: {exc}") from None
    return lambdas, ((clip_warning(clipped),) if clipped else ())


def slopes_of(slopes, num_heads: int) -> np.ndarray:
    """``"paper"`` / ``"hf"`` (generated from H), or explicit slopes: (H,) or (T, H)."""
    from posbias.numerics.slopes import CONVENTIONS, alibi_slopes

    if isinstance(slopes, str):
        if slopes not in CONVENTIONS:
            raise ModelError(f"slopes: expected one of {', '.join(CONVENTIONS)} or explicit values, got {slopes!r}")
        return alibi_slopes(num_heads, slopes)
    values = np.asarray(slopes, dtype=np.float64)
    if values.ndim not in (1, 2) or values.shape[-1] != num_heads:
        flat = values.ravel()
        shown = "[" + ", ".join(f"{v:g}" for v in flat[:8]) + (", ..." if flat.size > 8 else "") + "]"
        raise ModelError(
            f"slopes: {values.size} explicit value{'s' * (values.size != 1)} {shown} (shape "
            f"{values.shape}) for heads = {num_heads}: expected one slope per head, {num_heads} "
            f"values, or a (T, {num_heads}) array"
        )
    return values


def content_of(content_diagonal, num_layers: int, num_heads: int) -> np.ndarray:
    """Content diagonal d as (T, H): a number (pooled), T numbers (per layer) or (T, H) (per head)."""
    d = np.asarray(content_diagonal, dtype=np.float64)
    if d.ndim == 0:
        return np.full((num_layers, num_heads), float(d))
    if d.ndim == 1:
        if d.shape[0] != num_layers:
            raise ModelError(
                f"content_diagonal: {d.shape[0]} values, expected one number, "
                f"num_layers = {num_layers} values (per layer) or a (T, H) array"
            )
        return np.repeat(d[:, None], num_heads, axis=1)
    if d.shape not in ((num_layers, num_heads), (1, num_heads), (num_layers, 1)):
        raise ModelError(f"content_diagonal: shape {d.shape}, expected (T, H) = ({num_layers}, {num_heads})")
    return np.array(np.broadcast_to(d, (num_layers, num_heads)))


def period_of(
    schedule, num_layers: int, periodic: bool, slopes, content_diagonal, head_weights, sink=0.0
) -> int | None:
    """The number of layers p of the block a compact stack repeats, or None for an ordinary stack.

    ``periodic``: the custom schedule lists one period (its length is p; per-layer content then
    has p values too). Otherwise a constant schedule at T >= ``COMPACT_FROM_LAYERS`` whose slopes,
    content, head weights and sink are the same in every layer is time-invariant (p = 1)."""
    from posbias.numerics import schedules

    if periodic:
        if isinstance(schedule, schedules.Constant):
            return 1
        if not isinstance(schedule, schedules.Custom):
            raise ModelError(
                f"periodic: expected a custom:L0,L1,... schedule listing one period of lambdas, "
                f"got {getattr(schedule, 'spec', schedule)}"
            )
        p = len(schedule.lambdas)
        if p > num_layers:
            raise ModelError(f"periodic: one period of {p} layers is longer than layers = {num_layers}")
        return p
    if not isinstance(schedule, schedules.Constant) or num_layers < COMPACT_FROM_LAYERS:
        return None
    same = (
        isinstance(slopes, str) or np.ndim(slopes) <= 1,
        np.ndim(content_diagonal) == 0,
        head_weights is None or np.ndim(head_weights) <= 1,
        np.ndim(sink) <= 1,
    )
    return 1 if all(same) else None


def bias_stack_of(bias, lambdas, heads: int, diagonal, sink, head_weights, temperature, mask):
    """A ``BiasStack`` of ``heads`` heads from a bias spec / ``Bias`` / list (one for all heads, or one per head)."""
    from posbias.bias_spec import parse_biases
    from posbias.numerics.bias import Bias
    from posbias.numerics.bias_stack import BiasStack
    from posbias.numerics.stack import StackError

    try:
        biases = (
            parse_biases(bias, "bias") if isinstance(bias, str) else ([bias] if isinstance(bias, Bias) else list(bias))
        )
    except UserError as exc:
        raise ModelError(str(exc)) from None
    if len(biases) == 1:
        biases = biases * heads
    if len(biases) != heads:
        raise ModelError(f"bias: {len(biases)} head biases given, expected one or heads = {heads}")
    try:
        return BiasStack.build(lambdas, biases, diagonal, sink, head_weights, temperature, mask)
    except StackError as exc:
        raise ModelError(str(exc)) from None


def build_model(
    *,
    layers: int,
    heads: int,
    tokens: int,
    schedule="constant:0.5",
    slopes="paper",
    content_diagonal=0.0,
    head_weights=None,
    temperature: float = 1.0,
    mask="causal",
    periodic: bool = False,
    bias=None,
    sink=0.0,
) -> Model:
    """A model from numbers: T = ``layers``, H = ``heads``, N = ``tokens``.

    schedule: a spec string or a schedule object (``posbias.PowerDecay(0.6, 0.5)``);
    slopes: ``"paper"`` (m_h = 2^(-8h/H)), ``"hf"`` (the transformers construction) or
    explicit (H,) / (T, H) values; content_diagonal: d as a number, T numbers or (T, H);
    mask: ``"causal"``, ``"full"``, ``"window:W"``, ``"prefix:K"`` or a mask object.
    periodic: the ``custom:`` schedule is one period of p layers, repeated up to T
    (per-layer slopes, content and head weights then give p layers); the stack is a
    compact ``PeriodicStack``, as is a constant schedule at T >= ``COMPACT_FROM_LAYERS``.
    bias: instead of ALiBi slopes, a relative positional bias per head (THEORY.md C7): a spec
    (``posbias.bias_spec``: ``kerple-log:1,0.5``, ``t5:...``, ``expr:...``; one for every head, or
    H specs separated by ``/``), a ``Bias`` or a list of H of them; the stack is then a
    ``BiasStack`` (slopes are not used; ``sink``: the first-token term s, a number, (H,) or (T, H),
    with ``periodic`` (p, H) for the p layers of one period). A periodic or deep constant bias model
    is a compact ``PeriodicStack`` of ``BiasStack`` layers, computed by the power engine as ALiBi's.
    """
    from posbias.numerics.periodic import PeriodicStack
    from posbias.numerics.stack import AlibiStack, StackError

    for name, value in (("layers", layers), ("heads", heads), ("tokens", tokens)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ModelError(f"{name}: expected a positive integer, got {value!r}")
    layers = int(layers)
    sched = parse_schedule(schedule)
    period = period_of(
        sched, layers, bool(periodic), slopes, content_diagonal, head_weights, sink if bias is not None else 0.0
    )
    built = layers if period is None else period
    if period is None:
        check_size(layers, heads)
    lambdas, warnings = lambdas_of(sched, built)
    if bias is not None:
        if np.ndim(sink) == 2 and np.shape(sink)[0] != built:
            what = f"the {built} layers of one period" if period is not None else f"layers = {built}"
            raise ModelError(
                f"sink: {np.shape(sink)[0]} rows of per-layer values, expected one number, one per "
                f"head or one row per layer ({what})"
            )
        stack = bias_stack_of(
            bias,
            lambdas,
            heads,
            content_of(content_diagonal, built, heads),
            sink,
            head_weights,
            temperature,
            parse_mask(mask),
        )
    else:
        try:
            stack = AlibiStack.build(
                lambdas,
                slopes_of(slopes, heads),
                content_of(content_diagonal, built, heads),
                head_weights,
                temperature,
                parse_mask(mask),
            )
        except StackError as exc:
            raise ModelError(str(exc)) from None
        if stack.num_heads != heads:
            raise ModelError(f"slopes: {stack.num_heads} heads given, expected heads = {heads}")
    if period is not None:
        stack = PeriodicStack.build(stack, layers)
    return Model(stack, int(tokens), "flags", warnings, schedule=getattr(sched, "spec", None))
