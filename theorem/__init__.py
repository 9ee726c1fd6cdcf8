"""posbias theorem: SymPy derivations, certificates and the claim registry.

Never imports JAX at import time; expressions reach JAX through
``sympy.lambdify(..., modules="jax")`` inside the functions that need it.
"""
