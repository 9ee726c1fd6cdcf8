"""Fitting a relative bias to measured pre-softmax logits (THEORY.md, C7; issue 19, section 5).

For one layer t and head h, L[i, j] is the mean pre-softmax logit the softmax of query i gives
key j (the measured content times the layer's scale s_t, plus the family's ALiBi term
-m_h |i - j| where the model has one: ``pre_softmax_logits``). On the entries the mask allows
(causal: j <= i; full: all) it is fitted by least squares with C7's head model

    L[i, j] ~ c_i + b(i - j) + d [i = j] + s [j = 0],

b the past side b(g), g = i - j >= 0, and under the full mask a separate future side b_f(g),
g = j - i > 0. The row offsets c_i are what the softmax ignores (C4(a)); they are eliminated
exactly by centring every row over its allowed entries, L~ = L - mean_j L, and the same for each
feature, so the fit is ordinary least squares of L~ on the centred features. R^2 is
1 - SS_res / SS_tot over the allowed entries after that centring.

Families of b (``FAMILIES``):

* ``alibi``: b(g) = -m g on both sides, m >= 0 (a negative least-squares slope is refitted at
  the boundary m = 0); linear.
* ``table``: free b(g), g = 0 .. N-1 (and b_f(g), g = 1 .. N-1 under the full mask), with a
  second-difference penalty alpha sum_g (b(g+2) - 2 b(g+1) + b(g))^2 on each side (g = 0 .. N-3,
  b_f(0) = b(0)); linear. Gauge: a constant in b is a row offset, so b(0) = 0; and at g = 0 the
  table and d coincide (shifting every off-diagonal b against d is a row offset too), which the data
  cannot resolve, so the table takes b(2) = 2 b(1): d is the diagonal's excess over the line through
  b(1), b(2) extrapolated to g = 0. Everything else is determined by the logits (b(g <= N-2) by the
  entries with j >= 1, s by the first key of rows 1 .. N-2, b(N-1) by the entry (N-1, 0)), so
  alpha = 0 is allowed (N >= 4); alpha > 0 smooths noise.
* ``kerple-log`` (b = -r1 log(1 + r2 g)) and ``kerple-power`` (b = -r1 g^r2): linear in
  (r1, d, s) for fixed r2, so r2 is fitted by variable projection: the residual with r1, d, s
  solved exactly is a function of u = log r2 alone (r2 > 0), minimised by optax's L-BFGS from
  the best point of a grid over r2 in [1e-3, 1e2]. r1 >= 0 is kept: of the L-BFGS point, the best
  grid point with r1 >= 0 and b = 0 (the boundary r1 = 0, reported with r2 = 0), the one of least
  residual is returned.

Every linear solve uses normal equations built from per-diagonal sums: the Gram matrix of the
centred features depends only on the mask and N (one (Q, Q) matrix, Q = N + 2 causal, 2N + 1
full), the right-hand side of a head is Q sums of L~ over diagonals; no (entries x parameters)
design is formed. Columns are scaled to unit diagonal before solving, and a system whose
smallest scaled eigenvalue is below ``RANK_TOLERANCE`` is refused (``BiasFitError``: N too short
for the family, ``MIN_TOKENS``). Memory: about 8 (3 Q^2 + N Q + 4 H N^2) bytes per layer, checked
against ``posbias.numerics.budget`` first.

Floating point: the linear families reproduce noiseless planted parameters to about 1e-12
relative at N <= 64 (the conditioning of the scaled normal matrix, about N^2 for ``alibi``);
the variable projection's r2 is found to about 1e-8 relative (L-BFGS on an analytic gradient).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from posbias.errors import UserError

FAMILIES = ("alibi", "table", "kerple-log", "kerple-power")
MIN_TOKENS = {"alibi": 3, "table": 4, "kerple-log": 4, "kerple-power": 4}
"""The shortest N at which each family's parameters are determined under the causal mask (alibi: three
row-centred differences for m, d, s at N = 3; the table's gauge needs N >= 4; a Kerple r2 needs more
equations than the three linear parameters)."""
DEFAULT_SMOOTHNESS = 1.0
RANK_TOLERANCE = 1e-12
R2_GRID = np.geomspace(1e-3, 1e2, 61)
LBFGS_STEPS = 60


class BiasFitError(UserError):
    """Bad bias-fit input, or a fit the data cannot determine; one line."""


@dataclass(frozen=True)
class BiasFit:
    """The fitted head model of every layer t and head h (module docstring).

    parameters: (T, H, P) per family: ``alibi`` (m,); ``kerple-*`` (r1, r2); ``table`` b(0 .. N-1)
                and, under the full mask, b_f(0 .. N-1) after it (P = N or 2N)
    diagonal:   (T, H) d
    sink:       (T, H) s
    r2:         (T, H) R^2 over the allowed entries after removing row offsets
    """

    family: str
    num_tokens: int
    causal: bool
    smoothness: float
    parameters: np.ndarray
    diagonal: np.ndarray
    sink: np.ndarray
    r2: np.ndarray

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return {"alibi": ("slope",), "kerple-log": ("r1", "r2"), "kerple-power": ("r1", "r2")}.get(self.family, ("b",))

    def bias(self, layer: int, head: int):
        """The fitted ``posbias.numerics.bias.Bias`` of one head."""
        from posbias.numerics.bias import Alibi, Bias, KerpleLog, KerplePower, Table

        p = self.parameters[layer, head]
        if self.family == "alibi":
            return Bias(Alibi(float(p[0])))
        if self.family == "kerple-log":
            return Bias(KerpleLog(float(p[0]), float(p[1])))
        if self.family == "kerple-power":
            return Bias(KerplePower(float(p[0]), float(p[1])))
        n = self.num_tokens
        past = Table(tuple(float(v) for v in p[:n]))
        return Bias(past) if self.causal else Bias(past, Table(tuple(float(v) for v in p[n:])))

    def stack(self, lambdas, head_weights=None):
        """The ``BiasStack`` of the fitted biases, d and s (temperature 1: the logits were fitted as
        the softmax sees them) with the given (T,) lambdas and the measurement's mask."""
        from posbias.numerics.bias_stack import BiasStack
        from posbias.numerics.masks import Causal, Full

        t, h = self.diagonal.shape
        biases = [[self.bias(layer, head) for head in range(h)] for layer in range(t)]
        return BiasStack.build(
            lambdas, biases, self.diagonal, self.sink, head_weights, mask=Causal() if self.causal else Full()
        )

    def summary(self) -> dict:
        """A JSON-ready record: family, N, mask, smoothness, per layer and head the parameters, d, s, R^2."""
        return {
            "family": self.family,
            "num_tokens": self.num_tokens,
            "mask": "causal" if self.causal else "full",
            "smoothness": self.smoothness,
            "parameter_names": list(self.parameter_names),
            "parameters": self.parameters.tolist(),
            "diagonal": self.diagonal.tolist(),
            "sink": self.sink.tolist(),
            "r2": self.r2.tolist(),
            "mean_r2": float(self.r2.mean()),
        }


