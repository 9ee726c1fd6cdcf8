"""The text a Hugging Face checkpoint is measured on, tokenized with the checkpoint's own tokenizer.json.

``--data FILE.txt`` (the whole file, UTF-8) or ``--data FILE.jsonl`` (one JSON object per
line with a string ``text``; documents joined by a blank line); without ``--data``, the
validation topics of ``posbias.lm.data.load_corpus`` (CPython's pydoc_data text, the text
the byte-level model here is measured on). The S sequences of N tokens are windows at
evenly spaced offsets (``posbias.lm.data.heldout_sequences``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from posbias.measure.quantities import MeasureError


def read_text(path: Path | None) -> tuple[str, str]:
    """(text, label) of ``--data`` (module docstring)."""
    if path is None:
        from posbias.lm.data import load_corpus

        corpus = load_corpus()
        return corpus.validation.tobytes().decode("utf-8"), "pydoc_data validation topics " + ", ".join(
            corpus.validation_topics
        )
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MeasureError(f"--data {path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise MeasureError(f"--data {path}: not UTF-8 text (byte {exc.start})") from None
    if path.suffix != ".jsonl":
        return raw, str(path)
    docs = []
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise MeasureError(f"--data {path}: line {number} is not JSON ({exc.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise MeasureError(f'--data {path}: line {number}: expected an object with a string "text"')
        docs.append(record["text"])
    return "\n\n".join(docs), str(path)


def windows(ids: np.ndarray, num_tokens: int, samples: int, label: str, length_flag: str = "--tokens") -> np.ndarray:
    """(S, N) int32 windows of ``ids`` at evenly spaced offsets; too few tokens or windows get one line
    naming ``length_flag`` (the option that set N)."""
    from posbias.lm.data import heldout_sequences

    if ids.size < num_tokens:
        raise MeasureError(f"--data {label}: {ids.size} tokens, fewer than {length_flag} {num_tokens}")
    available = ids.size - num_tokens + 1
    if samples > available:
        raise MeasureError(
            f"--samples {samples}: {label} has {ids.size} tokens, only {available} windows of N = {num_tokens}"
        )
    return heldout_sequences(ids, num_tokens, samples)
