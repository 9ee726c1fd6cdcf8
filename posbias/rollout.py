"""One rollout as the CLI and the API report it: the options checked, then the profile p, its
summary and, when asked, the diagonal of P (C5(a)) or the whole of P (dense products)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from posbias.errors import UserError

PRECISIONS = ("float64", "float32")
PROGRESS_FROM_WORK = 50_000_000  # T*H*N from which a progress bar is shown
MAX_TOKENS = 2**53  # larger N are refused before any estimate (sizes stay exact floats)


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


def _matrix_rows(p_matrix: np.ndarray) -> np.ndarray:
    """(N, 3): P_ii, P_i0 and the entropy -sum_j P_ij log P_ij of each row (0 log 0 = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(p_matrix > 0, np.log(np.where(p_matrix > 0, p_matrix, 1.0)), 0.0)
    ent = -np.sum(p_matrix * logs, axis=1)
    return np.stack([np.diag(p_matrix), p_matrix[:, 0], ent], axis=1)


def _num_tokens(stack, num_tokens) -> int:
    """N: given, or the stack's own (measured kernels); a positive integer at most 2^53."""
    if num_tokens is None:
        num_tokens = getattr(stack, "num_tokens", None)
        if num_tokens is None:
            raise UserError("num_tokens: required for an ALiBi stack")
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, (int, np.integer)) or num_tokens < 1:
        raise UserError(f"--tokens: expected a positive integer, got {num_tokens!r}")
    if num_tokens > MAX_TOKENS:
        digits = len(str(int(num_tokens)))
        shown = str(num_tokens) if digits <= 20 else f"a {digits}-digit number"
        raise UserError(f"--tokens: N = {shown} is too large, expected at most 2^53 (far beyond any memory)")
    return num_tokens


def _refuse_options(stack, num_tokens: int, engine: str, full_matrix: bool, diagonal: bool) -> None:
    """Options that cannot apply are refused before the profile is computed (no minutes lost)."""
    from posbias import numerics as nx

    if isinstance(stack, nx.KernelStack) and nx.engines.get(engine).supports(stack, stack.num_tokens) is not None:
        raise UserError(f"--engine {engine}: measured kernels run on the measured engine (use auto)")
    if diagonal and isinstance(getattr(stack, "block", stack), nx.BiasStack):  # periodic bias stacks too
        raise UserError(
            "--diagonal: the O(T N) diagonal identity is not implemented for relative biases yet "
            "(--full gives P's diagonal by dense products)"
        )
    if diagonal and not stack.causal(num_tokens):
        raise UserError(
            f"--diagonal: the identity P_ii = prod_t (1 - lambda_t (1 - A_ii)) needs "
            f"lower-triangular kernels; mask {stack.mask_name} reads later tokens"
        )
    if full_matrix and not isinstance(stack, nx.KernelStack):
        reason = nx.Dense().supports(stack, num_tokens)
        if reason:
            raise UserError(f"--full: {reason}")
        from posbias.numerics import budget

        reason = budget.check(
            f"--full: the dense P at N = {num_tokens}",
            nx.Dense().memory_bytes(stack.num_layers, stack.num_heads, num_tokens),
        )
        if reason:
            raise UserError(reason)


def _full_matrix(stack, num_tokens: int, dtype) -> np.ndarray:
    """P by dense products, as float64: the measured kernels' rollout or the stack's dense route."""
    from posbias import numerics as nx

    if isinstance(stack, nx.KernelStack):
        return np.asarray(nx.rollout_matrix(stack.kernels, stack.lambdas), np.float64)
    rollout = nx.dense.bias_rollout if isinstance(stack, nx.BiasStack) else nx.dense_rollout
    return np.asarray(rollout(stack, num_tokens, dtype)[0], np.float64)


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
    from posbias import numerics as nx
    from posbias.diagonal import log_diagonal
    from posbias.numerics.summary import DiagonalSummary, MatrixSummary
    from posbias.runtime.progress import progress_bar

    if precision not in PRECISIONS:
        raise UserError(f"precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    num_tokens = _num_tokens(stack, num_tokens)
    dtype = np.float64 if precision == "float64" else np.float32
    _refuse_options(stack, num_tokens, engine, full_matrix, diagonal)
    work = stack.num_layers * (stack.num_heads or 1) * num_tokens
    try:
        with progress_bar(show_progress and work >= PROGRESS_FROM_WORK, "rollout") as progress:
            prof = nx.profile(stack, num_tokens, engine=engine, dtype=dtype, progress=progress)
        p_diag = rows = None
        extra = {}
        if diagonal:
            log_diag = log_diagonal(stack, num_tokens)
            p_diag = np.exp(log_diag)
            k = int(np.argmin(log_diag))
            extra["diagonal"] = DiagonalSummary(float(p_diag[k]), k)
        if full_matrix:
            p_matrix = _full_matrix(stack, num_tokens, dtype)
            rows = _matrix_rows(p_matrix)
            extra["matrix"] = MatrixSummary(
                float(rows[:, 0].min()),
                float(rows[:, 1].max()),
                float(rows[:, 2].mean()),
                float(np.abs(p_matrix.sum(axis=1) - 1.0).max()),
            )
    except nx.Unsupported as exc:
        raise UserError(f"--engine {engine}: {str(exc).split(': ', 1)[-1]}") from None
    except nx.StackError as exc:  # a bias evaluated at this N (non-finite, overflow after tau)
        raise UserError(f"--bias: {exc}") from None
    summary = dataclasses.replace(nx.summarize(prof, stack, precision=precision), **extra)
    p, logp, _ = nx.summary.normalised(prof)
    log_out = logp if prof.extended_range and bool(np.any(p < nx.engine.UNDERFLOW)) else None
    return RunResult(p, summary, log_out, p_diag, rows)
