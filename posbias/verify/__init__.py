"""Property-based verification runs: every claim of the registry, and the search for counterexamples.

Each claim of ``posbias.theorem.claims.CLAIMS`` has a *property*: a hypothesis strategy
(posbias.verify.strategies) and a check that calls the claim's registered predicate on what the
strategy draws. A property either is expected to **hold** (hypothesis tries ``examples``
cases and finds none that fails) or is a **necessity search**: one hypothesis of a claim
dropped, hypothesis's own engine (``hypothesis.find``) must find a case where the
conclusion fails, shrink it, and the run shows it as exact small matrices (Fractions)
and writes it as JSON (``load_counterexample`` replays it).

The necessity searches and the hypothesis each drops are listed in ``posbias.verify.searches``.

With a model (``verify_model(stack, N)``; ``posbias verify --stack CONFIG`` or
``--kernels FILE``) the run states which hypotheses hold for it (causal? every layer
stochastically monotone? sum lambda delta?), which claims apply, what they predict
(last-token atom, diagonal bound, Cesàro closed form, U-shape) and checks those
predictions and the monotone comparative statics (raise a lambda, a slope, a diagonal)
against the engine, again through hypothesis.

Users register their own claims and run them with the same machinery and output.
A complete example:

Examples
--------
>>> import numpy as np
>>> import posbias.verify as pv
>>> from posbias.verify.strategies import causal_kernels
>>> @pv.claim("row sums", strategy=lambda sizes: causal_kernels(max_tokens=sizes.max_dense_tokens),
...           hypotheses=("K causal row-stochastic",))
... def rows_sum_to_one(kernel):
...     return bool(np.allclose(kernel.sum(axis=1), 1.0, atol=1e-12))
>>> _ = pv.register_claim("diagonal <= 1/2", lambda kernel: bool(np.all(np.diag(kernel) <= 0.5)),
...                       causal_kernels(max_tokens=4), expect="counterexample")
>>> report = pv.verify(["row sums", "diagonal <= 1/2"], profile="ci", out=None)
>>> [(r.name, r.verdict, r.ok) for r in report.results]
[('row sums', 'held', True), ('diagonal <= 1/2', 'found', True)]
>>> report.results[1].counterexample.tolist()     # shrunk to the smallest case
[[1.0]]
>>> report.exit_code
0
>>> pv.unregister("row sums"); pv.unregister("diagonal <= 1/2")

``verify`` returns a ``Report`` (``.results``, ``.exit_code``, ``.to_dict()``);
``print_report(report)`` prints the table the command prints.

The package, one concept a module:

=====================  ===================================================================
``types``              Property, Result, Report, the run constants
``strategies``         hypothesis strategies for the theory's objects, valid by construction
``lazy``               hypothesis and posbias.verify.strategies imported on first use
``kernels``            NumPy / Fraction routes: A^(t), the last row p, exact ALiBi, ≼
``display``            examples as text (exact fractions)
``codec``              examples as JSON, AlibiStacks as rollout YAML
``claims``             the built-in properties expected to hold, one per claim
``searches``           the built-in necessity searches
``registry``           built-in and user properties by name
``counterexample``     counterexample files: write, load, replay
``runner``             run_property, select, verify
``model``              verify_model: the claims that apply to one model
``report``             print_report
``cli``                the ``posbias verify`` subcommand (and ``python -m posbias.verify``)
=====================  ===================================================================
"""

from __future__ import annotations

from posbias.verify.codec import config_yaml, decode, encode
from posbias.verify.counterexample import Counterexample, load_counterexample, slug, write_counterexample
from posbias.verify.display import show, show_example
from posbias.verify.kernels import alibi_kernels, alibi_layer_kernel, engine_profile, exact_alibi, last_row
from posbias.verify.model import verify_model
from posbias.verify.registry import claim, properties, register, register_claim, unregister
from posbias.verify.report import print_report
from posbias.verify.runner import run_property, select, verify
from posbias.verify.searches import STEEP_R_MAX, c6_old_profile
from posbias.verify.types import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    EXPECTS,
    FORMAT,
    PROFILES,
    Property,
    Report,
    Result,
)

__all__ = [
    # running claims, registering one's own, reading the results
    "Property",
    "Result",
    "Report",
    "Counterexample",
    "register_claim",
    "claim",
    "unregister",
    "properties",
    "verify",
    "verify_model",
    "run_property",
    "print_report",
    "load_counterexample",
    "add_parser",
    "run",
    "FORMAT",
    # the pieces they are made of
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "PROFILES",
    "EXPECTS",
    "register",
    "select",
    "write_counterexample",
    "slug",
    "encode",
    "decode",
    "config_yaml",
    "show",
    "show_example",
    "alibi_layer_kernel",
    "alibi_kernels",
    "last_row",
    "engine_profile",
    "exact_alibi",
    "c6_old_profile",
    "STEEP_R_MAX",
    "VERIFY_EPILOG",
    "main",
]
