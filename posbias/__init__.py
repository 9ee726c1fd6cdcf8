"""posbias: the structural theory of positional bias in transformers (arXiv 2602.16837).

Roll attention out through depth with residual connections,

    R^(t) = (1 - lambda_t) I + lambda_t A^(t),   P = R^(T-1) ... R^(0),

and read the last row p of P: how much each input position feeds the last token.
The claims C1-C6 of THEORY.md are statements about p.

The names a researcher needs (imported on first use, so ``import posbias`` is cheap
and does not touch JAX's configuration):

* models: ``build_model`` (from numbers), ``load_config`` (a reference YAML), ``Model``
  (``.profile()``, ``.summary()``, ``.diagonal()``, ``.matrix()``), ``AlibiStack``,
  ``KernelStack``; masks ``Causal``, ``SlidingWindow``, ``Prefix``, ``Full``; schedules
  ``Constant``, ``PowerDecay``, ``Geometric``, ``Custom``; ``alibi_slopes``;
* engines: ``profile`` (auto engine choice and extended-range fallback), ``summarize``,
  ``Profile``, ``Summary``, ``ENGINES`` and the engine classes;
* identities and dense routes: ``kernel_diagonals``, ``diagonal_product`` (C5(a)),
  ``alibi_kernels``, ``rollout_matrix``;
* theory: ``derive`` (a symbolic derivation by name), ``derivations``, ``claims``
  (the claim registry).

Examples
--------
>>> import posbias
>>> model = posbias.build_model(layers=8, heads=8, tokens=64, schedule="power_decay:0.6,0.5")
>>> summary = model.summary()
>>> summary.engine, summary.u_shape
('structured', True)
"""

from __future__ import annotations

import importlib

from posbias import _moved

_moved.install()  # the old names of moved modules, with a DeprecationWarning (posbias._moved)

_EXPORTS = {
    "build_model": "posbias.model",
    "Model": "posbias.model",
    "load_config": ("posbias.config", "load"),
    "derive": "posbias.theory",
    "derivations": "posbias.theory",
    "claims": "posbias.theory",
}
_NUMERICS = (
    "AlibiStack",
    "KernelStack",
    "Causal",
    "SlidingWindow",
    "Prefix",
    "Full",
    "Constant",
    "PowerDecay",
    "Geometric",
    "Custom",
    "alibi_slopes",
    "profile",
    "summarize",
    "Profile",
    "Summary",
    "ENGINES",
    "Engine",
    "Auto",
    "Structured",
    "FFT",
    "Dense",
    "Measured",
    "Power",
    "PeriodicStack",
    "Unsupported",
    "profiles",
    "kernel_diagonals",
    "diagonal_product",
    "alibi_kernels",
    "rollout_matrix",
    "u_shape",
)

__all__ = sorted([*_EXPORTS, *_NUMERICS])


def __getattr__(name: str):
    if name == "__version__":
        from importlib.metadata import version

        return version("posbias")
    if name in _NUMERICS:
        value = getattr(importlib.import_module("posbias.numerics"), name)
    elif name in _EXPORTS:
        target = _EXPORTS[name]
        module, attr = target if isinstance(target, tuple) else (target, name)
        value = getattr(importlib.import_module(module), attr)
    else:
        raise AttributeError(f"module 'posbias' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return __all__
