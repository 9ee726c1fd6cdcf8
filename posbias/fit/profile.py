"""Fitting the structural model's free parameters to a measured profile (``posbias fit``).

The architecture fixes the mask and the ALiBi slopes, and measurement gives the
mixing coefficients lambda_t; the theory leaves free the content diagonal d
(pooled, or one per layer), a content scale c (d = c d_measured), the softmax
temperature tau and, optionally, a global lambda scale s (lambda_t' = min(1, s lambda_t)).
They are fitted by minimising

    W1(p_theta, q) / (N - 1) = sum_k |F_p(k) - F_q(k)| / (N - 1)

(the L1 distance between the cumulative profiles) with optax's Adam under a cosine
learning-rate decay, gradients by ``jax.grad`` through the differentiable dense
profile route (numerics/differentiable.py, O(T H N^2) per step; the native C kernel has
no gradient). Positive parameters are fitted in log space (tau = e^theta, s = e^theta).

A held-out check evaluates the fitted parameters on a second measured profile (another
N, or another data split): a fit that only memorises shows up as a held-out loss no
better than the unfitted model's.

The fit returns its best iterate, not its last: the loss of every iterate theta_0 (the
start) .. theta_K is known, and the one with the smallest W1 is returned (``returned_step``;
equal losses keep the later one). A non-finite loss or parameter (a learning rate so large
that tau = e^theta or s = e^theta overflows, even where theta and the loss stay finite) stops
the optimisation at once (``stopped``) and the best finite iterate before it is returned; when
even the start has no finite loss the fit is refused. So no NaN reaches fit.json, which is
written as strict JSON.

Budgets, checked before anything is allocated: memory ``memory_bytes`` (the gradient
recomputes one layer at a time, so it holds one layer's H (N, N) head kernels, not T of
them) against ``posbias.numerics.budget``'s limit, and time ``seconds_estimate`` (a cost
per head-entry per step measured on a 2-core CPU) against ``--time-budget``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from posbias.errors import UserError

DIAGONAL_MODES = ("none", "pooled", "per-layer")


class FitError(UserError):
    """Bad fit input; one line."""


@dataclass(frozen=True)
class FitSpec:
    """Which parameters are free, and the optimiser's settings."""

    diagonal: str = "pooled"
    temperature: bool = True
    content_scale: bool = False
    lambda_scale: bool = False
    steps: int = 500
    learning_rate: float = 0.1

    def __post_init__(self):
        if self.diagonal not in DIAGONAL_MODES:
            raise FitError(f"diagonal: {self.diagonal!r}, expected one of {', '.join(DIAGONAL_MODES)}")
        if self.diagonal != "none" and self.content_scale:
            raise FitError(
                "content scale multiplies the model's own diagonal; it cannot be fitted together with "
                "a free diagonal (use --diagonal none)"
            )
        if not (self.diagonal != "none" or self.temperature or self.content_scale or self.lambda_scale):
            raise FitError("nothing to fit: free at least one of diagonal, temperature, content scale, lambda scale")
        if self.steps < 1:
            raise FitError(f"steps: {self.steps}, expected at least 1")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise FitError(f"learning rate: {self.learning_rate}, expected a finite value > 0")


@dataclass(frozen=True)
class FitResult:
    """Fitted values, losses (W1 / (N - 1)) before and after, the loss curve, both profiles.

    ``history[k]`` is the loss of iterate k (0: the start) as the optimiser computed it;
    ``returned_step`` is the iterate returned (the best), ``steps_done`` the steps taken and
    ``stopped`` why the optimisation stopped early (None: it ran all its steps)."""

    values: dict
    loss_before: float
    loss_after: float
    history: tuple[float, ...]
    before: np.ndarray = field(repr=False)
    after: np.ndarray = field(repr=False)
    returned_step: int = 0
    steps_done: int = 0
    stopped: str | None = None

    @property
    def returned(self) -> str:
        """One line: which iterate was returned and why."""
        last = self.history[-1] if self.history else math.nan
        if self.stopped is not None:
            return (
                f"iterate {self.returned_step} (the best finite one; {self.stopped}, "
                f"optimisation stopped after {self.steps_done} steps)"
            )
        if self.returned_step == self.steps_done:
            return f"iterate {self.returned_step} (the last, which is the best)"
        return f"iterate {self.returned_step} of {self.steps_done} (the best; the last has W1/(N-1) {last:.4g})"


SECONDS_PER_ENTRY = 5e-8
"""Seconds per head-entry (one of the T H N^2 softmax entries) per optimiser step, forward and
gradient together: 36-48 ns were measured for T = 70, H = 112, N = 256 and 512 on a busy
2-core CPU; faster machines finish sooner than estimated."""
SECONDS_PER_STEP = 2e-3
"""Fixed cost of one step (dispatch and bookkeeping) on the same machine."""
XLA_OVERHEAD = 512 * 2**20
"""Bytes the interpreter, JAX and XLA's compilation take beside the arrays (measured: 350-400 MiB
peak resident for the smallest fits and trainings)."""


