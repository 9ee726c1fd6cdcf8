"""Whether each measured window starts with the model's beginning-of-sequence token (``validate --bos``).

Attention sinks form on the first token a model sees, and which token that is matters: a model
trained with a BOS token parks attention on it. The windows of ``posbias.hf.data.windows`` are
cut from one tokenization of the whole text, so at most the first window would start with a
BOS the tokenizer adds. ``--bos``:

* ``auto`` (default): the tokenizer's own convention. If its post-processor puts a token in front
  of a single sequence (``encode(text)`` versus ``encode(text, add_special_tokens=False)``: Llama's
  ``<s>``, BERT's ``[CLS]``), every window is that token followed by N - 1 text tokens; otherwise
  (GPT-2, SmolLM2) the windows are N text tokens, as before;
* ``yes``: every window is the BOS token and N - 1 text tokens: the tokenizer's leading token, else
  config.json's (or the GGUF metadata's) ``bos_token_id``; refused in one line when neither exists;
* ``no``: N text tokens, no special token anywhere.

The text tokens are always those of ``encode(text, add_special_tokens=False)`` at evenly spaced
offsets (``posbias.hf.data.windows``), so the three modes read the same text.
"""

from __future__ import annotations

import numpy as np

from posbias.measure.quantities import MeasureError

MODES = ("auto", "yes", "no")


def leading_token(tokenizer) -> int | None:
    """The id the tokenizer's post-processor puts in front of a single sequence, or None."""
    probe = "The"
    plain = tokenizer.encode(probe, add_special_tokens=False).ids
    full = tokenizer.encode(probe).ids
    if len(full) > len(plain) and full[1 : 1 + len(plain)] == plain:
        return int(full[0])
    return None


def bos_id(tokenizer, config: dict, mode: str, where: str) -> int | None:
    """The token every window starts with under ``mode`` (module docstring), or None."""
    if mode not in MODES:
        raise MeasureError(f"--bos: expected one of {', '.join(MODES)}, got {mode!r}")
    if mode == "no":
        return None
    lead = leading_token(tokenizer)
    if mode == "auto" or lead is not None:
        return lead
    value = config.get("bos_token_id")
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise MeasureError(
            f"--bos yes: {where} names no BOS token (its tokenizer adds none and bos_token_id is {value!r})"
        )
    return value


def windows(
    tokenizer, text: str, lengths, samples: int, label: str, bos: int | None, flag: str = "--lengths"
) -> dict[int, np.ndarray]:
    """N -> (S, N) int32 windows of the text for every N of ``lengths``: N text tokens, or ``bos`` and
    N - 1 text tokens (module docstring); too little text is refused naming ``flag`` (the option that set N)."""
    from posbias.hf import data

    ids = np.asarray(tokenizer.encode(text, add_special_tokens=False).ids, np.int64)
    out = {}
    for n in sorted(lengths, reverse=True):
        if bos is None:
            out[n] = data.windows(ids, n, samples, label, f"{flag} N =")
        else:
            if n < 2:
                raise MeasureError(f"{flag} N = {n}: a window with a BOS token needs N >= 2")
            text_part = data.windows(ids, n - 1, samples, label, f"{flag} N - 1 (after the BOS token) =")
            out[n] = with_bos(text_part, bos)
    return out


def with_bos(text_part: np.ndarray, bos: int | None) -> np.ndarray:
    """(S, n) text-token windows with the BOS token put in front of each ((S, n + 1)), or as they are (None)."""
    if bos is None:
        return text_part
    return np.concatenate([np.full((len(text_part), 1), bos, np.int32), text_part], axis=1)


def fit_windows(
    tokenizer, text: str, fit_length: int, samples: int, lengths, label: str, bos: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """(S, N_fit) windows laid out as ``windows`` lays them (the BOS token, if any, then text tokens) whose text
    tokens share no position with any window ``windows`` cuts for ``lengths``, and their text offsets
    (``posbias.lm.data.disjoint_sequences``)."""
    from posbias.lm.data import disjoint_sequences

    ids = np.asarray(tokenizer.encode(text, add_special_tokens=False).ids, np.int64)
    shift = 0 if bos is None else 1
    text_part, starts = disjoint_sequences(ids, fit_length - shift, samples, tuple(n - shift for n in lengths))
    return with_bos(text_part, bos), starts
