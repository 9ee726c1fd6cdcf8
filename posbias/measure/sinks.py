"""Attention-sink diagnostics of one measurement, per layer t (heads parking their weight on the first
token):

* ``key0_mass``: the mean over query rows of A^(t)_{i0}, the head-mean kernel's mass on key 0 (a causal
  model's rows i >= 1: row 0 can only read key 0; an encoder's every row);
* ``key0_mass_value_weighted``: the same for the value-norm-weighted kernels;
* ``value_norm_ratio``: mean_h n_h0 / mean_h mean_{j>=1} n_hj, n_hj = ||W_O^h v_hj|| averaged over
  sequences: how large token 0's values are against the rest's (a sink whose values are small moves
  little). None where the ratio is not finite (every value norm 0).

Written by every measurement route into report.json and read by ``posbias validate``.

Examples
--------
>>> import numpy as np
>>> key0_mass(np.array([[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.9, 0.05, 0.05]]])).tolist()
[0.7]
"""

from __future__ import annotations

import numpy as np


def key0_mass(kernels, *, causal: bool = True) -> np.ndarray:
    """(T,) mean over query rows of K^(t)_{i0} (causal: rows 1..N-1; a one-token window: row 0)."""
    kernels = np.asarray(kernels, np.float64)
    rows = kernels[:, 1:, 0] if causal and kernels.shape[-1] > 1 else kernels[:, :, 0]
    return rows.mean(axis=-1)


def sink_diagnostics(m, *, causal: bool = True) -> dict[str, list]:
    """Per layer: ``key0_mass``, and where measured ``key0_mass_value_weighted`` and ``value_norm_ratio``
    (module docstring); lists of T floats."""
    out = {"key0_mass": key0_mass(m.kernels, causal=causal).tolist()}
    if m.kernels_value is not None:
        out["key0_mass_value_weighted"] = key0_mass(m.kernels_value, causal=causal).tolist()
    if m.value_norms is not None and m.num_tokens > 1:
        norms = np.asarray(m.value_norms, np.float64)  # (T, H, N)
        rest = norms[:, :, 1:].mean(axis=-1).mean(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = norms[:, :, 0].mean(axis=-1) / rest
        out["value_norm_ratio"] = [float(r) if np.isfinite(r) else None for r in ratio]
    return out