@dataclass(frozen=True)
class _Design:
    """What depends only on the mask and N: the allowed entries, each entry's distance column
    (past g at g, future g at N - 1 + g), and the Gram matrix (Q, Q) of the row-centred raw
    features (one indicator per distance column, then [i = j], then [j = 0])."""

    num_tokens: int
    causal: bool
    allowed: np.ndarray  # (N, N) bool
    column: np.ndarray  # (N, N) int64 distance column of each entry
    counts: np.ndarray  # (N,) allowed entries per row
    gram: np.ndarray  # (Q, Q)

    @property
    def distances(self) -> int:
        return self.num_tokens if self.causal else 2 * self.num_tokens - 1

    @property
    def size(self) -> int:
        return self.distances + 2


def _design(num_tokens: int, causal: bool) -> _Design:
    n = int(num_tokens)
    i, j = np.indices((n, n))
    allowed = j <= i if causal else np.ones((n, n), bool)
    column = np.where(j <= i, i - j, 0 if causal else n - 1 + (j - i))  # causal: above the diagonal unused
    q = (n if causal else 2 * n - 1) + 2
    rows, cols = np.nonzero(allowed)
    k = column[rows, cols]
    features = [(k, np.ones(k.size, bool)), (np.full(k.size, q - 2), rows == cols), (np.full(k.size, q - 1), cols == 0)]
    gram = np.zeros((q, q))
    per_row = np.zeros((n, q))
    for a, on_a in features:
        np.add.at(per_row, (rows[on_a], a[on_a]), 1.0)
        for b, on_b in features:
            both = on_a & on_b
            np.add.at(gram, (a[both], b[both]), 1.0)
    counts = allowed.sum(axis=1).astype(np.float64)
    gram -= per_row.T @ (per_row / counts[:, None])
    return _Design(n, causal, allowed, column, counts, gram)


