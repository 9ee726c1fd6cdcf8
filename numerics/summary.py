"""Scalar summaries of a profile (THEORY.md: C2(c), C5(a), C6).

All functions are pure numpy over the arrays an engine returns.
"""

from __future__ import annotations

import numpy as np

from posbias.numerics.masks import is_lower_triangular
from posbias.numerics.stack import AlibiStack


def entropy(p: np.ndarray) -> float:
    """Shannon entropy -sum p log p in nats (0 log 0 = 0)."""
    q = p[p > 0]
    return float(-np.sum(q * np.log(q)))


def u_shape(p: np.ndarray) -> bool:
    """C6: the minimum is interior and both ends lie strictly above it."""
    k = int(np.argmin(p))
    return bool(0 < k < p.size - 1 and p[0] > p[k] and p[-1] > p[k])


def last_token_atom(lambdas: np.ndarray, last_self_weight: np.ndarray) -> float:
    """C2(c): p(N-1) = prod_t (1 - lambda_t (1 - A^(t)[N-1, N-1])) for causal kernels."""
    return float(np.prod(1.0 - lambdas * (1.0 - last_self_weight)))


def summarize(
    p_raw: np.ndarray,
    stack: AlibiStack,
    num_tokens: int,
    min_self_weight: np.ndarray,
    last_self_weight: np.ndarray,
) -> tuple[np.ndarray, dict]:
    """(renormalised profile, summary dict). ``mass_defect`` = |sum p - 1| before renormalising."""
    total = float(np.sum(p_raw))
    p = p_raw / total
    k = int(np.argmin(p))
    delta = 1.0 - min_self_weight
    causal = is_lower_triangular(stack.mask, num_tokens)
    return p, {
        "num_layers": stack.num_layers,
        "num_tokens": num_tokens,
        "num_heads": stack.num_heads,
        "mask": stack.mask.name,
        "p_first": float(p[0]),
        "p_last": float(p[-1]),
        "argmin": k,
        "p_min": float(p[k]),
        "entropy": entropy(p),
        "sum_lambda": float(np.sum(stack.lambdas)),
        "sum_lambda_delta": float(np.sum(stack.lambdas * delta)),
        "last_token_atom": last_token_atom(stack.lambdas, last_self_weight) if causal else None,
        "u_shape": u_shape(p),
        "mass_defect": abs(total - 1.0),
    }
