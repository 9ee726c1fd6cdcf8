"""The native CPU layer kernel (numerics/native/alibi_layer.c) behind JAX's FFI.

Small problems (N ~ 256) are dominated by XLA's per-kernel overhead, not by
arithmetic; one C loop per layer removes it. The kernel is compiled with the C
compiler (``cc``/``gcc``) on first use against the headers of the installed
jaxlib (``jax.ffi.include_dir()``), cached under ``$XDG_CACHE_HOME/posbias``
(``~/.cache/posbias``) by source hash and jaxlib version, and registered as an
FFI target for the CPU platform. Where no compiler is found, or the build
fails, ``available()`` is False and the engines use their pure-XLA path; on
GPU/TPU the XLA path is always used. Float64 only.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

SOURCE = Path(__file__).with_name("native") / "alibi_layer.c"
TARGET = "posbias_alibi_layer"
HEAD_BLOCK = 8  # HB in alibi_layer.c


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "posbias"


def _compile() -> Path | None:
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        return None
    import jaxlib

    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + jaxlib.__version__.encode()).hexdigest()[:16]
    lib = _cache_dir() / f"alibi_layer-{key}.so"
    if lib.exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
        built = Path(tmp) / lib.name
        cmd = [compiler, "-O3", "-std=c99", "-shared", "-fPIC", f"-I{jax.ffi.include_dir()}",
               str(SOURCE), "-o", str(built)]
        if subprocess.run(cmd, capture_output=True).returncode != 0:
            return None
        os.replace(built, lib)  # atomic: a concurrent reader sees the old or the new file
    return lib


@functools.cache
def available() -> bool:
    """Compile (once per source and jaxlib version) and register the kernel; False if impossible."""
    if os.environ.get("POSBIAS_NATIVE", "1") == "0":
        return False
    try:
        lib = _compile()
        if lib is None:
            return False
        handle = ctypes.cdll.LoadLibrary(str(lib))
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(handle.posbias_alibi_layer), platform="cpu")
    except (OSError, AttributeError, RuntimeError):
        return False
    return True


def alibi_layer(v, s, r, q, w, rw, lam, window: int, bidirectional: int):
    """(v R^(t), alpha-bar) for one layer of all heads; see alibi_layer.c. float64 arrays.

    r = e^{-m}, q = e^{-d}, rw = r^(window - 1) (ignored without a window), all (H,);
    s: the row normalisers (H, P).
    """
    p = v.shape[0]
    out = jax.ShapeDtypeStruct((p,), jnp.float64)
    scratch = jax.ShapeDtypeStruct((HEAD_BLOCK, p), jnp.float64)
    shape = jnp.asarray(np.array([window, bidirectional, 0], dtype=np.int64))
    new, alpha_bar, _ = jax.ffi.ffi_call(TARGET, (out, out, scratch))(
        v, s, r, q, w, rw, jnp.reshape(lam, (1,)), shape
    )
    return new, alpha_bar
