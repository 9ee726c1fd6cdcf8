"""Run a sweep: validate, plan, compute the batches on the local devices, write them, resume.

Order of work (nothing is computed before 1-4 have passed):

1. read and validate the spec (``spec.load``); refuse a grid above ``MAX_POINTS`` unless forced;
2. build each shape's base model and check what a point could trip over (``grid.validate``);
3. plan batches under the memory budget (refusing a point that cannot fit, with its estimate);
4. claim the output folder (``posbias.io.files.prepare``, then under ``posbias.io.files.locked``: a
   fresh sweep needs a folder without a manifest and without part files of another sweep,
   ``--resume`` needs the same spec digest and reuses the recorded batch sizes; the manifest
   is written under the same lock, so of two sweeps started at once one wins, one is refused);
5. compute this process's unfinished batches (batch index % P == process index): each batch is
   one ``posbias.numerics.batch.profiles`` call on its stacks (an ``AlibiBatch`` built from the
   grid's columns where the points allow), summarised over the batch (``summary_arrays``) and
   written as one Parquet file (atomic rename). On the native route the next batch's profiles
   are computed in a worker thread while a batch is summarised and written, when both fit the
   memory budget (the C kernel releases the GIL); batches are still written in order. With
   several local JAX devices the batch axis is sharded over a Mesh of them
   (``jax.sharding.NamedSharding``; ``Structured.batched``): every point is an independent
   scan, so its numbers do not depend on the number of devices. The native CPU kernel uses no
   JAX device: its batches run one stack per worker thread;
6. complete the manifest (merged with every process's part).

A fresh sweep that is refused or cannot write (a full disk) after its claim removes what it
wrote (manifest, parts, folders it created); a resumed one keeps its finished batches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from posbias.errors import UserError
from posbias.io.files import locked, prepare, remove_created
from posbias.sweep import grid as grid_mod
from posbias.sweep import manifest as mf
from posbias.sweep import table as tb
from posbias.sweep.spec import MAX_POINTS, Spec, SpecError

WAIT_FOR_MANIFEST_S = 600.0  # processes other than 0 wait this long for process 0's manifest (a hang guard)


@dataclass(frozen=True)
class Options:
    """How to run: out folder, resume, memory budget (bytes; None: the posbias limit), batch cap,
    device count (None: all local), force (grids above MAX_POINTS), profiles (store p; None: as the
    spec says), distributed (process index, count), progress bar."""

    out: Path
    resume: bool = False
    memory_budget: int | None = None
    batch_cap: int | None = None
    devices: int | None = None
    force: bool = False
    profiles: bool | None = None
    process_id: int = 0
    num_processes: int = 1
    progress: bool = False


@dataclass(frozen=True)
class Outcome:
    """What a run did: batches computed here, batches already present, the plan, seconds."""

    spec: Spec
    out: Path
    groups: list
    batches: list
    computed: list
    skipped: int
    devices: list
    seconds: float
    complete: bool
    notes: list


def _run_digest(spec: Spec, profiles: bool) -> str:
    return hashlib.sha256(f"{spec.digest}|profiles={profiles}|diagonal={spec.diagonal}".encode()).hexdigest()


def _probe_summary():
    """A Summary of a one-layer stack: its keys and values fix the table's summary columns."""
    from posbias import numerics as nx

    stack = nx.AlibiStack.build([0.5], [0.5])
    return nx.summarize(nx.profile(stack, 4), stack)


def native_route(engine: str) -> bool:
    """Whether this engine name runs on the native CPU kernel here (then no JAX device is used), as the
    engine says (``Engine.uses_native``)."""
    from posbias.numerics import engines

    return engines.get(engine).uses_native(np.float64)  # type: ignore[arg-type]  (a validated name)


def local_devices(engine: str, limit: int | None):
    """(label, [jax devices] or None, note or None): what each batch runs on (None: the native
    kernel). ``--devices N`` beyond the local devices is refused; on the native route (which
    uses no JAX device) it is stated in a note. JAX is imported only where a device is used or
    counted (the native route without ``--devices`` starts without it)."""
    if limit is None and native_route(engine):
        return "cpu: native kernel", None, None
    import jax

    devs = jax.local_devices()
    if limit is not None and limit > len(devs):
        raise UserError(f"--devices {limit}: only {len(devs)} local device(s) here ({', '.join(str(d) for d in devs)})")
    if native_route(engine):
        note = (
            None
            if limit is None
            else (
                f"--devices {limit}: the batches run on the native CPU kernel "
                "(worker threads, no JAX device); the flag has no effect here"
            )
        )
        return "cpu: native kernel", None, note
    devs = devs[:limit] if limit is not None else devs
    return ", ".join(f"{d.platform}:{d.id}" for d in devs), list(devs), None


