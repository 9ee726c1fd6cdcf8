"""What the measurement pipeline asks of a model: the ``Backend`` protocol and the options every backend takes.

A backend is a model read but not yet measured. ``posbias.measure.pipeline`` drives it the same way for
``posbias measure`` (one length) and ``posbias validate`` (several): refuse bad input in one line before
any weight is read, cut the windows of token ids (``windows``), size the batches to the memory budget
(``plan``), load the weights once (``load``), measure each length in batches (the returned measurer; the
quantities and their reduction are ``posbias.measure.quantities``'), then write the files.

Three implementations, one per way of computing the forward:

* ``posbias.measure.trained``: the byte-level ALiBi model ``posbias train`` writes (``posbias.lm``);
* ``posbias.measure.checkpoint``: Hugging Face folders and GGUF files through posbias's own JAX forward
  (``posbias.hf``);
* ``posbias.measure.transformers``: Hugging Face folders and GGUF files through transformers' eager
  forward with PyTorch hooks (``posbias.hf.torch_backend``).

A new backend implements the protocol (structural typing: no base class to inherit) and joins
``posbias.measure.pipeline.open_backend``'s dispatch; nothing else changes (docs/architecture.md has a
complete example).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from posbias.measure.influence import Influence
from posbias.measure.quantities import Measurement


@dataclass(frozen=True)
class Options:
    """The options of ``posbias measure`` and ``posbias validate`` that reach a backend.

    ``precision``: "float64" (default) or "float32"; ``memory``: the budget in bytes (None: the backend's
    default); ``data``: a text or JSON-lines file for checkpoints (None: the pydoc_data validation topics);
    ``bos``: "auto", "yes" or "no" (``posbias.hf.bos``); ``verb``: "measured" or "validated", for the one-line
    refusals that name the command; ``influence``: the influence measures (``posbias.measure.influence``)."""

    precision: str = "float64"
    memory: int | None = None
    data: Path | None = None
    bos: str = "auto"
    verb: str = "measured"
    influence: Influence = field(default_factory=Influence)

    @property
    def itemsize(self) -> int:
        return 8 if self.precision == "float64" else 4


@dataclass(frozen=True)
class Plan:
    """How one length is measured: ``batch`` sequences per batch (None: the backend sizes its batches from
    its own budget) and, where the backend estimates it, the memory ``estimate`` reported in report.json."""

    batch: int | None
    estimate: dict | None = None


Measurer = Callable[[np.ndarray, "int | None", "Callable[[int, int], None] | None"], Measurement]
"""(sequences (S, N), batch or None, progress(done, total) or None) -> the ``Measurement``."""


class Backend(Protocol):
    """A model to measure (module docstring). Attributes are known once the backend is opened, before any
    weight is read; ``notes`` and ``warnings`` are complete once ``load`` has run."""

    options: Options  # what the user asked for (precision, memory, text, BOS, influence measures)
    name: str  # "trained", "jax" or "transformers": report.json's backend
    files: str  # the output set: "trained" (posbias train's run folder) or "checkpoint"
    source: str  # the model as reports name it (a path)
    title: str  # the summary line's description of the model
    layers: int
    slopes: np.ndarray  # (H,) the ALiBi slopes the softmax sees (zeros without an ALiBi term)
    causal: bool
    positions: str  # "alibi", "rotary", "learned" or "unknown": how the model encodes positions
    windows_note: str  # validate's note on sliding windows ("" without)
    limit: int | None  # the longest N (None: none)
    limit_phrase: str  # names ``limit`` in a refusal ("context length 256")
    training_length: int | None  # the N the model was trained at, where known (longer N extrapolate)
    default_tokens: int  # measure's N when --tokens is not given
    default_lengths: tuple[int, ...]  # validate's lengths when --lengths is not given
    meta: dict  # the model's fields of report.json / measure.json

    def model_line(self, samples: int) -> str:
        """validate's one-line description of the model, the data and the sample count."""
        ...

    def notes(self) -> list[str]:
        """What a reader of the report must know about this measurement (after ``load``: complete)."""
        ...

    def default_out(self, name: str) -> Path:
        """Where ``posbias measure``'s folder ``name`` goes when --out is not given."""
        ...

    def windows(self, lengths: tuple[int, ...], samples: int, flag: str) -> dict[int, np.ndarray]:
        """N -> (S, N) int32 token ids for every length, refusing too little text in one line naming ``flag``."""
        ...

    def fit_windows(self, fit_length: int, samples: int, lengths: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """((S, N_fit) int32 token ids, their offsets in the text): windows that share no text position with any
        window ``windows`` cuts for ``lengths`` (``posbias.lm.data.disjoint_sequences``), for a fit scored out of
        sample on those; too little text refused in one line."""
        ...

    def plan(self, lengths: tuple[int, ...], samples: int, extra: Callable[[int], int]) -> dict[int, Plan]:
        """N -> its ``Plan``, refusing a length whose memory (``extra(N)`` bytes held beside the measurement
        included) exceeds the budget before any weight is read."""
        ...

    def load(self) -> Measurer:
        """Read the weights; the measurer of every length."""
        ...

    def warnings(self) -> list[str]:
        """What the user must see on stderr before the results (an unfinished training, tensors the file holds
        that the model does not use), kept in the notes too (after ``load``)."""
        ...
