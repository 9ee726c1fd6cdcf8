"""The ``Backend`` of a Hugging Face checkpoint folder or a GGUF file through posbias's own JAX forward
(``posbias.measure.backend``; the forward is ``posbias.hf.forward``, the capture ``posbias.hf.measure``).

The text is ``--data`` or the pydoc_data validation topics, tokenized with the model's own tokenizer,
windows with or without the model's BOS token (``posbias.hf.bos``). The memory budget covers the whole
measurement, host and device (``posbias.hf.memory.plan``: at most 80% of physical memory or
``POSBIAS_MEMORY_LIMIT``), and a length that does not fit at one sequence per batch is refused before any
weight is read.
"""

from __future__ import annotations

from pathlib import Path

from posbias.measure.backend import Options, Plan
from posbias.measure.defaults import DEFAULT_TOKENS, default_lengths

ALIBI_DEFAULT_LENGTHS = (128, 256)
"""validate's lengths of a checkpoint without a length limit (ALiBi, rotary)."""


def family_notes(spec) -> list[str]:
    """What a reader of report.json must know about how this family's measurement relates to the theory."""
    notes = []
    if spec.positions == "rotary":
        notes.append(
            "rotary positions (RoPE): not a separable slope, so the slopes in config.yaml are 0 and the "
            "ALiBi prediction does not apply; the content logits are the full pre-softmax q.k (rotation "
            "included)"
        )
        if spec.windows is not None:
            notes.append(
                f"sliding-window attention (per layer: {list(spec.windows)}): a query reads only its W "
                f"latest keys; the kernels are measured with it"
            )
    elif spec.positions != "alibi":
        notes.append(
            "learned absolute positions: the slopes in config.yaml are 0; the position signal is in the content logits"
        )
    if spec.alibi_rounding == "bfloat16":
        notes.append(
            f"Falcon ALiBi: the slopes in config.yaml are bf16(m_h) * {spec.alibi_scale:.6g} (the term is "
            f"added before the 1/sqrt(d_head) scaling), as the softmax sees them; the model rounds m_h j "
            f"to bfloat16 (8 significant bits), so its term is linear in j only up to that rounding"
        )
    if not spec.causal:
        notes.append(
            "encoder: every token reads every token (config.yaml mask_type full); influence is the "
            "Frobenius norm ||d y / d e_j|| of the final hidden state y at the last position"
        )
    return notes


def positive_int(config: dict, key: str) -> int | None:
    """config.json's ``key`` where it is a positive integer, else None."""
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def training_length(config: dict, positions: str) -> int | None:
    """The length the checkpoint was trained at, where config.json says: an ALiBi model's max_seq_len or
    seq_length (MPT, BLOOM), a rotary model's max_position_embeddings; None for learned positions (their
    limit is the context)."""
    if positions == "alibi":
        return positive_int(config, "max_seq_len") or positive_int(config, "seq_length")
    return positive_int(config, "max_position_embeddings") if positions == "rotary" else None


def text_windows(tokenizer, config: dict, text: tuple[str, str], mode: str, where: str, lengths, samples, flag):
    """N -> (S, N) windows of ``text`` ((text, label): ``posbias.hf.data.read_text``) tokenized by
    ``tokenizer``, each starting with the BOS token as ``mode`` says (``posbias.hf.bos``); shared with the
    transformers backend, so that both measure the same token ids."""
    from posbias.hf import bos

    first = bos.bos_id(tokenizer, config, mode, where)
    return bos.windows(tokenizer, text[0], lengths, samples, text[1], first, flag)


def text_fit_windows(
    tokenizer, config: dict, text: tuple[str, str], mode: str, where: str, fit_length, samples, lengths
):
    """``Backend.fit_windows`` of both checkpoint backends: (S, N_fit) windows laid out as ``text_windows`` lays
    them that share no text position with any of its windows for ``lengths``, and their text offsets."""
    from posbias.hf import bos

    first = bos.bos_id(tokenizer, config, mode, where)
    return bos.fit_windows(tokenizer, text[0], fit_length, samples, lengths, text[1], first)


