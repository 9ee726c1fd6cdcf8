"""The bias FFT engine: relative-bias stacks (``BiasStack``, THEORY.md C7) at large N, O(T (U + 1) N log N).

Same walk as the exact bias engine (numerics/bias_engine.py, formulas in
numerics/_bias_scan.py): v <- (1 - lambda_t) v + lambda_t v A^(t), each row of head h
normalised by the head's cumulative weights (C7(a)), never the N x N matrix. Head h of a
layer (logits already divided by tau) has past logits l(g) = b(g) + [g = 0] d for g <= L
(L the window's reach), sink logits l(i) + s in column 0, shift M_h (its largest logit),
weights e_h(g) = exp(l(g) - M_h), es_h(i) = exp(l(i) + s - M_h), normalisers
Z_i = W(i - 1) + es(i) (i <= L), W(L) (i > L), and u_h = w_h v / Z. Then

    (vA)_j = sum_h [ u_{h,j} e_h(0) + sum_{g >= 1} u_{h,j+g} e_h(g) ]   (j >= 1),
    (vA)_0 = sum_h sum_i u_{h,i} es_h(i).

The diagonal term and column 0 are summed directly (non-negative terms, relative error
O(N eps)). The off-diagonal part is a Toeplitz correlation: with k_u(g) = exp(b_u(g) - M_u)
for 1 <= g <= L (0 elsewhere; M_u its largest value) for each distinct bias u, e_h(g) =
exp(M_u - M_h) k_u(g) (a factor <= 1), so the heads of one bias share one input
y_u = sum_{h: bias u} exp(M_u - M_h) u_h (entry 0 set to 0: it reaches only output 0), and

    sum_h sum_{g >= 1} u_{h,j+g} e_h(g) = sum_u (y_u * k_u)_j   (correlation),

one real FFT of length P = 2^ceil(log2 2N) per distinct bias per layer, one inverse per
layer; the kernels' transforms are computed once per stack. Causal and sliding-window
masks only (no token reads a later one); ALiBi stacks keep the O(T H N) structured engine.

Floating point. Each FFT of length P has a relative 2-norm error at most
eps_F = log2(P) (eps + gamma_4 (sqrt 2 + eps)) < 7 eps log2(P) (Higham, *Accuracy and
Stability of Numerical Algorithms*, 2nd ed., Thm 24.2). Bounding |Y|_inf <= ||y||_1 and
|K|_inf <= ||k||_1, the correlation computed from three such transforms and a complex
product has, to first order in eps,

    ||c_hat - c||_2 <= gamma (||y||_2 ||k||_1 + ||y||_1 ||k||_2),  gamma = 2 (3 eps_F + 3 eps)

(the 2 covers the sum over distinct biases and the second-order terms). That error is
*absolute*: it does not shrink with the entry. Every layer is linear in v and the later
layers are row-stochastic, so an error vector delta in v reaches entry j of p as
|(delta R')_j| <= ||delta||_2 ||R'(:, j)||_2 <= sqrt(N) ||delta||_2 (entries of R' <= 1).
The engine sums lambda_t sqrt(N) gamma (...) over the layers with the norms of that run,
and returns that sum B divided by max p as ``Profile.resolution``: entries below
``resolution * max p`` are not determined (they may come back as noise or 0) and
``Profile.unresolved()`` marks them; the ``auto`` engine re-runs such profiles on the exact
bias engine where that is affordable (numerics/auto.py). Since ||delta R'||_1 <= ||delta||_1 <=
sqrt(N) ||delta||_2, B also bounds the 1-norm of the error, so |sum p - 1| <= B (plus O(N eps)).
A run whose B exceeds ``MAX_BOUND`` = 1e-6 (the mass tolerance of ``engine.implausible``) is
refused: rows far below their head's largest logit amplify the FFT's error by up to e^D, and
then the exact engine (which ``auto`` takes instead) is the route. The bound is a worst case,
often 10^4 to 10^6 times the measured error (about 1e-16 of max p). Each entry's error is at
most B plus the O(T N eps) relative error of the direct sums: resolved entries do not carry
float64 relative accuracy. A row whose largest logit lies more than ``MAX_DEFICIT`` = 600 nats
below its head's largest is refused, as by the exact engine.
Float64 only, NumPy (pocketfft) on the CPU; no JAX.

Examples
--------
>>> from posbias.numerics.bias import Bias, KerpleLog
>>> from posbias.numerics.bias_stack import BiasStack
>>> stack = BiasStack.build([1.0], Bias(KerpleLog(0.0, 1.0)))  # r1 = 0: uniform causal attention
>>> p = BiasFFT().profile(stack, 4)
>>> [round(x, 12) for x in p.probabilities.tolist()], p.path
([0.25, 0.25, 0.25, 0.25], 'fft')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.engine import Engine, Profile, Unsupported, linear_profile

if TYPE_CHECKING:
    from posbias.numerics.boundary import Stack

MAX_DEFICIT = 600.0  # nats, as the exact bias engine (numerics/_bias_scan.py)
MAX_BOUND = 1e-6  # the largest absolute error bound B (module docstring) a profile is returned with
EPS = float(np.finfo(np.float64).eps)


def fft_length(num_tokens: int) -> int:
    """P: the power of two >= 2N (a linear correlation of N entries without wrap-around)."""
    return 1 << max(1, (2 * int(num_tokens) - 1).bit_length())


def gamma(length: int) -> float:
    """The module docstring's first-order factor for one correlation by FFTs of ``length``."""
    eps_f = math.log2(length) * (EPS + 4 * EPS / (1 - 4 * EPS) * (math.sqrt(2) + EPS))
    return 2.0 * (3.0 * eps_f + 3.0 * EPS)


