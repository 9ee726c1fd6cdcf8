"""Property-based verification runs: every claim of the registry, and the search for counterexamples.

Each claim of ``posbias.theorem.claims.CLAIMS`` has a *property*: a hypothesis strategy
(posbias.strategies) and a check that calls the claim's registered predicate on what the
strategy draws. A property either is expected to **hold** (hypothesis tries ``examples``
cases and finds none that fails) or is a **necessity search**: one hypothesis of a claim
dropped, hypothesis's own engine (``hypothesis.find``) must find a case where the
conclusion fails, shrink it, and the run shows it as exact small matrices (Fractions)
and writes it as JSON (``load_counterexample`` replays it).

=================================  =====================================================
necessity search                   dropped hypothesis
=================================  =====================================================
``C1 w/o causality``               K causal (K may read later tokens)
``C2(b) w/o monotonicity``         every A^(t) stochastically monotone
``C3(c) w/ non-monotone layer``    every layer ALiBi (a layer below is any causal kernel)
``C4(a) w/ non-constant shift``    b constant along the row
``C6 old: steep => monotone``      the withdrawn statement "a steep slope (r = e^-m
                                   <= 1/5) makes the profile monotone" (THEORY.md C6)
``C6 U-shapes exist``              (existence: a U-shaped profile at depth >= 2)
=================================  =====================================================

The searches draw exact cases (integer-weight rows, vertices e_j, r = 1/k, lambda = k/8)
and steer with ``hypothesis.target`` where failures are rare (C2(b), C6), so the shrunk
counterexample is a few exact Fractions that ``explain`` turns into a negative CDF gap.

With a model (``verify_model(stack, N)``; ``posbias verify --stack CONFIG`` or
``--kernels FILE``) the run states which hypotheses hold for it (causal? every layer
stochastically monotone? sum lambda delta?), which claims apply, what they predict
(last-token atom, diagonal bound, Cesàro closed form, U-shape) and checks those
predictions and the monotone comparative statics (raise a lambda, a slope, a diagonal)
against the engine, again through hypothesis.

Users register their own claims and run them with the same machinery and output.
A complete example:

>>> import numpy as np
>>> import posbias.verify as pv
>>> from posbias.strategies import causal_kernels
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
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import random as _random
import re
import sys
import time
import warnings
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import numpy as np

from posbias.argtypes import at_least
from posbias.errors import UserError


class _Lazy:
    """A module imported on first attribute access: ``import posbias.verify`` (and the CLI's
    ``add_parser``) needs neither hypothesis nor JAX; running properties does."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self._name), attr)


st = _Lazy("hypothesis.strategies")
ps = _Lazy("posbias.strategies")


def _composite(fn):
    """``hypothesis.strategies.composite``, applied when the strategy is first asked for."""
    @functools.wraps(fn)
    def make(*args, **kwargs):
        from hypothesis import strategies

        return strategies.composite(fn)(*args, **kwargs)
    return make

__all__ = ["Property", "Result", "Report", "Counterexample", "register_claim", "claim", "unregister", "properties",
           "verify", "verify_model", "run_property", "print_report", "load_counterexample", "add_parser", "run",
           "FORMAT"]

FORMAT = "posbias-counterexample/1"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
PROFILES = ("ci", "dev", "deep")
EXPECTS = ("holds", "counterexample")


class VerifyError(UserError):
    """Bad input to a verification run (one line; the CLI exits 2)."""


# ------------------------------------------------------------------------------ types
@dataclass(frozen=True)
class Property:
    """A checkable statement. name: table key; claim: the registry label it tests (None for a
    user claim); hypotheses: what the strategy guarantees; strategy: a hypothesis strategy or
    a function ``Sizes -> strategy``; check: ``example -> bool`` (True where the statement
    holds); expect: "holds" or "counterexample"; dropped: the hypothesis a necessity search
    drops; explain: ``example -> str`` an exact account of a violation; artifacts:
    ``example -> {name: ("alibi", stack, N) | ("kernels", kernels, lambdas, causal)}`` files
    that ``posbias rollout`` reads; examples: a multiplier of the profile's example count;
    target: ``example -> float`` that hypothesis.target maximises (steers a search toward
    failure: e.g. minus the smallest CDF gap)."""

    name: str
    claim: str | None
    hypotheses: tuple[str, ...]
    strategy: Any
    check: Callable[..., bool]
    expect: str = "holds"
    statement: str = ""
    dropped: str = ""
    explain: Callable[..., str] | None = None
    artifacts: Callable[..., dict] | None = None
    examples: float = 1.0
    target: Callable[..., float] | None = None

    def strategy_for(self, sizes):
        from hypothesis.strategies import SearchStrategy

        s = self.strategy
        return s if isinstance(s, SearchStrategy) else s(sizes)


@dataclass
class Result:
    """One property's run. verdict: held | refuted (expected to hold) | found | not found
    (necessity search) | error | n/a; ok: as expected; examples: cases tried before the
    first failing one (all, when none failed); shrinks: evaluations while shrinking."""

    name: str
    claim: str | None
    hypotheses: tuple[str, ...]
    expect: str
    verdict: str
    ok: bool
    examples: int = 0
    shrinks: int = 0
    seconds: float = 0.0
    counterexample: Any = None
    text: str = ""
    detail: str = ""
    files: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"name": self.name, "claim": self.claim, "hypotheses": list(self.hypotheses), "expect": self.expect,
                "verdict": self.verdict, "ok": self.ok, "examples": self.examples, "shrinks": self.shrinks,
                "seconds": round(self.seconds, 4), "detail": self.detail,
                "counterexample": None if self.counterexample is None else encode(self.counterexample),
                "explanation": self.text, "files": [str(f) for f in self.files]}


@dataclass
class Report:
    """results: one ``Result`` per property; model: what the model checks found (or None)."""

    results: list
    profile: str
    seed: int | None
    model: dict | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_OK if all(r.ok for r in self.results) else EXIT_FAILED

    def to_dict(self) -> dict:
        return {"profile": self.profile, "seed": self.seed, "exit_code": self.exit_code, "model": self.model,
                "results": [r.to_dict() for r in self.results]}


# --------------------------------------------------------------------------- numerics
def alibi_layer_kernel(stack, t: int, n: int, *, slopes=None, diagonal=None) -> np.ndarray:
    """A^(t) in NumPy: sum_h w_h masked-softmax((d_h [i = j] - m_h |i - j|) / tau) (THEORY.md
    Notation), independent of the engines. slopes / diagonal: (H,) overrides (unscaled)."""
    from posbias.numerics.masks import allowed

    m = (stack.slopes[t] if slopes is None else np.asarray(slopes, np.float64)) / stack.temperature
    d = (stack.diagonal[t] if diagonal is None else np.asarray(diagonal, np.float64)) / stack.temperature
    ok = allowed(stack.mask, n)
    dist = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]).astype(np.float64)
    out = np.zeros((n, n))
    eye = np.eye(n)
    for mh, dh, wh in zip(m, d, stack.head_weights[t]):
        if wh == 0:
            continue
        x = np.where(ok, dh * eye - mh * dist, -np.inf)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        out += wh * e / e.sum(axis=1, keepdims=True)
    return out


def alibi_kernels(stack, n: int) -> np.ndarray:
    """(T, N, N) kernels of an AlibiStack by ``alibi_layer_kernel``."""
    return np.stack([alibi_layer_kernel(stack, t, n) for t in range(stack.num_layers)])


def last_row(kernels, lambdas) -> np.ndarray:
    """p = e_{N-1}^T R^(T-1) ... R^(0), O(T N^2); exact when given Fractions (object arrays)."""
    kernels = np.asarray(kernels)
    n = kernels.shape[-1]
    exact = kernels.dtype == object
    v = np.array([Fraction(0)] * (n - 1) + [Fraction(1)], dtype=object) if exact else np.eye(n)[-1]
    for a, lam in zip(kernels[::-1], list(lambdas)[::-1]):
        v = (1 - lam) * v + lam * (v @ a)
    return v


