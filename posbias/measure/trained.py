"""The ``Backend`` of the model ``posbias train`` writes (``posbias.measure.backend``): a run folder or its
checkpoint.npz, measured on the held-out pydoc_data validation topics, byte by byte.

The forward and its capture are ``posbias.lm.measure``'s; ``--memory`` is the budget of one batch of
sequences (``posbias.measure.defaults.TRAINED_BATCH_MEMORY`` when not given), refused when one sequence
alone exceeds it (``posbias.lm.measure.bytes_per_sequence``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from posbias.measure.backend import Options, Plan
from posbias.measure.defaults import TRAINED_BATCH_MEMORY, default_lengths
from posbias.measure.quantities import MeasureError


class TrainedBackend:
    """A loaded checkpoint of ``posbias train`` (``posbias.lm.checkpoint.load``), not yet measured."""

    name = "trained"
    files = "trained"
    positions = "alibi"
    windows_note = ""
    training_length = None

    def __init__(self, loaded, source: str, options: Options, run_dir: Path):
        from posbias.lm.model import slopes_of

        model = loaded.model
        self.loaded, self.options, self.run_dir = loaded, options, run_dir
        self.source = source
        self.layers = model.layers
        self.slopes = np.asarray(slopes_of(model), np.float64)
        self.causal = True
        self.limit, self.limit_phrase = model.context, f"context length {model.context}"
        self.default_tokens = model.context
        self.default_lengths = default_lengths(model.context)
        self.title = f"{source} (T={model.layers}, H={model.heads})"
        self._corpus = None
        self.meta = {"model": model.to_dict(), "step": loaded.step}

    def corpus(self):
        if self._corpus is None:
            from posbias.lm.data import load_corpus

            self._corpus = load_corpus()
            self.meta["validation_topics"] = list(self._corpus.validation_topics)
        return self._corpus

    def model_line(self, samples: int) -> str:
        m = self.loaded.model
        return (
            f"Model T = {m.layers}, H = {m.heads}, width {m.width}, context {m.context}; "
            f"S = {samples} held-out sequences per length; {self.options.precision} measurement."
        )

    def notes(self) -> list[str]:
        return []

    def warnings(self) -> list[str]:
        loaded, out = self.loaded, []
        if not loaded.complete:
            out.append(f"checkpoint at step {loaded.step} of {loaded.train.steps}: training is not complete")
        if loaded.meta.get("corpus") != self.corpus().fingerprint:
            out.append(
                "the corpus differs from the one the model was trained on (another Python version); "
                "the validation topics are still held out"
            )
        return out

    def default_out(self, name: str) -> Path:
        return self.run_dir / name

    def windows(self, lengths, samples, flag):
        from posbias.lm.data import heldout_sequences

        validation = self.corpus().validation
        out = {}
        for n in lengths:
            available = validation.size - n + 1
            if samples > available:
                raise MeasureError(
                    f"--samples {samples}: the validation text ({validation.size} bytes) has "
                    f"only {available} windows of {n} bytes"
                )
            out[n] = heldout_sequences(validation, n, samples)
        return out

    def fit_windows(self, fit_length, samples, lengths):
        from posbias.lm.data import disjoint_sequences

        return disjoint_sequences(self.corpus().validation, fit_length, samples, tuple(lengths))

    def plan(self, lengths, samples, extra):
        from posbias.lm.measure import bytes_per_sequence

        if self.options.memory is not None:
            for n in lengths:
                one = bytes_per_sequence(self.loaded.model, n, self.options.itemsize)
                if self.options.memory < one:
                    raise MeasureError(
                        f"--memory {self.options.memory} bytes: one sequence of N = {n} needs about {one} bytes "
                        f"({self.options.precision}); raise --memory or lower the length"
                    )
        return {n: Plan(None) for n in lengths}

    def load(self):
        from posbias.lm.measure import measure

        loaded, options = self.loaded, self.options
        return lambda seqs, batch, progress: measure(
            loaded.params,
            loaded.model,
            seqs,
            precision=options.precision,
            memory=options.memory or TRAINED_BATCH_MEMORY,
            progress=progress,
            influence=options.influence,
        )


def open_trained(path: Path | None, options: Options, *, preset: str = "default", progress: bool = True):
    """The ``TrainedBackend`` of a run folder or checkpoint.npz; with ``path`` None, runs/lm-<preset>, trained
    first when its checkpoint is missing or unfinished (a progress bar on stderr with ``progress``)."""
    import sys

    from posbias.lm import checkpoint as ckpt

    if options.data is not None:  # before anything is read
        raise MeasureError(
            f"--data applies to Hugging Face checkpoints; a posbias train model is {options.verb} on its "
            "held-out topics"
        )

    if path is not None:
        loaded = ckpt.load(path)
        run_dir = path if path.is_dir() else path.parent
        return TrainedBackend(loaded, str(ckpt.resolve(path)), options, run_dir)
    from posbias.lm.config import PRESETS
    from posbias.lm.train import train

    run_dir = Path("runs") / f"lm-{preset}"
    done = (run_dir / ckpt.CHECKPOINT).exists() and ckpt.load(run_dir / ckpt.CHECKPOINT).complete
    if not done:
        print(f"posbias validate: training the {preset} model into {run_dir} first", file=sys.stderr)
        train(PRESETS[preset].model, PRESETS[preset].train, run_dir, progress=progress, log=lambda line: None)
    return TrainedBackend(ckpt.load(run_dir / ckpt.CHECKPOINT), str(run_dir), options, run_dir)
