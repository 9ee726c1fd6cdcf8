"""Rollout configuration files (the reference implementation's YAML schema) -> AlibiStack.

The schema is the one the authors' loader reads (../shared/data/README.md):
``sequence_length``, ``num_layers``, ``mask_config``, ``attention_config``,
``content_config``, ``lambda_schedule_config``, ``save_dir``. posbias adds the
mask type ``prefix`` with key ``prefix_length``. Unknown keys, NaN/inf, wrong
list lengths, non-positive sizes, sizes above 2^53 and booleans where a number is
expected (YAML ``true`` is not 1) are errors. The file is read by
posbias/io/yaml_io.py: libyaml (C) with a YAML 1.2 resolver that gives ruamel.yaml's
results, ruamel.yaml where the two could differ; sizes, nesting depth and alias
expansion are limited before anything is built.

Broadcasting: an outer (per-layer) list of length 1 applies to every layer; an
inner (per-head) list of length 1 applies to every head, content included.
``content_broadcast="first-head"`` reproduces the reference implementation,
which gives a single provided content value to head 0 only (every other head
gets zero content).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pydantic

from posbias.errors import UserError
from posbias.io.schema import NOT_BOOL, STRICT, first_error, refusal, shown
from posbias.io.yaml_io import read_yaml
from posbias.model import Model, ModelError, check_size, content_of, lambdas_of, parse_mask, parse_schedule, slopes_of
from posbias.numerics import masks, schedules
from posbias.numerics.stack import AlibiStack, StackError


class ConfigError(UserError):
    """One line: the file, the key and what was expected."""


MAX_SIZE = 2**53
"""Largest N, T, H or mask size read (far beyond any memory; keeps every size an exact float)."""

FiniteFloat = Annotated[float, NOT_BOOL, pydantic.Field(allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, NOT_BOOL, pydantic.Field(ge=0.0, allow_inf_nan=False)]
Size = Annotated[int, NOT_BOOL, pydantic.Field(gt=0, le=MAX_SIZE)]
Count = Annotated[int, NOT_BOOL, pydantic.Field(ge=0, le=MAX_SIZE)]


def _folder_name(text: str) -> str:
    """A save_dir as ``--out`` takes one (posbias.cli.argtypes.path): not blank, no NUL byte."""
    if not text.strip():
        raise ValueError("expected a folder name, got a blank string")
    if "\0" in text:
        raise ValueError("expected a folder name without a NUL byte")
    return text


FolderName = Annotated[str, pydantic.AfterValidator(_folder_name)]


class MaskConfig(pydantic.BaseModel):
    model_config = STRICT
    mask_type: Literal["causal", "full", "sliding_window", "prefix"] = "causal"
    window_size: Size | None = None
    prefix_length: Count | None = None

    @pydantic.model_validator(mode="after")
    def _needs_size(self):
        if self.mask_type == "sliding_window" and self.window_size is None:
            raise ValueError("window_size: required for mask_type sliding_window")
        if self.mask_type == "prefix" and self.prefix_length is None:
            raise ValueError("prefix_length: required for mask_type prefix")
        return self

    def build(self):
        match self.mask_type:
            case "causal":
                return masks.Causal()
            case "full":
                return masks.Full()
            case "sliding_window":
                return masks.SlidingWindow(self.window_size)
            case "prefix":
                return masks.Prefix(self.prefix_length)


def _bias_text(value):
    """A bias is a spec or a list of specs, one per head (posbias.bias_spec): anything else is refused
    in these words, not in pydantic's union wording ("bias.str: input should be a valid string")."""
    if value is None or isinstance(value, str):
        return value
    expected = "expected a bias spec such as kerple-log:1,0.5 or -0.5*log(1+g), or a list of them, one per head"
    if not isinstance(value, list):
        raise refusal(f"{expected}; got {shown(value)}")
    for k, item in enumerate(value):
        if not isinstance(item, str):
            raise refusal(f"{expected}; got {shown(item)}", at=f"[{k}]")
    return value


class AttentionConfig(pydantic.BaseModel):
    model_config = STRICT
    num_heads: Size
    alibi_slopes: list[list[NonNegativeFloat]] | None = None
    head_weights: list[list[NonNegativeFloat]] | None = None
    softmax_temperature: Annotated[float, NOT_BOOL, pydantic.Field(gt=0.0, allow_inf_nan=False)] = 1.0
    # posbias: a relative bias per head instead of slopes (bias_spec)
    bias: Annotated[str | list[str] | None, pydantic.BeforeValidator(_bias_text)] = None
    sink: list[list[FiniteFloat]] | None = None  # posbias: first-token logit s per layer and head

    @pydantic.model_validator(mode="after")
    def _slopes_or_bias(self):
        return slopes_or_bias(self)


class ContentConfig(pydantic.BaseModel):
    model_config = STRICT
    diagonal_scores: list[list[FiniteFloat]] = [[0.0]]
    base_scores: list[list[FiniteFloat]] = [[0.0]]