def _centre(logits: np.ndarray, design: _Design) -> np.ndarray:
    """(H, N, N) logits minus each row's mean over its allowed entries; 0 where not allowed."""
    inside = np.where(design.allowed, logits, 0.0)
    mean = inside.sum(axis=-1) / design.counts
    return np.where(design.allowed, inside - mean[..., None], 0.0)


def _raw_rhs(centred: np.ndarray, design: _Design) -> np.ndarray:
    """(H, Q): per distance column the sum of L~ over its entries, then over the diagonal, then over key 0."""
    q = design.size
    allowed = design.allowed
    cols = design.column[allowed]
    out = np.empty((centred.shape[0], q))
    for h, one in enumerate(centred):
        out[h, : q - 2] = np.bincount(cols, weights=one[allowed], minlength=q - 2)
        out[h, q - 2] = np.trace(one)
        out[h, q - 1] = one[:, 0].sum()
    return out


def _table_map(n: int, causal: bool) -> np.ndarray:
    """(distances, P_b) linear map from the free table values to b at every distance column (gauge of the
    module docstring: b(0) = 0, b(2) = 2 b(1); the future side free at g = 1 .. N-1)."""
    past_free = [g for g in range(1, n) if g != 2]
    future = 0 if causal else n - 1
    m = np.zeros((n if causal else 2 * n - 1, len(past_free) + future))
    for k, g in enumerate(past_free):
        m[g, k] = 1.0
    if n > 2:
        m[2] = 2.0 * m[1]
    for g in range(1, future + 1):
        m[n - 1 + g, len(past_free) + g - 1] = 1.0
    return m


def _second_differences(n: int, causal: bool) -> np.ndarray:
    """(K, distances) second differences b(g+2) - 2 b(g+1) + b(g), g = 0 .. N-3, on each side (b_f(0) = b(0))."""
    sides = 1 if causal else 2
    width = n if causal else 2 * n - 1
    rows = []
    for side in range(sides):
        index = list(range(n)) if side == 0 else [0] + [n - 1 + g for g in range(1, n)]
        for g in range(n - 2):
            row = np.zeros(width)
            row[index[g]] += 1.0
            row[index[g + 1]] -= 2.0
            row[index[g + 2]] += 1.0
            rows.append(row)
    return np.asarray(rows).reshape(-1, width)


def _with_ds(b_map: np.ndarray) -> np.ndarray:
    """(Q, P) full map: the b columns, then d and s."""
    dist, p = b_map.shape
    out = np.zeros((dist + 2, p + 2))
    out[:dist, :p] = b_map
    out[dist, p] = 1.0
    out[dist + 1, p + 1] = 1.0
    return out


