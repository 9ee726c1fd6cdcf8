"""The measurement pipeline: one path from a model to measured quantities, for every backend and command.

``open_backend`` picks the backend for what the user named (``posbias.measure.backend``): a run folder of
``posbias train``, a Hugging Face folder or a GGUF file (through posbias's JAX forward, or transformers
with ``backend="transformers"``). Then, for ``posbias measure`` (``measure_to_folder``, one length) and
``posbias validate`` (``measure_lengths``, several), in this order:

1. every length checked against the model's limit, the output folder checked (measure), each length's
   memory planned (``Backend.plan``: refused in one line before any weight is read), the windows of token
   ids cut (``Backend.windows``: refused when the text is too short);
2. the weights read once (``Backend.load``), the notes collected, the backend's warnings printed;
3. each length measured in batches with a progress bar (sequences done, rate, ETA), one measurement held
   at a time; the quantities are ``posbias.measure.quantities``';
4. measure: the files rendered in memory (``posbias.measure.outputs``) and written all or none
   (``posbias.io.files.write_run``), and a summary printed; validate scores each measurement as it comes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from posbias.measure.backend import Backend, Options, Plan
from posbias.measure.quantities import MeasureError, Measurement

BACKENDS = ("jax", "transformers")


def open_backend(
    path: Path | None,
    options: Options,
    backend: str = "jax",
    *,
    flag: str = "RUN",
    preset: str = "default",
    progress: bool = True,
) -> Backend:
    """The backend that measures ``path``: a ``posbias train`` run folder or checkpoint.npz
    (``posbias.measure.trained``; ``path`` None: runs/lm-<preset>, trained first if unfinished), a Hugging
    Face folder or a .gguf file (``posbias.measure.checkpoint``, or ``posbias.measure.transformers`` with
    ``backend="transformers"``). Anything else is refused in one line naming ``flag``."""
    from posbias.hf.checkpoint import refuse_other, route

    if backend not in BACKENDS:
        raise MeasureError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    kind = "trained" if path is None else route(path)
    if kind == "other":
        refuse_other(path, flag)
    if kind in ("hf", "gguf"):
        if backend == "transformers":
            from posbias.measure.transformers import TransformersBackend

            return TransformersBackend(Path(path), options)
        from posbias.hf.source import open_checkpoint
        from posbias.measure.checkpoint import CheckpointBackend

        return CheckpointBackend(open_checkpoint(path), options)
    if backend != "jax":
        raise MeasureError(
            f"--backend {backend} applies to Hugging Face checkpoints and .gguf files, not to a posbias train model"
        )
    if options.bos != "auto":
        raise MeasureError(
            "--bos applies to Hugging Face checkpoints and .gguf files, not to a posbias train model "
            "(bytes, no BOS token)"
        )
    from posbias.measure.trained import open_trained

    return open_trained(path, options, preset=preset, progress=progress)


def check_lengths(backend: Backend, lengths, flag: str) -> None:
    """Refuse a length below 1 or beyond the model's limit, naming ``flag`` (the option that set it)."""
    for n in lengths:
        if n < 1:
            raise MeasureError(f"{flag}: expected a positive integer, got {n}")
        if backend.limit is not None and n > backend.limit:
            raise MeasureError(f"{flag} {n}: longer than the model's {backend.limit_phrase} ({backend.source})")


def prepare(
    backend: Backend, lengths: tuple[int, ...], samples: int, flag: str, extra: Callable[[int], int] = lambda n: 0
) -> tuple[dict[int, Plan], dict]:
    """Steps 1 of the module docstring: (N -> plan, N -> windows); nothing is read but the text."""
    if samples < 1:
        raise MeasureError(f"--samples: expected a positive integer, got {samples}")
    check_lengths(backend, lengths, flag)
    plans = backend.plan(tuple(lengths), samples, extra)
    return plans, backend.windows(tuple(lengths), samples, flag)


def load(backend: Backend, command: str) -> tuple[Callable, list[str]]:
    """Step 2: (the measurer, the notes); each of the backend's warnings printed on stderr and kept as a note."""
    measurer = backend.load()
    warnings = backend.warnings()
    for line in warnings:
        print(f"posbias {command}: warning: {line}", file=sys.stderr)
    return measurer, [*backend.notes(), *warnings]


def measure_lengths(
    measurer: Callable, plans: dict[int, Plan], windows: dict, *, show: bool = True, label: str = "measure"
) -> Iterator[tuple[int, Measurement]]:
    """Step 3: (N, its measurement) for every planned length, one at a time, with a progress bar."""
    from posbias.runtime.progress import progress_bar

    for n, plan in plans.items():
        with progress_bar(show, f"{label} N = {n}" if len(plans) > 1 else label, "sequences") as update:
            m = measurer(windows[n], plan.batch, update)
        yield n, m


def measure_to_folder(
    backend: Backend,
    *,
    tokens: int | None,
    samples: int,
    out: Path | None,
    content_scale: str = "scaled",
    show: bool = True,
) -> int:
    """``posbias measure``: one length (``tokens``, default the backend's) measured into ``out`` (default
    ``Backend.default_out``); returns 0, bad input raises ``UserError`` before anything is written."""
    from posbias.io.files import check_out, write_run
    from posbias.measure import outputs

    n = backend.default_tokens if tokens is None else tokens
    check_lengths(backend, (n,), "--tokens")
    if samples < 1:
        raise MeasureError(f"--samples: expected a positive integer, got {samples}")
    out = Path(out) if out is not None else backend.default_out(f"measure-N{n}-S{samples}")
    check_out(out, outputs.FILES[backend.files])
    plans, windows = prepare(backend, (n,), samples, "--tokens")
    measurer, notes = load(backend, "measure")
    label = "measure (transformers)" if backend.name == "transformers" else "measure"
    ((_, m),) = measure_lengths(measurer, plans, windows, show=show, label=label)
    influence = backend.options.influence
    meta = {**backend.meta, "notes": notes}
    if influence.extra:
        meta["influence_setup"] = {
            "measures": list(influence.measures),
            "ig_steps": influence.ig_steps,
            "baseline": influence.baseline,
        }
    if plans[n].estimate is not None:
        meta["memory_estimate"] = plans[n].estimate
    if backend.files == "trained":
        files = outputs.render_trained(m, source=backend.source, content_scale=content_scale, meta=meta)
    else:
        files = outputs.render_checkpoint(
            m, source=backend.source, content_scale=content_scale, meta=meta, causal=backend.causal
        )
    written = write_run(out, {}, binaries=files)
    outputs.print_summary(f"{backend.title}, N = {n}, S = {samples}, {m.precision}", m, written)
    return 0
