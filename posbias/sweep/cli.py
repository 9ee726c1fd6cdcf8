"""The ``posbias sweep`` subcommand: ``add_parser(subparsers)`` and ``run(args) -> exit code``.

Bad input (spec, flags, an output folder of another sweep, a point that cannot fit the
memory budget) gets one line on stderr and exit code 2 before any work.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from posbias.cli import argtypes
from posbias.cli.argtypes import at_least, size
from posbias.errors import UserError

EXIT_USAGE = 2

SWEEP_EPILOG = """\
examples:
  posbias sweep examples/sweep-ushape.yaml --out out/ushape
  posbias sweep examples/sweep-ushape.yaml --out out/ushape --resume     (after a kill: finished batches stay)
  posbias sweep examples/sweep-kerple.yaml --out out/kerple   (a relative bias: kerple-log:{r1},{r2} over axes r1, r2)
  posbias sweep SPEC --memory-budget 4G --devices 2
  posbias sweep SPEC --out /shared/run --coordinator host0:1234 --num-processes 2 --process-id 0   (per host)
    (processes I > 0 give up after --connect-timeout seconds, default 60, if process 0 does not answer)

read the table: pandas.read_parquet("out/ushape/table") or posbias.sweep.read_table("out/ushape")
"""


def add_parser(subparsers):
    """Add the ``sweep`` subcommand to an argparse subparsers object; returns its parser."""
    ps = subparsers.add_parser(
        "sweep",
        help="a grid of models (axes of a spec) into a Parquet table, resumable, sharded",
        description="Compute the profile summary of every point of a grid of models (a YAML spec: a base model "
        "and axes) in memory-bounded batches; one Parquet row per point plus a JSON manifest.",
        epilog=SWEEP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ps.add_argument(
        "spec",
        type=Path,
        help="sweep spec (YAML): base, axes, zip, engine, profiles, diagonal "
        "(base.bias / axes bias, sink and {placeholder} axes: relative biases)",
    )
    ps.add_argument("--out", type=argtypes.path, help="output folder (default ./posbias-sweep/<spec name>)")
    ps.add_argument(
        "--resume",
        action="store_true",
        help="continue the sweep in --out: finished batch files are kept, the rest computed",
    )
    ps.add_argument(
        "--memory-budget",
        type=size,
        metavar="SIZE",
        help="bytes one batch may use on one device (default: the posbias memory limit, "
        "80%% of RAM or POSBIAS_MEMORY_LIMIT)",
    )
    ps.add_argument("--batch-size", type=at_least(1), metavar="B", help="at most B points per batch (default 1024)")
    ps.add_argument("--devices", type=at_least(1), metavar="N", help="use the first N local JAX devices (default all)")
    ps.add_argument("--force", action="store_true", help="run grids above 1,000,000 points")
    ps.add_argument("--profiles", action="store_true", help="also store every profile p (column 'profile')")
    ps.add_argument("--quiet", action="store_true", help="no progress bar, no summary lines")
    dist = ps.add_argument_group("several processes / hosts (jax.distributed)")
    dist.add_argument("--coordinator", metavar="HOST:PORT", help="address of process 0 (jax.distributed.initialize)")
    dist.add_argument("--num-processes", type=at_least(1), metavar="P", help="number of processes")
    dist.add_argument("--process-id", type=at_least(0), metavar="I", help="this process's index, 0..P-1")
    dist.add_argument(
        "--connect-timeout",
        type=_seconds,
        default=CONNECT_TIMEOUT_S,
        metavar="S",
        help=f"seconds to reach the coordinator (process I > 0) or to wait for the other processes "
        f"(default {CONNECT_TIMEOUT_S:g})",
    )
    dist.add_argument(
        "--distributed",
        action="store_true",
        help="jax.distributed.initialize() with JAX's auto-detection (TPU pods, SLURM, Open MPI)",
    )
    return ps


CONNECT_TIMEOUT_S = 60.0


def _seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def _reach(address: str, timeout: float) -> None:
    """Connect to the coordinator (TCP) until it answers or ``timeout`` seconds have passed; refuses
    with one line if it never does. (jax.distributed aborts the whole process, a C++ fatal error
    with a stack dump, when the coordinator cannot be reached, so this is checked first.)"""
    import socket
    import time

    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    reason = "no answer"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=min(left, 2.0)):
                return
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    raise UserError(
        f"--coordinator {address}: process 0 not reachable within {timeout:g} s ({reason}); "
        "start process 0 first, check HOST:PORT, or raise --connect-timeout"
    )


def _distributed(args) -> tuple[int, int]:
    """(process index, count): 0, 1 unless --coordinator / --distributed ask for jax.distributed."""
    given = [f for f in ("num_processes", "process_id") if getattr(args, f) is not None]
    if args.coordinator is None and not args.distributed:
        if given:
            raise UserError(f"--{given[0].replace('_', '-')} needs --coordinator HOST:PORT (or --distributed)")
        return 0, 1
    if args.coordinator is not None:
        if args.num_processes is None or args.process_id is None:
            raise UserError("--coordinator needs --num-processes P and --process-id I")
        if args.process_id >= args.num_processes:
            raise UserError(f"--process-id {args.process_id}: expected 0..{args.num_processes - 1}")
        host, _, port = args.coordinator.rpartition(":")
        if not host or not port.isdigit():
            raise UserError(f"--coordinator: expected HOST:PORT, got {args.coordinator!r}")
        if int(port) > 65535:
            raise UserError(f"--coordinator: port {port} is not a TCP port (1..65535)")
        if args.process_id > 0:
            _reach(args.coordinator, args.connect_timeout)
    import jax

    try:
        if args.coordinator is not None:
            jax.distributed.initialize(
                coordinator_address=args.coordinator,
                num_processes=args.num_processes,
                process_id=args.process_id,
                initialization_timeout=max(1, math.ceil(args.connect_timeout)),
            )
        else:
            jax.distributed.initialize()
    except (RuntimeError, ValueError) as exc:
        raise UserError(f"jax.distributed.initialize: {str(exc).splitlines()[0]}") from None
    return jax.process_index(), jax.process_count()


def run(args) -> int:
    """Execute ``posbias sweep`` from parsed arguments; returns the exit code."""
    from posbias.sweep import spec as spec_mod
    from posbias.sweep.runner import Options, run_sweep

    try:
        spec = spec_mod.load(args.spec)
        out = args.out if args.out is not None else Path("posbias-sweep") / args.spec.stem
        process, count = _distributed(args)
        opts = Options(
            out=out,
            resume=args.resume,
            memory_budget=args.memory_budget,
            batch_cap=args.batch_size,
            devices=args.devices,
            force=args.force,
            profiles=args.profiles or None,
            process_id=process,
            num_processes=count,
            progress=not args.quiet,
        )
        outcome = run_sweep(spec, opts)
    except UserError as exc:
        print(f"posbias sweep: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for note in outcome.notes:
        print(f"posbias sweep: note: {note}", file=sys.stderr)
    if not args.quiet:
        _report(outcome, process, count)
    return 0


def _report(o, process: int, count: int) -> None:
    s = o.spec
    dims = " x ".join(f"{'+'.join(d)} ({len(s.axis(d[0]).values)})" for d in s.dims)
    print(f"{s.path}: {s.name}: {s.num_points:,} points ({dims}), engine {s.engine}")
    shown = o.groups if len(o.groups) <= 6 else [*o.groups[:2], None, *o.groups[-2:]]
    for g in shown:
        if g is None:
            print(f"  ... ({len(o.groups) - 4} more shapes)")
            continue
        t, h, n, mask = g.key
        when = "" if g.seconds_per_point is None else f", ~{g.seconds_per_point:.2g} s (relative bias)"
        print(
            f"  shape T={t}, H={h}, N={n}, {mask}: {len(g.points):,} points, batches of {g.batch_size} "
            f"(~{_bytes(g.bytes_per_point)}{when} per point)"
        )
    who = f"process {process} of {count}, " if count > 1 else ""
    print(
        f"  {who}devices: {', '.join(o.devices)}; computed {len(o.computed)} batch(es), "
        f"{o.skipped} already done, in {o.seconds:.1f} s"
    )
    state = "complete" if o.complete else "incomplete (other processes, or --resume to finish)"
    print(f"  wrote {o.out}/table/ ({len(o.batches)} batch files when complete), {o.out}/manifest.json: {state}")


def _bytes(n: int) -> str:
    from posbias.numerics.budget import describe

    return describe(n)


def main(argv=None) -> int:
    """``python -m posbias.sweep.cli SPEC ...``: ``posbias sweep`` (the same parser and behaviour)."""
    from posbias.cli import main as posbias_main

    return posbias_main(["sweep", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
