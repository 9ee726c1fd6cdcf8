"""Run a rollout and collect what the CLI and the API report: the glue between stacks and engines."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from posbias.errors import UserError

PRECISIONS = ("float64", "float32")
PROGRESS_FROM_WORK = 50_000_000  # T*H*N from which a progress bar is shown


class InputError(UserError):
    """Bad input that is not a config file problem (kernel files, option combinations)."""


@dataclass(frozen=True)
class RunResult:
    """profile: the renormalised float64 profile; summary: its ``Summary``; log_profile: log p
    (renormalised) when entries fall below 1e-280 and the engine kept them (extended range);
    diagonal: P_ii by the C5(a) identity; matrix_rows: (N, 3) P_ii, P_i0, row entropy (dense)."""

    profile: np.ndarray
    summary: object
    log_profile: np.ndarray | None = None
    diagonal: np.ndarray | None = None
    matrix_rows: np.ndarray | None = None


@contextmanager
def progress_bar(enabled: bool, label: str, unit: str = "layers"):
    """A rich progress bar with ETA; yields ``update(done, total)`` or None when disabled."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(
        TextColumn(label), BarColumn(), TextColumn(f"{{task.completed}}/{{task.total}} {unit}"),
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


def run_stack(
    stack,
    num_tokens: int | None = None,
    *,
    engine: str = "auto",
    precision: str = "float64",
    full_matrix: bool = False,
    diagonal: bool = False,
    show_progress: bool = False,
) -> RunResult:
    """Profile, summary and, when asked, the full P (dense) or its diagonal (C5(a)) of a stack."""
    import jax.numpy as jnp

    from posbias import numerics as nx
    from posbias.numerics.summary import DiagonalSummary, MatrixSummary

    if precision not in PRECISIONS:
        raise InputError(f"precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    if num_tokens is None:
        num_tokens = getattr(stack, "num_tokens", None)
        if num_tokens is None:
            raise InputError("num_tokens: required for an ALiBi stack")
    if isinstance(stack, nx.KernelStack) and engine not in ("auto", "measured"):
        raise InputError(f"--engine {engine}: measured kernels run on the measured engine (use auto)")
    dtype = jnp.float64 if precision == "float64" else jnp.float32
    work = stack.num_layers * (stack.num_heads or 1) * num_tokens
    try:
        with progress_bar(show_progress and work >= PROGRESS_FROM_WORK, "rollout") as progress:
            prof = nx.profile(stack, num_tokens, engine=engine, dtype=dtype, progress=progress)
        p_diag = rows = None
        extra = {}
        if diagonal:
            if not stack.causal(num_tokens):
                raise InputError(f"--diagonal: the identity P_ii = prod_t (1 - lambda_t (1 - A_ii)) needs "
                                 f"lower-triangular kernels; mask {stack.mask_name} reads later tokens")
            self_weights = (np.diagonal(stack.kernels, axis1=1, axis2=2) if isinstance(stack, nx.KernelStack)
                            else nx.kernel_diagonals(stack, num_tokens))
            p_diag = nx.diagonal_product(self_weights, stack.lambdas)
            k = int(np.argmin(p_diag))
            extra["diagonal"] = DiagonalSummary(float(p_diag[k]), k)
        if full_matrix:
            if isinstance(stack, nx.KernelStack):
                p_matrix = np.asarray(nx.rollout_matrix(stack.kernels, stack.lambdas), np.float64)
            else:
                reason = nx.Dense().supports(stack, num_tokens)
                if reason:
                    raise InputError(f"--full: {reason}")
                p_matrix = np.asarray(nx.dense_rollout(stack, num_tokens, dtype)[0], np.float64)
            rows = _matrix_rows(p_matrix)
            extra["matrix"] = MatrixSummary(
                float(rows[:, 0].min()), float(rows[:, 1].max()), float(rows[:, 2].mean()),
                float(np.abs(p_matrix.sum(axis=1) - 1.0).max()),
            )
    except nx.Unsupported as exc:
        raise InputError(f"--engine {engine}: {str(exc).split(': ', 1)[-1]}") from None
    summary = dataclasses.replace(nx.summarize(prof, stack, precision=precision), **extra)
    p, logp, _ = nx.summary.normalised(prof)
    log_out = logp if prof.extended_range and bool(np.any(p < nx.engine.UNDERFLOW)) else None
    return RunResult(p, summary, log_out, p_diag, rows)


def load_kernels(path: Path, schedule: str | None, causal: bool):
    """Measured-kernel mode: a KernelStack from .npy/.npz ('kernels', 'lambdas') and --schedule."""
    from posbias import numerics as nx

    try:
        loaded = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"{path}: not a .npy/.npz array file ({exc})") from None
    lambdas = None
    try:
        if isinstance(loaded, np.lib.npyio.NpzFile):
            if "kernels" not in loaded.files:
                raise InputError(f"{path}: expected an array named 'kernels' in the .npz (found {loaded.files})")
            kernels = loaded["kernels"]
            lambdas = loaded["lambdas"] if "lambdas" in loaded.files else None
        else:
            kernels = loaded
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"{path}: unreadable array ({exc})") from None
    warnings = []
    if kernels.ndim != 3:
        raise InputError(f"{path}: kernels must have shape (T, N, N), got {kernels.shape}")
    t = kernels.shape[0]
    if schedule is not None:
        try:
            lambdas, clipped = nx.schedules.evaluate(nx.schedules.parse(schedule), t)
        except ValueError as exc:
            raise InputError(f"--schedule: {exc}") from None
        if clipped:
            warnings.append(clip_warning(clipped))
    elif lambdas is None:
        raise InputError(f"{path}: no 'lambdas' array in the file; give --schedule SPEC")
    if lambdas is not None and not np.issubdtype(np.asarray(lambdas).dtype, np.number):
        raise InputError(f"{path}: lambdas: expected numbers, got dtype {np.asarray(lambdas).dtype}")
    try:
        return nx.KernelStack.build(kernels, lambdas, causal=causal), tuple(warnings)
    except nx.KernelError as exc:
        raise InputError(f"{path}: {exc}") from None


def clip_warning(clipped: list[int]) -> str:
    shown = ", ".join(map(str, clipped[:10])) + (" ..." if len(clipped) > 10 else "")
    return f"lambda clipped to [0, 1] in layer(s) {shown}"
