"""Run a sweep: validate, plan, compute the batches on the local devices, write them, resume.

Order of work (nothing is computed before 1-4 have passed):

1. read and validate the spec (``spec.load``); refuse a grid above ``MAX_POINTS`` unless forced;
2. build each shape's base model and check what a point could trip over (``grid.validate``);
3. plan batches under the memory budget (refusing a point that cannot fit, with its estimate);
4. check the output folder: a fresh sweep needs a folder without a manifest, ``--resume``
   needs the same spec digest and reuses the recorded batch sizes;
5. compute this process's unfinished batches (batch index % P == process index): each batch is
   one ``posbias.numerics.batch.profiles`` call, summarised (``summarize``) and written as one
   Parquet file (atomic rename). With several local JAX devices the batch axis is sharded over
   a Mesh of them (``jax.sharding.NamedSharding``; ``Structured.compute_batch``): every point
   is an independent scan, so its numbers do not depend on the number of devices. The native
   CPU kernel uses no JAX device: its batches run one stack per worker thread;
6. complete the manifest (merged with every process's part).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from posbias.errors import UserError
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
    """Whether this engine name runs on the native CPU kernel here (then no JAX device is used)."""
    if engine not in ("auto", "structured"):
        return False
    from posbias.numerics.structured import Structured

    return Structured().uses_native(np.float64)


def local_devices(engine: str, limit: int | None):
    """(label, [jax devices] or None): what each batch runs on (None: the native kernel)."""
    if native_route(engine):
        return "cpu: native kernel", None
    import jax

    devs = jax.local_devices()
    if limit is not None:
        if limit > len(devs):
            raise UserError(f"--devices {limit}: only {len(devs)} local device(s) here "
                            f"({', '.join(str(d) for d in devs)})")
        devs = devs[:limit]
    return ", ".join(f"{d.platform}:{d.id}" for d in devs), list(devs)


def _summaries(spec: Spec, stacks, profs, n: int, keep_profiles: bool):
    from posbias import numerics as nx
    from posbias.numerics.summary import DiagonalSummary, normalised

    rows, ps, engines = [], [], Counter()
    for stack, prof in zip(stacks, profs):
        s = nx.summarize(prof, stack)
        if spec.diagonal and stack.causal(n):
            diag = nx.diagonal_product(nx.kernel_diagonals(stack, n), stack.lambdas)
            k = int(np.argmin(diag))
            s = dataclasses.replace(s, diagonal=DiagonalSummary(float(diag[k]), k))
        d = s.to_dict()
        d.pop("matrix", None)
        rows.append(d)
        engines[f"{prof.engine}/{prof.path}"] += 1
        if keep_profiles:
            p = normalised(prof)[0]
            if not abs(float(p.sum()) - 1.0) <= 1e-12:
                raise UserError(f"profile of a point sums to {float(p.sum())!r} after renormalisation")
            ps.append(p)
    return rows, (ps if keep_profiles else None), engines


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


def _wait_for_manifest(out: Path) -> dict:
    deadline = time.monotonic() + WAIT_FOR_MANIFEST_S
    while time.monotonic() < deadline:
        found = mf.read(out)
        if found is not None:
            return found
        time.sleep(0.2)
    raise mf.ManifestError(f"{out}: process 0 wrote no {mf.MAIN} within {WAIT_FOR_MANIFEST_S:.0f} s")


def run_sweep(spec: Spec, opts: Options) -> Outcome:
    """Run (or resume) ``spec`` into ``opts.out``; raise UserError (one line) on bad input."""
    from posbias.numerics import budget

    t_start = time.perf_counter()
    out = Path(opts.out)
    if spec.num_points > MAX_POINTS and not opts.force:
        raise SpecError(f"{spec.path}: the grid has {spec.num_points:,} points, more than {MAX_POINTS:,} "
                        "(use --force to run it anyway)")
    profiles = spec.profiles if opts.profiles is None else (opts.profiles or spec.profiles)
    if profiles != spec.profiles:
        spec = dataclasses.replace(spec, profiles=profiles)
    digest = _run_digest(spec, profiles)
    grid = grid_mod.Grid(spec)
    keys = grid.keys()
    grid_mod.validate(grid, keys)
    layout = _layout(grid, profiles, spec.diagonal)

    existing = mf.read(out)
    if existing is not None and existing.get("digest") != digest:
        what = "resume it" if opts.resume else "write into it"
        raise mf.ManifestError(f"{out}: holds a sweep of another spec (digest {str(existing.get('digest'))[:12]}, "
                               f"this spec {digest[:12]}); cannot {what}; choose another --out")
    if existing is not None and not opts.resume and opts.process_id == 0:
        raise mf.ManifestError(f"{out}: holds this sweep already ({mf.MAIN}); use --resume to continue it, "
                               "or choose another --out")
    if existing is None and opts.process_id != 0:
        existing = _wait_for_manifest(out)
        if existing.get("digest") != digest:
            raise mf.ManifestError(f"{out}: process 0 runs another spec (digest {existing.get('digest')[:12]})")
    given_budget = opts.memory_budget
    budget_bytes = given_budget if given_budget is not None else budget.memory_limit()
    cap = opts.batch_cap or grid_mod.DEFAULT_BATCH_CAP
    sizes = None
    if existing is not None:
        recorded = existing["plan"]
        for flag, mine, theirs in (("--memory-budget", given_budget, recorded["memory_budget"]),
                                   ("--batch-size", opts.batch_cap, recorded["batch_cap"])):
            if mine is not None and mine != theirs:
                raise mf.ManifestError(f"{out}: was planned with {flag} {theirs}; resume without {flag} or with "
                                       "the same value (batches must not change)")
        budget_bytes, cap = recorded["memory_budget"], recorded["batch_cap"]
        sizes = {tuple(g["key"]): g["batch_size"] for g in recorded["groups"]}
    groups, batches = grid_mod.plan(grid, keys, budget_bytes=budget_bytes, cap=cap, sizes=sizes)
    folder = out / tb.TABLE_DIR
    notes = []
    if existing is None:
        main = {
            "format": mf.FORMAT, "name": spec.name, "spec_file": spec.path, "spec": spec.raw,
            "spec_digest": spec.digest, "digest": digest, "engine": spec.engine, "profiles": profiles,
            "diagonal": spec.diagonal, "points": spec.num_points,
            "axes": [a.name for a in spec.axes], "dims": [list(d) for d in spec.dims],
            "plan": {"memory_budget": budget_bytes, "batch_cap": cap, "batches": len(batches),
                     "groups": [{"key": list(g.key), "points": int(len(g.points)), "batch_size": g.batch_size,
                                 "bytes_per_point": g.bytes_per_point} for g in groups]},
            "processes": opts.num_processes, "versions": mf.versions(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "complete": False,
        }
        mf.write_json(out / mf.MAIN, main)
    else:
        main = existing
    mine = [b for b in batches if b.index % opts.num_processes == opts.process_id]
    mine_idx = {b.index for b in mine}
    tb.remove_stale_temporaries(folder, mine_idx)
    done, redo = tb.finished(folder, layout, batches, digest)
    notes += redo
    pending = [b for b in mine if b.index not in done]
    label, devices = local_devices(spec.engine, opts.devices)
    part_path = out / mf.part_name(opts.process_id)
    part = {"process": opts.process_id, "host": mf.host(),
            "devices": label.split(", ") if devices else [label], "batches": {}}
    if part_path.is_file():
        import json

        try:
            part["batches"] = json.loads(part_path.read_text(encoding="utf-8")).get("batches", {})
        except ValueError:
            pass
    computed = []
    t_compute = time.perf_counter()
    from posbias.run import progress_bar

    total_points = sum(len(b.points) for b in mine)
    done_points = total_points - sum(len(b.points) for b in pending)
    with progress_bar(opts.progress and bool(pending), "sweep", unit="points") as update:
        if update:
            update(done_points, total_points)
        for batch in pending:
            record = compute_batch(grid, spec, layout, batch, label, devices, folder, digest, opts.process_id)
            part["batches"][str(batch.index)] = record
            mf.write_json(part_path, part)
            computed.append(batch.index)
            done_points += len(batch.points)
            if update:
                update(done_points, total_points)
    t_end = time.perf_counter()
    part["timings"] = {"compute_s": round(t_end - t_compute, 3), "total_s": round(t_end - t_start, 3),
                       "batches_computed": len(computed)}
    with mf.locked(out):
        mf.write_json(part_path, part)
        done_all, _ = tb.finished(folder, layout, batches, digest)
        merged = mf.merge(out, main, len(batches), done_all)
        merged["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        mf.write_json(out / mf.MAIN, merged)
    return Outcome(spec, out, groups, batches, computed, len(mine) - len(pending), part["devices"],
                   t_end - t_start, merged["complete"], notes)


def compute_batch(grid, spec: Spec, layout, batch, label: str, devices, folder: Path, digest: str,
                  process: int) -> dict:
    """One batch: stacks, ``profiles`` (sharded over ``devices`` when several), summaries, one
    Parquet file. Returns its record."""
    from posbias.numerics.batch import profiles
    from posbias.numerics.engine import Unsupported

    t0 = time.perf_counter()
    n = batch.key[2]
    stacks = [grid.stack(int(i), batch.key) for i in batch.points]
    scope = contextlib.nullcontext()
    if devices:
        import jax

        scope = jax.default_device(devices[0])
    try:
        with scope:
            profs = profiles(stacks, n, engine=spec.engine, devices=devices if devices and len(devices) > 1 else None)
    except Unsupported as exc:
        raise UserError(f"batch {batch.index} (points {int(batch.points[0])}..{int(batch.points[-1])}): {exc}") from None
    rows, ps, engines = _summaries(spec, stacks, profs, n, layout.profiles)
    table = tb.batch_table(layout, grid, batch.points, rows, ps)
    meta = {"digest": digest, "batch": batch.index, "process": process, "device": label,
            "points": [int(batch.points[0]), int(batch.points[-1])]}
    path = tb.write_part(folder, batch.index, table, meta)
    return {"file": f"{tb.TABLE_DIR}/{path.name}", "points": int(len(batch.points)),
            "first_point": int(batch.points[0]), "process": process, "device": label,
            "engines": dict(engines), "seconds": round(time.perf_counter() - t0, 3)}