def _solve(
    design: _Design, full_map: np.ndarray, rhs_raw: np.ndarray, penalty: np.ndarray | None, what: str, minimum: int
) -> np.ndarray:
    """Least squares (H, P) for every head: (E^T G E + penalty) theta = E^T rhs, columns scaled to a
    unit diagonal; refuses a rank-deficient system."""
    gram = full_map.T @ design.gram @ full_map
    if penalty is not None:
        gram = gram + penalty
    scale = np.sqrt(np.diag(gram))
    if np.any(scale <= 0):
        raise BiasFitError(f"{what}: a parameter touches no allowed entry at N = {design.num_tokens}")
    scaled = gram / np.outer(scale, scale)
    eig = np.linalg.eigvalsh(scaled)
    if eig[0] < RANK_TOLERANCE * eig[-1]:
        raise BiasFitError(
            f"{what}: the logits at N = {design.num_tokens} do not determine the fit "
            f"(smallest scaled eigenvalue {eig[0]:.3g}); expected N >= {minimum}"
        )
    rhs = rhs_raw @ full_map / scale
    return np.linalg.solve(scaled, rhs.T).T / scale


def _residual_r2(logits: np.ndarray, centred: np.ndarray, design: _Design, raw_theta: np.ndarray) -> np.ndarray:
    """(H,) R^2 of raw parameters (H, Q) (values at every distance column, then d, s) on L~; 1 where
    SS_tot is at the rounding level of the logits (rows constant: nothing to explain)."""
    q = design.size
    fitted = raw_theta[:, design.column] + raw_theta[:, q - 2, None, None] * np.eye(design.num_tokens)
    fitted[:, :, 0] += raw_theta[:, q - 1, None]
    fitted = _centre(fitted, design)
    total = (centred**2).sum(axis=(-2, -1))
    resid = ((centred - fitted) ** 2).sum(axis=(-2, -1))
    floor = (64 * np.finfo(np.float64).eps) ** 2 * (np.where(design.allowed, logits, 0.0) ** 2).sum(axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > floor, 1.0 - resid / np.where(total > floor, total, 1.0), 1.0)


def _distance_values(n: int, causal: bool) -> np.ndarray:
    """(distances,) g at every distance column."""
    g = np.arange(n, dtype=np.float64)
    return g if causal else np.concatenate([g, g[1:]])


def _kerple_shape(family: str, g, r2, xp=np):
    """phi(g; r2) with b = -r1 phi: log(1 + r2 g) or g^r2 (r2 > 0, so 0^r2 = 0); ``xp`` NumPy or jax.numpy."""
    return xp.log1p(r2 * g) if family == "kerple-log" else xp.power(g, r2)


def _fit_alibi(design, centred, rhs_raw, what):
    g = _distance_values(design.num_tokens, design.causal)
    theta = _solve(design, _with_ds(-g[:, None]), rhs_raw, None, what, MIN_TOKENS["alibi"])
    rising = theta[:, 0] < 0
    if rising.any():  # m >= 0: the constrained optimum of a rising line is m = 0
        ds = _solve(design, _with_ds(np.zeros((g.size, 0))), rhs_raw[rising], None, what, MIN_TOKENS["alibi"])
        theta[rising] = np.column_stack([np.zeros(rising.sum()), ds])
    raw = np.concatenate([-theta[:, :1] * g, theta[:, 1:]], axis=1)
    return theta[:, :1], theta[:, 1], theta[:, 2], raw


def _fit_table(design, centred, rhs_raw, smoothness, what):
    n, causal = design.num_tokens, design.causal
    b_map = _table_map(n, causal)
    full_map = _with_ds(b_map)
    penalty = None
    if smoothness > 0 and n >= 3:
        diff = _second_differences(n, causal) @ b_map
        penalty = np.zeros((full_map.shape[1],) * 2)
        penalty[:-2, :-2] = smoothness * diff.T @ diff
    theta = _solve(design, full_map, rhs_raw, penalty, what, MIN_TOKENS["table"])
    values = theta[:, :-2] @ b_map.T  # (H, distances)
    if causal:
        params = values
    else:
        params = np.concatenate([values[:, :n], np.zeros((values.shape[0], 1)), values[:, n:]], axis=1)
    raw = np.concatenate([values, theta[:, -2:]], axis=1)
    return params, theta[:, -2], theta[:, -1], raw


