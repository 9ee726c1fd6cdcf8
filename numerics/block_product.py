"""The product of one period of layers, B = R^(p-1) ... R^(0), formed densely (THEORY.md, Notation).

Each layer's kernel A^(t) is formed densely by the kernel-forming function of its type
(``kernels.layer_kernels``: ALiBi + content, or any relative positional bias, C7: the masked row
softmax of (b(i - j) + d [i = j] + s [j = 0]) / tau), then R^(t) = (1 - lambda_t) I + lambda_t A^(t)
is applied on the left: R^(t) P = (1 - lambda_t) P + lambda_t A^(t) P, by BLAS (triangular under a
causal mask, numerics/triangular.py). The entries are non-negative sums of products of
non-negative numbers, so rounding is relative (about p N eps); entries that underflow below
2^-1022 are what the power engine's loss bound starts from. Cost O(p (H N^2 + N^3)); memory:
the kernel, the product and the next one (three N x N float64 arrays).

Examples
--------
>>> import numpy as np
>>> from posbias.numerics.stack import AlibiStack
>>> b, diag = block_product(AlibiStack.build([0.5, 0.25], [0.5]), 4, causal=True)
>>> b.shape, diag.shape, bool(np.allclose(b.sum(axis=1), 1.0))
((4, 4), (2, 4), True)
"""

from __future__ import annotations

import numpy as np

from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.periodic import layer_range
from posbias.numerics.stack import AlibiStack
from posbias.numerics.triangular import tri_matmul


def block_product(stack: AlibiStack | BiasStack, num_tokens: int, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """(R^(p-1) ... R^(0), self-weights (p, N)) of a stack's layers: kernels by masked softmax of their
    logits (``kernels.layer_kernels``: ALiBi + content, or relative biases, C7), one layer at a time,
    products by BLAS (triangular when causal)."""
    from posbias.numerics.kernels import layer_kernels

    def kernel_of(t: int) -> np.ndarray:
        return np.array(layer_kernels(layer_range(stack, t, t + 1), num_tokens)[0], np.float64)  # writable

    product = kernel_of(0)  # R^(0) = (1 - lambda) I + lambda A
    diagonals = [np.diagonal(product).copy()]
    lam = float(stack.lambdas[0])
    product *= lam
    product[np.diag_indices(num_tokens)] += 1.0 - lam
    for t in range(1, stack.num_layers):  # R^(t) P = (1 - lambda) P + lambda A P
        kernel = kernel_of(t)
        diagonals.append(np.diagonal(kernel).copy())
        lam = float(stack.lambdas[t])
        moved = tri_matmul(kernel, product) if causal else kernel @ product
        del kernel
        moved *= lam
        product *= 1.0 - lam
        product += moved
        del moved
    return product, np.array(diagonals)