class ConstantSchedule(pydantic.BaseModel):
    model_config = STRICT
    schedule_type: Literal["constant"]
    lambda_const: FiniteFloat


class PowerDecaySchedule(pydantic.BaseModel):
    model_config = STRICT
    schedule_type: Literal["power_decay"]
    lambda_0: FiniteFloat
    beta: FiniteFloat


class CustomSchedule(pydantic.BaseModel):
    model_config = STRICT
    schedule_type: Literal["custom"]
    lambdas_custom: list[FiniteFloat]


class RolloutConfig(pydantic.BaseModel):
    model_config = STRICT
    sequence_length: Size
    num_layers: Size
    mask_config: MaskConfig = MaskConfig()
    attention_config: AttentionConfig
    content_config: ContentConfig = ContentConfig()
    lambda_schedule_config: Annotated[
        ConstantSchedule | PowerDecaySchedule | CustomSchedule,
        pydantic.Field(discriminator="schedule_type"),
    ]
    save_dir: FolderName | None = None


SCHEDULE_TAGS = ("constant", "power_decay", "custom")


def _per_layer_head(path, key, rows, num_layers, num_heads, *, first_head_only=False):
    """Broadcast an outer list (length 1 or T) of inner lists (length 1 or H) to (T, H)."""
    if len(rows) not in (1, num_layers):
        raise ConfigError(f"{path}: {key}: outer list has length {len(rows)}, expected 1 or num_layers = {num_layers}")
    out = np.zeros((num_layers, num_heads))
    for t in range(num_layers):
        row = rows[min(t, len(rows) - 1)]
        if len(row) not in (1, num_heads):
            raise ConfigError(
                f"{path}: {key}[{min(t, len(rows) - 1)}]: has length {len(row)}, expected 1 or num_heads = {num_heads}"
            )
        if len(row) == 1 and first_head_only:
            out[t, 0] = row[0]
        else:
            out[t] = row
    return out


def slopes_or_bias(att: AttentionConfig) -> AttentionConfig:
    """attention_config gives ALiBi slopes or (posbias's extension) a relative bias, exactly one of them;
    sink needs bias."""
    if (att.alibi_slopes is None) == (att.bias is None):
        raise ValueError(
            "expected exactly one of alibi_slopes or bias (a relative positional bias, e.g. kerple-log:1,0.5)"
        )
    if att.sink is not None and att.bias is None:
        raise ValueError("sink: applies with bias (a relative-bias model), not with alibi_slopes")
    return att


def check_sink(where: str, sink, temperature: float = 1.0) -> None:
    """Refuse (UserError, one line naming ``where`` and the value) a first-token logit s that is not finite
    or whose s / temperature overflows the logits (|s / tau| > ``LOGIT_LIMIT`` of numerics/bias_stack.py)."""
    from posbias.numerics.bias_stack import LOGIT_LIMIT

    values = np.asarray(sink, np.float64).ravel()
    for value in values:
        if not np.isfinite(value):
            raise UserError(f"{where}: {float(value)} is not finite, expected a finite number")
    tau = float(temperature)
    if tau > 0 and np.isfinite(tau):
        with np.errstate(over="ignore"):
            scaled = np.abs(values / tau)
        if np.any(scaled > LOGIT_LIMIT):
            value = float(values[int(np.argmax(scaled))])
            raise UserError(
                f"{where}: {value:g} overflows the logits at temperature {tau:g} "
                f"(expected |s| / temperature <= {LOGIT_LIMIT:g})"
            )


def bias_stack_from_config(
    path,
    att: AttentionConfig,
    lambdas,
    diagonal,
    weights,
    mask,
    num_layers: int,
    h: int,
    bias: str | None = None,
    sink=None,
):
    """The ``BiasStack`` of an attention_config with ``bias`` (one spec for every head, a list of H, or one
    string of H specs separated by /) and optional ``sink`` (broadcast like the slopes). ``bias`` and
    ``sink`` given here (the ``--bias``, ``--sink`` flags) override the file's: a spec string, and one
    number or one per layer."""
    from posbias.model import bias_stack_of

    if bias is None:
        bias = att.bias if isinstance(att.bias, str) else "/".join(att.bias)
    if sink is not None:
        check_sink("--sink", sink, att.softmax_temperature)
    if isinstance(sink, list):
        if len(sink) != num_layers:
            raise ConfigError(
                f"{path}: --sink: {len(sink)} values, expected one number or num_layers = {num_layers} values"
            )
        sink = np.asarray(sink, np.float64)[:, None] * np.ones((1, h))
    elif sink is None:
        if att.sink is not None:
            check_sink(f"{path}: attention_config.sink", att.sink, att.softmax_temperature)
        sink = 0.0 if att.sink is None else _per_layer_head(path, "attention_config.sink", att.sink, num_layers, h)
    return bias_stack_of(bias, lambdas, h, diagonal, sink, weights, att.softmax_temperature, mask)


