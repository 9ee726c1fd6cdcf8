"""Sweep specs: a base model and axes, read from YAML and validated before any work.

A spec names a base model (THEORY.md, Notation: T layers, H heads, N tokens, the
schedule lambda_t, slopes m_h, content diagonal d, the mask) and axes along which
some of its parameters vary::

    name: U-shape region                   # optional title (figures, manifest)
    base:                                  # model flags, as `posbias rollout` takes them ...
      layers: 32
      heads: 32
      tokens: 256
      schedule: constant:0.5
    # base: ../configs/bloom.yaml          # ... or a rollout config (relative to the spec)
    # base: {config: bloom.yaml, tokens: 64}   (a config with flags overriding it)
    axes:
      lambda: {linspace: [0.05, 0.95, 100]}
      slope_scale: {geomspace: [0.01, 10, 100]}
    zip: [[lambda0, beta]]                 # axes that vary together (equal lengths)
    engine: auto                           # auto | structured | log | fft | dense
    profiles: false                        # store each profile p in the table
    diagonal: false                        # min_i P_ii (C5(a)), causal masks

Relative biases (THEORY.md C7): ``base`` takes ``bias: SPEC`` (posbias/bias_spec.py, as
``posbias rollout --bias``: one spec for every head, or one per head separated by ``/``) and
``sink: S`` (``--sink``); the axis ``bias`` takes spec strings, the axis ``sink`` numbers. A
spec may hold named placeholders ``{NAME}``, each filled per point from a numeric axis of that
name (any name that is not a built-in axis)::

    base: {layers: 12, heads: 4, tokens: 256, schedule: constant:0.5, bias: "kerple-log:{r1},{r2}"}
    axes: {r1: {linspace: [0, 2, 5]}, r2: [0.5, 1]}

Checked when the spec is read: every placeholder has an axis, every such axis fills a
placeholder, and every generated spec parses (one line naming the axis and value
otherwise). A bias sweep has no ALiBi slopes (``slopes``, ``slope_scale`` refused); its
table has a column ``bias_spec`` (the spec string of each point, placeholders filled) beside
the axis columns. Engines: ``auto`` or ``bias`` (and ``dense``); ``structured``, ``log`` and
``fft`` take only points whose every head is ALiBi at their N (``BiasStack.as_alibi``).

Axes: ``lambda`` (lambda_t = value), ``lambda0`` and ``beta`` (lambda_t =
lambda0 / (t+1)^beta), ``layers`` (T), ``tokens`` (N), ``slope_scale`` (every slope
times this), ``slopes`` (explicit per-head slopes, one list per value),
``content_diagonal`` (d on every head), ``mask`` (``causal``, ``full``,
``window:W``, ``prefix:K``), ``window`` (a sliding window of W tokens), ``bias`` and
``sink`` (above), and the placeholder axes of a bias spec. Values
are a list or a range: ``{linspace: [a, b, n]}``, ``{logspace: [a, b, n]}`` (10^a ..
10^b), ``{geomspace: [a, b, n]}``, ``{range: [start, stop, step]}`` (stop excluded, also when
rounding puts the last value a hair below it: ``range_count``).
The grid is the product of the axes in the order written, the first varying slowest;
axes of one ``zip`` group take their k-th values together and stand at the place of
the group's first axis.

The fixed keys are pydantic models in posbias's one validation style (``SpecFile`` and
``BaseFlags``; posbias/io/schema.py formats their refusals): unknown keys are refused first, with
the keys expected there. The axes are named by the user, so their values are checked axis by
axis after that (``_parse_axes``), then the zip groups and the rules that tie keys together.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pydantic

from posbias.errors import UserError
from posbias.io.schema import STRICT, first_error, refusal
from posbias.numerics.engines import CHOOSABLE as ENGINES  # the one engine table


class SpecError(UserError):
    """A bad spec: one line naming the file, the key and what was expected."""


FLOAT_AXES = ("lambda", "lambda0", "beta", "slope_scale", "content_diagonal", "sink")
INT_AXES = ("layers", "tokens", "window")
AXES = (
    "lambda",
    "lambda0",
    "beta",
    "layers",
    "tokens",
    "slope_scale",
    "slopes",
    "content_diagonal",
    "mask",
    "window",
    "bias",
    "sink",
)


@functools.cache
def alibi_only(engine: str) -> bool:
    """Whether the engine of that name computes ALiBi stacks only, asked of the engine itself (its
    ``supports`` on a one-layer relative-bias stack, plain and repeated): for such an engine a bias
    point must be ALiBi at its N (``BiasStack.as_alibi``). Only that engine's module is imported."""
    from posbias.numerics import engines
    from posbias.numerics.bias import Bias, KerpleLog
    from posbias.numerics.bias_stack import BiasStack
    from posbias.numerics.periodic import PeriodicStack

    probe = BiasStack.build([0.5], [Bias(KerpleLog(1.0, 1.0))])
    chosen = engines.get(engine)  # type: ignore[arg-type]  (a name the spec has validated)
    return all(chosen.supports(st, 4) is not None for st in (probe, PeriodicStack.build(probe, 2)))


PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_GENERATED_SPECS = 100_000
"""At most this many distinct bias specs (templates times placeholder values) are generated and checked."""
RANGES = ("linspace", "logspace", "geomspace", "range")
MAX_POINTS = 1_000_000
"""Grids larger than this are refused unless forced (``--force``)."""
MAX_AXIS_VALUES = 10_000_000
MAX_SIZE = 2**53


@dataclass(frozen=True)
class Axis:
    """One axis: its name and its values (floats, ints, strings or tuples of floats for ``slopes``)."""

    name: str
    values: tuple


def fill(template: str, values: dict[str, float]) -> str:
    """A bias spec with every placeholder ``{NAME}`` replaced by ``repr(values[NAME])`` (the shortest
    text that reads back as the same float64)."""
    return PLACEHOLDER.sub(lambda m: repr(float(values[m.group(1)])), template)


def placeholders(template: str) -> list[str]:
    """The placeholder names of a bias spec, in order of first appearance."""
    return list(dict.fromkeys(PLACEHOLDER.findall(template)))


@dataclass(frozen=True)
class Spec:
    """A validated sweep spec.

    raw: the mapping as read (recorded in the manifest); path: the spec file;
    base: the base mapping (flags; ``config`` resolved to an absolute path);
    axes: in the order written; dims: groups of axis names, one per grid dimension
    (a single axis, or a zip group); digest: SHA-256 over the spec and the base config's
    bytes (a sweep resumes only with the same digest).
    """

    raw: dict
    path: str
    name: str
    base: dict
    axes: tuple[Axis, ...]
    dims: tuple[tuple[str, ...], ...]
    engine: str
    profiles: bool
    diagonal: bool
    digest: str

    @property
    def shape(self) -> tuple[int, ...]:
        lengths = {a.name: len(a.values) for a in self.axes}
        return tuple(lengths[d[0]] for d in self.dims)

    @property
    def num_points(self) -> int:
        return math.prod(self.shape)

    @property
    def bias_sweep(self) -> bool:
        """True when the spec sets a relative bias (``base.bias`` or an axis ``bias``)."""
        return "bias" in self.base or self.axis("bias") is not None

    @property
    def parameter_axes(self) -> tuple[str, ...]:
        """The axes that fill placeholders of the bias spec (in the order written)."""
        return tuple(a.name for a in self.axes if a.name not in AXES)

    def axis(self, name: str) -> Axis | None:
        return next((a for a in self.axes if a.name == name), None)


def _fail(where: str, what: str) -> SpecError:
    return SpecError(f"{where}: {what}")