def engine_profile(stack, n: int) -> np.ndarray:
    """The structured engine's profile (O(T H N)); the XLA route where the C kernel cannot run."""
    from posbias.numerics import Structured

    return np.asarray(Structured().profile(stack, n).probabilities, np.float64)


def exact_alibi(r: Fraction, n: int) -> np.ndarray:
    """Causal ALiBi kernel with r = e^{-m} rational and d = 0: K[i, j] = r^{i-j} / sum_{g<=i} r^g."""
    out = np.empty((n, n), dtype=object)
    out[...] = Fraction(0)
    for i in range(n):
        total = sum(r**g for g in range(i + 1))
        for j in range(i + 1):
            out[i, j] = r ** (i - j) / total
    return out


def _with_layer(stack, t: int, **changes):
    """The stack with layer t's slopes / diagonal / lambda replaced (validated)."""
    from posbias.numerics.stack import AlibiStack

    lambdas, slopes, diag = stack.lambdas.copy(), stack.slopes.copy(), stack.diagonal.copy()
    if "lam" in changes:
        lambdas[t] = changes["lam"]
    if "slopes" in changes:
        slopes[t] = changes["slopes"]
    if "diagonal" in changes:
        diag[t] = changes["diagonal"]
    return AlibiStack.build(lambdas, slopes, diag, stack.head_weights, stack.temperature, stack.mask)


def _cdf_gap(lo, hi) -> tuple[int, Any]:
    """(k, min_k F_lo(k) - F_hi(k)) for exact or float vectors: lo ≼ hi needs it >= 0."""
    f_lo, f_hi = np.cumsum(lo), np.cumsum(hi)
    gaps = [f_lo[k] - f_hi[k] for k in range(len(f_lo))]
    k = min(range(len(gaps)), key=lambda i: gaps[i])
    return k, gaps[k]


# ---------------------------------------------------------------------------- display
def _frac(x) -> str:
    if isinstance(x, Fraction):
        return str(x)
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    f = Fraction(x).limit_denominator(10**4)
    return str(f) if float(f) == x else f"{x:.6g}"


def show(value, indent: str = "  ") -> str:
    """Readable text of an example value: matrices row by row as exact fractions where the
    float is one (1/3 shows as 1/3 only if it is the float nearest 1/3), stacks by fields."""
    from posbias.numerics.stack import AlibiStack

    if isinstance(value, AlibiStack):
        lines = [f"AlibiStack(T={value.num_layers}, H={value.num_heads}, mask={value.mask.spec}, "
                 f"tau={_frac(value.temperature)})"]
        lines.append(f"{indent}lambdas: " + show(value.lambdas, "").strip())
        for name in ("slopes", "diagonal", "head_weights"):
            arr = getattr(value, name)
            same = bool(np.all(arr == arr[:1]))
            lines.append(f"{indent}{name} (per head{'' if same else ', row t = layer t'}): "
                         + show(arr[0] if same else arr, indent + "  ").strip("\n ") if same else
                         f"{indent}{name} (row t = layer t):\n" + show(arr, indent + "  "))
        return "\n".join(lines)
    arr = np.asarray(value) if isinstance(value, (np.ndarray, list)) else None
    if arr is not None and arr.ndim == 2:
        cells = [[_frac(x) for x in row] for row in arr]
        width = max((len(c) for row in cells for c in row), default=1)
        return "\n".join(indent + "[" + "  ".join(c.rjust(width) for c in row) + "]" for row in cells)
    if arr is not None and arr.ndim == 3:
        return "\n".join(f"{indent}layer {t}:\n" + show(a, indent + "  ") for t, a in enumerate(arr))
    if arr is not None and arr.ndim == 1:
        return indent + "[" + ", ".join(_frac(x) for x in arr) + "]"
    if hasattr(value, "spec"):
        return indent + value.spec
    return indent + _frac(value) if isinstance(value, (int, float, Fraction, np.number)) else indent + repr(value)


def show_example(example) -> str:
    if isinstance(example, dict):
        parts = []
        for key, value in example.items():
            text = show(value)
            parts.append(f"{key} =\n{text}" if "\n" in text else f"{key} = {text.strip()}")
        return "\n".join(parts)
    return show(example)


# ------------------------------------------------------------------------- JSON codec
def encode(value):
    """JSON-ready form of an example: arrays (float or Fraction), AlibiStack, masks, Fractions."""
    from posbias.numerics.stack import AlibiStack

    if isinstance(value, dict):
        return {"type": "dict", "items": {str(k): encode(v) for k, v in value.items()}}
    if isinstance(value, AlibiStack):
        return {"type": "AlibiStack", "lambdas": encode(value.lambdas), "slopes": encode(value.slopes),
                "diagonal": encode(value.diagonal), "head_weights": encode(value.head_weights),
                "temperature": float(value.temperature), "mask": value.mask.spec}
    if isinstance(value, Fraction):
        return {"type": "fraction", "value": str(value)}
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return {"type": "fractions", "data": np.vectorize(str, otypes=[object])(value).tolist()}
        if value.dtype == bool:
            return {"type": "bools", "data": value.tolist()}
        data = np.where(np.isfinite(value), value, 0.0).tolist() if value.size else value.tolist()
        bad = np.argwhere(~np.isfinite(value)) if value.size else []
        return {"type": "array", "data": data, "nonfinite": [[*map(int, i), repr(float(value[tuple(i)]))]
                                                             for i in bad]}
    if isinstance(value, (tuple, list)):
        return {"type": "tuple" if isinstance(value, tuple) else "list", "items": [encode(v) for v in value]}
    if hasattr(value, "spec") and hasattr(value, "bidirectional_length"):
        return {"type": "mask", "spec": value.spec}
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        return x if math.isfinite(x) else {"type": "float", "value": repr(x)}
    if value is None or isinstance(value, str):
        return value
    return {"type": "repr", "value": repr(value)}


def decode(data):
    """Inverse of ``encode``."""
    from posbias.numerics import masks
    from posbias.numerics.stack import AlibiStack

    if not isinstance(data, dict):
        return data
    kind = data.get("type")
    if kind == "dict":
        return {k: decode(v) for k, v in data["items"].items()}
    if kind == "list":
        return [decode(v) for v in data["items"]]
    if kind == "tuple":
        return tuple(decode(v) for v in data["items"])
    if kind == "fraction":
        return Fraction(data["value"])
    if kind == "fractions":
        return np.vectorize(Fraction, otypes=[object])(np.array(data["data"], dtype=object))
    if kind == "bools":
        return np.array(data["data"], dtype=bool)
    if kind == "array":
        arr = np.array(data["data"], dtype=np.float64)
        for *idx, text in data.get("nonfinite", []):
            arr[tuple(idx)] = float(text)
        return arr
    if kind == "float":
        return float(data["value"])
    if kind == "mask":
        return masks.parse(data["spec"])
    if kind == "AlibiStack":
        return AlibiStack.build(decode(data["lambdas"]), decode(data["slopes"]), decode(data["diagonal"]),
                                decode(data["head_weights"]), data["temperature"], masks.parse(data["mask"]))
    if kind == "repr":
        return data["value"]
    raise ValueError(f"unknown encoded type {kind!r}")


