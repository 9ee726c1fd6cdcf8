"""Run a rollout and collect what the CLI and the API report: the glue between stacks and engines."""

from __future__ import annotations

import dataclasses
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from posbias.errors import UserError

PRECISIONS = ("float64", "float32")
PROGRESS_FROM_WORK = 50_000_000  # T*H*N from which a progress bar is shown
MAX_TOKENS = 2**53  # larger N are refused before any estimate (sizes stay exact floats)


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
    if not (enabled and sys.stderr.isatty()):  # rich draws nothing useful without a terminal
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(
        TextColumn(label), BarColumn(), TextColumn(f"{{task.completed}}/{{task.total}} {unit}"),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), transient=True,
        console=Console(stderr=True),  # stdout stays the results' (pipes, --json)
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


def run_stack(  # noqa: C901 (one branch per refused option; split the checks from the run; issue 20 §4)
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
    from posbias.numerics.summary import DiagonalSummary, MatrixSummary

    if precision not in PRECISIONS:
        raise InputError(f"precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    if num_tokens is None:
        num_tokens = getattr(stack, "num_tokens", None)
        if num_tokens is None:
            raise InputError("num_tokens: required for an ALiBi stack")
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, (int, np.integer)) or num_tokens < 1:
        raise InputError(f"--tokens: expected a positive integer, got {num_tokens!r}")
    if num_tokens > MAX_TOKENS:
        digits = len(str(int(num_tokens)))
        shown = str(num_tokens) if digits <= 20 else f"a {digits}-digit number"
        raise InputError(f"--tokens: N = {shown} is too large, expected at most 2^53 (far beyond any memory)")
    if isinstance(stack, nx.KernelStack) and engine not in ("auto", "measured"):
        raise InputError(f"--engine {engine}: measured kernels run on the measured engine (use auto)")
    dtype = np.float64 if precision == "float64" else np.float32
    # Options that cannot apply are refused before the profile is computed (no minutes lost).
    if diagonal and isinstance(getattr(stack, "block", stack), nx.BiasStack):  # periodic bias stacks too
        raise InputError("--diagonal: the O(T N) diagonal identity is not implemented for relative biases yet "
                         "(--full gives P's diagonal by dense products)")
    if diagonal and not stack.causal(num_tokens):
        raise InputError(f"--diagonal: the identity P_ii = prod_t (1 - lambda_t (1 - A_ii)) needs "
                         f"lower-triangular kernels; mask {stack.mask_name} reads later tokens")
    if full_matrix and not isinstance(stack, nx.KernelStack):
        reason = nx.Dense().supports(stack, num_tokens)
        if reason:
            raise InputError(f"--full: {reason}")
        from posbias.numerics import budget

        reason = budget.check(f"--full: the dense P at N = {num_tokens}",
                              nx.Dense().memory_bytes(stack.num_layers, stack.num_heads, num_tokens))
        if reason:
            raise InputError(reason)
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
            if isinstance(stack, nx.KernelStack):
                p_matrix = np.asarray(nx.rollout_matrix(stack.kernels, stack.lambdas), np.float64)
            else:
                rollout = nx.dense.bias_rollout if isinstance(stack, nx.BiasStack) else nx.dense_rollout
                p_matrix = np.asarray(rollout(stack, num_tokens, dtype)[0], np.float64)
            rows = _matrix_rows(p_matrix)
            extra["matrix"] = MatrixSummary(
                float(rows[:, 0].min()), float(rows[:, 1].max()), float(rows[:, 2].mean()),
                float(np.abs(p_matrix.sum(axis=1) - 1.0).max()),
            )
    except nx.Unsupported as exc:
        raise InputError(f"--engine {engine}: {str(exc).split(': ', 1)[-1]}") from None
    except nx.StackError as exc:  # a bias evaluated at this N (non-finite, overflow after tau)
        raise InputError(f"--bias: {exc}") from None
    summary = dataclasses.replace(nx.summarize(prof, stack, precision=precision), **extra)
    p, logp, _ = nx.summary.normalised(prof)
    log_out = logp if prof.extended_range and bool(np.any(p < nx.engine.UNDERFLOW)) else None
    return RunResult(p, summary, log_out, p_diag, rows)


def log_diagonal(stack, num_tokens: int) -> np.ndarray:
    """(N,) log P_ii = sum_t log(1 - lambda_t (1 - A^(t)_ii)) (C5(a), lower-triangular kernels) for
    measured kernels, an ALiBi stack or a compact periodic stack (its distinct layers, counted)."""
    from posbias import numerics as nx

    if isinstance(stack, nx.KernelStack):
        weights, lambdas = np.diagonal(stack.kernels, axis1=1, axis2=2), stack.lambdas
    elif hasattr(stack, "log_diagonal"):  # PeriodicStack: never T-long arrays
        weights = np.concatenate([nx.kernel_diagonals(s, num_tokens) for s in stack.distinct])
        return stack.log_diagonal(weights)
    else:
        weights, lambdas = nx.kernel_diagonals(stack, num_tokens), stack.lambdas
    with np.errstate(divide="ignore"):
        return np.sum(np.log1p(-np.asarray(lambdas)[:, None] * (1.0 - weights)), axis=0)


def _npy_header(handle) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) from an .npy stream's header, reading no array data."""
    version = np.lib.format.read_magic(handle)
    try:
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
    except (ValueError, SyntaxError, TypeError) as exc:
        if "EOF" in str(exc):
            raise
        raise ValueError(f"malformed .npy header ({type(exc).__name__})") from None
    if any(int(n) < 0 for n in shape):
        raise ValueError(f"header declares a negative dimension {shape}")
    return shape, dtype