def _summaries(spec: Spec, stacks, profs, n: int, keep_profiles: bool):
    """The batch's summary columns (``numerics.summary.summary_arrays``: key -> list or array over
    the points), its renormalised profiles when kept, and how many points each engine/path computed."""
    from posbias.numerics.summary import summary_arrays

    columns = summary_arrays(profs, stacks)
    columns.pop("matrix", None)
    if spec.diagonal:  # min_i P_ii (C5(a)), from log P_ii (compact stacks too)
        from posbias.diagonal import log_diagonal

        for i, stack in enumerate(stacks):
            if stack.causal(n):
                log_diag = log_diagonal(stack, n)
                k = int(np.argmin(log_diag))
                columns["diagonal"][i] = {"min": float(np.exp(log_diag[k])), "argmin": k}
    engines = Counter(f"{prof.engine}/{prof.path}" for prof in profs)
    ps = None
    if keep_profiles:
        prob = np.stack([prof.probabilities for prof in profs])
        ps = prob / prob.sum(axis=1, keepdims=True)  # = numerics.summary.normalised, row by row
        bad = np.flatnonzero(~(np.abs(ps.sum(axis=1) - 1.0) <= 1e-12))
        if bad.size:
            raise UserError(f"profile of a point sums to {float(ps[bad[0]].sum())!r} after renormalisation")
    return columns, ps, engines


def _layout(grid, profiles: bool, diagonal: bool):
    probe = _probe_summary()
    if diagonal:
        from posbias.numerics.summary import DiagonalSummary

        probe = dataclasses.replace(probe, diagonal=DiagonalSummary(0.0, 0))
    layout = tb.Layout.build(grid, probe, profiles)
    drop = [c for c, (key, _), _ in layout.summary if key == "matrix" or (key == "diagonal" and not diagonal)]
    if drop:
        import pyarrow as pa

        summary = tuple(s for s in layout.summary if s[0] not in drop)
        schema = pa.schema([f for f in layout.schema if f.name not in drop])
        layout = tb.Layout(layout.axes, summary, layout.profiles, schema)
    return layout


def _group_record(g) -> dict:
    """A shape group in the manifest's plan (with the time estimate of relative-bias points)."""
    record = {
        "key": list(g.key),
        "points": int(len(g.points)),
        "batch_size": g.batch_size,
        "bytes_per_point": g.bytes_per_point,
    }
    if g.seconds_per_point is not None:
        record["seconds_per_point"] = g.seconds_per_point
    return record


def _wait_for_manifest(out: Path) -> dict:
    deadline = time.monotonic() + WAIT_FOR_MANIFEST_S
    while time.monotonic() < deadline:
        found = mf.read(out)
        if found is not None:
            return found
        time.sleep(0.2)
    raise UserError(f"{out}: process 0 wrote no {mf.MAIN} within {WAIT_FOR_MANIFEST_S:.0f} s")


def _check_memory(spec: Spec, given: int | None) -> int:
    """The per-batch budget (bytes): ``--memory-budget`` or the posbias limit, never above the limit;
    refuses a grid whose own bookkeeping (``grid.bookkeeping_bytes``) cannot fit the limit (also
    with --force), before the grid is built."""
    from posbias.numerics import budget

    limit = budget.memory_limit()
    if given is not None and given > limit:
        raise UserError(
            f"--memory-budget {budget.describe(given)}: more than the posbias memory limit of "
            f"{budget.describe(limit)} (80% of RAM, or POSBIAS_MEMORY_LIMIT)"
        )
    need = grid_mod.bookkeeping_bytes(spec)
    if need > limit:
        raise UserError(
            f"{spec.path}: the grid of {spec.num_points:,} points needs about "
            f"{budget.describe(need)} for its bookkeeping alone, more than the memory limit of "
            f"{budget.describe(limit)}; split the sweep into smaller grids"
        )
    return given if given is not None else limit


def _check_existing(out: Path, existing: dict | None, digest: str, opts: Options) -> None:
    if existing is not None and existing["digest"] != digest:
        what = "resume it" if opts.resume else "write into it"
        raise UserError(
            f"{out}: holds a sweep of another spec (digest {existing['digest'][:12]}, "
            f"this spec {digest[:12]}); cannot {what}; choose another --out"
        )
    if existing is not None and not opts.resume and opts.process_id == 0:
        raise UserError(
            f"{out}: holds this sweep already ({mf.MAIN}); use --resume to continue it, or choose another --out"
        )


def _recorded_plan(out: Path, existing: dict, opts: Options):
    """(budget, cap, batch sizes per shape) recorded by the sweep being resumed."""
    recorded = existing["plan"]
    for flag, mine, theirs in (
        ("--memory-budget", opts.memory_budget, recorded["memory_budget"]),
        ("--batch-size", opts.batch_cap, recorded["batch_cap"]),
    ):
        if mine is not None and mine != theirs:
            raise UserError(
                f"{out}: was planned with {flag} {theirs}; resume without {flag} or with "
                "the same value (batches must not change)"
            )
    try:
        sizes = {tuple(g["key"]): int(g["batch_size"]) for g in recorded["groups"]}
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{out / mf.MAIN}: not a sweep manifest (plan.groups malformed)") from None
    return recorded["memory_budget"], recorded["batch_cap"], sizes


