"""JAX's persistent compilation cache for posbias: compiled engines reused across processes.

Each ``posbias`` process otherwise compiles its JAX engine afresh (XLA, on the
CPU backend too). With the cache on, the compiled executable is stored on disk
the first time and read back by later runs with the same shapes, dtypes and
engine (benchmarks/bench_startup.py measures it).

Call :func:`enable_compilation_cache` once, before the first ``jax.jit`` call
compiles anything (JAX initialises its cache at the first compilation; a later
call has no effect on that process). It

* does nothing and returns None when the environment variable
  ``POSBIAS_JAX_CACHE`` is ``0`` (or ``false``, ``no``, ``off``);
* leaves an existing setting alone: if the user configured JAX's cache already
  (``JAX_COMPILATION_CACHE_DIR`` or ``jax.config``), that directory is used
  and returned;
* otherwise uses ``$XDG_CACHE_HOME/posbias/jax`` (``~/.cache/posbias/jax``
  when ``XDG_CACHE_HOME`` is unset or not absolute), creating it; if the
  directory cannot be created (read-only home), the cache stays off and the
  run goes on;
* caches every compilation, however quick: JAX's default
  ``jax_persistent_cache_min_compile_time_secs`` of 1 s would skip the CPU
  compilations posbias does (a few hundred ms each), so it is set to 0 unless
  ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` says otherwise;
  ``jax_persistent_cache_min_entry_size_bytes`` stays at 0 (no size floor).

JAX does not cap the directory's size unless ``jax_compilation_cache_max_size``
is set (that needs the ``filelock`` package); entries are small (tens to
hundreds of KB per engine and shape), and the directory can be deleted at any
time.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_SWITCH = "POSBIAS_JAX_CACHE"
_OFF = {"0", "false", "no", "off"}


def cache_dir() -> Path:
    """Where posbias keeps JAX's compiled executables: $XDG_CACHE_HOME/posbias/jax."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "posbias" / "jax"


def enabled_by_environment() -> bool:
    """False when POSBIAS_JAX_CACHE is 0/false/no/off."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in _OFF


def enable_compilation_cache(path: str | os.PathLike | None = None) -> Path | None:
    """Switch on JAX's persistent compilation cache; return its directory, or None when off.

    ``path`` overrides the default directory (not the user's own JAX setting).
    """
    if not enabled_by_environment():
        return None
    import sys

    if "jax" not in sys.modules:
        # JAX reads these when it is first imported: setting them keeps JAX unimported on
        # routes that never use it (the native CPU kernel).
        existing = os.environ.get("JAX_COMPILATION_CACHE_DIR")
        if existing:
            return Path(existing)
        directory = _writable(path)
        if directory is None:
            return None
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(directory)
        os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        return directory
    import jax

    existing = jax.config.jax_compilation_cache_dir
    if existing:
        return Path(existing)
    directory = _writable(path)
    if directory is None:
        return None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return directory


def _writable(path) -> Path | None:
    directory = Path(path) if path is not None else cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return directory if os.access(directory, os.W_OK) else None
