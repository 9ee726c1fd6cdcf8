"""What a language-model run is: the model's shape and the training recipe, as frozen pydantic
models in the one validation style of posbias's user files (``posbias.io.schema``).

``ModelConfig`` fixes the decoder (byte vocabulary 256, T pre-LayerNorm blocks, H ALiBi
heads with the ``paper`` or ``hf`` slopes of ``posbias.numerics.slopes``, width D, GELU
MLP of width 4D, context length). ``TrainConfig`` fixes the optimisation (AdamW with
linear warm-up and cosine decay, global-norm clipping, batch, steps, seed). Both refuse,
when built, what no run can use (``checked`` turns that into one ``UserError`` line); fields
are checked in the order they are declared, the rules that tie fields together last. Two
presets: ``default`` (the model measured in docs/lm.md) and ``ci`` (trains in well under a minute).

>>> PRESETS["ci"].model.head_dim
8
>>> from posbias.lm.limits import PRESET_NAMES
>>> tuple(sorted(PRESETS)) == PRESET_NAMES
True
>>> TrainConfig.from_dict(PRESETS["ci"].train.to_dict()) == PRESETS["ci"].train
True
>>> checked(ModelConfig, layers=2, heads=4, width=30)
Traceback (most recent call last):
...
posbias.errors.UserError: width 30 is not a multiple of heads 4
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import pydantic

from posbias.errors import UserError
from posbias.io.schema import STRICT, first_error
from posbias.lm.limits import SEED_MAX, SLOPE_CONVENTIONS


def _positive_int(value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("expected a positive integer")
    return value


def _finite_number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("expected a finite number")
    return value


def _seed(value):
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= SEED_MAX:
        raise ValueError(f"expected an integer in [0, {SEED_MAX}]")
    return value


def _convention(value):
    if value not in SLOPE_CONVENTIONS:
        raise ValueError(f"expected one of {', '.join(SLOPE_CONVENTIONS)}")
    return value


PositiveInt = Annotated[int, pydantic.BeforeValidator(_positive_int)]
FiniteNumber = Annotated[float, pydantic.BeforeValidator(_finite_number)]


class _Config(pydantic.BaseModel):
    model_config = STRICT

    def to_dict(self) -> dict:
        return self.model_dump()

    @classmethod
    def from_dict(cls, data: dict):
        """From a checkpoint's record: every field must be present (KeyError names the first missing);
        other keys are ignored."""
        return cls(**{name: data[name] for name in cls.model_fields})


def checked(kind: type[_Config], **fields) -> _Config:
    """``kind(**fields)``, a refusal turned into one ``UserError`` line naming the field."""
    try:
        return kind(**fields)
    except pydantic.ValidationError as err:
        raise UserError(first_error(err)) from None


class ModelConfig(_Config):
    """layers T, heads H, width D (= H * head_dim), context length (the longest input), MLP width
    ratio, slopes convention (m_h = 2^(-8h/H) for ``paper``; the transformers construction for ``hf``)."""

    layers: PositiveInt = 4
    heads: PositiveInt = 4
    width: PositiveInt = 128
    context: PositiveInt = 256
    mlp_ratio: PositiveInt = 4
    slopes: Annotated[str, pydantic.BeforeValidator(_convention)] = "paper"

    @pydantic.model_validator(mode="after")
    def _heads_divide_width(self):
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not a multiple of heads {self.heads}")
        return self

    @property
    def head_dim(self) -> int:
        return self.width // self.heads


class TrainConfig(_Config):
    """steps, batch (sequences of context + 1 bytes per step), evaluation interval (steps), warm-up
    steps (linear from 0), seed (init and the batch of every step), peak learning rate, cosine decay
    to ``final_lr_fraction`` of the peak at the last step, AdamW (b1, b2, weight decay on matrices
    only), gradient clipping by global norm."""

    steps: PositiveInt = 1000
    batch: PositiveInt = 16
    eval_every: PositiveInt = 100
    warmup: int = 50
    seed: Annotated[int, pydantic.BeforeValidator(_seed)] = 0
    lr: FiniteNumber = 3e-3
    final_lr_fraction: FiniteNumber = 0.1
    b1: FiniteNumber = 0.9
    b2: FiniteNumber = 0.99
    weight_decay: FiniteNumber = 0.1
    clip: FiniteNumber = 1.0

    @pydantic.field_validator("warmup", mode="before")
    @classmethod
    def _warmup_before_steps(cls, value, info):
        steps = info.data.get("steps")  # absent when steps itself was refused (reported first)
        if not isinstance(value, int) or (steps is not None and not 0 <= value < steps):
            raise ValueError("expected an integer in [0, steps)")
        return value

    @pydantic.model_validator(mode="after")
    def _ranges(self):
        if not (
            self.lr > 0
            and 0 <= self.final_lr_fraction <= 1
            and 0 <= self.b1 < 1
            and 0 <= self.b2 < 1
            and self.weight_decay >= 0
            and self.clip > 0
        ):
            raise ValueError("lr, clip must be > 0; b1, b2 in [0, 1); weight_decay >= 0; final_lr_fraction in [0, 1]")
        return self


@dataclass(frozen=True)
class Preset:
    name: str
    model: ModelConfig
    train: TrainConfig


PRESETS = {
    # About 9 minutes of training on an idle 2-core CPU (docs/lm.md has the measured figures).
    "default": Preset(
        "default",
        ModelConfig(layers=4, heads=4, width=64, context=256),
        TrainConfig(steps=1500, batch=16, lr=3e-3, warmup=75, eval_every=250),
    ),
    # Well under a minute: for tests and CI.
    "ci": Preset(
        "ci",
        ModelConfig(layers=2, heads=4, width=32, context=64),
        TrainConfig(steps=300, batch=16, lr=1e-2, warmup=20, eval_every=100),
    ),
}