def _undo(written: list[Path], created: list[Path], folder: Path) -> None:
    """Remove what a refused fresh sweep wrote: its manifest, parts, an emptied table/ and created folders."""
    for path in reversed(written):
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        folder.rmdir()  # only if empty (another run's files stay)
    remove_created(created)


def run_sweep(spec: Spec, opts: Options) -> Outcome:
    """Run (or resume) ``spec`` into ``opts.out``; raise UserError (one line) on bad input.

    The output folder is claimed atomically (the manifest is checked and written under the
    folder's lock) and a fresh sweep that is refused or fails to write (full disk) leaves
    nothing behind: no manifest, no part files, no folder it created."""
    t_start = time.perf_counter()
    out = Path(opts.out)
    if spec.num_points > MAX_POINTS and not opts.force:
        raise SpecError(
            f"{spec.path}: the grid has {spec.num_points:,} points, more than {MAX_POINTS:,} "
            "(use --force to run it anyway)"
        )
    budget_bytes = _check_memory(spec, opts.memory_budget)
    profiles = spec.profiles if opts.profiles is None else (opts.profiles or spec.profiles)
    if profiles != spec.profiles:
        spec = dataclasses.replace(spec, profiles=profiles)
    digest = _run_digest(spec, profiles)
    grid = grid_mod.Grid(spec)
    keys = grid.keys()
    grid_mod.validate(grid, keys)
    layout = _layout(grid, profiles, spec.diagonal)
    label, devices, device_note = local_devices(spec.engine, opts.devices)
    notes = [device_note] if device_note else []
    cap = opts.batch_cap or grid_mod.DEFAULT_BATCH_CAP
    folder = out / tb.TABLE_DIR
    if opts.process_id != 0 and mf.read(out) is None:
        _wait_for_manifest(out)
    if mf.read(out) is None:  # refuse a point that cannot fit before creating anything
        grid_mod.plan(grid, keys, budget_bytes=budget_bytes, cap=cap)
    created = prepare(out)
    written: list[Path] = []
    fresh = False
    try:
        with locked(out):  # the claim: check and write the manifest as one step
            existing = mf.read(out)
            _check_existing(out, existing, digest, opts)
            sizes = None
            if existing is not None:
                budget_bytes, cap, sizes = _recorded_plan(out, existing, opts)
            groups, batches = grid_mod.plan(grid, keys, budget_bytes=budget_bytes, cap=cap, sizes=sizes)
            done, redo = tb.finished(folder, layout, batches, digest)  # refuses part files of another sweep
            if existing is None:
                main = {
                    "format": mf.FORMAT,
                    "name": spec.name,
                    "spec_file": spec.path,
                    "spec": spec.raw,
                    "spec_digest": spec.digest,
                    "digest": digest,
                    "engine": spec.engine,
                    "profiles": profiles,
                    "diagonal": spec.diagonal,
                    "points": spec.num_points,
                    "axes": [a.name for a in spec.axes],
                    "dims": [list(d) for d in spec.dims],
                    "plan": {
                        "memory_budget": budget_bytes,
                        "batch_cap": cap,
                        "batches": len(batches),
                        "groups": [_group_record(g) for g in groups],
                    },
                    "processes": opts.num_processes,
                    "versions": mf.versions(),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "complete": False,
                }
                fresh = True
                written.append(out / mf.MAIN)
                mf.write_json(out / mf.MAIN, main)
            else:
                main = existing
        notes += redo
        outcome = _compute(
            spec, opts, grid, layout, groups, batches, main, digest, label, devices, folder, written, notes, t_start
        )
    except (UserError, OSError) as exc:
        if fresh and opts.process_id == 0:
            _undo(written, created, folder)
        elif not written:
            remove_created(created)
        if isinstance(exc, OSError):
            kept = "" if fresh else "; finished batches are kept (--resume after fixing it)"
            raise UserError(f"--out {out}: cannot write ({exc.strerror or exc}){kept}") from None
        raise
    return outcome


