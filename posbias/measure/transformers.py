"""The ``Backend`` of a Hugging Face checkpoint folder or a GGUF file through transformers' eager forward and
PyTorch hooks (``posbias.measure.backend``; the hooks and the capture are ``posbias.hf.torch_backend``).

For architectures posbias's JAX families do not cover, and side by side with them where they do: the
same windows as the JAX route (``posbias.measure.checkpoint.text_windows``: the tokenizer of the JAX
route, so that both measure the same token ids), the same quantities and files. The slopes of the
validate predictions (a)-(c) are those of posbias's JAX family where it has one (BLOOM's ALiBi), else 0
(learned or rotary positions). ``--memory`` bounds the working memory of a batch (default 1 GiB,
``posbias.hf.torch_backend.bytes_per_sequence``); a length whose one sequence exceeds it is refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from posbias.errors import UserError
from posbias.measure.backend import Options, Plan
from posbias.measure.checkpoint import text_fit_windows, text_windows
from posbias.measure.defaults import DEFAULT_TOKENS, default_lengths
from posbias.measure.quantities import MeasureError

DEFAULT_MEMORY = 2**30
"""The budget of one batch's working memory when --memory is not given."""


class TransformersBackend:
    """A checkpoint whose configuration transformers has read (``posbias.hf.torch_backend.read_config``:
    posbias's own checks first); the weights are read by ``load``."""

    name = "transformers"
    files = "checkpoint"
    windows_note = ""

    def __init__(self, path: Path, options: Options):
        from posbias.hf import data
        from posbias.hf.torch_backend import LAYOUTS, layout_of, read_config, tokenizer_of
        from posbias.measure.influence import check_for

        self.path, self.options = Path(path), options
        self.tokenizer = tokenizer_of(self.path)
        self.text = data.read_text(options.data)  # a bad --data refused before transformers is imported (~4 s)
        self.read = read_config(self.path)  # the input is checked in full before any weight is read
        config = self.config = self.read[0]
        layout_of(config.model_type, str(self.path))
        check_for(options.influence, encoder=False, model=config.model_type)  # the backend's decoders
        self.source = str(self.path)
        self.layers, self.heads = int(config.num_hidden_layers), int(config.num_attention_heads)
        self.width, self.vocab = int(config.hidden_size), int(config.vocab_size)
        try:  # posbias's JAX family, where it has one, knows the ALiBi slopes and the position encoding
            from posbias.hf.forward import slopes
            from posbias.hf.source import open_checkpoint

            spec = open_checkpoint(self.path).spec
            self.slopes, self.positions = slopes(spec), spec.positions if spec.positions != "learned" else "learned"
        except UserError:
            self.slopes, self.positions = np.zeros(self.heads), "unknown"
        self.causal = True
        context = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        # only learned positions (GPT-2, OPT) stop at the context; ALiBi and rotary models extrapolate
        self.limit = context if config.model_type in ("gpt2", "opt") else None
        self.limit_phrase = f"{context} learned positions"
        self.training_length = None if self.positions == "alibi" else context
        self.default_tokens = min(DEFAULT_TOKENS, context or DEFAULT_TOKENS)
        self.default_lengths = (
            default_lengths(min(context, 256)) if context is not None and self.positions != "alibi" else (128, 256)
        )
        self.title = (
            f"{self.path} ({config.model_type} through transformers, T={self.layers}, H={self.heads}, D={self.width})"
        )
        self.addend = LAYOUTS[config.model_type].addend
        self.loaded = None
        self.meta = {
            "model_type": config.model_type,
            "layers": self.layers,
            "heads": self.heads,
            "width": self.width,
            "vocab": self.vocab,
            "data": self.text[1],
            "backend": "transformers",
        }

    def model_line(self, samples: int) -> str:
        context = self.training_length
        return (
            f"Checkpoint through transformers: model_type {self.config.model_type}, T = {self.layers}, "
            f"H = {self.heads}, width {self.width}, vocab {self.vocab}, "
            f"context {'ALiBi, no limit' if context is None else f'{context} positions'} (causal decoder); "
            f"data: {self.text[1]}; S = {samples} sequences per length; {self.options.precision} measurement."
        )

    def notes(self) -> list[str]:
        from posbias.hf.torch_backend import notes

        return notes(self.loaded) if self.loaded is not None else []

    def default_out(self, name: str) -> Path:
        folder = self.path if self.path.is_dir() else self.path.parent
        return folder / f"{name}-transformers"

    def windows(self, lengths, samples, flag):
        config = self.config.to_dict()
        return text_windows(self.tokenizer, config, self.text, self.options.bos, str(self.path), lengths, samples, flag)

    def fit_windows(self, fit_length, samples, lengths):
        config = self.config.to_dict()
        return text_fit_windows(
            self.tokenizer, config, self.text, self.options.bos, str(self.path), fit_length, samples, lengths
        )

    def plan(self, lengths, samples, extra):
        from posbias.hf.torch_backend import LAYOUTS, Loaded, bytes_per_sequence
        from posbias.numerics.budget import describe

        budget = self.options.memory or DEFAULT_MEMORY
        shape = Loaded(
            None,
            LAYOUTS[self.config.model_type],
            self.config.model_type,
            self.layers,
            self.heads,
            self.width,
            self.vocab,
            str(self.path),
        )
        out = {}
        for n in lengths:
            per = bytes_per_sequence(shape, n, self.options.itemsize)
            if per > budget:
                raise MeasureError(
                    f"--memory {describe(budget)}: one sequence of N = {n} needs about {describe(per)} "
                    "(transformers backend): lower the length or raise --memory"
                )
            out[n] = Plan(int(max(1, min(samples, budget // per))))
        return out

    def load(self):
        from posbias.hf.torch_backend import load, measure

        self.loaded = loaded = load(self.path, self.options.precision, read=self.read)
        precision = self.options.precision
        influence = self.options.influence
        return lambda seqs, batch, progress: measure(
            loaded, seqs, precision=precision, batch=batch, progress=progress, influence=influence
        )

    def warnings(self) -> list[str]:
        return []