def seconds_estimate(num_layers: int, num_heads: int, num_tokens: int, steps: int) -> float:
    """Estimated seconds of ``steps`` fit steps (plus the before/after profiles): the gradient
    re-builds every layer's H (N, N) kernels, O(T H N^2) per step."""
    entries = float(num_layers) * num_heads * num_tokens * num_tokens
    return (steps + 1) * (entries * SECONDS_PER_ENTRY + SECONDS_PER_STEP)


def memory_bytes(num_layers: int, num_heads: int, num_tokens: int, *, gradient: bool = True) -> int:
    """Bytes a fit holds at once (float64): with the gradient, one layer's H softmax outputs
    kept for its backward pass and their cotangents (2 H N^2), the layer's masks, distances and
    accumulators (8 N^2), one (N,) vector per layer and its cotangent (4 T N); a profile alone
    (no gradient, the held-out check) needs the 8 N^2 only; plus ``XLA_OVERHEAD``."""
    t, h, n = int(num_layers), int(num_heads), int(num_tokens)
    per_layer = (2 * h if gradient else 0) + 8
    return XLA_OVERHEAD + 8 * (per_layer * n * n + 4 * t * n + 8 * t * h)


def _initial(stack, spec: FitSpec) -> dict:
    theta = {}
    if spec.diagonal == "pooled":
        theta["diagonal"] = np.float64(np.mean(stack.diagonal))
    elif spec.diagonal == "per-layer":
        theta["diagonal"] = np.mean(stack.diagonal, axis=1)
    if spec.temperature:
        theta["log_temperature"] = np.log(np.float64(stack.temperature))
    if spec.content_scale:
        theta["content_scale"] = np.float64(1.0)
    if spec.lambda_scale:
        theta["log_lambda_scale"] = np.float64(0.0)
    return theta


def _parameters(theta: dict, stack):
    """(lambdas, slopes, diagonal, weights, temperature) as JAX arrays from theta and the stack."""
    import jax.numpy as jnp

    t, h = stack.num_layers, stack.num_heads
    diagonal = jnp.asarray(stack.diagonal)
    if "diagonal" in theta:
        diagonal = jnp.broadcast_to(jnp.reshape(theta["diagonal"], (-1, 1)), (t, h))
    if "content_scale" in theta:
        diagonal = theta["content_scale"] * diagonal
    lambdas = jnp.asarray(stack.lambdas)
    if "log_lambda_scale" in theta:
        lambdas = jnp.minimum(1.0, jnp.exp(theta["log_lambda_scale"]) * lambdas)
    temperature = jnp.exp(theta["log_temperature"]) if "log_temperature" in theta else stack.temperature
    return lambdas, jnp.asarray(stack.slopes), diagonal, jnp.asarray(stack.head_weights), temperature


def _readable(theta: dict) -> dict:
    out = {}
    for name, value in theta.items():
        value = np.asarray(value, np.float64)
        if name.startswith("log_"):
            with np.errstate(over="ignore"):  # an overflow is inf, which fit() stops at
                name, value = name[4:], np.exp(value)
        out[name] = value.tolist()
    return out


def model_profile(stack, num_tokens: int, values: dict | None = None) -> np.ndarray:
    """The profile of ``stack`` at N = ``num_tokens`` with fitted ``values`` (as in ``FitResult.values``)."""
    import jax

    from posbias.numerics import differentiable

    theta = (
        {}
        if values is None
        else {
            ("log_" + k if k in ("temperature", "lambda_scale") else k): (
                np.log(v) if k in ("temperature", "lambda_scale") else np.asarray(v)
            )
            for k, v in values.items()
        }
    )
    with jax.enable_x64(True):
        p = differentiable.profile(*_parameters(theta, stack), num_tokens=num_tokens, mask=stack.mask)
        return np.asarray(p, np.float64)