@dataclass(frozen=True)
class Kernels:
    """Per distinct bias u (rows): past logits l_u (g <= L, -inf beyond), the off-diagonal
    kernel's shift M_u, the conjugate transform of k_u and its norms ||k_u||_1, ||k_u||_2."""

    logits: np.ndarray
    shift: np.ndarray
    spectrum: np.ndarray
    norm1: np.ndarray
    norm2: np.ndarray


def kernels(past: np.ndarray, reach: int, length: int) -> Kernels:
    """The off-diagonal kernels k_u(g) = exp(l_u(g) - M_u), 1 <= g <= L, of the (U, N) past tables."""
    g = np.arange(past.shape[1])
    logits = np.where(g[None, :] <= reach, past, -np.inf)
    off = np.where(g[None, :] >= 1, logits, -np.inf)
    shift = off.max(axis=1)
    live = np.isfinite(shift)
    k = np.exp(off - np.where(live, shift, 0.0)[:, None])
    spectrum = np.conj(np.fft.rfft(k, n=length, axis=1))
    return Kernels(logits, np.where(live, shift, 0.0), spectrum, k.sum(axis=1), np.sqrt((k * k).sum(axis=1)))


def head_weights(logits: np.ndarray, diagonal: np.ndarray, sink: np.ndarray, reach: int):
    """Per head (H, N) of one layer: e, es, Z, the shift M (H,) and the layer's row deficit max D."""
    n = logits.shape[1]
    g = np.arange(n)
    lp = logits.copy()
    lp[:, 0] += diagonal
    reads_first = g <= reach
    ls = np.where(reads_first[None, :], lp + sink[:, None], -np.inf)
    top = np.maximum(lp.max(axis=1), ls.max(axis=1))
    e, es = np.exp(lp - top[:, None]), np.exp(ls - top[:, None])
    cum = np.cumsum(e, axis=1)
    before = np.concatenate([np.zeros((e.shape[0], 1)), cum[:, :-1]], axis=1)
    z = np.where(reads_first[None, :], before + es, cum[:, [reach]])
    pmax = np.maximum.accumulate(lp, axis=1)
    pbefore = np.concatenate([np.full((e.shape[0], 1), -np.inf), pmax[:, :-1]], axis=1)
    row = np.where(reads_first[None, :], np.maximum(pbefore, ls), pmax[:, [reach]])
    return e, es, z, top, float(np.max(top - row.min(axis=1)))


@dataclass(frozen=True)
class LayerWeights:
    """One layer's coefficients of v (all (N,) unless noted), so that with a_h = w_h / Z (H, N):
    diagonal = sum_h a_h e_h(0), sink = sum_h a_h es_h, and for the distinct biases ``biases`` of
    the layer coefficients (U_t, N) = sum_{h: bias u} exp(M_u - M_h) a_h (y_u = v * coefficients_u);
    the self-weights min_i A[i, i], A[N-1, N-1] and the row deficit max D."""

    diagonal: np.ndarray
    sink: np.ndarray
    biases: np.ndarray
    coefficients: np.ndarray
    min_self: float
    last_self: float
    deficit: float


def layer_weights(
    ker: Kernels, index: np.ndarray, diagonal: np.ndarray, sink: np.ndarray, weights: np.ndarray, reach: int
) -> LayerWeights:
    """The ``LayerWeights`` of one layer (heads' bias indices, d / tau, s / tau, head weights)."""
    e, es, z, top, deficit = head_weights(ker.logits[index], diagonal, sink, reach)
    a = weights[:, None] / z
    diag = (a * e[:, :1]).sum(axis=0)
    biases = np.array([b for b in np.unique(index) if ker.norm1[b] > 0], np.int64)  # norm 0: window of one token
    coefficients = (
        np.stack([(np.exp(ker.shift[b] - top[index == b])[:, None] * a[index == b]).sum(axis=0) for b in biases])
        if biases.size
        else np.zeros((0, e.shape[1]))
    )
    self_w = diag.copy()
    self_w[0] = float((a[:, 0] * es[:, 0]).sum())
    return LayerWeights(
        diag, (a * es).sum(axis=0), biases, coefficients, float(self_w.min()), float(self_w[-1]), deficit
    )