def config_yaml(stack, num_tokens: int) -> str:
    """The reference-schema rollout YAML of an AlibiStack (``posbias rollout FILE`` reads it).
    Values are written at full repr precision; the lambdas as a custom schedule."""
    def rows(a):
        return "[" + ", ".join("[" + ", ".join(repr(float(x)) for x in row) + "]" for row in np.asarray(a)) + "]"

    mask = stack.mask
    mask_lines = {"causal": '  mask_type: "causal"', "full": '  mask_type: "full"'}.get(mask.spec)
    if mask_lines is None:
        kind, _, arg = mask.spec.partition(":")
        mask_lines = (f'  mask_type: "sliding_window"\n  window_size: {arg}' if kind == "window"
                      else f'  mask_type: "prefix"\n  prefix_length: {arg}')
    return (f"# counterexample written by posbias verify\n"
            f"sequence_length: {int(num_tokens)}\nnum_layers: {stack.num_layers}\n"
            f"mask_config:\n{mask_lines}\n"
            f"attention_config:\n  num_heads: {stack.num_heads}\n  alibi_slopes: {rows(stack.slopes)}\n"
            f"  head_weights: {rows(stack.head_weights)}\n  softmax_temperature: {float(stack.temperature)!r}\n"
            f"content_config:\n  diagonal_scores: {rows(stack.diagonal)}\n  base_scores: [[0.0]]\n"
            f"lambda_schedule_config:\n  schedule_type: \"custom\"\n"
            f"  lambdas_custom: [{', '.join(repr(float(x)) for x in stack.lambdas)}]\n")


@dataclass(frozen=True)
class Counterexample:
    """A counterexample file, loaded: property and claim names, the decoded example (numpy
    arrays, Fractions, AlibiStack ...), and the raw JSON. ``replay()`` re-runs the property's
    check (False: it still fails); ``stacks()`` the models it names, ready for the engines."""

    property: str
    claim: str | None
    example: Any
    data: dict

    def replay(self) -> bool:
        prop = properties().get(self.property)
        if prop is None:
            raise KeyError(f"property {self.property!r} is not registered in this process")
        return bool(_call(prop.check, self.example))

    def stacks(self) -> dict:
        """part -> ("alibi", AlibiStack, N) or ("kernels", kernels, lambdas, causal): the models the
        counterexample compares (what the YAML / .npz files beside the JSON hold)."""
        prop = properties().get(self.property)
        return {} if prop is None or prop.artifacts is None else _call(prop.artifacts, self.example)


def load_counterexample(path) -> Counterexample:
    """Read a counterexample JSON written by ``posbias verify`` (or ``verify(out=...)``)."""
    data = json.loads(Path(path).read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a posbias counterexample (format {data.get('format')!r}, expected {FORMAT})")
    return Counterexample(data["property"], data.get("claim"), decode(data["example"]), data)


# ------------------------------------------------------------------------- registry
_REGISTRY: dict[str, Property] = {}


def _call(fn, example):
    if isinstance(example, dict):
        return fn(**example)
    if isinstance(example, tuple):
        return fn(*example)
    return fn(example)


def register(prop: Property, *, replace_existing: bool = False) -> Property:
    if prop.expect not in EXPECTS:
        raise ValueError(f"expect: {prop.expect!r}, expected one of {EXPECTS}")
    if prop.name in _REGISTRY and not replace_existing:
        raise ValueError(f"a property named {prop.name!r} is already registered (replace=True to replace it)")
    _REGISTRY[prop.name] = prop
    return prop


def register_claim(name: str, predicate: Callable[..., bool], strategy, *, hypotheses=(), expect: str = "holds",
                   claim: str | None = None, statement: str = "", explain=None, replace: bool = False) -> Property:
    """Register a user claim: ``predicate(example) -> bool`` over what ``strategy`` draws (a
    hypothesis strategy, or a function of ``posbias.strategies.Sizes`` returning one). A dict
    example is passed as keywords, a tuple as positional arguments. expect="holds": the run
    fails if hypothesis finds a case where the predicate is False; expect="counterexample":
    the run fails unless it finds (and shrinks) one."""
    return register(Property(name, claim, tuple(hypotheses), strategy, predicate, expect, statement,
                             explain=explain), replace_existing=replace)


def claim(name: str, strategy, **kwargs):
    """Decorator form of ``register_claim``: ``@claim("name", strategy=...)`` over the predicate."""
    def wrap(fn):
        register_claim(name, fn, strategy, **kwargs)
        return fn
    return wrap


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def properties() -> dict[str, Property]:
    """name -> Property, built-in first (in claim order), then user claims."""
    _builtins()
    return dict(_REGISTRY)


# ------------------------------------------------------------------- built-in claims
def _pred(label: str):
    from posbias.theorem.claims import CLAIMS

    return CLAIMS[label].predicate


def _hyp(label: str) -> tuple[str, ...]:
    from posbias.theorem.claims import CLAIMS

    return tuple(CLAIMS[label].hypotheses)


@_composite
def _kernel_and_mu(draw, sizes, *, kind="causal", exact=False, max_tokens=None):
    n = draw(st.integers(1, max_tokens or sizes.max_tokens))
    make = ps.causal_kernels if kind == "causal" else ps.stochastic_kernels
    return {"K": draw(make(n, exact=exact)), "mu": draw(ps.distributions(n, exact=exact))}


def _c1_check(K, mu):
    return _pred("C1")(ps.as_float(K), ps.as_float(mu))


def _explain_dominance(lo_name, hi_name):
    def explain(lo, hi) -> str:
        k, gap = _cdf_gap(lo, hi)
        return (f"F_{lo_name}({k}) - F_{hi_name}({k}) = {_frac(gap)} < 0: {lo_name} ≼ {hi_name} fails at k = {k}"
                if gap < 0 else f"F_{lo_name} >= F_{hi_name} everywhere (min gap {_frac(gap)} at k = {k})")
    return explain


def _c1_explain(K, mu):
    return _explain_dominance("muK", "mu")(mu @ K, mu)


@_composite
def _c2a_case(draw, sizes):
    ex = draw(_kernel_and_mu(sizes))
    lam = draw(st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0)))
    ex.update(lam=lam, lam_hi=lam + (1.0 - lam) * draw(st.floats(0.0, 1.0)))
    return ex


def _c2a_check(K, mu, lam, lam_hi):
    return _pred("C2(a)")(K, mu, lam, lam_hi)


@_composite
def _c2b_case(draw, sizes, *, kind="monotone", exact=False):
    if exact:  # the search: N >= 3 and T >= 2 (2 x 2 causal kernels and one layer cannot fail, C2(a))
        n = draw(st.integers(3, 4))
        t = draw(st.integers(2, 3))
        kernels = np.stack([draw(ps.causal_kernels(n, exact=True)) for _ in range(t)])
        lambdas = draw(ps.lambda_schedules(t, exact=True))
    else:
        kernels, lambdas = draw(ps.kernel_stacks(kind=kind, max_tokens=sizes.max_dense_tokens,
                                                 max_layers=sizes.max_dense_layers))
    layer = len(lambdas) - 1 - draw(st.integers(0, len(lambdas) - 1))  # shrinks toward the top layer
    old = lambdas[layer]
    if exact:
        new = Fraction(min(8, int(old * 8) + draw(st.integers(1, 8))), 8)  # lambdas are k/8
    else:
        new = old + (1.0 - old) * draw(st.floats(0.0, 1.0))
    return {"kernels": kernels, "lambdas": lambdas, "layer": layer, "new_lambda": new}


def _c2b_check(kernels, lambdas, layer, new_lambda):
    return _pred("C2(b)")(ps.as_float(kernels), ps.as_float(lambdas), layer, float(new_lambda))


def _c2b_target(kernels, lambdas, layer, new_lambda):
    more = ps.as_float(lambdas).copy()
    more[layer] = float(new_lambda)
    k = ps.as_float(kernels)
    gaps = np.cumsum(last_row(k, more)) - np.cumsum(last_row(k, ps.as_float(lambdas)))
    return -float(gaps[:-1].min()) if len(gaps) > 1 else 0.0


