"""What a language-model run is: the model's shape and the training recipe, as frozen dataclasses.

``ModelConfig`` fixes the decoder (byte vocabulary 256, T pre-LayerNorm blocks, H ALiBi
heads with the ``paper`` or ``hf`` slopes of ``posbias.numerics.slopes``, width D, GELU
MLP of width 4D, context length). ``TrainConfig`` fixes the optimisation (AdamW with
linear warm-up and cosine decay, global-norm clipping, batch, steps, seed). Two presets:
``default`` (the model measured in docs/lm.md) and ``ci`` (trains in well under a minute).

>>> PRESETS["ci"].model.head_dim
8
>>> TrainConfig.from_dict(PRESETS["ci"].train.to_dict()) == PRESETS["ci"].train
True
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

VOCAB = 256  # bytes
SLOPE_CONVENTIONS = ("paper", "hf")
SEED_MAX = 2**32 - 1
"""Seeds are 32-bit: jax.random.PRNGKey takes one unsigned 32-bit word of entropy in its default mode."""


@dataclass(frozen=True)
class ModelConfig:
    """layers T, heads H, width D (= H * head_dim), context length (the longest input), slopes
    convention (m_h = 2^(-8h/H) for ``paper``; the transformers construction for ``hf``)."""

    layers: int = 4
    heads: int = 4
    width: int = 128
    context: int = 256
    slopes: str = "paper"
    mlp_ratio: int = 4

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def problem(self) -> str | None:
        """Why this is not a model we can build (one line), or None."""
        for name in ("layers", "heads", "width", "context", "mlp_ratio"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                return f"{name}: expected a positive integer, got {value!r}"
        if self.width % self.heads:
            return f"width {self.width} is not a multiple of heads {self.heads}"
        if self.slopes not in SLOPE_CONVENTIONS:
            return f"slopes: expected one of {', '.join(SLOPE_CONVENTIONS)}, got {self.slopes!r}"
        return None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ModelConfig:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class TrainConfig:
    """steps, batch (sequences of context + 1 bytes per step), peak learning rate, warm-up steps
    (linear from 0), cosine decay to ``final_lr_fraction`` of the peak at the last step, AdamW
    (b1, b2, weight decay on matrices only), gradient clipping by global norm, seed (init and
    the batch of every step), evaluation interval (steps) and validation windows used then."""

    steps: int = 1000
    batch: int = 16
    lr: float = 3e-3
    warmup: int = 50
    final_lr_fraction: float = 0.1
    b1: float = 0.9
    b2: float = 0.99
    weight_decay: float = 0.1
    clip: float = 1.0
    seed: int = 0
    eval_every: int = 100

    def problem(self) -> str | None:
        for name in ("steps", "batch", "eval_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                return f"{name}: expected a positive integer, got {value!r}"
        if not isinstance(self.warmup, int) or not 0 <= self.warmup < self.steps:
            return f"warmup: expected an integer in [0, steps), got {self.warmup!r}"
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= SEED_MAX:
            return f"seed: expected an integer in [0, {SEED_MAX}], got {self.seed!r}"
        numbers = ("lr", "final_lr_fraction", "b1", "b2", "weight_decay", "clip")
        for name in numbers:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                return f"{name}: expected a finite number, got {value!r}"
        if not (self.lr > 0 and 0 <= self.final_lr_fraction <= 1 and 0 <= self.b1 < 1 and 0 <= self.b2 < 1
                and self.weight_decay >= 0 and self.clip > 0):
            return "lr, clip must be > 0; b1, b2 in [0, 1); weight_decay >= 0; final_lr_fraction in [0, 1]"
        return None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class Preset:
    name: str
    model: ModelConfig
    train: TrainConfig


PRESETS = {
    # About 9 minutes of training on an idle 2-core CPU (docs/lm.md has the measured figures).
    "default": Preset("default", ModelConfig(layers=4, heads=4, width=64, context=256),
                      TrainConfig(steps=1500, batch=16, lr=3e-3, warmup=75, eval_every=250)),
    # Well under a minute: for tests and CI.
    "ci": Preset("ci", ModelConfig(layers=2, heads=4, width=32, context=64),
                 TrainConfig(steps=300, batch=16, lr=1e-2, warmup=20, eval_every=100)),
}
