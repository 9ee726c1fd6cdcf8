"""Measured-kernel mode: a ``KernelStack`` from a .npy/.npz file ('kernels', 'lambdas') and --schedule.

Declared shapes and dtypes (``posbias.io.array_headers``) are checked against the memory
limit and the expected layout (T, N, N) before any array is read. Rows must sum to 1 within
``kernel_tolerance`` of the stored dtype; kernels stored below float64 precision are then
renormalised row by row (the stochastic matrices they round), so the rollout keeps its mass."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from posbias.errors import UserError
from posbias.io.array_headers import declared_arrays, read_errors


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= 160 else line[:150] + "..."


def _check_file(path: Path) -> None:
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: is a folder, expected a .npy or .npz file")
    if not path.is_file():  # a device or a pipe: np.load and zipfile need a seekable file of known size
        raise UserError(f"{path}: is not a regular file, expected a .npy or .npz file")


def _check_declared(path: Path, declared: dict) -> tuple[int, ...]:
    """The declared kernels shape (T, N, N), once names, dtypes, shapes and the memory limit pass."""
    from posbias.numerics import budget

    if "kernels" not in declared:
        raise UserError(f"{path}: expected an array named 'kernels' in the .npz (found {sorted(declared)})")
    for name in ("kernels", "lambdas"):
        if name in declared:
            dtype = declared[name][1]
            if not (
                np.issubdtype(dtype, np.floating)
                or (name == "lambdas" and np.issubdtype(dtype, np.integer) and dtype != np.bool_)
            ):
                raise UserError(f"{path}: {name}: expected floating-point values, got dtype {dtype}")
    shape = declared["kernels"][0]
    if len(shape) != 3:
        raise UserError(f"{path}: kernels must have shape (T, N, N), got {shape}")
    if shape[1] != shape[2] or shape[0] < 1 or shape[1] < 1:
        raise UserError(f"{path}: kernels must have shape (T, N, N) with T, N >= 1, got {shape}")
    if "lambdas" in declared and int(np.prod(declared["lambdas"][0], dtype=object)) != shape[0]:
        raise UserError(
            f"{path}: lambdas: expected {shape[0]} finite values in [0, 1] (one per layer of "
            f"kernels {shape}), got shape {declared['lambdas'][0]}"
        )
    reason = budget.check(f"kernels of shape {shape}", 3 * 8 * int(np.prod(shape, dtype=object)))
    if reason:
        raise UserError(f"{path}: {reason}")
    return shape


def _read(path: Path, shape: tuple[int, ...]):
    """(kernels, lambdas or None) as stored; the kernels must still have the declared shape."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                kernels = loaded["kernels"]
                lambdas = loaded["lambdas"] if "lambdas" in loaded.files else None
        else:
            kernels, lambdas = loaded, None
    except read_errors() as exc:
        raise UserError(f"{path}: unreadable array ({_first_line(exc)})") from None
    if kernels.shape != tuple(shape):  # the file changed since its header was read
        raise UserError(f"{path}: kernels: read shape {kernels.shape}, but the header declared {shape}")
    return kernels, lambdas


def _lambdas(path: Path, stored, schedule: str | None, num_layers: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """--schedule evaluated over T layers (clipped, with a warning) or else the stored lambdas in [0, 1]."""
    from posbias import numerics as nx
    from posbias.numerics.schedules import clip_warning

    if schedule is not None:
        try:
            with np.errstate(all="ignore"):
                lambdas, clipped = nx.schedules.evaluate(nx.schedules.parse(schedule), num_layers)
        except ValueError as exc:
            raise UserError(f"--schedule: {exc}") from None
        return lambdas, ((clip_warning(clipped),) if clipped else ())
    if stored is None:
        raise UserError(f"{path}: no 'lambdas' array in the file; give --schedule SPEC")
    lam = np.asarray(stored, dtype=np.float64).reshape(-1)
    bad = np.flatnonzero(~(np.isfinite(lam) & (lam >= 0) & (lam <= 1)))
    if bad.size:
        raise UserError(
            f"{path}: lambdas[{bad[0]}] = {lam[bad[0]]:g}, expected a value in [0, 1] "
            "(or give --schedule SPEC, which clips)"
        )
    return lam, ()


def load_kernels(path: Path, schedule: str | None, causal: bool):
    """(KernelStack, warnings) from a .npy/.npz file: the checks above in order, then the build.

    Kernels stored in float32 or float16 are checked within their dtype's tolerance, then
    clipped at 0 (rounding below zero), masked when ``causal`` and divided by their row sums
    in float64: each row's mass is 1 to float64 rounding (about N ulp)."""
    from posbias import numerics as nx

    path = Path(path)
    _check_file(path)
    try:
        declared = declared_arrays(path)
    except read_errors() as exc:
        raise UserError(f"{path}: not a .npy/.npz array file ({_first_line(exc)})") from None
    kernels, stored = _read(path, _check_declared(path, declared))
    lambdas, warnings = _lambdas(path, stored, schedule, kernels.shape[0])
    tol = nx.stack.kernel_tolerance(kernels.dtype, kernels.shape[-1])
    try:
        stack = nx.KernelStack.build(kernels, lambdas, causal=causal, tol=tol)
    except nx.KernelError as exc:
        raise UserError(f"{path}: {exc}") from None
    if float(np.finfo(kernels.dtype).eps) > float(np.finfo(np.float64).eps):
        k = np.clip(stack.kernels, 0.0, None)  # within tolerance: tiny negative rounding goes to 0
        if causal:
            k = np.tril(k)
        stack = nx.KernelStack(k / k.sum(axis=2, keepdims=True), stack.lambdas, stack.declared_causal)
    return stack, warnings