def _projected_loss(family: str, g, gram, rhs, total):
    """JAX: u (1,) = log r2 -> the residual SS of the best (r1, d, s) at r2 = e^u (variable projection)."""
    import jax.numpy as jnp

    q = gram.shape[0]

    def loss(u):
        phi = _kerple_shape(family, g, jnp.exp(u[0]), jnp)
        phi = phi / jnp.sqrt(jnp.sum(phi**2))
        e = jnp.zeros((q, 3)).at[:-2, 0].set(-phi).at[-2, 1].set(1.0).at[-1, 2].set(1.0)
        r = e.T @ rhs
        return total - r @ jnp.linalg.solve(e.T @ gram @ e, r)

    return loss


@functools.cache
def _refiner(family: str):
    """jit(vmap over heads): (u0 (H, 1), g, gram, rhs (H, Q), total (H,)) -> (u (H, 1), loss (H,)) after
    ``LBFGS_STEPS`` steps of optax's L-BFGS on ``_projected_loss``."""
    import jax
    import optax

    opt = optax.lbfgs()

    def refine(u0, g, gram, rhs, total):
        loss = _projected_loss(family, g, gram, rhs, total)
        value_and_grad = optax.value_and_grad_from_state(loss)

        def body(carry, _):
            u, state = carry
            value, grad = value_and_grad(u, state=state)
            with jax.numpy_dtype_promotion("standard"):  # optax's L-BFGS mixes int32 and int64 counters
                updates, state = opt.update(grad, state, u, value=value, grad=grad, value_fn=loss)
            return (optax.apply_updates(u, updates), state), None

        (u, _), _ = jax.lax.scan(body, (u0, opt.init(u0)), None, length=LBFGS_STEPS)
        return u, loss(u)

    return jax.jit(jax.vmap(refine, in_axes=(0, None, None, 0, 0)))


def _grid_losses(family, g, design, rhs_raw, totals, what):
    """(grid, H) projected residual SS at every r2 of ``R2_GRID``, and (grid, H) whether r1 < 0 there."""
    out = np.full((R2_GRID.size, rhs_raw.shape[0]), np.inf)
    rising = np.ones_like(out, bool)
    for k, r2 in enumerate(R2_GRID):
        phi = _kerple_shape(family, g, r2)
        e = _with_ds(-(phi / np.linalg.norm(phi))[:, None])
        small = e.T @ design.gram @ e
        r = rhs_raw @ e
        try:
            coef = np.linalg.solve(small, r.T)
        except np.linalg.LinAlgError:
            continue
        out[k] = totals - np.einsum("hp,ph->h", r, coef)
        rising[k] = coef[0] < 0
    if not np.isfinite(out).any(axis=0).all():
        raise BiasFitError(f"{what}: no r2 on the grid gives a solvable fit at N = {design.num_tokens}")
    return out, rising


def _kerple_at(design, g, rhs, total, family, r2, what):
    """(r1, d, s, SS_res) of one head (rhs (1, Q)) at a fixed r2 > 0, or None where r1 < 0."""
    phi = _kerple_shape(family, g, r2)
    full_map = _with_ds(-phi[:, None])
    theta = _solve(design, full_map, rhs, None, what, MIN_TOKENS[family])[0]
    if theta[0] < 0:
        return None
    return theta, float(total - theta @ (rhs[0] @ full_map))


