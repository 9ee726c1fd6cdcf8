"""The corpus: the English reference text that ships inside CPython (``pydoc_data.topics``).

Every CPython installation carries the language reference's help topics as one dict,
topic name -> text (79 topics, about 465 KB in Python 3.11). The split is by topic,
fixed and documented, never by random bytes:

* validation: ``formatstrings``, ``typesmapping``, ``execmodel`` (about 47 KB, 10 %);
  chosen because none of their 48-byte shingles occurs in any other topic (several topics
  contain others: ``specialnames`` holds ``customization``, ``compound`` holds ``function``);
* train: every other topic.

Each split is the UTF-8 bytes of its topics in sorted name order, joined by a blank line.
Training batches are random windows of the train bytes drawn from a generator seeded with
(seed, step), so the batch of a step does not depend on what ran before (resumable runs
see the same batches). Evaluation uses fixed, non-overlapping windows.

The unigram baseline: byte frequencies of the train split with add-one smoothing over all
256 bytes, scored on the validation split (cross-entropy in bits per byte).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

VALIDATION_TOPICS = ("execmodel", "formatstrings", "typesmapping")
SEPARATOR = b"\n\n"


@dataclass(frozen=True)
class Corpus:
    """train, validation: uint8 byte arrays; topics of each; fingerprint: SHA-256 (12 hex) of both."""

    train: np.ndarray
    validation: np.ndarray
    train_topics: tuple[str, ...]
    validation_topics: tuple[str, ...]

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(self.train.tobytes())
        digest.update(b"|" + self.validation.tobytes())
        return digest.hexdigest()[:12]


def _join(texts: list[str]) -> np.ndarray:
    return np.frombuffer(SEPARATOR.join(t.encode("utf-8") for t in texts), dtype=np.uint8).copy()


def load_corpus() -> Corpus:
    """The train/validation split of ``pydoc_data.topics`` described above."""
    from pydoc_data.topics import topics

    names = sorted(topics)
    val = tuple(n for n in names if n in VALIDATION_TOPICS)
    train = tuple(n for n in names if n not in VALIDATION_TOPICS)
    return Corpus(_join([topics[n] for n in train]), _join([topics[n] for n in val]), train, val)


def train_batch(data: np.ndarray, batch: int, length: int, seed: int, step: int) -> np.ndarray:
    """(batch, length) int32 windows at offsets drawn by numpy's PCG64 seeded with (seed, step)."""
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, data.size - length + 1, size=batch)
    return data[starts[:, None] + np.arange(length)[None, :]].astype(np.int32)


def eval_windows(data: np.ndarray, length: int, limit: int | None = None) -> np.ndarray:
    """(W, length) int32 non-overlapping windows from the start (stride length - 1, so every
    byte after the first is predicted exactly once); at most ``limit`` windows."""
    count = (data.size - 1) // (length - 1)
    if limit is not None:
        count = min(count, limit)
    starts = np.arange(count) * (length - 1)
    return data[starts[:, None] + np.arange(length)[None, :]].astype(np.int32)


def window_starts(size: int, length: int, samples: int) -> np.ndarray:
    """The offsets round(k (L - N) / (S - 1)), k = 0..S-1, of ``heldout_sequences``' windows."""
    return np.rint(np.linspace(0, size - length, samples)).astype(np.int64)


def heldout_sequences(data: np.ndarray, length: int, samples: int) -> np.ndarray:
    """(S, N) int32 held-out sequences: windows of N bytes at evenly spaced offsets
    round(k (L - N) / (S - 1)), k = 0..S-1 (non-overlapping whenever S N <= L)."""
    starts = window_starts(data.size, length, samples)
    return data[starts[:, None] + np.arange(length)[None, :]].astype(np.int32)


def disjoint_sequences(
    data: np.ndarray, length: int, samples: int, taken: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """((S, N) int32 windows, their offsets) that share no position of ``data`` with any window
    ``heldout_sequences(data, n, samples)`` cuts for n in ``taken``, nor with each other: the free stretches
    are tiled with windows of N, and S tiles are picked at evenly spaced ranks. A fit set disjoint from the
    scored windows (``posbias.validate.sink_fit``). Fewer than S tiles: ``MeasureError``, one line."""
    from posbias.measure.quantities import MeasureError

    free = np.ones(data.size, dtype=bool)
    for n in taken:
        for start in window_starts(data.size, n, samples):
            free[start : start + n] = False
    edges = np.flatnonzero(np.diff(np.concatenate([[0], free.astype(np.int8), [0]])))
    tiles = [s for a, b in zip(edges[::2], edges[1::2]) for s in range(a, b - length + 1, length)]
    if len(tiles) < samples:
        raise MeasureError(
            f"the fit set: only {len(tiles)} windows of {length} tokens fit beside the scored windows, "
            f"{samples} needed (a longer --data text, or fewer --samples)"
        )
    starts = np.asarray(tiles, dtype=np.int64)[np.rint(np.linspace(0, len(tiles) - 1, samples)).astype(np.int64)]
    return data[starts[:, None] + np.arange(length)[None, :]].astype(np.int32), starts


def unigram_bits(train: np.ndarray, validation: np.ndarray) -> float:
    """Cross-entropy (bits per byte) on ``validation`` of the add-one smoothed byte frequencies of ``train``."""
    counts = np.bincount(train, minlength=256).astype(np.float64) + 1.0
    logp = np.log2(counts / counts.sum())
    return float(-logp[validation].mean())