class CheckpointBackend:
    """A checkpoint opened by ``posbias.hf.source.open_checkpoint`` (config checked, no tensor read)."""

    name = "jax"
    files = "checkpoint"

    def __init__(self, ck, options: Options):
        from posbias.hf import data
        from posbias.hf.forward import slopes
        from posbias.measure.influence import check_for

        spec = ck.spec
        check_for(options.influence, encoder=not spec.lm_head, model=spec.model_type)  # before any weight is read
        self.text = data.read_text(options.data)
        self.ck, self.spec, self.options = ck, spec, options
        self.source = str(ck.folder)
        self.layers = spec.layers
        self.slopes = slopes(spec)
        self.causal = spec.causal
        self.positions = spec.positions if spec.positions in ("alibi", "rotary") else "learned"
        self.windows_note = (
            ""
            if spec.windows is None or spec.positions != "rotary"
            else f"Sliding windows {sorted({w for w in spec.windows if w is not None})}"
        )
        self.limit = spec.context
        self.limit_phrase = f"{spec.context} learned positions"
        self.training_length = training_length(ck.config, self.positions)
        self.default_tokens = min(DEFAULT_TOKENS, spec.context or DEFAULT_TOKENS)
        unlimited = spec.context is None or self.positions == "rotary"
        self.default_lengths = (
            ALIBI_DEFAULT_LENGTHS if unlimited else default_lengths(min(spec.context, ALIBI_DEFAULT_LENGTHS[-1]))
        )
        self.title = f"{ck.folder} ({spec.model_type}, T={spec.layers}, H={spec.heads}, D={spec.width})"
        self.tied = ck.family.tied(ck.config)
        self._gradient: dict[int, tuple[bool, bool]] = {}  # N -> posbias.hf.memory.plan's (remat, one_forward)
        self.meta = {
            "model_type": spec.model_type,
            "layers": spec.layers,
            "heads": spec.heads,
            "width": spec.width,
            "vocab": spec.vocab,
            "data": self.text[1],
        }
        self._tokenizer = None

    def model_line(self, samples: int) -> str:
        spec = self.spec
        context = (
            "ALiBi, no limit"
            if self.positions == "alibi"
            else f"rotary, trained at {self.training_length}"
            if self.positions == "rotary"
            else f"{spec.context} learned positions"
        )
        kind = "causal decoder" if spec.causal else "encoder, full mask"
        return (
            f"Hugging Face checkpoint: model_type {spec.model_type}, T = {spec.layers}, H = {spec.heads}, "
            f"width {spec.width}, vocab {spec.vocab}, context {context} ({kind}); data: {self.meta['data']}; "
            f"S = {samples} sequences per length; {self.options.precision} measurement."
        )

    def notes(self) -> list[str]:
        return family_notes(self.spec)

    def default_out(self, name: str) -> Path:
        folder = self.ck.folder  # a GGUF file (perhaps inside an installed package): the current folder
        return folder / name if folder.is_dir() else Path(f"{folder.stem}-{name}")

    def windows(self, lengths, samples, flag):
        if self._tokenizer is None:
            self._tokenizer = self.ck.tokenizer()
        return text_windows(
            self._tokenizer, self.ck.config, self.text, self.options.bos, str(self.ck.folder), lengths, samples, flag
        )

    def fit_windows(self, fit_length, samples, lengths):
        if self._tokenizer is None:
            self._tokenizer = self.ck.tokenizer()
        return text_fit_windows(
            self._tokenizer,
            self.ck.config,
            self.text,
            self.options.bos,
            str(self.ck.folder),
            fit_length,
            samples,
            lengths,
        )

    def plan(self, lengths, samples, extra):
        from posbias.hf import checkpoint
        from posbias.hf.memory import plan, run_budget

        budget, stored = run_budget(self.options.memory), checkpoint.stored_bytes(self.ck)
        out = {}
        for n in lengths:
            p = plan(
                self.spec,
                n,
                samples,
                self.options.itemsize,
                stored + extra(n),
                budget,
                tied=self.tied,
                what=f"posbias {'measure' if self.options.verb == 'measured' else 'validate'} of {self.ck.folder}",
            )
            out[n] = Plan(
                p.batch,
                {"host": p.host, "device": p.device, "batch": p.batch, "remat": p.remat, "one_forward": p.one_forward},
            )
            self._gradient[n] = (p.remat, p.one_forward)
        return out

    def load(self):
        from posbias.hf import weights
        from posbias.hf.measure import measure
        from posbias.hf.memory import params_bytes

        self.meta["params_bytes"] = params_bytes(self.spec, self.options.itemsize, tied=self.tied)
        params = weights.params(self.ck, None)  # as stored: the measurement casts to its precision
        spec, precision, influence = self.spec, self.options.precision, self.options.influence
        gradient = self._gradient  # N -> how the planned batch computes the gradient (rematerialised if not planned)

        def measurer(seqs, batch, progress):
            remat, one_forward = gradient.get(seqs.shape[1], (True, False))
            return measure(
                params,
                spec,
                seqs,
                precision=precision,
                batch=batch,
                progress=progress,
                influence=influence,
                remat=remat,
                one_forward=one_forward,
            )

        return measurer

    def warnings(self) -> list[str]:
        from posbias.hf import checkpoint

        unused = checkpoint.unused_note(self.ck)
        return [unused] if unused else []