def fit(stack, measured: np.ndarray, spec: FitSpec = FitSpec(), *, progress=None) -> FitResult:
    """Fit the free parameters of ``spec`` so that the profile of ``stack`` at N = len(measured)
    matches ``measured`` in W1; ``progress(done, total)`` is called every step."""
    import jax
    import jax.numpy as jnp
    import optax

    from posbias.numerics import differentiable

    require_alibi(stack, "stack")
    n = int(measured.shape[0])
    with jax.enable_x64(True):
        q = jnp.asarray(measured, jnp.float64)
        theta = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), _initial(stack, spec))

        def loss(theta):
            p = differentiable.profile(*_parameters(theta, stack), num_tokens=n, mask=stack.mask)
            return differentiable.w1(p, q)

        optimiser = optax.adam(optax.cosine_decay_schedule(spec.learning_rate, spec.steps))
        state = optimiser.init(theta)

        @jax.jit
        def step(theta, state):
            value, grads = jax.value_and_grad(loss)(theta)
            with jax.numpy_dtype_promotion("standard"):  # optax mixes its int32 step count with floats
                updates, state = optimiser.update(grads, state, theta)
            return optax.apply_updates(theta, updates), state, value

        def finite(theta) -> bool:
            """theta and the values it stands for (tau = e^theta, s = e^theta: finite theta above 709.78
            overflows, and s = inf still gives a finite loss through min(1, s lambda)) all finite."""
            leaves = jax.tree_util.tree_leaves(theta)
            readable = _readable(theta).values()
            return all(bool(jnp.all(jnp.isfinite(x))) for x in leaves) and all(np.all(np.isfinite(v)) for v in readable)

        start = theta
        history, stopped = [], None
        best_loss, best_step, best = math.inf, 0, theta
        done = 0
        for k in range(spec.steps + 1):
            if k < spec.steps:
                new_theta, state, value = step(theta, state)  # value: the loss of iterate k
            else:
                value = jax.jit(loss)(theta)  # the last iterate's loss
            value = float(value)
            history.append(value)
            if not math.isfinite(value):
                stopped = f"the loss of iterate {k} is {value}"
                break
            if value <= best_loss:
                best_loss, best_step, best = value, k, theta
            if k == spec.steps:
                break
            theta, done = new_theta, k + 1
            if progress is not None:
                progress(k + 1, spec.steps)
            if not finite(theta):
                stopped = f"iterate {k + 1} has non-finite parameters"
                break
        if not math.isfinite(best_loss):
            raise FitError(f"the loss of the starting parameters is {history[0]} (not finite): nothing to fit from")
        values = _readable(best)
        before = model_profile(stack, n, _readable(start))
        after = model_profile(stack, n, values)
    if not (np.all(np.isfinite(after)) and abs(float(after.sum()) - 1.0) <= 1e-9):
        raise FitError(
            f"the fitted profile is not a probability vector (sum {float(after.sum())!r}); "
            "try a smaller --learning-rate"
        )
    w1 = lambda p: float(np.sum(np.abs(np.cumsum(p)[:-1] - np.cumsum(measured)[:-1])) / max(n - 1, 1))  # noqa: E731
    return FitResult(values, w1(before), w1(after), tuple(history), before, after, best_step, done, stopped)


def check_budgets(
    stack, num_tokens: int, heldout_tokens: int | None, steps: int, time_budget: float, *, where: str
) -> None:
    """Refuse (FitError, one line) a fit whose memory or time estimate exceeds its budget."""
    from posbias.numerics import budget

    t, h = stack.num_layers, stack.num_heads
    need = memory_bytes(t, h, num_tokens)
    if heldout_tokens is not None:
        need = max(need, memory_bytes(t, h, heldout_tokens, gradient=False))
    reason = budget.check(f"a fit of T = {t} layers, H = {h} heads at N = {num_tokens}", need)
    if reason is not None:
        raise FitError(f"{where}: {reason}")
    seconds = seconds_estimate(t, h, num_tokens, steps)
    if seconds > time_budget:
        raise FitError(
            f"{where}: {steps} steps of a fit of T = {t} layers, H = {h} heads at N = {num_tokens} would "
            f"take about {_duration(seconds)}, more than --time-budget {time_budget:g} s "
            "(fewer --steps, a shorter profile or a larger --time-budget)"
        )


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def fit_figure(measured, result: FitResult, title: str):
    from posbias.fit.compare import overlay_figure

    return overlay_figure(
        measured,
        {
            f"before fit (W1 {result.loss_before:.4f})": result.before,
            f"after fit (W1 {result.loss_after:.4f})": result.after,
        },
        title=title,
    )


DEFAULT_TIME_BUDGET = 3600.0
DEFAULT_STEPS = 500
DEFAULT_LEARNING_RATE = 0.1

PROFILE_FIT_FLAGS = (
    ("diagonal", "--diagonal"),
    ("temperature", "--no-temperature"),
    ("content_scale", "--content-scale"),
    ("lambda_scale", "--lambda-scale"),
    ("steps", "--steps"),
    ("learning_rate", "--learning-rate"),
    ("time_budget", "--time-budget"),
    ("heldout", "--heldout"),
    ("content_broadcast", "--content-broadcast"),
)
"""(argparse dest, flag) of the flags of the profile fit (a measured CSV and CONFIG); None when not given."""

MAX_SMOOTHNESS = 1e8
"""The largest table smoothness alpha ``posbias fit MEASURE_DIR`` accepts. The penalty alpha D^T D is
added to the logits' Gram matrix, whose entries count the (row, distance) entries, O(N); far beyond
them the fitted table is already a straight line (1e6 and 1e10 agree to 1e-5 at N = 16), and from
about 1e11 (N = 4 .. 256 measured) the penalised system's scaled eigenvalues fall below
``posbias.fit.bias.RANK_TOLERANCE`` and the fit is refused as undetermined (at 1e308 the penalty
overflows)."""


def require_alibi(stack, where: str) -> None:
    """Refuse (FitError, one line) a model that is not an ALiBi stack: the fit differentiates the profile
    through the ALiBi slopes (numerics/differentiable.py); a relative-bias config has none."""
    from posbias.numerics.stack import AlibiStack

    if not isinstance(stack, AlibiStack):
        what = "a relative-bias config" if type(stack).__name__ == "BiasStack" else f"a {type(stack).__name__}"
        raise FitError(
            f"{where}: fit: {what} is not supported (it has no ALiBi slopes to differentiate through); "
            "expected an ALiBi config (attention_config.alibi_slopes)"
        )