def _declared_arrays(path: Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """name -> (shape, dtype) of every array in a .npy/.npz file, from headers only (a zip bomb is
    refused before anything is decompressed beyond its header)."""
    import zipfile

    with open(path, "rb") as f:
        magic = f.read(6)
        f.seek(0)
        if magic == b"\x93NUMPY":
            return {"kernels": _npy_header(f)}
    if not zipfile.is_zipfile(path):
        raise ValueError("neither an .npy array nor an .npz archive" if magic else "the file is empty")
    out = {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if not info.filename.endswith(".npy"):
                continue
            name = info.filename[:-4]
            if name in out:
                raise ValueError(f"the archive holds two arrays named {name!r}")
            with z.open(info) as member:
                out[name] = _npy_header(member)
    return out


# What reading an array file can raise on a corrupt, truncated or hostile file (zlib.error,
# zipfile.BadZipFile, a header numpy cannot parse, an unsupported compression method ...).
def _read_errors():
    import zipfile
    import zlib

    return (OSError, ValueError, EOFError, KeyError, TypeError, SyntaxError, NotImplementedError,
            RuntimeError, zipfile.BadZipFile, zlib.error)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= 160 else line[:150] + "..."


def load_kernels(path: Path,  # noqa: C901 (file then header checks; split reading from checks; issue 20 §4)
                 schedule: str | None, causal: bool):
    """Measured-kernel mode: a KernelStack from .npy/.npz ('kernels', 'lambdas') and --schedule.

    Declared shapes and dtypes are checked against the memory limit and the expected
    layout before any array is read. Rows must sum to 1 within ``kernel_tolerance`` of the
    stored dtype; kernels stored below float64 precision are then renormalised row by row
    (the stochastic matrices they round), so the rollout keeps its mass."""
    from posbias import numerics as nx
    from posbias.numerics import budget

    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a folder, expected a .npy or .npz file")
    if not path.is_file():  # a device or a pipe: np.load and zipfile need a seekable file of known size
        raise InputError(f"{path}: is not a regular file, expected a .npy or .npz file")
    try:
        declared = _declared_arrays(path)
    except _read_errors() as exc:
        raise InputError(f"{path}: not a .npy/.npz array file ({_first_line(exc)})") from None
    if "kernels" not in declared:
        raise InputError(f"{path}: expected an array named 'kernels' in the .npz (found {sorted(declared)})")
    for name in ("kernels", "lambdas"):
        if name in declared:
            shape, dtype = declared[name]
            if not (np.issubdtype(dtype, np.floating) or (name == "lambdas" and np.issubdtype(dtype, np.integer)
                                                           and dtype != np.bool_)):
                raise InputError(f"{path}: {name}: expected floating-point values, got dtype {dtype}")
    shape = declared["kernels"][0]
    if len(shape) != 3:
        raise InputError(f"{path}: kernels must have shape (T, N, N), got {shape}")
    if shape[1] != shape[2] or shape[0] < 1 or shape[1] < 1:
        raise InputError(f"{path}: kernels must have shape (T, N, N) with T, N >= 1, got {shape}")
    if "lambdas" in declared and int(np.prod(declared["lambdas"][0], dtype=object)) != shape[0]:
        raise InputError(f"{path}: lambdas: expected {shape[0]} finite values in [0, 1] (one per layer of "
                         f"kernels {shape}), got shape {declared['lambdas'][0]}")
    reason = budget.check(f"kernels of shape {shape}", 3 * 8 * int(np.prod(shape, dtype=object)))
    if reason:
        raise InputError(f"{path}: {reason}")
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                kernels = loaded["kernels"]
                lambdas = loaded["lambdas"] if "lambdas" in loaded.files else None
        else:
            kernels, lambdas = loaded, None
    except _read_errors() as exc:
        raise InputError(f"{path}: unreadable array ({_first_line(exc)})") from None
    if kernels.shape != tuple(shape):  # the file changed since its header was read
        raise InputError(f"{path}: kernels: read shape {kernels.shape}, but the header declared {shape}")
    warnings = []
    t = kernels.shape[0]
    if schedule is not None:
        try:
            with np.errstate(all="ignore"):
                lambdas, clipped = nx.schedules.evaluate(nx.schedules.parse(schedule), t)
        except ValueError as exc:
            raise InputError(f"--schedule: {exc}") from None
        if clipped:
            warnings.append(clip_warning(clipped))
    elif lambdas is None:
        raise InputError(f"{path}: no 'lambdas' array in the file; give --schedule SPEC")
    else:
        lam = np.asarray(lambdas, dtype=np.float64).reshape(-1)
        bad = np.flatnonzero(~(np.isfinite(lam) & (lam >= 0) & (lam <= 1)))
        if bad.size:
            raise InputError(f"{path}: lambdas[{bad[0]}] = {lam[bad[0]]:g}, expected a value in [0, 1] "
                             "(or give --schedule SPEC, which clips)")
        lambdas = lam
    tol = nx.stack.kernel_tolerance(kernels.dtype, kernels.shape[-1])
    try:
        stack = nx.KernelStack.build(kernels, lambdas, causal=causal, tol=tol)
    except nx.KernelError as exc:
        raise InputError(f"{path}: {exc}") from None
    if float(np.finfo(kernels.dtype).eps) > float(np.finfo(np.float64).eps):
        k = np.clip(stack.kernels, 0.0, None)  # within tolerance: tiny negative rounding goes to 0
        if causal:
            k = np.tril(k)
        stack = nx.KernelStack(k / k.sum(axis=2, keepdims=True), stack.lambdas, stack.declared_causal)
    return stack, tuple(warnings)


def clip_warning(clipped: list[int]) -> str:
    shown = ", ".join(map(str, clipped[:10])) + (" ..." if len(clipped) > 10 else "")
    return f"lambda clipped to [0, 1] in layer(s) {shown}"