def _compute(
    spec, opts, grid, layout, groups, batches, main, digest, label, devices, folder, written, notes, t_start
) -> Outcome:
    """This process's unfinished batches, its manifest part after each, then the merged manifest."""
    out = Path(opts.out)
    mine = [b for b in batches if b.index % opts.num_processes == opts.process_id]
    tb.remove_stale_temporaries(folder, {b.index for b in mine})
    done, _ = tb.finished(folder, layout, batches, digest)
    pending = [b for b in mine if b.index not in done]
    part_path = out / mf.part_name(opts.process_id)
    part = {
        "process": opts.process_id,
        "host": mf.host(),
        "devices": label.split(", ") if devices else [label],
        "batches": {},
    }
    if part_path.is_file():
        import json

        with contextlib.suppress(ValueError, OSError):
            old = json.loads(part_path.read_text(encoding="utf-8"))
            if isinstance(old, dict) and isinstance(old.get("batches"), dict):
                part["batches"] = old["batches"]
    else:
        written.append(part_path)
    computed = []
    t_compute = time.perf_counter()
    from posbias.runtime.progress import progress_bar

    total_points = sum(len(b.points) for b in mine)
    done_points = total_points - sum(len(b.points) for b in pending)
    per_point = {g.key: g.bytes_per_point for g in groups}
    budget_bytes = main["plan"]["memory_budget"]

    def overlaps(k: int) -> bool:  # batch k + 1 may run while batch k is summarised and written
        if devices or k + 1 >= len(pending):
            return False
        a, b = pending[k], pending[k + 1]
        return len(a.points) * per_point[a.key] + len(b.points) * per_point[b.key] <= budget_bytes

    with (
        progress_bar(opts.progress and bool(pending), "sweep", unit="points") as update,
        ThreadPoolExecutor(max_workers=1) as ahead,
    ):
        if update:
            update(done_points, total_points)
        following = None
        for k, batch in enumerate(pending):
            t0 = time.perf_counter()
            written.append(folder / tb.part_name(batch.index))
            current = following.result() if following is not None else batch_profiles(grid, spec, batch, devices)
            following = ahead.submit(batch_profiles, grid, spec, pending[k + 1], devices) if overlaps(k) else None
            record = write_batch(grid, spec, layout, batch, current, label, folder, digest, opts.process_id, t0)
            part["batches"][str(batch.index)] = record
            mf.write_json(part_path, part)
            computed.append(batch.index)
            done_points += len(batch.points)
            if update:
                update(done_points, total_points)
    t_end = time.perf_counter()
    part["timings"] = {
        "compute_s": round(t_end - t_compute, 3),
        "total_s": round(t_end - t_start, 3),
        "batches_computed": len(computed),
    }
    with locked(out):
        mf.write_json(part_path, part)
        done_all, _ = tb.finished(folder, layout, batches, digest)
        merged = mf.merge(out, main, len(batches), done_all)
        merged["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        mf.write_json(out / mf.MAIN, merged)
    return Outcome(
        spec,
        out,
        groups,
        batches,
        computed,
        len(mine) - len(pending),
        part["devices"],
        t_end - t_start,
        merged["complete"],
        notes,
    )


def batch_profiles(grid, spec: Spec, batch, devices):
    """One batch's stacks (``Grid.stacks``: an ``AlibiBatch`` where the points allow) and their
    ``profiles`` (sharded over ``devices`` when several). The C kernel releases the GIL, so this
    runs in a worker thread for batch k + 1 while batch k is summarised and written (when both fit
    the memory budget; not on JAX devices)."""
    from posbias.numerics.batch import profiles
    from posbias.numerics.engine import Unsupported
    from posbias.numerics.stack import StackError

    n = batch.key[2]
    stacks = grid.stacks(batch.points, batch.key)
    scope = contextlib.nullcontext()
    if devices:
        import jax

        scope = jax.default_device(devices[0])
    try:
        with scope:
            profs = profiles(stacks, n, engine=spec.engine, devices=devices if devices and len(devices) > 1 else None)
    except (Unsupported, StackError) as exc:  # StackError: a bias without a value at this N (b(710) = e^710)
        raise UserError(
            f"batch {batch.index} (points {int(batch.points[0])}..{int(batch.points[-1])}): {exc}"
        ) from None
    return stacks, profs


def write_batch(
    grid, spec: Spec, layout, batch, computed, label: str, folder: Path, digest: str, process: int, t0: float
) -> dict:
    """One batch's summaries and Parquet file from ``batch_profiles``' (stacks, profiles); its record."""
    stacks, profs = computed
    columns, ps, engines = _summaries(spec, stacks, profs, batch.key[2], layout.profiles)
    table = tb.batch_table(layout, grid, batch.points, columns, ps)
    meta = {
        "digest": digest,
        "batch": batch.index,
        "process": process,
        "device": label,
        "points": [int(batch.points[0]), int(batch.points[-1])],
    }
    path = tb.write_part(folder, batch.index, table, meta)
    return {
        "file": f"{tb.TABLE_DIR}/{path.name}",
        "points": int(len(batch.points)),
        "first_point": int(batch.points[0]),
        "process": process,
        "device": label,
        "engines": dict(engines),
        "seconds": round(time.perf_counter() - t0, 3),
    }