def _fit_kerple(design, centred, rhs_raw, family, what):
    """Variable projection (module docstring). Per head the candidates are the L-BFGS point and the best grid
    point with r1 >= 0; the one of least residual wins, and b = 0 (r1 = r2 = 0) when neither has r1 >= 0 or
    b = 0 fits better (the constraint r1 >= 0 active)."""
    import jax
    import jax.numpy as jnp

    n, causal = design.num_tokens, design.causal
    g = _distance_values(n, causal)
    totals = (centred**2).sum(axis=(-2, -1))
    grid, rising = _grid_losses(family, g, design, rhs_raw, totals, what)
    start = np.log(R2_GRID[np.argmin(grid, axis=0)])
    with jax.enable_x64(True):
        u, value = _refiner(family)(
            jnp.asarray(start[:, None]),
            jnp.asarray(g),
            jnp.asarray(design.gram),
            jnp.asarray(rhs_raw),
            jnp.asarray(totals),
        )
        u, value = np.asarray(u, np.float64)[:, 0], np.asarray(value, np.float64)
    with np.errstate(over="ignore"):
        refined = np.exp(u)
    constrained = np.where(rising, np.inf, grid)
    heads = rhs_raw.shape[0]
    params, diagonal, sink = np.empty((heads, 2)), np.empty(heads), np.empty(heads)
    raw = np.empty((heads, design.size))
    flat_map = _with_ds(np.zeros((g.size, 0)))
    for h in range(heads):
        rhs = rhs_raw[h : h + 1]
        ds = _solve(design, flat_map, rhs, None, what, MIN_TOKENS[family])[0]
        best = (0.0, 0.0, ds[0], ds[1], float(totals[h] - ds @ (rhs[0] @ flat_map)))
        candidates = [R2_GRID[np.argmin(constrained[:, h])]] if np.isfinite(constrained[:, h]).any() else []
        if np.isfinite(value[h]) and np.isfinite(refined[h]) and refined[h] > 0:
            candidates.append(refined[h])
        for r2 in candidates:
            found = _kerple_at(design, g, rhs, totals[h], family, float(r2), what)
            if found is not None and found[1] < best[4]:
                best = (found[0][0], float(r2), found[0][1], found[0][2], found[1])
        r1, r2, diagonal[h], sink[h], _ = best
        params[h] = r1, r2
        phi = _kerple_shape(family, g, r2) if r2 > 0 else np.zeros_like(g)
        raw[h] = np.concatenate([-r1 * phi, [diagonal[h], sink[h]]])
    return params, diagonal, sink, raw


def memory_bytes(num_heads: int, num_tokens: int, causal: bool) -> int:
    """Bytes one layer's fit holds (module docstring): the Gram matrix and its transforms, the per-row
    feature counts, and a few (H, N, N) temporaries."""
    n = int(num_tokens)
    q = (n if causal else 2 * n - 1) + 2
    return 8 * (3 * q * q + n * q + 4 * int(num_heads) * n * n)


def check_family(family: str, smoothness: float) -> None:
    """Refuse (``BiasFitError``, one line) a family outside ``FAMILIES`` or a smoothness that is not finite and >= 0."""
    if family not in FAMILIES:
        raise BiasFitError(f"--bias: unknown family {family!r}, expected one of {', '.join(FAMILIES)}")
    if not (math.isfinite(smoothness) and smoothness >= 0):
        raise BiasFitError(f"--smoothness: {smoothness!r}, expected a finite value >= 0")


