"""``posbias measure CHECKPOINT_DIR`` for a Hugging Face checkpoint folder.

``run_measure(args)`` does the work from parsed arguments (``checkpoint``, ``data``,
``tokens``, ``samples``, ``out``, ``precision``, ``memory``, ``content_scale``, ``quiet``;
the ``posbias measure`` parser of posbias/lm/cli.py) and returns the exit code; bad input
raises ``posbias.errors.UserError`` (one line; the caller prints it and exits 2). ``main(argv)`` is
``posbias measure`` itself:

    python -m posbias.hf.cli CHECKPOINT_DIR [--data FILE.txt|FILE.jsonl] [--tokens N] [--samples S] [--out DIR]

Nothing here imports JAX until a command runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from posbias.measure.defaults import DEFAULT_TOKENS

EXIT_USAGE = 2


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


def run_measure(args) -> int:
    """Measure the checkpoint folder ``args.checkpoint`` (module docstring); returns 0. Refused before any
    weight is read: an unusable --out, files holding more layers than config.json, and a run whose host
    and device memory (``posbias.hf.memory.plan``) exceed the budget (``--memory``)."""
    from posbias.files import check_out, write_run
    from posbias.hf import checkpoint, data, outputs, weights
    from posbias.hf.measure import measure
    from posbias.hf.memory import params_bytes, plan, run_budget
    from posbias.hf.source import open_checkpoint
    from posbias.lm.measure import MeasureError
    from posbias.progress import progress_bar

    ck = open_checkpoint(args.checkpoint)
    spec = ck.spec
    n = args.tokens if args.tokens is not None else min(DEFAULT_TOKENS, spec.context or DEFAULT_TOKENS)
    if n < 1:
        raise MeasureError(f"--tokens: expected a positive integer, got {n}")
    if spec.context is not None and n > spec.context:
        raise MeasureError(f"--tokens {n}: longer than the model's {spec.context} learned positions ({ck.folder})")
    if args.samples < 1:
        raise MeasureError(f"--samples: expected a positive integer, got {args.samples}")
    # beside a checkpoint folder; a GGUF file (perhaps inside an installed package): in the current folder
    name = f"measure-N{n}-S{args.samples}"
    default = ck.folder / name if ck.folder.is_dir() else Path(f"{ck.folder.stem}-{name}")
    out = args.out if args.out is not None else default
    check_out(out, outputs.FILES)
    itemsize = 8 if args.precision == "float64" else 4
    tied = ck.family.tied(ck.config)
    memory = plan(
        spec,
        n,
        args.samples,
        itemsize,
        checkpoint.stored_bytes(ck),
        run_budget(args.memory),
        tied=tied,
        what=f"posbias measure of {ck.folder}",
    )
    text, label = data.read_text(getattr(args, "data", None))
    seqs = data.sequences(ck.tokenizer(), text, n, args.samples, label)
    params = weights.params(ck, None)  # as stored: the measurement casts to its precision (posbias.hf.measure)
    notes = family_notes(spec)
    unused = checkpoint.unused_note(ck)
    if unused:
        print(f"posbias measure: warning: {unused}", file=sys.stderr)
        notes.append(unused)
    with progress_bar(not args.quiet, "measure", "sequences") as update:
        m = measure(params, spec, seqs, precision=args.precision, batch=memory.batch, progress=update)
    meta = {
        "model_type": spec.model_type,
        "layers": spec.layers,
        "heads": spec.heads,
        "width": spec.width,
        "vocab": spec.vocab,
        "data": label,
        "notes": notes,
        "params_bytes": params_bytes(spec, itemsize, tied=tied),
        "memory_estimate": {"host": memory.host, "device": memory.device, "batch": memory.batch},
    }
    files = outputs.render(m, source=str(ck.folder), content_scale=args.content_scale, meta=meta, causal=spec.causal)
    written = write_run(Path(out), {}, binaries=files)
    outputs.print_summary(
        f"{ck.folder} ({spec.model_type}, T={spec.layers}, H={spec.heads}, D={spec.width}), "
        f"N = {n}, S = {args.samples}, {args.precision}",
        m,
        written,
    )
    return 0


def main(argv=None) -> int:
    """``python -m posbias.hf.cli CHECKPOINT_DIR ...``: ``posbias measure`` (the same parser and behaviour)."""
    from posbias.cli import main as posbias_main

    return posbias_main(["measure", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
