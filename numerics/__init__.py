"""posbias numerics: JAX engines for residual-aware attention rollout.

Float64 throughout by default (x64 is switched on when this package is
imported). Never imports SymPy.
"""

import jax

jax.config.update("jax_enable_x64", True)

from posbias.numerics.engines import (  # noqa: E402
    ENGINES,
    Profile,
    dense_rollout,
    diagonal_product,
    kernel_diagonals,
    profile,
    profile_from_kernels,
    rollout_matrix,
)
from posbias.numerics.kernels import KernelError, alibi_kernels, validate_kernels  # noqa: E402
from posbias.numerics.masks import Causal, Full, Mask, Prefix, SlidingWindow, allowed  # noqa: E402
from posbias.numerics.schedules import Constant, Custom, PowerDecay, Schedule  # noqa: E402
from posbias.numerics.slopes import alibi_slopes  # noqa: E402
from posbias.numerics.stack import AlibiStack  # noqa: E402
from posbias.numerics import masks, schedules, toeplitz  # noqa: E402

__all__ = [
    "ENGINES", "AlibiStack", "Causal", "Constant", "Custom", "Full", "KernelError", "Mask",
    "PowerDecay", "Prefix", "Profile", "Schedule", "SlidingWindow", "alibi_kernels",
    "alibi_slopes", "allowed", "dense_rollout", "diagonal_product", "kernel_diagonals", "profile",
    "profile_from_kernels", "rollout_matrix", "masks", "schedules", "toeplitz", "validate_kernels",
]
