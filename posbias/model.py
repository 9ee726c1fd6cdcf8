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

Examples
--------
>>> m = build_model(layers=4, heads=8, tokens=32, schedule="constant:0.5")
>>> m.stack.num_layers, m.stack.num_heads, m.num_tokens
(4, 8, 32)
>>> s = m.summary()
>>> bool(s.argmin is not None and abs(m.profile().probabilities.sum() - 1) < 1e-12)
True
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from posbias.errors import UserError


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

        return nx.profile(self.stack, self.num_tokens, engine=engine,
                          dtype=np.float64 if precision == "float64" else np.float32)

    def run(self, engine="auto", *, precision="float64", full_matrix=False, diagonal=False, show_progress=False):
        """Everything ``posbias rollout`` reports: a ``RunResult`` (renormalised profile, Summary, extras)."""
        from posbias.run import run_stack

        result = run_stack(self.stack, self.num_tokens, engine=engine, precision=precision,
                           full_matrix=full_matrix, diagonal=diagonal, show_progress=show_progress)
        provenance = {"source": self.source}
        if self.schedule:  # a long custom list is in the source file already
            provenance["schedule"] = self.schedule if len(self.schedule) <= 64 else self.schedule.split(":")[0]
        if self.overrides:
            provenance["overrides"] = list(self.overrides)
        from dataclasses import replace

        return replace(result, summary=result.summary.with_provenance(**provenance))

    def summary(self, engine="auto"):
        """The ``Summary`` of the profile (extremes from log p where entries underflow)."""
        return self.run(engine).summary

    def diagonal(self) -> np.ndarray:
        """(N,) P_ii by the identity prod_t (1 - lambda_t (1 - A^(t)_ii)) (C5(a)); causal masks only."""
        from posbias import numerics as nx

        if not self.stack.causal(self.num_tokens):
            raise ModelError(f"diagonal: the identity needs lower-triangular kernels; mask {self.stack.mask.name} "
                             "reads later tokens (use matrix())")
        return nx.diagonal_product(nx.kernel_diagonals(self.stack, self.num_tokens), self.stack.lambdas)

    def matrix(self) -> np.ndarray:
        """(N, N) P = R^(T-1) ... R^(0) by dense products (N <= 8192)."""
        from posbias import numerics as nx

        reason = nx.Dense().supports(self.stack, self.num_tokens)
        if reason:
            raise ModelError(f"matrix: {reason}")
        return np.asarray(nx.dense_rollout(self.stack, self.num_tokens)[0])


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

    reason = budget.check(f"a stack of T = {num_layers} layers and H = {num_heads} heads",
                          budget.stack_bytes(num_layers, num_heads))
    if reason:
        raise ModelError(reason)


def lambdas_of(schedule, num_layers: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """Evaluate a schedule over T layers, clipped to [0, 1], with a warning naming clipped layers."""
    from posbias.numerics import schedules
    from posbias.run import clip_warning

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
    return np.asarray(slopes, dtype=np.float64)


def content_of(content_diagonal, num_layers: int, num_heads: int) -> np.ndarray:
    """Content diagonal d as (T, H): a number (pooled), T numbers (per layer) or (T, H) (per head)."""
    d = np.asarray(content_diagonal, dtype=np.float64)
    if d.ndim == 0:
        return np.full((num_layers, num_heads), float(d))
    if d.ndim == 1:
        if d.shape[0] != num_layers:
            raise ModelError(f"content_diagonal: {d.shape[0]} values, expected one number, "
                             f"num_layers = {num_layers} values (per layer) or a (T, H) array")
        return np.repeat(d[:, None], num_heads, axis=1)
    if d.shape not in ((num_layers, num_heads), (1, num_heads), (num_layers, 1)):
        raise ModelError(f"content_diagonal: shape {d.shape}, expected (T, H) = ({num_layers}, {num_heads})")
    return np.array(np.broadcast_to(d, (num_layers, num_heads)))


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
) -> Model:
    """A model from numbers: T = ``layers``, H = ``heads``, N = ``tokens``.

    schedule: a spec string or a schedule object (``posbias.PowerDecay(0.6, 0.5)``);
    slopes: ``"paper"`` (m_h = 2^(-8h/H)), ``"hf"`` (the transformers construction) or
    explicit (H,) / (T, H) values; content_diagonal: d as a number, T numbers or (T, H);
    mask: ``"causal"``, ``"full"``, ``"window:W"``, ``"prefix:K"`` or a mask object.
    """
    from posbias.numerics.stack import AlibiStack, StackError

    for name, value in (("layers", layers), ("heads", heads), ("tokens", tokens)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ModelError(f"{name}: expected a positive integer, got {value!r}")
    check_size(layers, heads)
    sched = parse_schedule(schedule)
    lambdas, warnings = lambdas_of(sched, layers)
    try:
        stack = AlibiStack.build(lambdas, slopes_of(slopes, heads), content_of(content_diagonal, layers, heads),
                                 head_weights, temperature, parse_mask(mask))
    except StackError as exc:
        raise ModelError(str(exc)) from None
    if stack.num_heads != heads:
        raise ModelError(f"slopes: {stack.num_heads} heads given, expected heads = {heads}")
    return Model(stack, int(tokens), "flags", warnings, schedule=getattr(sched, "spec", None))