def _c2b_explain(kernels, lambdas, layer, new_lambda):
    more = np.array(lambdas, dtype=object if np.asarray(lambdas).dtype == object else np.float64)
    more[layer] = new_lambda
    p, q = last_row(kernels, lambdas), last_row(kernels, more)
    return (f"p = {show(p).strip()}\np' (lambda_{layer} = {_frac(new_lambda)}) = {show(q).strip()}\n"
            + _explain_dominance("p'", "p")(q, p))


def _c2b_artifacts(kernels, lambdas, layer, new_lambda):
    more = ps.as_float(lambdas).copy()
    more[layer] = float(new_lambda)
    k = ps.as_float(kernels)
    return {"before": ("kernels", k, ps.as_float(lambdas), True), "after": ("kernels", k, more, True)}


@_composite
def _c2c_case(draw, sizes):
    if draw(st.booleans()):
        stack, n = draw(ps.alibi_cases(_dense_sizes(sizes), mask_kinds=ps.CAUSAL_MASKS))
        return {"stack": stack, "n": n}
    kernels, lambdas = draw(ps.kernel_stacks(max_tokens=sizes.max_dense_tokens, max_layers=sizes.max_dense_layers))
    return {"kernels": kernels, "lambdas": lambdas}


def _dense_sizes(sizes):
    return replace(sizes, max_tokens=sizes.max_dense_tokens)


def _c2c_check(stack=None, n=None, kernels=None, lambdas=None):
    if stack is not None:  # p from the structured engine, kernels from NumPy
        return _pred("C2(c)")(engine_profile(stack, n), alibi_kernels(stack, n), stack.lambdas)
    return _pred("C2(c)")(last_row(kernels, lambdas), kernels, lambdas)


def _c3a_check(stack, n):
    return _pred("C3(a)")(alibi_layer_kernel(stack, 0, n))


@_composite
def _steeper(draw, stack, layer, what="slopes"):
    h = stack.num_heads
    inc = np.array(draw(st.lists(st.one_of(st.just(0.0), st.sampled_from([0.5, 1.0, 30.0]), st.floats(0.0, 8.0)),
                                 min_size=h, max_size=h)))
    base = (stack.slopes if what == "slopes" else stack.diagonal)[layer]
    return base + inc


@_composite
def _layer_change_case(draw, sizes, what, *, max_tokens=None):
    stack, n = draw(ps.alibi_cases(replace(sizes, max_tokens=max_tokens or sizes.max_tokens),
                                   mask_kinds=ps.CAUSAL_MASKS))
    layer = draw(st.integers(0, stack.num_layers - 1))
    return {"stack": stack, "n": n, "layer": layer, "new": draw(_steeper(stack, layer, what))}


def _c3b_check(stack, n, layer, new):
    return _pred("C3(b)")(alibi_layer_kernel(stack, layer, n), alibi_layer_kernel(stack, layer, n, slopes=new))


def _c3c_check(stack, n, layer, new):
    return _pred("C3(c)")(engine_profile(stack, n), engine_profile(_with_layer(stack, layer, slopes=new), n))


def _c3c_artifacts(stack, n, layer, new):
    return {"flat": ("alibi", stack, n), "steep": ("alibi", _with_layer(stack, layer, slopes=new), n)}


def _c4b_check(stack, n, layer, new):
    high = _with_layer(stack, layer, diagonal=new)
    return _pred("C4(b)")(alibi_layer_kernel(stack, layer, n), alibi_layer_kernel(stack, layer, n, diagonal=new),
                          engine_profile(stack, n), engine_profile(high, n))


@_composite
def _logits_case(draw, sizes, *, row_constant=True):
    from posbias.numerics.masks import allowed

    n = draw(st.integers(1, min(sizes.max_dense_tokens, ps.EXPLICIT_MAX)))
    logits = np.array(draw(st.lists(st.one_of(st.integers(-3, 3).map(float), st.floats(-30.0, 30.0)),
                                    min_size=n * n, max_size=n * n))).reshape(n, n)
    mask = allowed(draw(ps.masks(max_tokens=n)), n)
    if row_constant:
        background = np.array(draw(st.lists(st.one_of(st.integers(-3, 3).map(float), st.floats(-100.0, 100.0)),
                                            min_size=n, max_size=n)))
    else:
        background = np.array(draw(st.lists(st.integers(-3, 3), min_size=n * n, max_size=n * n)),
                              dtype=np.float64).reshape(n, n)
    return {"logits": logits, "background": background, "mask": mask}


def _c4a_check(logits, background, mask):
    return _pred("C4(a)")(logits, background, mask)


def _c4a_explain(logits, background, mask):
    def softmax(x):
        x = np.where(mask, x, -np.inf)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    diff = np.abs(softmax(logits + background) - softmax(logits))
    i, j = np.unravel_index(np.argmax(diff), diff.shape)
    return (f"softmax(x + b)[{i}, {j}] = {softmax(logits + background)[i, j]:.6g} but softmax(x)[{i}, {j}] = "
            f"{softmax(logits)[i, j]:.6g}: b varies along row {i} ({show(background[i]).strip()})")


@_composite
def _dense_stack_case(draw, sizes, kind="causal"):
    kernels, lambdas = draw(ps.kernel_stacks(kind=kind, max_tokens=sizes.max_dense_tokens,
                                             max_layers=sizes.max_dense_layers))
    return {"kernels": kernels, "lambdas": lambdas}


def _c5_check(label):
    def check(kernels, lambdas):
        from posbias.theorem import orders

        return _pred(label)(orders.rollout(kernels, lambdas), kernels, lambdas)
    return check


def _c6_depth1_check(stack, n):
    return not _pred("C6")(engine_profile(stack, n))


def _c6_u_check(stack, n):
    return not _pred("C6")(engine_profile(stack, n))


@_composite
def _cesaro_case(draw, sizes):
    from posbias.numerics.stack import AlibiStack

    lambdas = draw(ps.lambda_schedules(max_layers=sizes.max_layers, exact=True))
    n = draw(st.integers(1, min(sizes.max_tokens, 128)))
    return {"stack": AlibiStack.build(ps.as_float(lambdas), [0.0]), "n": n, "lambdas": lambdas}


def _cesaro_check(stack, n, lambdas):
    return _pred("cesaro")(engine_profile(stack, n), list(lambdas))


# necessity searches --------------------------------------------------------------------
@_composite
def _c3c_mixed_case(draw):
    """Layers below the ALiBi layer (>= 1) and above it (>= 0) are any causal kernels; the ALiBi
    layer (r = 1/k, d = 0) gets a steeper r = 1/k'. Shrinks toward one layer below, none above."""
    n = draw(st.integers(2, 5))
    below, above = draw(st.integers(1, 3)), draw(st.integers(0, 2))
    k = draw(st.integers(1, 6))
    k_steep = draw(st.integers(k + 1, 8))
    lower = [draw(ps.causal_kernels(n, exact=True)) for _ in range(below)]
    upper = [draw(ps.causal_kernels(n, exact=True)) for _ in range(above)]
    lambdas = draw(ps.lambda_schedules(below + 1 + above, exact=True))
    flat = np.stack(lower + [exact_alibi(Fraction(1, k), n)] + upper)
    steep = np.stack(lower + [exact_alibi(Fraction(1, k_steep), n)] + upper)
    return {"flat": flat, "steep": steep, "lambdas": lambdas, "layer": below,
            "r_flat": Fraction(1, k), "r_steep": Fraction(1, k_steep)}


def _c3c_mixed_check(flat, steep, lambdas, layer, r_flat, r_steep):
    return _pred("C3(c)")(ps.as_float(last_row(flat, lambdas)), ps.as_float(last_row(steep, lambdas)))