def _shown(value, width: int = 40) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _number(where: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(where, f"expected a number, got {_shown(value)}")
    x = float(value)
    if not math.isfinite(x):
        raise _fail(where, f"expected a finite number, got {_shown(value)}")
    return x


RANGE_TOLERANCE = 1e-9
"""A range value within this many steps of the stop counts as the stop (excluded)."""


def range_count(where: str, start: float, stop: float, step: float) -> int:
    """How many values ``start + k step`` (k = 0, 1, ...) lie before ``stop``, the stop excluded.

    n = (stop - start) / step is rounded in floating point (about 2 ulp of n, and stop - start
    itself one ulp of the larger end), so a value within ``RANGE_TOLERANCE`` steps of the stop (or
    within 8 ulp of n, for long ranges) counts as the stop: ``[0.7, 1.0, 0.1]`` gives 0.7, 0.8, 0.9
    (n = 3.0000000000000004) and ``[0, 1, 0.25]`` gives four values. Refuses (one line) a range
    with more than ``MAX_AXIS_VALUES`` values or whose count overflows (step 1e-320, ends 1e308
    apart), before any array is made."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        n = (np.float64(stop) - np.float64(start)) / np.float64(step)
    if not np.isfinite(n) or n > MAX_AXIS_VALUES + 1:
        shown = "too many to count" if not np.isfinite(n) else f"about {float(n):.3g}"
        raise _fail(
            where,
            f"range: {shown} values (step {step!r} from {start!r} to {stop!r}), expected at most {MAX_AXIS_VALUES:,}",
        )
    n = float(n)
    tol = max(RANGE_TOLERANCE, 8 * np.finfo(np.float64).eps * abs(n))
    count = max(0, math.ceil(n - tol))
    if count > MAX_AXIS_VALUES:
        raise _fail(where, f"range: {count:,} values, expected at most {MAX_AXIS_VALUES:,}")
    return count


def _range_values(where: str, kind: str, args) -> list:
    if not isinstance(args, list) or len(args) != 3:
        raise _fail(
            where,
            f"{kind}: expected a list [start, stop, {'step' if kind == 'range' else 'count'}], got {_shown(args)}",
        )
    a, b = _number(f"{where}.{kind}[0]", args[0]), _number(f"{where}.{kind}[1]", args[1])
    if kind == "range":
        step = _number(f"{where}.range[2]", args[2])
        if step == 0:
            raise _fail(where, "range: step must not be 0")
        return (a + np.arange(range_count(where, a, b, step), dtype=np.float64) * step).tolist()
    n = args[2]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n > MAX_AXIS_VALUES:
        raise _fail(f"{where}.{kind}[2]", f"expected a count between 1 and {MAX_AXIS_VALUES}, got {_shown(n)}")
    if kind == "linspace":
        return np.linspace(a, b, n).tolist()
    if kind == "logspace":
        with np.errstate(over="ignore"):
            return np.logspace(a, b, n).tolist()
    if a <= 0 or b <= 0:
        raise _fail(where, f"geomspace: expected positive end points, got {a!r} and {b!r}")
    return np.geomspace(a, b, n).tolist()


def _raw_values(where: str, value) -> list:
    if isinstance(value, dict):
        if len(value) != 1 or next(iter(value)) not in RANGES:
            raise _fail(
                where, f"expected a list of values or one of {{{'|'.join(RANGES)}: [...]}}, got {_shown(value)}"
            )
        kind, args = next(iter(value.items()))
        return _range_values(where, kind, args)
    if not isinstance(value, list):
        raise _fail(
            where,
            f"expected a list of values or {{linspace: [a, b, n]}} (a fixed value belongs in base), "
            f"got {_shown(value)}",
        )
    return value


def _axis_values(  # noqa: C901 (one branch per refused value; issue 20 §4)
    name: str,
    where: str,
    raw: list,
    rounded: bool = False,
) -> tuple:
    """Values of one axis, each checked against the axis's range."""
    if not raw:
        raise _fail(where, "empty axis, expected at least one value")
    out = []
    for k, v in enumerate(raw):
        at = f"{where}[{k}]"
        if name in FLOAT_AXES:
            x = _number(at, v)
            if name in ("lambda", "lambda0") and not 0.0 <= x <= 1.0:
                raise _fail(at, f"{name} = {x!r}, expected a value in [0, 1]")
            if name in ("beta", "slope_scale") and x < 0:
                raise _fail(at, f"{name} = {x!r}, expected a value >= 0")
            out.append(x)
        elif name in INT_AXES:
            x = _number(at, v)
            n = int(round(x)) if abs(x) < 2.0**63 else -1
            if not rounded and x != n:
                raise _fail(at, f"{name} = {x!r}, expected an integer")
            if n < 1 or n > MAX_SIZE:
                raise _fail(at, f"{name} = {_shown(v)}, expected an integer between 1 and 2^53")
            out.append(n)
        elif name == "bias":
            if not isinstance(v, str) or not v.strip():
                raise _fail(at, f"expected a bias spec string ({_bias_specs()}), got {_shown(v)}")
            out.append(v.strip())
        elif name not in AXES:  # a placeholder's values
            out.append(_number(at, v))
        elif name == "mask":
            from posbias.numerics import masks

            if not isinstance(v, str):
                raise _fail(at, f"expected a mask ({masks.MASK_SPECS}), got {_shown(v)}")
            try:
                out.append(masks.parse(v).spec)
            except ValueError as exc:
                raise _fail(at, str(exc)) from None
        else:  # slopes: one list of per-head slopes per value
            if not isinstance(v, list) or not v:
                raise _fail(at, f"expected a non-empty list of per-head slopes, got {_shown(v)}")
            slopes = tuple(_number(f"{at}[{h}]", s) for h, s in enumerate(v))
            bad = [h for h, s in enumerate(slopes) if s < 0]
            if bad:
                raise _fail(f"{at}[{bad[0]}]", f"slope {slopes[bad[0]]!r}, expected a value >= 0")
            out.append(slopes)
    if name in INT_AXES:
        seen = {}
        for k, n in enumerate(out):
            if n in seen:
                raise _fail(
                    where,
                    f"the value {n} appears twice (positions {seen[n]} and {k}"
                    " after rounding to integers); use fewer or wider-spaced values",
                )
            seen[n] = k
    return tuple(out)


def _bias_specs() -> str:
    from posbias.bias_spec import SPECS

    return SPECS


def _parse_axes(where: str, axes, params: set[str] = frozenset()) -> list[Axis]:
    if not isinstance(axes, dict) or not axes:
        raise _fail(where, f"expected a mapping of axis names to values ({', '.join(AXES)}), got {_shown(axes)}")
    out = []
    for name, value in axes.items():
        at = f"{where}.{name}"
        if name not in AXES and name not in params:
            raise _fail(
                at, f"unknown axis, expected one of {', '.join(AXES)} or a placeholder {{NAME}} of the bias spec"
            )
        out.append(Axis(name, _axis_values(name, at, _raw_values(at, value), rounded=isinstance(value, dict))))
    return out


def _parse_zip(where: str, groups, axes: list[Axis]) -> list[tuple[str, ...]]:
    if groups is None:
        return []
    if not isinstance(groups, list) or not all(isinstance(g, list) for g in groups):
        raise _fail(where, f"expected a list of axis-name lists, e.g. [[lambda0, beta]], got {_shown(groups)}")
    lengths = {a.name: len(a.values) for a in axes}
    used = set()
    out = []
    for k, group in enumerate(groups):
        at = f"{where}[{k}]"
        if len(group) < 2:
            raise _fail(at, f"expected at least two axis names, got {_shown(group)}")
        for name in group:
            if name not in lengths:
                raise _fail(at, f"{_shown(name)} is not an axis of this spec (axes: {', '.join(lengths)})")
            if name in used:
                raise _fail(at, f"axis {name} is in two zip groups")
            used.add(name)
        if len({lengths[n] for n in group}) != 1:
            shown = ", ".join(f"{n} has {lengths[n]}" for n in group)
            raise _fail(at, f"zipped axes need equal lengths ({shown})")
        out.append(tuple(group))
    return out


def _dims(axes: list[Axis], zips: list[tuple[str, ...]]) -> tuple[tuple[str, ...], ...]:
    group_of = {n: g for g in zips for n in g}
    dims, placed = [], set()
    for a in axes:
        if a.name in placed:
            continue
        group = group_of.get(a.name, (a.name,))
        ordered = tuple(n.name for n in axes if n.name in group)
        dims.append(ordered)
        placed.update(group)
    return tuple(dims)


def _checked(check, *args):
    """``check("", *args)`` with its SpecError turned into a refusal of the field being validated
    (the path inside the value, such as ``[0][1]``, kept)."""
    try:
        return check("", *args)
    except SpecError as exc:
        at, _, what = str(exc).partition(": ")
        raise refusal(what, at) from None


def _config_path(value, info: pydantic.ValidationInfo) -> str:
    if not isinstance(value, str) or not value:
        raise refusal(f"expected a path to a rollout config, got {_shown(value)}")
    path = Path(value) if Path(value).is_absolute() else info.context["spec_dir"] / value
    if not path.is_file():
        raise refusal(f"{value}: no such file (paths are relative to the spec file)")
    return str(path)


def _size(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
        raise refusal(f"expected a positive integer, got {_shown(value)}")
    return value


def _spec_string(value) -> str:
    if not isinstance(value, str):
        raise refusal(f"expected a spec string, got {_shown(value)}")
    return value


def _base_slopes(value):
    if isinstance(value, str):
        if value not in ("paper", "hf"):
            raise refusal(f"expected paper, hf or a list of per-head slopes, got {_shown(value)}")
        return value
    return _checked(lambda where, v: _axis_values("slopes", where, [v])[0], value)


def _bias(value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise refusal(f"expected a bias spec string ({_bias_specs()}), got {_shown(value)}")
    return value.strip()


def _temperature(value) -> float:
    x = _checked(_number, value)
    if x <= 0:
        raise refusal(f"expected a value > 0, got {x!r}")
    return x


def _flag(value) -> bool:
    if not isinstance(value, bool):
        raise refusal(f"expected true or false, got {_shown(value)}")
    return value


def _engine(value) -> str:
    if value not in ENGINES:
        raise refusal(f"expected one of {', '.join(ENGINES)}, got {_shown(value)}")
    return value


def _name(value) -> str:
    if not isinstance(value, str):
        raise refusal(f"expected a string, got {_shown(value)}")
    return value


def _base_mapping(value) -> dict:
    if isinstance(value, str):
        return {"config": value}
    if not isinstance(value, dict):
        raise refusal(
            f"expected a config path or a mapping of model flags ({', '.join(BASE_KEYS)}), got {_shown(value)}"
        )
    return value


def _number_value(value) -> float:
    return _checked(_number, value)


# A key that may be left out (None then) but, when given, is refused unless its check passes
# (an explicit null included): the check runs before pydantic's own type check.
_Before = pydantic.BeforeValidator
ConfigPath = Annotated[str | None, _Before(_config_path)]
OptionalSize = Annotated[int | None, _Before(_size)]
OptionalSpecString = Annotated[str | None, _Before(_spec_string)]
OptionalNumber = Annotated[float | None, _Before(_number_value)]


class BaseFlags(pydantic.BaseModel):
    """``base``: a rollout config (``config``, relative to the spec file) and model flags, as
    ``posbias rollout`` takes them; only the keys given are set."""

    model_config = STRICT
    config: ConfigPath = None
    layers: OptionalSize = None
    heads: OptionalSize = None
    tokens: OptionalSize = None
    schedule: OptionalSpecString = None
    slopes: Annotated[str | tuple[float, ...] | None, _Before(_base_slopes)] = None
    content_diagonal: OptionalNumber = None
    mask: OptionalSpecString = None
    temperature: Annotated[float | None, _Before(_temperature)] = None
    bias: Annotated[str | None, _Before(_bias)] = None
    sink: OptionalNumber = None


class SpecFile(pydantic.BaseModel):
    """The fixed keys of a spec file (module docstring). ``axes`` and ``zip`` name the user's own
    axes, so their values are checked per axis after this (``_parse_axes``, ``_parse_zip``)."""

    model_config = STRICT
    name: Annotated[str | None, _Before(_name)] = None
    base: Annotated[BaseFlags, _Before(_base_mapping)]
    axes: Any
    zip: Any = None
    engine: Annotated[str, _Before(_engine)] = "auto"
    profiles: Annotated[bool, _Before(_flag)] = False
    diagonal: Annotated[bool, _Before(_flag)] = False

    @pydantic.model_validator(mode="before")
    @classmethod
    def _a_mapping(cls, data):
        if not isinstance(data, dict):
            raise refusal(f"expected a mapping with keys {', '.join(TOP_KEYS)}")
        return data


TOP_KEYS = tuple(SpecFile.model_fields)
BASE_KEYS = tuple(BaseFlags.model_fields)
KEYS = {"": TOP_KEYS, "base": BASE_KEYS}
"""The keys of each fixed mapping, named when an unknown key is refused."""
NOTES = {"base": "a config path or model flags", "axes": "e.g. axes: {lambda: [0.25, 0.5]}"}


def _check_combination(where: str, base: dict, names: set[str]) -> None:
    if "lambda" in names and names & {"lambda0", "beta"}:
        raise _fail(where, "axis lambda (constant schedule) cannot be combined with lambda0 / beta (power decay)")
    if "mask" in names and "window" in names:
        raise _fail(where, "axes mask and window both set the mask; use one")
    if "config" in base:
        return
    for key, axis in (("layers", "layers"), ("tokens", "tokens")):
        if key not in base and axis not in names:
            raise _fail(where, f"base.{key} is missing (or give an axis {axis})")
    if "heads" not in base and "slopes" not in names and not isinstance(base.get("slopes"), tuple):
        raise _fail(where, "base.heads is missing (or give explicit slopes)")
    if "schedule" not in base and not ("lambda" in names or {"lambda0", "beta"} <= names):
        raise _fail(where, "base.schedule is missing (or give an axis lambda, or lambda0 and beta)")


def _check_schedule(where: str, base: dict, names: set[str]) -> None:
    """lambda0 or beta alone varies one parameter of a power_decay base schedule."""
    if bool(names & {"lambda0", "beta"}) and not {"lambda0", "beta"} <= names:
        spec = base.get("schedule")
        if spec is None and "config" in base:
            from posbias.io.yaml_io import read_yaml

            cfg = read_yaml(base["config"]).get("lambda_schedule_config") or {}
            spec = cfg.get("schedule_type") if isinstance(cfg, dict) else None
        if not (isinstance(spec, str) and spec.startswith("power_decay")):
            one = "lambda0" if "lambda0" in names else "beta"
            raise _fail(where, f"axis {one} alone needs a power_decay base schedule (or both lambda0 and beta axes)")


@functools.lru_cache(maxsize=MAX_GENERATED_SPECS)
def biases_of(text: str) -> tuple:
    """The ``Bias`` of each head (one, or one per head) of a bias spec (posbias/bias_spec.py), parsed once
    per spec text; a one-line ``UserError`` for a spec that does not parse."""
    from posbias.bias_spec import parse_biases

    return tuple(parse_biases(text, "bias"))


def _placeholder_names(base_raw, axes_raw) -> set[str]:
    """Placeholder names in the raw ``base.bias`` and ``axes.bias`` values (before validation)."""
    texts = []
    if isinstance(base_raw, dict) and isinstance(base_raw.get("bias"), str):
        texts.append(base_raw["bias"])
    if isinstance(axes_raw, dict) and isinstance(axes_raw.get("bias"), list):
        texts += [v for v in axes_raw["bias"] if isinstance(v, str)]
    return {n for t in texts for n in placeholders(t)}


def _check_bias(  # noqa: C901 (one branch per bias-sweep rule; split per rule; issue 20 §4)
    where: str,
    base: dict,
    axes: list[Axis],
    engine: str,
) -> None:
    """A bias sweep's rules (module docstring): no slopes, every placeholder has an axis (an axis that
    fills none is refused as unknown by ``_parse_axes``), every generated spec parses (with one bias
    or one per head)."""
    names = {a.name for a in axes}
    values = {a.name: a.values for a in axes}
    if "bias" in values:
        templates = [(f"axes.bias[{k}]", t) for k, t in enumerate(values["bias"])]
    else:
        templates = [("base.bias", base["bias"])] if "bias" in base else []
    if not templates:
        if "config" not in base:  # a config may give the bias itself (checked when the grid is built)
            for key, present in (
                ("axes.sink", "sink" in names),
                ("base.sink", "sink" in base),
                ("engine", engine == "bias"),
            ):
                if present:
                    what = "engine bias" if key == "engine" else "a sink"
                    raise _fail(f"{where}: {key}", f"{what} needs a relative bias (base.bias or an axis bias)")
        return
    if "bias" in base and "bias" in values:
        raise _fail(f"{where}: axes.bias", "base.bias and the axis bias both set the bias; use one")
    for key in ("slopes", "slope_scale"):
        if key in names:
            raise _fail(f"{where}: axes.{key}", "a bias sweep has no ALiBi slopes (vary the bias spec instead)")
    if "slopes" in base:
        raise _fail(f"{where}: base.slopes", "a bias sweep has no ALiBi slopes (base.bias replaces them)")
    heads = base.get("heads") if "config" not in base else None
    for at, template in templates:
        if PLACEHOLDER.sub("", template).count("{") or PLACEHOLDER.sub("", template).count("}"):
            raise _fail(
                f"{where}: {at}",
                f"{_shown(template)}: a brace that is not a placeholder {{NAME}} "
                "(a letter or _, then letters, digits or _)",
            )
        used = placeholders(template)
        for name in used:
            if name in AXES:
                raise _fail(f"{where}: {at}", f"placeholder {{{name}}} names a built-in axis; use another name")
            if name not in names:
                raise _fail(f"{where}: {at}", f"placeholder {{{name}}} has no axis (add axes.{name})")
        count = math.prod(len(values[n]) for n in used)
        if count > MAX_GENERATED_SPECS:
            raise _fail(
                f"{where}: {at}", f"{count:,} bias specs from its placeholders, more than {MAX_GENERATED_SPECS:,}"
            )
        for combo in itertools.product(*(values[n] for n in used)):
            point = dict(zip(used, combo))
            text = fill(template, point)
            shown = ", ".join(f"axes.{n} = {v!r}" for n, v in point.items()) or at
            try:
                biases = biases_of(text)
            except UserError as exc:
                raise _fail(f"{where}: {shown}", str(exc)) from None
            if heads is not None and len(biases) not in (1, heads):
                raise _fail(
                    f"{where}: {shown}", f"bias {text!r}: {len(biases)} head biases, expected one or heads = {heads}"
                )


def digest(raw: dict, base: dict) -> str:
    """SHA-256 of the spec (canonical JSON) and of the bytes of its base config file, if any."""
    h = hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode("utf-8"))
    if "config" in base:
        h.update(Path(base["config"]).read_bytes())
    return h.hexdigest()


def parse(raw, path: str = "<spec>", spec_dir: Path | None = None) -> Spec:
    """Validate a spec mapping (as read from YAML) into a ``Spec``; raise SpecError (one line).

    The fixed keys first (``SpecFile``: unknown keys before anything else, then the base flags,
    engine, flags and name), then the axes, the zip groups and the rules that tie them together."""
    where = str(path)
    try:
        top = SpecFile.model_validate(raw, context={"spec_dir": spec_dir or Path(".")})
    except pydantic.ValidationError as err:
        raise SpecError(f"{where}: {first_error(err, keys=KEYS, notes=NOTES)}") from None
    base_raw = raw["base"] if isinstance(raw["base"], dict) else {"config": raw["base"]}
    base = {key: getattr(top.base, key) for key in base_raw}
    axes = _parse_axes(f"{where}: axes", raw["axes"], _placeholder_names(raw["base"], raw["axes"]))
    zips = _parse_zip(f"{where}: zip", raw.get("zip"), axes)
    names = {a.name for a in axes}
    _check_combination(f"{where}: axes", base, names)
    _check_schedule(f"{where}: axes", base, names)
    _check_bias(where, base, axes, top.engine)
    name = Path(where).stem if top.name is None else top.name
    return Spec(
        raw,
        where,
        name,
        base,
        tuple(axes),
        _dims(axes, zips),
        top.engine,
        top.profiles,
        top.diagonal,
        digest(raw, base),
    )


def load(path: str | Path) -> Spec:
    """Read and validate a spec file (YAML, read by posbias/io/yaml_io.py's limited loader)."""
    from posbias.io.yaml_io import read_yaml

    path = Path(path)
    raw = read_yaml(path)
    return parse(raw, str(path), path.parent)
