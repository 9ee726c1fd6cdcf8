"""posbias.numerics: JAX engines for residual-aware attention rollout (never imports SymPy).

Float64 by default, scoped to posbias's own calls: importing this package does not
change the caller's JAX configuration (every engine runs under ``jax.enable_x64``
for the duration of the call). Names are imported on first use, so
``import posbias.numerics`` is cheap and pulls in JAX only when an engine is used.

Public names:

* stacks: ``AlibiStack``, ``BiasStack`` (any relative bias, ``Bias``; C7), ``KernelStack``,
  ``PeriodicStack`` (a block of layers repeated, any depth), masks ``Causal``, ``SlidingWindow``, ``Prefix``,
  ``Full``, schedules ``Constant``, ``PowerDecay``, ``Geometric``, ``Custom``, ``alibi_slopes``;
* engines: ``profile`` (the entry point), ``profiles`` (a batch of one shape), ``ENGINES``, ``Engine``,
  ``Profile``, ``Auto``, ``Structured``, ``FFT``, ``Dense``, ``Measured``, ``Power``, ``BiasEngine``, ``Unsupported``;
* summaries: ``summarize``, ``Summary``, ``u_shape``;
* dense routes and identities: ``alibi_kernels``, ``rollout_matrix``, ``dense_rollout``,
  ``profile_from_kernels``, ``kernel_diagonals``, ``diagonal_product``, ``validate_kernels``.
"""

from __future__ import annotations

if __name__ != "posbias.numerics":  # the source folder imported from the checkout as a top-level module
    raise ImportError(
        f"this folder is the package posbias.numerics; import posbias.numerics (got {__name__!r}: "
        "a second copy beside the installed one would not share its classes)"
    )

import importlib

_EXPORTS = {
    "AlibiStack": "stack",
    "KernelStack": "stack",
    "StackError": "stack",
    "BiasStack": "bias_stack",
    "Bias": "bias",
    "BiasEngine": "bias_engine",
    "Causal": "masks",
    "SlidingWindow": "masks",
    "Prefix": "masks",
    "Full": "masks",
    "Mask": "masks",
    "allowed": "masks",
    "Constant": "schedules",
    "PowerDecay": "schedules",
    "Geometric": "schedules",
    "Custom": "schedules",
    "Schedule": "schedules",
    "alibi_slopes": "slopes",
    "profile": "engines",
    "ENGINES": "engines",
    "get": "engines",
    "profiles": "batch",
    "Engine": "engine",
    "Profile": "engine",
    "Unsupported": "engine",
    "PeriodicStack": "periodic",
    "Power": "power",
    "Auto": "auto",
    "Structured": "structured",
    "FFT": "fft",
    "Dense": "dense",
    "Measured": "measured",
    "summarize": "summary",
    "Summary": "summary",
    "u_shape": "shape",
    "alibi_kernels": "kernels",
    "validate_kernels": "kernel_checks",
    "KernelError": "kernel_checks",
    "rollout_matrix": "dense",
    "profile_from_kernels": "measured",
    "kernel_diagonals": "structured",
    "diagonal_product": "structured",
}
_ALIASES = {"dense_rollout": ("dense", "rollout")}
_SUBMODULES = {
    "masks",
    "schedules",
    "slopes",
    "stack",
    "engine",
    "engines",
    "auto",
    "structured",
    "fft",
    "dense",
    "measured",
    "summary",
    "shape",
    "kernels",
    "native",
    "semiring",
    "batch",
    "periodic",
    "power",
    "differentiable",
    "bias",
    "bias_stack",
    "bias_engine",
    "native_bias",
    "boundary",
    "arrays",
}

__all__ = sorted([*_EXPORTS, *_ALIASES])


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    elif name in _ALIASES:
        module, attr = _ALIASES[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return __all__