def _c3c_mixed_explain(flat, steep, lambdas, layer, r_flat, r_steep):
    p, q = last_row(flat, lambdas), last_row(steep, lambdas)
    from posbias.theorem import orders

    bad = [t for t in range(len(flat)) if not orders.is_monotone(ps.as_float(flat[t]))]
    return (f"layer {layer}: ALiBi r = {r_flat} -> steeper r = {r_steep}; non-monotone layer(s) {bad}\n"
            f"p(flat) = {show(p).strip()}\np(steep) = {show(q).strip()}\n"
            + _explain_dominance("p_flat", "p_steep")(p, q))


def _c3c_mixed_artifacts(flat, steep, lambdas, layer, r_flat, r_steep):
    lam = ps.as_float(lambdas)
    return {"flat": ("kernels", ps.as_float(flat), lam, True), "steep": ("kernels", ps.as_float(steep), lam, True)}


STEEP_R_MAX = Fraction(1, 5)


@_composite
def _c6_old_case(draw):
    k = draw(st.integers(5, 10))  # r = 1/k <= 1/5: the steep slopes of the withdrawn statement
    return {"n": draw(st.integers(1, 12)), "r": Fraction(1, k), "layers": draw(st.integers(1, 12)),
            "lam": Fraction(draw(st.integers(0, 8)), 8)}


def c6_old_profile(n: int, r: Fraction, layers: int, lam: Fraction) -> np.ndarray:
    """Exact profile (Fractions) of T = ``layers`` identical one-head causal ALiBi layers with
    r = e^{-m}, d = 0, constant lambda (the setting of the withdrawn C6 statement)."""
    a = exact_alibi(Fraction(r), n)
    return last_row(np.stack([a] * layers), [Fraction(lam)] * layers)


def _monotone_seq(p) -> bool:
    d = [p[j + 1] - p[j] for j in range(len(p) - 1)]
    return all(x >= 0 for x in d) or all(x <= 0 for x in d)


def _c6_old_check(n, r, layers, lam):
    return _monotone_seq(c6_old_profile(n, r, layers, lam))


def _c6_old_target(n, r, layers, lam):
    p = ps.as_float(c6_old_profile(n, r, layers, lam))
    return float(p[-2] - p[-1]) if n >= 2 else 0.0


def _c6_old_explain(n, r, layers, lam):
    p = c6_old_profile(n, r, layers, lam)
    j = next(j for j in range(1, n - 1) if (p[j] - p[j - 1]) * (p[j + 1] - p[j]) < 0)
    return (f"N = {n}, r = e^-m = {r} (m = ln {1 / r} = {math.log(1 / r):.4f}), d = 0, T = {layers}, lambda = {lam}\n"
            f"p = {show(p).strip()}\n  ~ [{', '.join(f'{float(x):.4f}' for x in p)}]\n"
            f"p({j - 1}), p({j}), p({j + 1}) = {p[j - 1]}, {p[j]}, {p[j + 1]}: not monotone at j = {j}")


def _c6_old_artifacts(n, r, layers, lam):
    from posbias.numerics.stack import AlibiStack

    return {"stack": ("alibi", AlibiStack.build([float(lam)] * layers, [math.log(1 / r)]), n)}


def _alibi_artifact(stack, n, **_):
    return {"stack": ("alibi", stack, n)}


_BUILTINS_DONE = False


def _builtins() -> None:
    """Register the built-in properties (once): every claim of CLAIMS, then the searches."""
    global _BUILTINS_DONE
    if _BUILTINS_DONE:
        return
    _BUILTINS_DONE = True
    from posbias.theorem.claims import CLAIMS

    causal_alibi = lambda z, **kw: ps.alibi_cases(z, mask_kinds=ps.CAUSAL_MASKS, **kw).map(  # noqa: E731
        lambda c: {"stack": c[0], "n": c[1]})
    builtin = [
        Property("C1", "C1", _hyp("C1"), lambda z: _kernel_and_mu(z), _c1_check, explain=_c1_explain),
        Property("C2(a)", "C2(a)", _hyp("C2(a)"), _c2a_case, _c2a_check),
        Property("C2(b)", "C2(b)", _hyp("C2(b)"), _c2b_case, _c2b_check, explain=_c2b_explain),
        Property("C2(c)", "C2(c)", _hyp("C2(c)"), _c2c_case, _c2c_check),
        Property("C3(a)", "C3(a)", _hyp("C3(a)"), lambda z: causal_alibi(z, num_layers=1), _c3a_check),
        Property("C3(b)", "C3(b)", _hyp("C3(b)"), lambda z: _layer_change_case(z, "slopes", max_tokens=min(
            z.max_tokens, 256)), _c3b_check),
        Property("C3(c)", "C3(c)", _hyp("C3(c)"), lambda z: _layer_change_case(z, "slopes"), _c3c_check,
                 artifacts=_c3c_artifacts),
        Property("C4(a)", "C4(a)", _hyp("C4(a)"), lambda z: _logits_case(z), _c4a_check),
        Property("C4(b)", "C4(b)", _hyp("C4(b)"), lambda z: _layer_change_case(z, "diagonal", max_tokens=min(
            z.max_tokens, 256)), _c4b_check),
        Property("C5(a)", "C5(a)", _hyp("C5(a)"), _dense_stack_case, _c5_check("C5(a)")),
        Property("C5(b)", "C5(b)", _hyp("C5(b)"), _dense_stack_case, _c5_check("C5(b)")),
        Property("C5(c)", "C5(c)", _hyp("C5(c)"), _dense_stack_case, _c5_check("C5(c)")),
        Property("C6", "C6", ("ALiBi + content stacks, any mask", "T = 1"),
                 lambda z: ps.alibi_cases(z, num_layers=1).map(lambda c: {"stack": c[0], "n": c[1]}),
                 _c6_depth1_check, statement="at depth 1 no profile is U-shaped", artifacts=_alibi_artifact),
        Property("cesaro", "cesaro", _hyp("cesaro"), _cesaro_case, _cesaro_check),
        # necessity searches: drop one hypothesis, hypothesis must find and shrink a counterexample
        Property("C1 w/o causality", "C1", ("K row-stochastic", "mu a distribution"),
                 lambda z: _kernel_and_mu(z, kind="any", exact=True, max_tokens=4), _c1_check,
                 "counterexample", dropped="K causal", explain=_c1_explain),
        Property("C2(b) w/o monotonicity", "C2(b)", ("every A^(t) causal row-stochastic",),
                 lambda z: _c2b_case(z, kind="causal", exact=True), _c2b_check, "counterexample",
                 dropped="every A^(t) stochastically monotone", explain=_c2b_explain, artifacts=_c2b_artifacts,
                 examples=8, target=_c2b_target),
        Property("C3(c) w/ non-monotone layer", "C3(c)",
                 ("causal mask", "steeper slope at an ALiBi layer", "other layers any causal kernel"),
                 _c3c_mixed_case(), _c3c_mixed_check, "counterexample",
                 dropped="every layer ALiBi (monotone)", explain=_c3c_mixed_explain, artifacts=_c3c_mixed_artifacts),
        Property("C4(a) w/ non-constant shift", "C4(a)", ("any masked logits",), lambda z: _logits_case(
            z, row_constant=False), _c4a_check, "counterexample", dropped="b constant along the row",
                 explain=_c4a_explain),
        Property("C6 old: steep => monotone", "C6", ("one head, causal, d = 0", "r = e^-m <= 1/5", "constant lambda"),
                 _c6_old_case(), _c6_old_check, "counterexample",
                 statement="(withdrawn) a steep slope makes the profile monotone",
                 dropped="(statement withdrawn: THEORY.md C6)", explain=_c6_old_explain,
                 artifacts=_c6_old_artifacts, examples=8, target=_c6_old_target),
        Property("C6 U-shapes exist", "C6", ("ALiBi + content stacks, causal", "T >= 2"),
                 lambda z: ps.alibi_cases(_dense_sizes(z), mask_kinds=("causal",), min_tokens=3).filter(
                     lambda c: c[0].num_layers >= 2).map(lambda c: {"stack": c[0], "n": c[1]}),
                 _c6_u_check, "counterexample", statement="some profile at depth >= 2 is U-shaped",
                 dropped="(existence)", artifacts=_alibi_artifact),
    ]
    missing = [label for label in CLAIMS if label not in {p.name for p in builtin}]
    for label in missing:  # a claim added to the registry after this module: its predicate, untested here
        builtin.append(Property(label, label, _hyp(label), st.nothing(), lambda *a, **k: True,
                                statement="no property yet"))
    user = dict(_REGISTRY)
    _REGISTRY.clear()
    for prop in builtin:
        _REGISTRY[prop.name] = prop
    _REGISTRY.update(user)


