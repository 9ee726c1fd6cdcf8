"""The grid of a sweep: its points, their stacks, and the batches they are computed in.

Point i of the grid (row-major over ``Spec.dims``, the first dimension slowest) sets
each axis to one value; everything else comes from the base model. Points that share
a shape (T, H, N, mask) can be computed in one batched call
(``posbias.numerics.batch.profiles``); each shape group is cut into batches whose
estimated working set fits the memory budget. The batch plan depends on the spec and
on the per-group batch sizes only, so a resumed sweep (which reuses the recorded sizes)
recomputes exactly the batches an uninterrupted one would have.

Per point the stack is (THEORY.md, Notation) lambda_t from the ``lambda`` axis
(constant) or ``lambda0 / (t+1)^beta`` (power decay), slopes m_th = scale * m_h,
content diagonal d_th = d, head weights, temperature and mask of the base. In a bias
sweep (C7) the point's bias spec (``bias_spec``: ``base.bias`` or the ``bias`` axis value,
placeholders filled from the parameter axes) replaces the slopes, with the sink of the
``sink`` axis or ``base.sink``: the ``BiasStack`` that ``posbias rollout --bias SPEC --sink S``
builds for the same flags (``BiasStack.build``). Its planned memory is the bias engine's
O(H N) working set, its time O(T H N^2) (``point_seconds``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from posbias.errors import UserError
from posbias.sweep.spec import Spec, SpecError, alibi_only, biases_of, fill

DEFAULT_BATCH_CAP = 1024
"""At most this many points per batch (one Parquet file, one ``profiles`` call per device)."""
STRING_COLUMNS = ("mask", "slopes", "bias", "bias_spec")
BIAS_SECONDS_PER_UNIT = 3e-10
"""Bias engine seconds per layer x head x token^2 (native, one thread: 1.5e-10 measured at T = 32, H = 4,
N = 2048 on the shared 2-core machine; doubled for its load)."""


@dataclass(frozen=True)
class Group:
    """Points of one shape: key (T, H, N, mask spec), their indices, batch size and bytes per point;
    for relative-bias points the estimated seconds per point (``point_seconds``), else None."""

    key: tuple
    points: np.ndarray
    batch_size: int
    bytes_per_point: int
    seconds_per_point: float | None = None


@dataclass(frozen=True)
class Batch:
    """index: global batch number (the file name); key: its shape; points: grid indices, ascending."""

    index: int
    key: tuple
    points: np.ndarray


class Grid:
    """Axis value columns for every point and a stack factory (templates cached per shape)."""

    def __init__(self, spec: Spec):
        self.spec = spec
        shape = spec.shape
        n = spec.num_points
        flat = np.arange(n, dtype=np.int64)
        index = np.unravel_index(flat, shape) if shape else ()
        self.columns: dict[str, np.ndarray] = {}
        for d, names in enumerate(spec.dims):
            for name in names:
                values = spec.axis(name).values
                if name in STRING_COLUMNS:
                    arr = np.empty(len(values), dtype=object)
                    arr[:] = list(values)
                else:
                    arr = np.asarray(values, dtype=np.int64 if isinstance(values[0], int) else np.float64)
                self.columns[name] = arr[index[d]]
        if spec.bias_sweep:
            self.columns["bias_spec"] = self._bias_specs()
        self._base_info = None

    def _bias_specs(self) -> np.ndarray:
        """(points,) the bias spec of every point: its template (``base.bias`` or the ``bias`` axis)
        with the placeholders filled from the parameter axes; equal texts share one string."""
        names = self.spec.parameter_axes
        templates = self.columns.get("bias")
        out = np.empty(self.num_points, dtype=object)
        if templates is None and not names:
            out[:] = self.spec.base["bias"]
            return out
        cols = [self.columns[n].tolist() for n in names]
        base = self.spec.base.get("bias")
        texts: dict = {}
        for i in range(self.num_points):
            template = base if templates is None else templates[i]
            values = tuple(c[i] for c in cols)
            key = (template, values)
            if key not in texts:
                texts[key] = fill(template, dict(zip(names, values)))
            out[i] = texts[key]
        return out

    @property
    def num_points(self) -> int:
        return self.spec.num_points

    # ------------------------------------------------------------------ shapes
    def base_info(self):
        """(T, H, N, mask spec, schedule spec) of the base model (a config is read once)."""
        if self._base_info is None:
            base = self.spec.base
            if "config" in base:
                m = _load_config(base["config"], _config_overrides(base))
                s = m.stack
                self._base_info = (s.num_layers, s.num_heads, m.num_tokens, s.mask.spec, m.schedule)
            else:
                slopes = base.get("slopes", "paper")
                heads = base.get("heads", len(slopes) if isinstance(slopes, tuple) else None)
                self._base_info = (
                    base.get("layers"),
                    heads,
                    base.get("tokens"),
                    base.get("mask", "causal"),
                    base.get("schedule"),
                )
        return self._base_info

    def keys(self) -> list[tuple]:
        """The shape key (T, H, N, mask) of every point."""
        t0, h0, n0, mask0, _ = self.base_info()
        c = self.columns
        n = self.num_points

        def col(name, default):
            return c[name].tolist() if name in c else [default] * n

        layers, tokens = col("layers", t0), col("tokens", n0)
        heads = [len(s) for s in c["slopes"]] if "slopes" in c else [h0] * n
        if "window" in c:
            masks = [f"window:{w}" for w in c["window"].tolist()]
        else:
            masks = col("mask", _mask_spec(mask0))
        return list(zip(layers, heads, tokens, masks))

    @functools.lru_cache(maxsize=4)  # noqa: B019 (one grid per sweep)
    def template(self, key: tuple):
        """The base Model at shape ``key``: what every point of that shape starts from."""
        t, h, n, mask = key
        base = self.spec.base
        if "config" in base:
            over = _config_overrides(base)
            over.update(layers=t, tokens=n, mask=mask)
            if "slopes" in self.columns:
                over["heads"] = h
                over.setdefault("slopes", "paper")
            return _load_config(base["config"], over)
        from posbias.model import ModelError, build_model

        slopes = base.get("slopes", "paper")
        if isinstance(slopes, tuple):
            slopes = list(slopes)
        if "slopes" in self.columns:
            slopes = "paper"
        try:
            return build_model(
                layers=t,
                heads=h,
                tokens=n,
                schedule=base.get("schedule", "constant:0.5"),
                slopes=slopes,
                content_diagonal=base.get("content_diagonal", 0.0),
                temperature=base.get("temperature", 1.0),
                mask=mask,
            )
        except ModelError as exc:
            raise SpecError(f"{self.spec.path}: base: {exc}") from None

    def power_decay_base(self):
        """(lambda_0, beta) of a power_decay base schedule, or None."""
        from posbias.numerics import schedules

        spec = self.base_info()[4]
        if isinstance(spec, str) and spec.startswith("power_decay"):
            sched = schedules.parse(spec)
            return sched.lambda_0, sched.beta
        return None

    # ------------------------------------------------------------------ stacks
    def stack(self, i: int, key: tuple):
        """The stack of point ``i`` (its axis values on the template of its shape): an AlibiStack
        (a BiasStack in a bias sweep, or where the base config gives a bias), or a compact
        PeriodicStack where the template is one (a constant schedule at T >=
        ``posbias.model.COMPACT_FROM_LAYERS``) and the point keeps every layer alike (its
        lambda, slope scale and content act on every layer; a power-decay point is expanded).
        Under the ALiBi-only engines (structured, log, fft) a bias point is its ALiBi stack
        (``as_alibi``; ``validate`` refused points that are not).

        Values were range-checked when the spec was read (lambda, lambda0 in [0, 1],
        beta >= 0, slopes and scales >= 0, everything finite), so the stack is built
        without revalidation."""
        from posbias.numerics.periodic import PeriodicStack

        st = self.template(key).stack
        if isinstance(st, PeriodicStack) and "lambda0" not in self.columns and "beta" not in self.columns:
            top = None if st.top is None else self._point(i, st.top, st.num_layers)
            out = PeriodicStack(self._point(i, st.block, st.num_layers), st.repeats, top)
        else:
            if isinstance(st, PeriodicStack):
                st = st.expand()  # lambda_t varies with t: T-long arrays (refused beyond 10^7 layers)
            out = self._point(i, st, st.num_layers)
        if _is_bias(out) and alibi_only(self.spec.engine):
            alibi = out.as_alibi(key[2])
            if alibi is None:
                raise UserError(f"{self.spec.path}: engine {self.spec.engine}: point {i}: {self.bias_reason(i, key)}")
            return alibi
        return out

    def stacks(self, points: np.ndarray, key: tuple):
        """The stacks of ``points`` (one shape ``key``): an ``AlibiBatch`` built from the axis
        columns at once where every point is a plain AlibiStack (no per-point objects; row b is
        ``stack(points[b], key)`` to the bit: the same elementwise products, the same cached
        power-decay rows), else the list of ``stack`` per point."""
        from posbias.numerics.batch import AlibiBatch
        from posbias.numerics.stack import AlibiStack

        st = self.template(key).stack
        if type(st) is not AlibiStack or self.spec.bias_sweep:
            return [self.stack(int(i), key) for i in points]
        c = self.columns
        b, (t, h) = len(points), st.slopes.shape
        if "lambda" in c:
            lambdas = np.repeat(c["lambda"][points].astype(np.float64)[:, None], t, axis=1)
        elif "lambda0" in c or "beta" in c:
            lam0, beta = self.power_decay_base() or (None, None)
            lam0s = c["lambda0"][points].astype(np.float64) if "lambda0" in c else np.full(b, lam0, np.float64)
            betas = c["beta"][points].astype(np.float64) if "beta" in c else np.full(b, beta, np.float64)
            pairs, inverse = np.unique(np.stack([lam0s, betas], axis=1), axis=0, return_inverse=True)
            rows = np.stack([_power_decay(float(a), float(e), t) for a, e in pairs])
            lambdas = rows[inverse.reshape(-1)]
        else:
            lambdas = np.broadcast_to(st.lambdas, (b, t))
        if "content_diagonal" in c:
            diagonal = np.broadcast_to(c["content_diagonal"][points].astype(np.float64)[:, None, None], (b, t, h))
        else:
            diagonal = np.broadcast_to(st.diagonal, (b, t, h))
        if "slopes" in c:
            slopes = np.broadcast_to(np.array(c["slopes"][points].tolist(), np.float64)[:, None, :], (b, t, h))
        else:
            slopes = np.broadcast_to(st.slopes, (b, t, h))
        if "slope_scale" in c:
            slopes = slopes * c["slope_scale"][points].astype(np.float64)[:, None, None]
        return AlibiBatch(
            lambdas,
            slopes,
            diagonal,
            np.broadcast_to(st.head_weights, (b, t, h)),
            np.full(b, st.temperature, np.float64),
            st.mask,
        )

    def bias_reason(self, i: int, key: tuple) -> str:
        """Why point ``i`` is not ALiBi at its N (for the ALiBi-only engines' refusal)."""
        spec = self.columns["bias_spec"][i] if "bias_spec" in self.columns else "the base config's bias"
        return (
            f"bias {spec!r} with sink {self.sink(i, key)!r} is not ALiBi at N = {key[2]} (every head "
            "-m|i-j| on the distances used, no sink); use engine auto, bias or dense"
        )

    def sink(self, i: int, key: tuple):
        """The sink s of point ``i``: the ``sink`` axis, ``base.sink``, the base config's, or 0."""
        if "sink" in self.columns:
            return float(self.columns["sink"][i])
        if "sink" in self.spec.base:
            return float(self.spec.base["sink"])
        st = self.template(key).stack
        st = getattr(st, "block", st)
        return float(np.max(np.abs(st.sink))) if hasattr(st, "sink") else 0.0

    def is_bias(self, key: tuple) -> bool:
        """Whether the points of shape ``key`` carry relative biases (a bias sweep, or a base config
        with ``attention_config.bias``)."""
        return self.spec.bias_sweep or _is_bias(self.template(key).stack)

    def _point(self, i: int, st, total_layers: int):
        """The AlibiStack ``st`` (all layers, or the distinct layers of a periodic stack of
        ``total_layers``) with point ``i``'s axis values."""
        from posbias.numerics.bias_stack import BiasStack
        from posbias.numerics.stack import AlibiStack

        c = self.columns
        t, h = st.num_layers, st.num_heads
        if "lambda" in c:
            lambdas = np.full(t, float(c["lambda"][i]))
        elif "lambda0" in c or "beta" in c:
            lam0, beta = self.power_decay_base() or (None, None)
            lam0 = float(c["lambda0"][i]) if "lambda0" in c else lam0
            beta = float(c["beta"][i]) if "beta" in c else beta
            lambdas = _power_decay(lam0, beta, total_layers)
        else:
            lambdas = st.lambdas
        diagonal = np.full((t, h), float(c["content_diagonal"][i])) if "content_diagonal" in c else st.diagonal
        if "bias_spec" in c or isinstance(st, BiasStack):
            sink = self.spec.base.get("sink", st.sink if isinstance(st, BiasStack) else 0.0)
            if "sink" in c:
                sink = float(c["sink"][i])
            if "bias_spec" not in c:  # the base config's biases, this point's lambdas, content and sink
                return BiasStack(
                    lambdas,
                    st.biases,
                    st.bias_index,
                    diagonal,
                    np.broadcast_to(np.asarray(sink, np.float64), (t, h)),
                    st.head_weights,
                    st.temperature,
                    st.mask,
                )
            biases = biases_of(c["bias_spec"][i])
            return BiasStack.build(
                lambdas,
                list(biases) * (h if len(biases) == 1 else 1),
                diagonal,
                sink,
                st.head_weights,
                st.temperature,
                st.mask,
            )
        slopes = st.slopes
        if "slopes" in c:
            slopes = np.broadcast_to(np.asarray(c["slopes"][i], np.float64), (t, h))
        if "slope_scale" in c:
            slopes = slopes * float(c["slope_scale"][i])
        return AlibiStack(lambdas, slopes, diagonal, st.head_weights, st.temperature, st.mask)


def _is_bias(stack) -> bool:
    """A BiasStack, or a periodic stack of BiasStack layers."""
    from posbias.numerics.bias_stack import BiasStack

    return isinstance(getattr(stack, "block", stack), BiasStack)


@functools.lru_cache(maxsize=8)
def _power_decay(lambda_0: float, beta: float, num_layers: int) -> np.ndarray:
    """lambda_t = lambda_0 / (t + 1)^beta, t = 0..T-1 (read-only: shared between points)."""
    out = lambda_0 / (np.arange(num_layers, dtype=np.float64) + 1.0) ** beta
    out.setflags(write=False)
    return out


def _mask_spec(text: str) -> str:
    from posbias.numerics import masks

    return masks.parse(text).spec


def _config_overrides(base: dict) -> dict:
    over = {k: base[k] for k in ("layers", "heads", "tokens", "schedule", "mask") if k in base}
    if "slopes" in base:
        over["slopes"] = base["slopes"] if isinstance(base["slopes"], str) else list(base["slopes"])
    if "content_diagonal" in base:
        over["content_diagonal"] = base["content_diagonal"]
    return over


def _load_config(path: str, overrides: dict):
    from posbias.config import load

    slopes = overrides.get("slopes")
    explicit = slopes if isinstance(slopes, list) else None
    if explicit is not None:
        overrides = {**overrides, "slopes": "paper"}
    model = load(path, **overrides)
    if explicit is not None:
        import dataclasses

        st = model.stack
        if len(explicit) != st.num_heads:
            raise SpecError(f"{path}: base.slopes: {len(explicit)} values, expected heads = {st.num_heads}")
        stack = dataclasses.replace(
            st, slopes=np.broadcast_to(np.asarray(explicit, np.float64), st.slopes.shape).copy()
        )
        model = dataclasses.replace(model, stack=stack)
    return model


# ---------------------------------------------------------------------- planning
def point_bytes(engine: str, key: tuple, profiles: bool, bias: bool = False) -> int:
    """Estimated bytes one point of shape ``key`` holds while its batch runs: the engine's working
    set (``Engine.memory_bytes``; for relative-bias points under ``auto`` the bias engine's O(H N)),
    its stack's parameter arrays and its results."""
    from posbias.numerics import budget
    from posbias.numerics.engines import get

    t, h, n, _ = key
    results = 8 * n * (4 + 2 * bool(profiles)) + 64 * t
    working = get("bias" if bias and engine == "auto" else engine).memory_bytes(t, h, n)
    return int(working) + budget.stack_bytes(t, h) + results


def point_seconds(stack, num_tokens: int) -> float:
    """Estimated seconds of one relative-bias point: the bias engine's O(T H N^2) at
    ``BIAS_SECONDS_PER_UNIT``, or for a compact periodic stack the cheaper of that and the power
    engine (``Auto.power_seconds``, O(N^3 log T)), as ``auto`` chooses."""
    from posbias.numerics.auto import Auto
    from posbias.numerics.periodic import PeriodicStack

    n = float(num_tokens)
    scan = BIAS_SECONDS_PER_UNIT * stack.num_layers * stack.num_heads * n * n
    if isinstance(stack, PeriodicStack) and n <= 8192:
        return min(scan, Auto().power_seconds(stack, int(num_tokens)))
    return scan


def bookkeeping_bytes(spec: Spec) -> int:
    """Bytes the grid's own bookkeeping holds for the whole sweep, whatever the batch size: per
    point its int64 index per dimension and value per axis column (``Grid``), its shape key (a
    Python tuple in ``Grid.keys``, a window mask string per point with a ``window`` axis) and its
    place in the plan; ~150 bytes per point measured (tracemalloc, three axes), counted here as
    160 + 16 per axis and dimension (+ 64 for window strings, + 16 for a bias sweep's spec column).
    Checked before ``Grid`` is built."""
    per = (
        160
        + 16 * (len(spec.axes) + len(spec.dims))
        + (64 if spec.axis("window") is not None else 0)
        + (16 if spec.bias_sweep else 0)
    )  # the bias_spec column (equal texts shared)
    return int(spec.num_points) * per


def diagonal_bytes(key: tuple) -> int:
    """Estimated bytes of one point's diagonal (``diagonal: true``, min_i P_ii, C5(a)): the (T, H, N)
    self-weights ``kernel_diagonals`` forms (measured at 1.15 x 8 T H N bytes for T = H = 32,
    N = 4096; counted twice) and the (T, N) weights and log terms. The points of a batch get
    their diagonals one after another, so a batch holds one of these at a time."""
    t, h, n, _ = key
    return 8 * int(t) * int(n) * (2 * int(h) + 3)


def validate(grid: Grid, keys: list[tuple]) -> None:
    """Build every shape's template and check what a point could trip over, before any work:
    slopes and content that overflow after scaling and the temperature, and the engine's
    capability on the first and last point of each shape."""
    from posbias.numerics.engines import get

    spec = grid.spec
    first, last = {}, {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
        last[k] = i
    members: dict[tuple, list[int]] = {k: [] for k in first if grid.is_bias(k)}
    if members:
        for i, k in enumerate(keys):  # the points of each bias shape, in one pass
            if k in members:
                members[k].append(i)
    engine = get(spec.engine)
    scale = float(np.max(grid.columns["slope_scale"])) if "slope_scale" in grid.columns else 1.0
    for k in first:
        st = grid.template(k).stack
        st = getattr(st, "block", st)  # a compact periodic stack: its block holds every layer's parameters
        if grid.is_bias(k):
            _validate_bias(grid, k, st, members[k])
        elif "slopes" not in grid.columns:
            with np.errstate(over="ignore"):
                top = float(np.max(st.slopes, initial=0.0)) * scale / st.temperature
            if not np.isfinite(top):
                raise SpecError(
                    f"{spec.path}: axes.slope_scale: scaled slopes overflow (max slope x scale / tau is not finite)"
                )
        if "content_diagonal" in grid.columns:
            d = float(np.max(np.abs(grid.columns["content_diagonal"])))
            with np.errstate(over="ignore"):
                if not np.isfinite(d / st.temperature):
                    raise SpecError(f"{spec.path}: axes.content_diagonal: d / tau overflows")
        if spec.engine != "auto":
            for i in (first[k], last[k]):
                reason = engine.supports(grid.stack(i, k), k[2])
                if reason:
                    raise UserError(
                        f"{spec.path}: engine {spec.engine}: point {i} (T = {k[0]}, H = {k[1]}, "
                        f"N = {k[2]}, mask {k[3]}): {reason}"
                    )


def _validate_bias(grid: Grid, key: tuple, st, members: list[int]) -> None:
    """A bias shape: slopes and scales do not apply (a base config with a bias), every spec has one
    bias or one per head, s / tau stays finite, and under the ALiBi-only engines every point is
    ALiBi at its N."""
    spec = grid.spec
    c = grid.columns
    h = key[1]
    for name in ("slopes", "slope_scale"):
        if name in c:
            raise SpecError(f"{spec.path}: axes.{name}: the base config gives a relative bias, not ALiBi slopes")
    if "bias_spec" in c:
        for text in dict.fromkeys(c["bias_spec"][members].tolist()):
            count = len(biases_of(text))
            if count not in (1, h):
                raise SpecError(f"{spec.path}: bias {text!r}: {count} head biases, expected one or heads = {h}")
    from posbias.numerics.bias_stack import LOGIT_LIMIT

    sinks = c["sink"] if "sink" in c else np.asarray([spec.base.get("sink", 0.0)])
    with np.errstate(over="ignore"):
        if not np.all(np.abs(np.asarray(sinks, np.float64) / st.temperature) <= LOGIT_LIMIT):
            raise SpecError(f"{spec.path}: sink: s / tau overflows (tau = {st.temperature!r})")
    if alibi_only(spec.engine):
        seen = set()
        for i in members:
            what = (c["bias_spec"][i] if "bias_spec" in c else None, grid.sink(i, key))
            if what not in seen:
                seen.add(what)
                grid.stack(i, key)  # refuses (UserError, one line) a point that is not ALiBi at its N


def plan(
    grid: Grid, keys: list[tuple], *, budget_bytes: int, cap: int = DEFAULT_BATCH_CAP, sizes: dict | None = None
) -> tuple[list[Group], list[Batch]]:
    """Shape groups (in order of their first point) and their batches.

    ``sizes`` (shape key -> batch size, from a manifest) fixes the batch sizes of a resumed
    sweep; otherwise each group gets min(cap, (budget - diagonal) // bytes per point), the
    diagonal's working set (``diagonal_bytes``, with ``diagonal: true``) held once per batch. Refuses (UserError)
    a shape whose single point does not fit the budget, with the estimate."""
    from posbias.numerics.budget import describe

    order: dict[tuple, list[int]] = {}
    for i, k in enumerate(keys):
        order.setdefault(k, []).append(i)
    groups, batches = [], []
    for k, members in order.items():
        bias = grid.is_bias(k)
        per = point_bytes(grid.spec.engine, k, grid.spec.profiles, bias)
        fixed = diagonal_bytes(k) if grid.spec.diagonal else 0
        if per + fixed > budget_bytes:
            what = f" (with its diagonal, {describe(fixed)})" if fixed else ""
            raise UserError(
                f"one point of shape T = {k[0]}, H = {k[1]}, N = {k[2]} ({k[3]}) needs about "
                f"{describe(per + fixed)}{what}, more than the memory budget of {describe(budget_bytes)} "
                "(--memory-budget)"
            )
        size = sizes[k] if sizes is not None and k in sizes else max(1, min(cap, (budget_bytes - fixed) // per))
        pts = np.asarray(members, dtype=np.int64)
        seconds = point_seconds(grid.stack(members[0], k), k[2]) if bias else None
        groups.append(Group(k, pts, int(size), per, seconds))
        for start in range(0, len(pts), size):
            batches.append(Batch(len(batches), k, pts[start : start + size]))
    return groups, batches
