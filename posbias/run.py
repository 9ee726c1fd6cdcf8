"""Run a rollout and collect what the CLI reports: the glue between config and engines."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import posbias.numerics as nx
from posbias.numerics.summary import summarize
from posbias.errors import UserError

PRECISIONS = {"float64": jnp.float64, "float32": jnp.float32}
ENGINES = ("auto", "structured", "log", "fft", "dense")
FFT_FROM_TOKENS = 16384  # below this the exact recurrence is as fast
LOG_RETRY_MAX_WORK = 200_000_000  # T*H*N up to which auto silently redoes an underflowed run in log space
DENSE_MAX_TOKENS = 8192


class InputError(UserError):
    """Bad input that is not a config file problem (kernel files, option combinations)."""


@dataclass(frozen=True)
class RunResult:
    profile: np.ndarray  # renormalised, float64
    summary: dict
    matrix_rows: np.ndarray | None = None  # (N, 3): P_ii, P_i0, row entropy (dense runs)
    log_profile: np.ndarray | None = None  # log p from the log-space engine
    diagonal: np.ndarray | None = None  # P_ii by the diagonal identity (C5(a))


@contextmanager
def _progress_bar(enabled: bool, label: str):
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(
        TextColumn(label), BarColumn(), TextColumn("{task.completed}/{task.total} layers"),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done, total):
            bar.update(task, completed=done, total=total)

        yield update


def _matrix_rows(p_matrix: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(p_matrix > 0, np.log(np.where(p_matrix > 0, p_matrix, 1.0)), 0.0)
    ent = -np.sum(p_matrix * logs, axis=1)
    return np.stack([np.diag(p_matrix), p_matrix[:, 0], ent], axis=1)


def _matrix_summary(rows: np.ndarray, p_matrix: np.ndarray) -> dict:
    return {
        "min_diagonal": float(rows[:, 0].min()),
        "max_first_column": float(rows[:, 1].max()),
        "mean_row_entropy": float(rows[:, 2].mean()),
        "max_row_sum_error": float(np.abs(p_matrix.sum(axis=1) - 1.0).max()),
    }


def run_stack(
    stack: nx.AlibiStack,
    num_tokens: int,
    *,
    engine: str = "auto",
    precision: str = "float64",
    full_matrix: bool = False,
    diagonal: bool = False,
    show_progress: bool = False,
) -> RunResult:
    """Profile (and, when asked, the full P or its diagonal) of an ALiBi + content stack."""
    dtype = PRECISIONS[precision]
    p_diag = None
    if diagonal:
        if not nx.masks.is_lower_triangular(stack.mask, num_tokens):
            raise InputError(f"--diagonal: the identity P_ii = prod_t (1 - lambda_t (1 - A_ii)) needs lower-triangular "
                             f"kernels; mask {stack.mask.name} reads later tokens")
        p_diag = nx.diagonal_product(nx.kernel_diagonals(stack, num_tokens), stack.lambdas)
    with jax.default_matmul_precision("highest"):
        if engine == "dense" or full_matrix:
            if num_tokens > DENSE_MAX_TOKENS:
                raise InputError(
                    f"--full / --engine dense: N = {num_tokens} is too large for dense N x N products "
                    f"(at most {DENSE_MAX_TOKENS}); use the structured engine for the profile"
                )
            p_matrix, diag = nx.dense_rollout(stack, num_tokens, dtype)
            p_matrix, diag = np.asarray(p_matrix, np.float64), np.asarray(diag, np.float64)
            p_raw = p_matrix[-1]
            mins, lasts, used = diag.min(axis=1), diag[:, -1], "dense"
        if engine != "dense":
            chosen = engine
            if engine == "auto":
                fft_ok = nx.toeplitz.supports(stack.mask) and num_tokens >= FFT_FROM_TOKENS
                chosen = "fft" if fft_ok else "structured"
            work = stack.num_layers * stack.num_heads * num_tokens
            with _progress_bar(show_progress and work >= 50_000_000, "rollout") as progress:
                res = nx.profile(
                    stack, num_tokens, engine=chosen, dtype=dtype,
                    layers_per_call=max(1, stack.num_layers // 20) if progress else None,
                    progress=progress,
                )
                underflow = res.probabilities.min() < 1e-280
                if engine == "auto" and underflow and stack.mask.past_window is None and work <= LOG_RETRY_MAX_WORK:
                    # The profile left the float64 range: redo it in log space.
                    res = nx.profile(stack, num_tokens, engine="log", dtype=dtype, progress=progress)
                    underflow = False
            p_raw, mins, lasts, used = res.probabilities, res.min_self_weight, res.last_self_weight, res.engine
            log_p = res.log_probabilities if used == "log" else None
    p, summary = summarize(p_raw, stack, num_tokens, mins, lasts)
    summary.update(engine=used, precision=precision)
    if engine != "dense":
        summary["underflow_below_1e-280"] = int(np.sum(p_raw < 1e-280)) if underflow else 0
    rows = None
    if full_matrix:
        rows = _matrix_rows(p_matrix)
        summary["matrix"] = _matrix_summary(rows, p_matrix)
    if engine == "dense":
        log_p = None
    elif log_p is not None:
        log_p = log_p - np.log(np.sum(p_raw)) if np.sum(p_raw) > 0 else log_p
    if p_diag is not None:
        k = int(np.argmin(p_diag))
        summary["diagonal"] = {"min": float(p_diag[k]), "argmin": k}
    return RunResult(p, summary, rows, log_p, p_diag)


def load_kernels(path: Path, schedule: str | None, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """Measured-kernel mode: (T, N, N) kernels from .npy/.npz and lambda_t from the file or --schedule."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a .npy/.npz array file ({exc})") from None
    lambdas = None
    if isinstance(loaded, np.lib.npyio.NpzFile):
        if "kernels" not in loaded.files:
            raise InputError(f"{path}: expected an array named 'kernels' in the .npz (found {loaded.files})")
        kernels = loaded["kernels"]
        lambdas = loaded["lambdas"] if "lambdas" in loaded.files else None
    else:
        kernels = loaded
    if not np.issubdtype(kernels.dtype, np.floating):
        raise InputError(f"{path}: kernels: expected floating-point values, got dtype {kernels.dtype}")
    kernels = kernels.astype(np.float64)
    try:
        nx.validate_kernels(kernels, causal=causal)
    except nx.KernelError as exc:
        raise InputError(f"{path}: {exc}") from None
    t = kernels.shape[0]
    if schedule is not None:
        try:
            lambdas, clipped = nx.schedules.evaluate(nx.schedules.parse(schedule), t)
        except ValueError as exc:
            raise InputError(f"--schedule: {exc}") from None
    elif lambdas is None:
        raise InputError(f"{path}: no 'lambdas' array in the file; give --schedule SPEC")
    lambdas = np.asarray(lambdas, np.float64).reshape(-1)
    if lambdas.shape != (t,) or not np.all(np.isfinite(lambdas)) or lambdas.min() < 0 or lambdas.max() > 1:
        raise InputError(f"{path}: lambdas: expected {t} finite values in [0, 1], got shape {lambdas.shape}")
    return kernels, lambdas


def run_kernels(kernels: np.ndarray, lambdas: np.ndarray, *, causal: bool, precision: str = "float64") -> RunResult:
    """Profile and full-P diagnostics of measured kernels by dense products."""
    dtype = PRECISIONS[precision]
    with jax.default_matmul_precision("highest"):
        k = jnp.asarray(kernels, dtype)
        lam = jnp.asarray(lambdas, dtype)
        p_raw = np.asarray(nx.profile_from_kernels(k, lam), np.float64)
    diag = np.diagonal(kernels, axis1=1, axis2=2)
    t, n, _ = kernels.shape
    stack_like = nx.AlibiStack.build(lambdas, np.zeros((t, 1)), mask=nx.Causal() if causal else nx.Full())
    p, summary = summarize(p_raw, stack_like, n, diag.min(axis=1), diag[:, -1])
    summary.update(num_heads=None, mask="measured (causal)" if causal else "measured",
                   engine="dense-kernels", precision=precision)
    return RunResult(p, summary)