# ------------------------------------------------------------------------------ runs
def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def run_property(prop: Property, *, profile: str = "ci", examples: int | None = None, seed: int | None = None,
                 out: str | Path | None = None, progress: Callable[[int], None] | None = None) -> Result:
    """Run one property through ``hypothesis.find``: look for an example where the check is
    False, shrink it, and (with ``out``) write it as JSON plus YAML / .npz files."""
    from hypothesis import find, target
    from hypothesis.errors import HypothesisWarning, NoSuchExample, Unsatisfiable

    base = ps.settings_for(profile)
    n = max(1, round((examples if examples is not None else base.max_examples) * prop.examples))
    kwargs = {"max_examples": n}
    if seed is not None:
        kwargs["derandomize"] = False
    from hypothesis import settings

    conf = settings(base, **kwargs)
    calls, first = [0], [0]

    def failing(example) -> bool:
        calls[0] += 1
        if progress is not None and not first[0]:
            progress(calls[0])
        if prop.target is not None and not first[0]:
            target(float(_call(prop.target, example)))
        bad = not bool(_call(prop.check, example))
        if bad and not first[0]:
            first[0] = calls[0]
        return bad

    start = time.perf_counter()
    strategy = prop.strategy_for(ps.SIZES[profile])
    found, error = None, None
    try:
        with warnings.catch_warnings():  # hypothesis's note that a large example's repr is costly
            warnings.simplefilter("ignore", HypothesisWarning)
            found = find(strategy, failing, settings=conf,
                         random=_random.Random(seed) if seed is not None else None)
    except (NoSuchExample, Unsatisfiable) as exc:
        error = None if isinstance(exc, NoSuchExample) else f"unsatisfiable: {exc}"
    except Exception as exc:  # a crashing check: hypothesis has shrunk the crash
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    seconds = time.perf_counter() - start
    tried = first[0] or calls[0]
    res = Result(prop.name, prop.claim, prop.hypotheses, prop.expect, "", False, tried,
                 max(0, calls[0] - tried), seconds)
    if error is not None:
        res.verdict, res.detail = "error", error
        return res
    if found is None:
        res.verdict = "held" if prop.expect == "holds" else "not found"
        res.ok = prop.expect == "holds"
        return res
    res.verdict = "refuted" if prop.expect == "holds" else "found"
    res.ok = prop.expect == "counterexample"
    res.counterexample = found
    text = show_example(found)
    if prop.explain is not None:
        try:
            text += "\n" + _call(prop.explain, found)
        except Exception as exc:  # the account is a courtesy; the counterexample stands
            text += f"\n(explanation failed: {type(exc).__name__}: {exc})"
    res.text = text
    if out is not None:
        res.files = write_counterexample(prop, res, out, profile=profile, seed=seed)
    return res


