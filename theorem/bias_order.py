"""Registry entry of ``posbias derive order`` (C7(c)); the query is in ``posbias.theorem.bias_queries``."""

from posbias.theorem.bias_queries import ORDER_DERIVATION as DERIVATION

__all__ = ["DERIVATION"]
