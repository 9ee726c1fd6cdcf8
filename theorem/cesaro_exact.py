"""Exact rollout profile of uniform causal (Cesàro) attention: the integer evaluator.

THEORY.md, "An exact closed form" (with C2(c)). The rollout of T layers
(1 - λ_t) I + λ_t C, C[i, j] = 1/(i+1) for j <= i, is P = H(mu) (posbias.theorem.hausdorff), so

    p(j) = P[N-1, j] = C(N-1, j) sum_{i=0}^{N-1-j} (-1)^i C(N-1-j, i) mu_{j+i},
    mu_k = prod_t (1 - λ_t k/(k+1)).

The alternating sum cancels catastrophically in floating point (its terms are of size
2^(N-1) mu_j, its value can be 1e-12), so ``exact_profile`` evaluates it in integer
arithmetic over one common denominator: exact, about two seconds at N = 1024, T = 64.
``estimated_work`` bounds its cost from the schedule's parameters before anything is built.

Examples
--------
>>> from fractions import Fraction
>>> exact_profile([Fraction(1, 2)], 3).fractions()
[Fraction(1, 6), Fraction(1, 6), Fraction(2, 3)]
>>> exact_profile([Fraction(3, 10)] * 4, 5).denominator_bits > 0
True
>>> moment_fraction(2, [Fraction(1, 2)])
Fraction(2, 3)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from posbias.numerics import schedules
from posbias.theorem.cesaro_schedule import MAX_LAYERS, layer_bits, layer_count

MAX_TOKENS = 4096


@dataclass(frozen=True)
class ExactProfile:
    """p(j) = numerators[j] / denominator exactly (one common denominator, not reduced)."""

    numerators: tuple[int, ...]
    denominator: int

    @property
    def denominator_bits(self) -> int:
        """Size of the common denominator in bits (the cost of exactness)."""
        return self.denominator.bit_length()

    def fractions(self) -> list[Fraction]:
        """p(j) as exact (reduced) fractions."""
        return [Fraction(n, self.denominator) for n in self.numerators]

    def floats(self) -> list[float]:
        """Correctly rounded float64 values (Python's int / int rounds correctly)."""
        return [n / self.denominator for n in self.numerators]


def moment_parts(k: int, lambdas: Sequence[Fraction]) -> tuple[int, int]:
    """mu_k = num / den with num = Π_t (b_t (k+1) - a_t k), den = Π_t b_t (k+1) (λ_t = a_t/b_t), unreduced:
    T big-integer products and no gcd (a gcd per layer is quadratic in the bit size)."""
    num, den = 1, 1
    for lam in lambdas:
        lam = Fraction(lam)
        num *= lam.denominator * (k + 1) - lam.numerator * k
        den *= lam.denominator * (k + 1)
    return num, den


def moment_fraction(k: int, lambdas: Sequence[Fraction]) -> Fraction:
    """mu_k = prod_t (1 - λ_t k/(k+1)) as an exact fraction."""
    num, den = moment_parts(k, lambdas)
    return Fraction(num, den)


def exact_profile(lambdas: Sequence[Fraction | int], num_tokens: int) -> ExactProfile:
    """The last row of P = H(mu) exactly, in O(N^2) big-integer subtractions.

    With λ_t = a_t/b_t, 1 - λ_t k/(k+1) = (b_t (k+1) - a_t k) / (b_t (k+1)), so over the
    common denominator D = (prod_t b_t) lcm(1..N)^T every mu_k is an integer M_k. The
    alternating sum is an (N-1-j)-th backward difference: with (Δm)_k = m_k - m_{k+1},
    p(j) = C(N-1, j) (Δ^{N-1-j} M)_j / D, and (Δ^r M)_{N-1-r} is the last entry of
    row r of the difference table.
    """
    n = int(num_tokens)
    if n < 1:
        raise ValueError(f"num_tokens = {n}; expected >= 1")
    lams = [Fraction(x) for x in lambdas]
    for t, lam in enumerate(lams):
        if not 0 <= lam <= 1:
            raise ValueError(f"λ_{t} = {lam} outside [0, 1]")
    common_b = math.prod(lam.denominator for lam in lams)
    lcm = math.lcm(*range(1, n + 1))
    num_layers = len(lams)
    row = []
    for k in range(n):
        top = math.prod(lam.denominator * (k + 1) - lam.numerator * k for lam in lams)
        row.append(top * (lcm // (k + 1)) ** num_layers)
    denominator = common_b * lcm**num_layers
    edge = [0] * n  # edge[r] = (Δ^r M)_{N-1-r}
    edge[0] = row[-1]
    for r in range(1, n):
        row = [row[k] - row[k + 1] for k in range(n - r)]
        edge[r] = row[-1]
    numerators = tuple(math.comb(n - 1, j) * edge[n - 1 - j] for j in range(n))
    return ExactProfile(numerators, denominator)


def estimated_work(schedule: schedules.Schedule, num_tokens: int, num_layers: int | None) -> tuple[int, int]:
    """(word operations, bits B of the common denominator) of ``exact_profile``, bounded from the
    parameters before anything is built: per token k a product of T layer factors (4 N Σ_t ⌈B_t/64⌉
    ⌈b_t/64⌉, B_t the bits so far, b_t = bits(λ_t's denominator) + bits(N)) plus the difference table
    (N^2 ⌈B/64⌉), B = T bits(lcm(1..N)) + Σ_t b_t."""
    t_count = layer_count(schedule, num_layers)
    n = num_tokens
    if n > MAX_TOKENS or t_count > MAX_LAYERS:
        return 10**30, 10**30
    lcm_bits = math.lcm(*range(1, n + 1)).bit_length()
    layer = [b + n.bit_length() + 1 for b in layer_bits(schedule, t_count)]
    products, so_far = 0, 0
    for b in layer:
        so_far += b
        products += -(-so_far // 64) * -(-b // 64)
    bits = t_count * lcm_bits + sum(layer) + 1
    return 4 * n * products + n * n * -(-bits // 64), bits