def fit_bias(
    logits_of_layer,
    num_layers: int,
    num_heads: int,
    num_tokens: int,
    *,
    family: str = "table",
    causal: bool = True,
    smoothness: float = DEFAULT_SMOOTHNESS,
) -> BiasFit:
    """Fit the head model of the module docstring to every layer's (H, N, N) pre-softmax logits.

    ``logits_of_layer(t)`` returns layer t's logits (an (T, H, N, N) array may be passed as is);
    entries outside the mask are ignored. ``smoothness`` is the table's alpha (other families
    ignore it). Refused (``BiasFitError``): an unknown family, alpha < 0, non-finite logits on
    allowed entries, a memory estimate over the limit, N too short for the family.

    Examples
    --------
    >>> i, j = np.indices((6, 6))
    >>> logits = -0.5 * (i - j) + 1.0 * (i == j) + 0.25 * (j == 0) + 3.0 * i   # row offsets c_i = 3 i
    >>> fit = fit_bias(logits[None, None], 1, 1, 6, family="alibi")
    >>> [round(float(x), 12) for x in (fit.parameters[0, 0, 0], fit.diagonal[0, 0], fit.sink[0, 0], fit.r2[0, 0])]
    [0.5, 1.0, 0.25, 1.0]
    """
    from posbias.numerics import budget

    check_family(family, smoothness)
    t, h, n = int(num_layers), int(num_heads), int(num_tokens)
    if n < MIN_TOKENS[family]:
        raise BiasFitError(
            f"{family} bias fit: the logits at N = {n} do not determine the fit; expected N >= {MIN_TOKENS[family]}"
        )
    if isinstance(logits_of_layer, np.ndarray):
        array = logits_of_layer
        if array.shape != (t, h, n, n):
            raise BiasFitError(f"logits: expected shape {(t, h, n, n)}, got {array.shape}")
        logits_of_layer = lambda layer: array[layer]  # noqa: E731
    reason = budget.check(f"a {family} bias fit of H = {h} heads at N = {n}", memory_bytes(h, n, causal))
    if reason is not None:
        raise BiasFitError(reason)
    design = _design(n, causal)
    params, diagonal, sink, r2 = [], np.zeros((t, h)), np.zeros((t, h)), np.zeros((t, h))
    for layer in range(t):
        what = f"{family} bias fit, layer {layer}"
        logits = np.asarray(logits_of_layer(layer), np.float64)
        if logits.shape != (h, n, n):
            raise BiasFitError(f"{what}: expected logits of shape {(h, n, n)}, got {logits.shape}")
        if not np.all(np.isfinite(logits[:, design.allowed])):
            raise BiasFitError(f"{what}: the logits are not finite on the allowed entries")
        centred = _centre(logits, design)
        rhs_raw = _raw_rhs(centred, design)
        if family == "alibi":
            p, d, s, raw = _fit_alibi(design, centred, rhs_raw, what)
        elif family == "table":
            p, d, s, raw = _fit_table(design, centred, rhs_raw, smoothness, what)
        else:
            p, d, s, raw = _fit_kerple(design, centred, rhs_raw, family, what)
        params.append(p)
        diagonal[layer], sink[layer] = d, s
        r2[layer] = _residual_r2(logits, centred, design, raw)
    return BiasFit(family, n, bool(causal), float(smoothness), np.asarray(params), diagonal, sink, r2)


def pre_softmax_logits(content_mean: np.ndarray, scales, slopes, layer: int) -> np.ndarray:
    """(H, N, N) of layer t: s_t times the mean raw content q.k plus the ALiBi term -m_h |i - j| (module
    docstring; slopes 0 for rotary and learned positions, whose content already carries the positions).
    Falcon's bfloat16 ALiBi term differs from -m_h (i - j) by a row constant (ignored by the softmax and
    the fit) and its rounding, 2^-8 relative (``posbias.hf.forward.position_term``)."""
    content = np.asarray(content_mean[layer], np.float64)
    n = content.shape[-1]
    distance = np.abs(np.subtract.outer(np.arange(n), np.arange(n))).astype(np.float64)
    return float(scales[layer]) * content - np.asarray(slopes, np.float64)[:, None, None] * distance


def fit_measurement(m, *, family: str = "table", smoothness: float = DEFAULT_SMOOTHNESS) -> BiasFit:
    """``fit_bias`` of a ``posbias.measure.quantities.Measurement``'s mean pre-softmax logits (its content,
    per-layer softmax scales, slopes and mask)."""
    if m.scales is None:
        raise BiasFitError("measurement: no per-layer softmax scales recorded (measured by an older posbias)")
    if m.logits_note:
        raise BiasFitError(f"measurement: no bias fit: {m.logits_note}")
    t, h, n, _ = m.content_mean.shape
    return fit_bias(
        lambda layer: pre_softmax_logits(m.content_mean, m.scales, m.slopes, layer),
        t,
        h,
        n,
        family=family,
        causal=m.causal,
        smoothness=smoothness,
    )