def write_counterexample(prop: Property, res: Result, out, *, profile: str, seed) -> list[Path]:
    """<out>/<slug>.json (``load_counterexample`` reads it), and per model it names
    <slug>-<part>.yaml (an AlibiStack, reference schema) or .npz ('kernels', 'lambdas')."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    slug = _slug(prop.name)
    files: dict[str, str] = {}
    written = []
    if prop.artifacts is not None:
        for part, art in _call(prop.artifacts, res.counterexample).items():
            if art[0] == "alibi":
                path = out / f"{slug}-{part}.yaml"
                path.write_text(config_yaml(art[1], art[2]))
            else:
                path = out / f"{slug}-{part}.npz"
                np.savez(path, kernels=art[1], lambdas=art[2])
            files[part] = path.name
            written.append(path)
    payload = {"format": FORMAT, "property": prop.name, "claim": prop.claim, "expect": prop.expect,
               "verdict": res.verdict, "hypotheses": list(prop.hypotheses), "dropped": prop.dropped,
               "statement": prop.statement, "profile": profile, "seed": seed, "example": encode(res.counterexample),
               "explanation": res.text, "files": files}
    path = out / f"{slug}.json"
    path.write_text(json.dumps(payload, indent=1) + "\n")
    return [path, *written]


def select(names=None) -> list[Property]:
    """Properties by name or claim label (``C2(b)`` selects C2(b) and its necessity search)."""
    props = properties()
    if not names:
        return list(props.values())
    chosen: list[Property] = []
    for name in names:
        hit = [p for p in props.values() if p.name == name or p.claim == name]
        if not hit:
            labels = sorted({p.claim or p.name for p in props.values()})
            raise VerifyError(f"unknown claim {name!r}; expected one of {', '.join(labels)}")
        chosen += [p for p in hit if p not in chosen]
    return chosen


def verify(names=None, *, profile: str = "ci", examples: int | None = None, seed: int | None = None,
           out: str | Path | None = "posbias-verify", progress: bool = False) -> Report:
    """Run the selected properties (all by default). seed: None with ``ci`` is derandomized; with
    ``dev`` / ``deep`` a seed is drawn and reported, so every run can be repeated."""
    if profile not in PROFILES:
        raise VerifyError(f"--profile: {profile!r}, expected one of {', '.join(PROFILES)}")
    if seed is None and profile != "ci":
        seed = _random.SystemRandom().randrange(2**32)
    props = select(names)
    results = []
    with _Progress(progress, props, profile, examples) as bar:
        for prop in props:
            results.append(run_property(prop, profile=profile, examples=examples, seed=seed, out=out,
                                        progress=bar.updater(prop)))
            bar.done(prop)
    return Report(results, profile, seed)


class _Progress:
    """A rich progress bar on stderr (terminals only): one bar over all properties."""

    def __init__(self, enabled, props, profile, examples):
        self.enabled = enabled and sys.stderr.isatty()
        base = ps.settings_for(profile).max_examples
        self.totals = {p.name: max(1, round((examples or base) * p.examples)) for p in props}
        self.offset = 0

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
                                "{task.total} examples"), TimeElapsedColumn(), transient=True,
                                console=Console(stderr=True))
            self.bar.__enter__()
            self.task = self.bar.add_task("verify", total=sum(self.totals.values()))
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.bar.__exit__(*exc)

    def updater(self, prop):
        if not self.enabled:
            return None

        def update(count):
            if count % 5 == 0:
                self.bar.update(self.task, description=f"verify {prop.name}",
                                completed=self.offset + min(count, self.totals[prop.name]))
        return update

    def done(self, prop):
        self.offset += self.totals[prop.name]
        if self.enabled:
            self.bar.update(self.task, completed=self.offset)


# ------------------------------------------------------------------------ model mode
def _model_facts(stack, n):
    """Hypotheses that hold for a model: causal, monotone layers, sum lambda, sum lambda delta."""
    from posbias.numerics.stack import AlibiStack
    from posbias.theorem import orders

    alibi = isinstance(stack, AlibiStack)
    lambdas = np.asarray(stack.lambdas, np.float64)
    causal = bool(stack.causal(n)) if alibi else bool(np.all(np.abs(np.triu(stack.kernels, 1)) <= 1e-12))
    dense_ok = (not alibi) or stack.num_layers * stack.num_heads * n * n <= 4e7
    kernels = (alibi_kernels(stack, n) if alibi else stack.kernels) if dense_ok else None
    if kernels is not None:
        monotone = [bool(orders.is_monotone(k)) for k in kernels]
        self_w = np.diagonal(kernels, axis1=1, axis2=2)
    else:
        from posbias import numerics as nx

        monotone = None  # by C3(a) for causal ALiBi; not formed at this size
        self_w = np.asarray(nx.kernel_diagonals(stack, n), np.float64) if causal else None
    delta = None if self_w is None else 1 - self_w.min(axis=1)
    facts = {
        "kind": "alibi" if alibi else "kernels", "num_layers": int(len(lambdas)), "num_tokens": int(n),
        "causal": causal,
        "monotone_layers": None if monotone is None else all(monotone),
        "non_monotone_layers": None if monotone is None else [t for t, ok in enumerate(monotone) if not ok],
        "sum_lambda": float(lambdas.sum()),
        "sum_lambda_delta": None if delta is None else float((lambdas * delta).sum()),
        "max_lambda_delta": None if delta is None else float((lambdas * delta).max()),
    }
    if monotone is None and alibi and causal:
        facts["monotone_layers"] = True
        facts["monotone_note"] = "by C3(a) (causal ALiBi); kernels too large to form here"
    return facts, kernels, self_w


def verify_model(stack, num_tokens: int | None = None, *, profile: str = "ci", examples: int | None = None,
                 seed: int | None = None, out=None, progress: bool = False) -> Report:
    """Check the claims that apply to one model (an ``AlibiStack`` at N tokens or a ``KernelStack``):
    which hypotheses hold, which claims apply, their predictions against the engine, and the
    comparative statics (raise lambda_t, a slope, a diagonal) by hypothesis over perturbations."""
    from posbias.numerics.stack import AlibiStack

    if profile not in PROFILES:
        raise VerifyError(f"--profile: {profile!r}, expected one of {', '.join(PROFILES)}")
    if seed is None and profile != "ci":
        seed = _random.SystemRandom().randrange(2**32)
    n = num_tokens if num_tokens is not None else stack.num_tokens
    alibi = isinstance(stack, AlibiStack)
    facts, kernels, self_w = _model_facts(stack, n)
    lambdas = np.asarray(stack.lambdas, np.float64)
    if alibi:
        p = engine_profile(stack, n)
        profile_of = lambda s: engine_profile(s, n)  # noqa: E731
    else:
        p = last_row(stack.kernels, lambdas)
        profile_of = None
    results: list[Result] = []
    predictions: dict[str, Any] = {}

    def fixed(name, claim_label, hyps, ok, detail):
        results.append(Result(name, claim_label, hyps, "holds", "held" if ok else "refuted", bool(ok), 1, 0, 0.0,
                              detail=detail))

    def na(name, claim_label, why):
        results.append(Result(name, claim_label, (), "holds", "n/a", True, 0, 0, 0.0, detail=why))

    causal, mono = facts["causal"], facts["monotone_layers"]
    # C2(c) and C5(a): identities in the self-weights, against the engine's p and P
    if causal and self_w is not None:
        atom = float(np.prod(1 - lambdas * (1 - self_w[:, -1])))
        predictions["C2(c) p(N-1)"] = atom
        err = abs(p[-1] - atom)
        fixed("C2(c)", "C2(c)", _hyp("C2(c)"), err <= 1e-10 + 1e-9 * atom,
              f"predicted p(N-1) = {atom:.12g}, engine {p[-1]:.12g} (|diff| {err:.1e})")
        diag = np.prod(1 - lambdas[:, None] * (1 - self_w), axis=0)
        bound = float(np.prod(1 - lambdas * (1 - self_w.min(axis=1))))
        predictions["C5(a) min_i P_ii >= prod(1 - lambda delta)"] = bound
        ok = bool(diag.min() >= bound - 1e-12)
        detail = f"min_i P_ii = {diag.min():.6g} >= prod_t (1 - lambda_t delta_t) = {bound:.6g}"
        if kernels is not None:
            from posbias.theorem import orders

            pmat = orders.rollout(kernels, lambdas)
            ok = ok and bool(_pred("C5(a)")(pmat, kernels, lambdas))
            detail += "; diag P = identity (dense P)"
        fixed("C5(a)", "C5(a)", _hyp("C5(a)"), ok, detail + f"; sum lambda delta = {facts['sum_lambda_delta']:.4g}")
    else:
        why = "mask reads later tokens (not causal)" if not causal else "kernels too large to form"
        na("C2(c)", "C2(c)", why)
        na("C5(a)", "C5(a)", why)
    # C1 per layer, on drawn distributions
    if causal and kernels is not None and n <= 2048:
        results.append(run_property(Property(
            "C1", "C1", _hyp("C1"), st.tuples(st.integers(0, len(kernels) - 1), ps.distributions(n)).map(
                lambda c: {"K": kernels[c[0]], "mu": c[1]}), _c1_check), profile=profile, examples=examples,
            seed=seed))
    else:
        na("C1", "C1", "not causal" if not causal else "kernels too large to form")
    # C2(b): raise one lambda
    if causal and mono:
        @_composite
        def raise_lambda(draw):
            t = draw(st.integers(0, len(lambdas) - 1))
            return {"layer": t, "new_lambda": lambdas[t] + (1 - lambdas[t]) * draw(st.floats(0.0, 1.0))}

        def c2b(layer, new_lambda):
            if alibi:  # p(lambda') ≼ p(lambda), p from the engine
                return _dominated(profile_of(_with_layer(stack, layer, lam=new_lambda)), p)
            return _pred("C2(b)")(stack.kernels, lambdas, layer, new_lambda)

        results.append(run_property(Property("C2(b)", "C2(b)", _hyp("C2(b)"), raise_lambda(), c2b),
                                    profile=profile, examples=examples, seed=seed))
    else:
        na("C2(b)", "C2(b)", "not causal" if not causal else f"layers {facts['non_monotone_layers']} not monotone")
    # C3(c), C4(b): steeper slope / larger diagonal at one layer (ALiBi, causal)
    if alibi and causal:
        for name, what in (("C3(c)", "slopes"), ("C4(b)", "diagonal")):
            @_composite
            def change(draw, what=what):
                t = draw(st.integers(0, stack.num_layers - 1))
                return {"layer": t, "new": draw(_steeper(stack, t, what))}

            def check(layer, new, what=what, label=name):
                q = profile_of(_with_layer(stack, layer, **{what: new}))
                return _pred("C3(c)")(p, q) if label == "C3(c)" else _dominated(p, q)

            results.append(run_property(Property(name, name, _hyp(name), change(), check), profile=profile,
                                        examples=examples, seed=seed))
    else:
        na("C3(c)", "C3(c)", "not an ALiBi stack" if not alibi else "not causal")
        na("C4(b)", "C4(b)", "not an ALiBi stack" if not alibi else "not causal")
    # C6: the shape the engine finds; depth 1 is never U-shaped
    u = bool(_pred("C6")(p))
    predictions["C6 U-shaped"] = u
    argmin = int(np.argmin(p))
    if len(lambdas) == 1:
        fixed("C6", "C6", ("T = 1",), not u, f"depth 1: predicted not U-shaped; engine: U-shaped {u}")
    else:
        results.append(Result("C6", "C6", ("observed",), "holds", "observed", True, 1, 0, 0.0,
                              detail=f"U-shaped: {u} (argmin {argmin}, p(0) = {p[0]:.4g}, p(N-1) = {p[-1]:.4g})"))
    # Cesàro closed form: uniform causal attention
    if alibi and causal and stack.mask.past_window is None and np.all(stack.slopes == 0) and \
            np.all(stack.diagonal == 0) and n <= 512:
        ok = bool(_pred("cesaro")(p, [Fraction(float(x)) for x in lambdas]))
        fixed("cesaro", "cesaro", _hyp("cesaro"), ok, "engine p equals the Hausdorff closed form (exact)")
    else:
        na("cesaro", "cesaro", "not uniform causal attention (slope 0, d = 0)")
    if out is not None:
        for res in results:
            if res.counterexample is not None:
                res.files = [_write_model_counterexample(res, out)]
    return Report(results, profile, seed, model={**facts, "predictions": predictions})


def _dominated(mu, nu, tol=1e-10) -> bool:
    from posbias.theorem import orders

    return orders.dominated(mu, nu, tol)


def _write_model_counterexample(res: Result, out) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"model-{_slug(res.name)}.json"
    path.write_text(json.dumps({"format": FORMAT, "property": res.name, "claim": res.claim, "expect": res.expect,
                                "verdict": res.verdict, "example": encode(res.counterexample),
                                "explanation": res.text, "files": {}}, indent=1) + "\n")
    return path


# --------------------------------------------------------------------------- output
_VERDICT_STYLE = {"held": "green", "found": "green", "observed": "cyan", "n/a": "dim", "refuted": "red",
                  "not found": "red", "error": "red"}


def print_report(report: Report, file=None) -> None:
    """The table (claim, hypotheses, examples, verdict, time) and every counterexample, with rich."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file or sys.stdout, width=max(120, Console().width), highlight=False)
    if report.model is not None:
        m = report.model
        yes = {True: "yes", False: "no", None: "unknown"}
        console.print(f"model: {m['kind']}, T = {m['num_layers']}, N = {m['num_tokens']}; causal: {yes[m['causal']]}; "
                      f"every layer stochastically monotone: {yes[m['monotone_layers']]}"
                      + (f" ({m['monotone_note']})" if m.get("monotone_note") else "")
                      + f"; sum lambda = {m['sum_lambda']:.4g}"
                      + ("" if m["sum_lambda_delta"] is None else
                         f"; sum lambda delta = {m['sum_lambda_delta']:.4g} (max {m['max_lambda_delta']:.3g})"))
    seed = "derandomized" if report.seed is None else report.seed
    table = Table(title=f"posbias verify (profile {report.profile}, seed {seed})")
    for col in ("claim", "hypotheses", "examples", "verdict", "time"):
        table.add_column(col, justify="right" if col in ("examples", "time") else "left",
                         overflow="fold", max_width=None if col != "hypotheses" else 52)
    for r in report.results:
        style = _VERDICT_STYLE.get(r.verdict, "")
        if r.verdict in ("refuted", "found") and not r.ok:
            style = "red"
        note = " (expected)" if r.expect == "counterexample" and r.verdict == "found" else ""
        table.add_row(r.name, "; ".join(r.hypotheses), f"{r.examples}" + (f" +{r.shrinks} shrink" if r.shrinks
                                                                            else ""),
                      f"[{style}]{r.verdict}{note}[/]", f"{r.seconds:.2f}s")
    console.print(table)
    for r in report.results:
        if r.detail:
            console.print(f"[bold]{r.name}[/]: {r.detail}")
        if r.counterexample is not None:
            kind = "counterexample" if r.expect == "counterexample" else "REFUTED by"
            console.print(f"[bold]{r.name}[/] — {kind}:")
            console.print(r.text, markup=False)
            if r.files:
                console.print("  wrote " + ", ".join(str(f) for f in r.files), markup=False)
    bad = [r.name for r in report.results if not r.ok]
    console.print("all as expected" if not bad else f"[red]not as expected: {', '.join(bad)}[/]")