def load(
    path: str | Path,
    *,
    tokens: int | None = None,
    layers: int | None = None,
    heads: int | None = None,
    slopes: str | None = None,
    schedule: str | None = None,
    content_diagonal=None,
    mask: str | None = None,
    content_broadcast: str = "all",
    bias: str | None = None,
    sink=None,
) -> Model:
    """Read, validate and broadcast a rollout config into a ``Model``; raise ConfigError with one line.

    Keyword arguments override the file's fields (the ``posbias rollout`` flags of the
    same names); the model records which were overridden. ``bias`` (a spec, posbias/bias_spec.py)
    replaces the file's positional encoding (its ALiBi slopes or its bias) by a relative bias (C7);
    ``sink`` (a number, or one per layer) the first-token term, for a model with a bias.
    """
    path = Path(path)
    data = read_yaml(path)
    try:
        cfg = RolloutConfig.model_validate(data)
    except pydantic.ValidationError as err:
        raise ConfigError(f"{path}: {first_error(err, SCHEDULE_TAGS)}") from None

    overrides = [
        name
        for name, value in (
            ("tokens", tokens),
            ("layers", layers),
            ("heads", heads),
            ("slopes", slopes),
            ("schedule", schedule),
            ("content_diagonal", content_diagonal),
            ("mask", mask),
            ("bias", bias),
            ("sink", sink),
        )
        if value is not None
    ]
    num_tokens = cfg.sequence_length if tokens is None else tokens
    num_layers = cfg.num_layers if layers is None else layers
    att = cfg.attention_config
    h = att.num_heads if heads is None else heads
    if num_tokens < 1 or num_layers < 1 or h < 1:
        raise ConfigError(f"{path}: tokens, layers and heads must be positive integers")
    for flag, value in (("--tokens", tokens), ("--layers", layers), ("--heads", heads)):
        if value is not None and value > MAX_SIZE:
            raise ConfigError(f"{path}: {flag}: {shown(value)} is too large, expected at most 2^53")
    try:
        check_size(num_layers, h)
        has_bias = att.bias is not None or bias is not None
        if sink is not None and not has_bias:
            raise ModelError("--sink: applies with a relative bias (--bias, or attention_config.bias in the file)")
        if has_bias:
            if slopes is not None:
                raise ModelError("--slopes: the config gives a relative bias (attention_config.bias), not slopes")
            slope_matrix = None
        elif slopes is None:
            slope_matrix = _per_layer_head(path, "attention_config.alibi_slopes", att.alibi_slopes, num_layers, h)
        else:
            slope_matrix = np.broadcast_to(slopes_of(slopes, h), (num_layers, h))
        if att.head_weights is None:
            weights = np.ones((num_layers, h))
        else:
            weights = _per_layer_head(path, "attention_config.head_weights", att.head_weights, num_layers, h)
        first_head = content_broadcast == "first-head"
        content = cfg.content_config
        if content_diagonal is None:
            diagonal = _per_layer_head(
                path,
                "content_config.diagonal_scores",
                content.diagonal_scores,
                num_layers,
                h,
                first_head_only=first_head,
            )
        else:
            diagonal = content_of(content_diagonal, num_layers, h)
        # The background cancels in every row (C4(a)); it is validated, not used.
        _per_layer_head(path, "content_config.base_scores", content.base_scores, num_layers, h)
        sched = parse_schedule(schedule) if schedule is not None else _file_schedule(path, cfg, num_layers)
        with np.errstate(all="ignore"):  # an overflowing schedule is refused below, without RuntimeWarning lines
            lambdas, warnings = lambdas_of(sched, num_layers)
        chosen_mask = parse_mask(mask) if mask is not None else cfg.mask_config.build()
        if has_bias:
            stack = bias_stack_from_config(
                path, att, lambdas, diagonal, weights, chosen_mask, num_layers, h, bias, sink
            )
        else:
            stack = AlibiStack.build(lambdas, slope_matrix, diagonal, weights, att.softmax_temperature, chosen_mask)
    except (StackError, ModelError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return Model(
        stack, int(num_tokens), str(path), warnings, tuple(overrides), cfg.save_dir, getattr(sched, "spec", None)
    )


def _file_schedule(path, cfg, num_layers):
    sched_cfg = cfg.lambda_schedule_config
    match sched_cfg:
        case ConstantSchedule():
            return schedules.Constant(sched_cfg.lambda_const)
        case PowerDecaySchedule():
            return schedules.PowerDecay(sched_cfg.lambda_0, sched_cfg.beta)
        case CustomSchedule():
            if len(sched_cfg.lambdas_custom) != num_layers:
                raise ConfigError(
                    f"{path}: lambda_schedule_config.lambdas_custom: has {len(sched_cfg.lambdas_custom)} values, "
                    f"expected num_layers = {num_layers}"
                )
            return schedules.Custom(tuple(sched_cfg.lambdas_custom))
