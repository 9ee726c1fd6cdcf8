"""posbias theorem: SymPy derivations, certificates and the claim registry.

Never imports JAX at import time; expressions reach JAX through
``sympy.lambdify(..., modules="jax")`` inside the functions that need it
(theorem.lambdify_jax, hausdorff.jax_profile, continuum.jax_density). It shares the
pure-NumPy modules posbias.numerics.schedules (the one schedule type) and
posbias.numerics.shape (the one u_shape) with the engines.

Layout: ``derivation`` / ``params`` (the interface: typed parameters, ``compute``,
the CLI parser built from them), ``queries`` (the registry of derivations),
``certificate`` / ``claims`` (certificates declared with ``@certificate`` and the
claims they serve), ``statements`` (each claim's key formula against THEORY.md, from
``statement_fingerprints``, and its predicate on exact hand-derived instances, from
``statement_instances``), ``orders`` (the one CDF and dominance test,
float and exact), one module per derivation, ``expr_guard`` (the bounded literal / expression
parser every hostile input goes through) and ``bounded_eval`` (the magnitude-capped evaluator), for the Cesàro
closed form ``hausdorff``, ``cesaro_schedule``, ``cesaro_exact``, ``cesaro_certificates`` and
``cesaro``, for the dichotomy ``schedule_expr`` (parsing), ``dichotomy_analysis``,
``dichotomy_certificates``, ``dichotomy_format``, ``lambdify_jax``; ``sympy_types`` types
SymPy's loosely annotated results. The command line (``posbias derive``, ``posbias proofs``)
and its wall-clock guard are product code: posbias/cli/derive.py, posbias/cli/proofs.py,
posbias/runtime/time_limit.py.
"""

if __name__ != "posbias.theorem":  # the source folder imported from the checkout as a top-level module
    raise ImportError(
        f"this folder is the package posbias.theorem; import posbias.theorem (got {__name__!r}: "
        "a second copy beside the installed one would not share its classes)"
    )