# ------------------------------------------------------------------------------ CLI
VERIFY_EPILOG = """\
examples:
  posbias verify                               every claim and every necessity search (profile ci)
  posbias verify C2(b) C6 --profile deep --seed 7
  posbias verify --stack ../shared/data/official-configs/no_content/bloom.yaml --tokens 64
  posbias verify --kernels examples/kernels.npz --causal --json

exit status: 0 when every claim expected to hold held and every expected counterexample
was found, 1 otherwise, 2 on bad input.
"""


_nonneg_int = at_least(0)


def add_parser(subparsers):
    """Add the ``verify`` subcommand to an argparse subparsers object; returns its parser."""
    import argparse

    pv = subparsers.add_parser(
        "verify", help="property-based verification of the claims; counterexample search",
        description="Run every claim's property through hypothesis, search counterexamples where a hypothesis "
                    "is dropped, or check the claims that apply to one model.",
        epilog=VERIFY_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    pv.add_argument("claims", nargs="*", metavar="CLAIM", help="claim labels or property names (default: all)")
    src = pv.add_mutually_exclusive_group()
    src.add_argument("--stack", type=Path, metavar="CONFIG", help="check the claims that apply to this rollout YAML")
    src.add_argument("--kernels", type=Path, metavar="FILE", help="... or to these kernels (.npy/.npz)")
    pv.add_argument("--tokens", type=_nonneg_int, metavar="N", help="with --stack: override the sequence length")
    pv.add_argument("--causal", action="store_true", help="with --kernels: declare them causal (checked)")
    pv.add_argument("--schedule", metavar="SPEC", help="with --kernels: the lambda schedule")
    pv.add_argument("--examples", type=_nonneg_int, metavar="N",
                    help="examples per property (default: the profile's 25 / 150 / 1000; necessity searches 8x)")
    pv.add_argument("--seed", type=_nonneg_int, metavar="S", help="random seed (default: derandomized for ci)")
    pv.add_argument("--profile", choices=PROFILES, default="ci", help="sizes and example counts")
    pv.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    pv.add_argument("--out", type=Path, default=Path("posbias-verify"),
                    help="folder for counterexample files (default ./posbias-verify)")
    return pv


def run(args) -> int:
    """Execute ``posbias verify`` from parsed arguments; returns the exit code (bad input: one line, 2)."""
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        print("posbias verify: error: needs the hypothesis package (pip install hypothesis)", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.examples is not None and args.examples < 1:
            raise VerifyError("--examples: expected a positive integer")
        if args.tokens is not None and args.tokens < 1:
            raise VerifyError("--tokens: expected a positive integer")
        if args.stack is not None or args.kernels is not None:
            if args.claims:
                raise VerifyError("CLAIM names select built-in properties; with --stack/--kernels every applicable "
                                  "claim is checked")
            stack, n = _load_model(args)
            report = verify_model(stack, n, profile=args.profile, examples=args.examples, seed=args.seed,
                                  out=args.out, progress=not args.json)
        else:
            if args.tokens is not None or args.causal or args.schedule is not None:
                raise VerifyError("--tokens, --causal and --schedule apply to --stack / --kernels only")
            report = verify(args.claims, profile=args.profile, examples=args.examples, seed=args.seed,
                            out=args.out, progress=not args.json)
    except UserError as exc:
        print(f"posbias verify: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:  # e.g. a kernel file the stack refuses
        print(f"posbias verify: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print_report(report)
    return report.exit_code


def _load_model(args):
    if args.stack is not None:
        from posbias.config import load

        if not args.stack.exists():
            raise VerifyError(f"{args.stack}: no such file")
        model = load(args.stack, tokens=args.tokens)
        return model.stack, model.num_tokens
    from posbias.run import load_kernels

    if args.tokens is not None:
        raise VerifyError("--tokens applies to --stack only (kernels fix N)")
    stack, _ = load_kernels(args.kernels, args.schedule, args.causal)
    return stack, stack.num_tokens


def main(argv=None) -> int:
    """``python -m posbias.verify ...``: the subcommand on its own (for testing before wiring)."""
    import argparse

    class _P(argparse.ArgumentParser):
        def error(self, message):
            print(f"{self.prog}: {message}", file=sys.stderr)
            raise SystemExit(EXIT_USAGE)

    top = _P(prog="posbias")
    sub = top.add_subparsers(dest="command", required=True, parser_class=_P)
    add_parser(sub)
    args = top.parse_args(["verify", *(sys.argv[1:] if argv is None else argv)])
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