@dataclass(frozen=True)
class BiasFFT(Engine):
    """Causal and sliding-window ``BiasStack`` s by FFT correlation; linear float64, absolute resolution."""

    name = "bias-fft"

    def supports(self, stack: Stack, num_tokens: int) -> str | None:
        if not isinstance(stack, BiasStack):
            return f"expected a relative-bias stack (BiasStack), got {type(stack).__name__}"
        if stack.mask.reads_future:
            return f"handles causal and sliding-window masks only (mask {stack.mask.name} reads later tokens)"
        return None

    def needs_jax(self, stack: Stack, dtype) -> bool:
        return False

    def memory_bytes(self, num_layers: int, num_heads: int, num_tokens: int) -> int:
        length = fft_length(num_tokens)
        # per head: logits, e, es, Z, cumulative and running-max rows; per bias: y and its transform;
        # kernels' spectra (one per distinct bias, at most H here; ``compute`` checks the actual count)
        return 8 * (12 * num_heads * num_tokens + 4 * num_heads * length) + 64 * num_layers * num_heads

    def compute(self, stack: BiasStack, num_tokens: int, *, dtype, progress=None) -> Profile:
        if np.dtype(dtype) != np.float64:
            raise Unsupported(
                f"{self.name} engine: computes in float64 only (its resolution is float64's), "
                f"not {np.dtype(dtype).name}"
            )
        from posbias.numerics import budget

        n = int(num_tokens)
        length = fft_length(n)
        distinct = len(stack.biases)
        reason = budget.check(
            f"the kernel transforms of {distinct} distinct biases at N = {n}",
            8 * (2 * distinct * n + 2 * distinct * (length // 2 + 1)),
        )
        if reason is not None:
            raise Unsupported(f"{self.name} engine: {reason}")
        window = stack.mask.past_window
        reach = n - 1 if window is None else min(n - 1, int(window) - 1)
        past, _ = stack.tables(n)
        ker = kernels(past, reach, length)
        tau = stack.temperature
        diagonal, sink = stack.diagonal / tau, stack.sink / tau
        g1 = gamma(length)
        v = np.zeros(n)
        v[-1] = 1.0
        t_total = stack.num_layers
        mins, lasts = np.zeros(t_total), np.zeros(t_total)
        bound = 0.0
        key, weights = b"", None
        for done, t in enumerate(range(t_total - 1, -1, -1), start=1):
            params = (stack.bias_index[t], diagonal[t], sink[t], stack.head_weights[t])
            layer_key = b"".join(np.ascontiguousarray(x).tobytes() for x in params)
            if weights is None or layer_key != key:  # consecutive layers with the same heads share their weights
                key, weights = layer_key, layer_weights(ker, *params, reach)
            if not weights.deficit <= MAX_DEFICIT:
                raise Unsupported(
                    f"{self.name} engine: layer {t} has a row whose largest logit lies "
                    f"{weights.deficit:.4g} nats below its head's largest (beyond {MAX_DEFICIT:g}: "
                    "outside float64's range in linear arithmetic; the dense engine computes it)"
                )
            spectrum = np.zeros(length // 2 + 1, np.complex128)
            err = 0.0
            for b, coefficient in zip(weights.biases, weights.coefficients):
                y = coefficient * v
                y[0] = 0.0  # y_0 reaches output 0 only, which the sink sum replaces (and it may dominate the norms)
                spectrum += np.fft.rfft(y, n=length) * ker.spectrum[b]
                err += float(np.sqrt(y @ y)) * ker.norm1[b] + float(y.sum()) * ker.norm2[b]
            av = weights.diagonal * v
            if weights.biases.size:
                av += np.fft.irfft(spectrum, n=length)[:n]
            av[0] = float(weights.sink @ v)
            lam = float(stack.lambdas[t])
            v = (1.0 - lam) * v + lam * av
            bound += lam * math.sqrt(n) * g1 * err
            if not bound <= MAX_BOUND:
                raise Unsupported(
                    f"{self.name} engine: after layer {t} the FFT's error bound is {bound:.3g} > "
                    f"{MAX_BOUND:g} (rows far below their head's largest logit amplify it); "
                    "the exact bias engine computes this stack"
                )
            mins[t], lasts[t] = weights.min_self, weights.last_self
            if progress is not None:
                progress(done, t_total)
        top_p = float(np.max(v))
        resolution = float(bound) / top_p if top_p > 0 else math.inf
        return linear_profile(v, mins, lasts, engine=self.name, path="fft", resolution=resolution)
