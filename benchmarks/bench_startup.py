"""Benchmark: where the whole ``posbias rollout`` process spends its time, side by side with
the dense NumPy baseline (issue 7, item 6). Run on demand, never as a test:

    .venv/bin/python benchmarks/bench_startup.py [--config PATH] [--repeats 5] [--threads N]
                                                 [--engine auto] [--out results.json]

1. Whole process, interleaved repeats (median and min of wall time, like hyperfine):
   ``posbias rollout CONFIG --out TMP`` (JAX cache off), the same with JAX's persistent
   compilation cache warm, and ``python benchmarks/dense_baseline.py CONFIG``. Every
   command gets OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = MKL_NUM_THREADS = --threads
   (default: all cores) and the same environment otherwise. The warm-cache variant sets JAX's
   own variables (JAX_COMPILATION_CACHE_DIR, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0), so
   it measures the cache whether or not posbias calls posbias.runtime.jax_cache itself; "cache off"
   sets POSBIAS_JAX_CACHE=0. While posbias.config still parses with ruamel, two more variants
   (posbias and the baseline) preview the switch to posbias.io.yaml_io by patching
   posbias.config.read_yaml in the process.
2. Breakdown: the CLI's phases in process (timers wrapped around config.load, read_yaml, Model.run,
   output.profile_figure, files.write_run, after timing the heavy imports); imports (fresh process per module, and
   ``-X importtime`` cumulative times, also aggregated per top-level package for the real CLI run); YAML parse of
   CONFIG (ruamel pure Python, stock PyYAML CSafeLoader, posbias.io.yaml_io); config load (parse + validation); per
   engine (--engine, default auto and log), the first call (tracing + XLA compile) and steady-state call in a fresh
   process, without cache, with a warm cache under JAX's default settings and with the settings
   posbias.runtime.jax_cache uses; a cProfile of the whole CLI run (top functions by cumulative time).

Timings are of this machine and of whatever else runs on it: read medians, rerun.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO.parent / "shared/data/official-configs/all_content/fineweb-edu/bloom.yaml"
PY = sys.executable
POSBIAS = str(Path(PY).parent / "posbias")

ENGINE_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from posbias.config import load
from posbias import numerics as nx
import jax
t1 = time.perf_counter()
loaded = load(sys.argv[1])
t2 = time.perf_counter()
engine = sys.argv[2]
def once():
    if hasattr(loaded, "run"):
        return loaded.run(engine)
    from posbias.rollout import run_stack
    return run_stack(loaded.stack, loaded.num_tokens, engine=engine)
a = time.perf_counter(); once(); b = time.perf_counter(); once()
c = time.perf_counter(); once(); d = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "first_s": b - a, "second_s": c - b, "third_s": d - c,
                  "cache_dir": jax.config.jax_compilation_cache_dir}))
"""

PHASES_CHILD = r"""
import importlib, json, sys, time
t_start = time.perf_counter()
phases = {}

def wrap(module, attr, label):
    try:
        owner = importlib.import_module(module)
        for part in attr.split(".")[:-1]:
            owner = getattr(owner, part)
        name = attr.split(".")[-1]
        original = getattr(owner, name)
    except (ImportError, AttributeError):
        return
    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            phases[label] = phases.get(label, 0.0) + time.perf_counter() - t
    setattr(owner, name, timed)

for module in ("numpy", "jax", "jax.numpy", "pydantic", "matplotlib.figure", "matplotlib.backends.backend_agg",
               "posbias.cli", "posbias.config", "posbias.model", "posbias.rollout", "posbias.io.output",
               "posbias.io.files"):
    try:
        importlib.import_module(module)
    except ImportError:
        pass
phases["imports (numpy, jax, pydantic, matplotlib, posbias)"] = time.perf_counter() - t_start
wrap("posbias.config", "read_yaml", "  of which YAML parse (config.read_yaml)")
wrap("posbias.config", "load", "config load: parse + validate + build stack")
wrap("posbias.model", "Model.run", "engine run (Model.run)")
wrap("posbias.io.output", "profile_figure", "figure (output.profile_figure)")
wrap("posbias.io.files", "write_run", "write files + PNG (files.write_run)")
from posbias.cli import main
t_main = time.perf_counter()
try:
    code = main(["rollout", sys.argv[1], "--out", sys.argv[2]])
except SystemExit as exc:
    code = exc.code
t_end = time.perf_counter()
accounted = sum(v for k, v in phases.items() if not k.startswith(" ") and not k.startswith("imports"))
phases["rest of main (summary, printing, lazy imports)"] = (t_end - t_main) - accounted
phases["total in process"] = t_end - t_start
print(json.dumps({"returncode": code, "phases": phases}))
"""

CPROFILE_CHILD = r"""
import cProfile, io, pstats, sys
from posbias.cli import main
prof = cProfile.Profile()
prof.enable()
try:
    main(["rollout", sys.argv[1], "--out", sys.argv[2]])
except SystemExit:
    pass
prof.disable()
out = io.StringIO()
pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(int(sys.argv[3]))
print(out.getvalue())
"""


def env_with(threads: int, **extra: str | None) -> dict:
    env = dict(os.environ)
    for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[key] = str(threads)
    for key in (
        "JAX_COMPILATION_CACHE_DIR",
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
        "POSBIAS_JAX_CACHE",
    ):
        env.pop(key, None)
    for key, value in extra.items():
        if value is not None:
            env[key] = value
    return env


def run(cmd: list[str], env: dict, check: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        shown = [Path(cmd[0]).name] + [("<child script>" if "\n" in part else part) for part in cmd[1:3]]
        raise RuntimeError(f"{' '.join(shown)} ...: exit {proc.returncode}: {tail[0]}")
    return elapsed, proc


def stats(times: list[float]) -> dict:
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "n": len(times)}


# ------------------------------------------------------------------ 1. whole process


def whole_process(config: Path, repeats: int, threads: int, tmp: Path) -> dict:
    cache = tmp / "jax-cache"
    out = tmp / "out"
    variants = {
        "posbias rollout (JAX cache off)": (
            [POSBIAS, "rollout", str(config), "--out", str(out)],
            env_with(threads, POSBIAS_JAX_CACHE="0"),
        ),
        "posbias rollout (JAX cache warm)": (
            [POSBIAS, "rollout", str(config), "--out", str(out)],
            env_with(threads, JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0"),
        ),
        "dense NumPy baseline": ([PY, "benchmarks/dense_baseline.py", str(config)], env_with(threads)),
    }
    if not _config_uses_yaml_io():  # preview of switching posbias.config to posbias.io.yaml_io, for both sides
        patch = "import sys, runpy, posbias.config as c, posbias.io.yaml_io as y; c.read_yaml = y.read_yaml; "
        variants["posbias rollout (cache off), config.read_yaml -> yaml_io"] = (
            [
                PY,
                "-c",
                patch + f"from posbias.cli import main; sys.exit(main(['rollout', {str(config)!r}, "
                f"'--out', {str(out)!r}]))",
            ],
            env_with(threads, POSBIAS_JAX_CACHE="0"),
        )
        variants["dense NumPy baseline, config.read_yaml -> yaml_io"] = (
            [
                PY,
                "-c",
                patch + f"sys.argv = ['dense_baseline.py', {str(config)!r}]; "
                "runpy.run_path('benchmarks/dense_baseline.py', run_name='__main__')",
            ],
            env_with(threads),
        )
    times: dict[str, list[float]] = {name: [] for name in variants}
    errors: dict[str, str] = {}
    for name, (cmd, env) in variants.items():  # warm-up: file cache, and fills the JAX cache
        try:
            run(cmd, env)
        except RuntimeError as exc:
            errors[name] = str(exc)
    for _ in range(repeats):  # interleaved, so load changes hit every variant alike
        for name, (cmd, env) in variants.items():
            if name in errors:
                continue
            times[name].append(run(cmd, env)[0])
    result = {name: stats(t) for name, t in times.items() if t}
    result["errors"] = errors
    result["cache_bytes"] = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) if cache.exists() else 0
    return result


def _config_uses_yaml_io() -> bool:
    code = "import posbias.config as c, posbias.io.yaml_io as y; print(c.read_yaml is y.read_yaml)"
    proc = subprocess.run([PY, "-c", code], cwd=REPO, capture_output=True, text=True)
    return proc.stdout.strip() == "True"


# --------------------------------------------------------------------- 2. breakdown


def import_costs(repeats: int, threads: int) -> dict:
    env = env_with(threads)
    bare = [run([PY, "-c", "pass"], env)[0] for _ in range(repeats)]
    rows = {"(interpreter start, python -c pass)": {"wall_s": statistics.median(bare), "importtime_s": None}}
    for module in (
        "numpy",
        "yaml",
        "ruamel.yaml",
        "pydantic",
        "jax",
        "matplotlib.figure",
        "posbias.io.yaml_io",
        "posbias.config",
        "posbias.cli",
    ):
        walls = [run([PY, "-c", f"import {module}"], env)[0] for _ in range(repeats)]
        cumulative = []
        for _ in range(repeats):
            _, proc = run([PY, "-X", "importtime", "-c", f"import {module}"], env)
            cumulative.append(importtime_of(proc.stderr, module))
        rows[module] = {
            "wall_s": statistics.median(walls) - statistics.median(bare),
            "importtime_s": statistics.median(cumulative),
        }
    return rows


def importtime_of(stderr: str, module: str) -> float:
    """Cumulative seconds of ``module``'s own top-level import line in -X importtime output."""
    for line in stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() == module and parts[2].startswith(" " + module):
            return int(parts[1]) / 1e6
    return float("nan")


def importtime_by_package(stderr: str) -> dict[str, float]:
    """Seconds of import per root package, exclusive: a package's time excludes the other
    packages it imports (jax's numpy counts as numpy), so the rows add up to the total."""
    pending: dict[int, list] = {}
    for line in stderr.splitlines():  # post-order: children come before their parent
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        level = (len(parts[2]) - len(parts[2].lstrip(" ")) - 1) // 2
        node = (parts[2].strip().split(".")[0], int(parts[1]) / 1e6, pending.pop(level + 1, []))
        pending.setdefault(level, []).append(node)
    totals: dict[str, float] = {}

    def visit(node, parent_root):
        root, cumulative, children = node
        if root != parent_root:
            totals[root] = totals.get(root, 0.0) + cumulative
        if parent_root is not None and root != parent_root:
            totals[parent_root] -= cumulative
        for child in children:
            visit(child, root)

    for top in pending.get(0, []):
        visit(top, None)
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def cli_importtime(config: Path, threads: int, tmp: Path) -> dict:
    code = (
        "import sys; from posbias.cli import main; "
        f"sys.exit(main(['rollout', {str(config)!r}, '--out', {str(tmp / 'out-it')!r}]))"
    )
    _, proc = run([PY, "-X", "importtime", "-c", code], env_with(threads, POSBIAS_JAX_CACHE="0"), check=False)
    by_package = importtime_by_package(proc.stderr)
    return {
        "returncode": proc.returncode,
        "total_s": sum(by_package.values()),
        "top": dict(list(by_package.items())[:12]),
    }


def yaml_parse(config: Path, repeats: int) -> dict:
    import warnings

    from ruamel.yaml import YAML

    sys.path.insert(0, str(REPO))
    from posbias.io import yaml_io

    text = config.read_text(encoding="utf-8")
    rows = {}

    def timed(fn):
        fn()  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return stats(times)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows["ruamel.yaml safe, pure Python"] = timed(lambda: YAML(typ="safe", pure=True).load(text))
    try:
        import yaml

        if yaml.__with_libyaml__:
            rows["PyYAML CSafeLoader (stock, YAML 1.1 typing)"] = timed(
                lambda: yaml.load(text, Loader=yaml.CSafeLoader)
            )
    except ImportError:
        pass
    rows["posbias.io.yaml_io.loads (libyaml + checks)"] = timed(lambda: yaml_io.loads(text, str(config)))
    rows["posbias.io.yaml_io.read_yaml (file)"] = timed(lambda: yaml_io.read_yaml(config))
    try:
        from posbias.config import load

        rows["posbias.config.load (read + validate + stack)"] = timed(lambda: load(config))
    except Exception as exc:  # the config module is not this benchmark's business
        rows["posbias.config.load"] = {"error": f"{type(exc).__name__}: {exc}"}
    return rows


def engine_calls(config: Path, engine: str, threads: int, tmp: Path, repeats: int) -> dict:
    code = ENGINE_CHILD
    cases = {
        "no cache": {"POSBIAS_JAX_CACHE": "0"},
        "cache warm, JAX defaults (min compile time 1 s)": {"JAX_COMPILATION_CACHE_DIR": str(tmp / "jc-default")},
        "cache warm, min compile time 0 (posbias.runtime.jax_cache)": {
            "JAX_COMPILATION_CACHE_DIR": str(tmp / "jc-zero"),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        },
    }
    result = {}
    for name, extra in cases.items():
        env = env_with(threads, **extra)
        rows = []
        try:
            if "warm" in name:
                run([PY, "-c", code, str(config), engine], env)  # fills the cache
            for _ in range(repeats):
                _, proc = run([PY, "-c", code, str(config), engine], env)
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        except RuntimeError as exc:
            result[name] = {"error": str(exc)}
            continue
        result[name] = {
            key: statistics.median(r[key] for r in rows)
            for key in ("import_s", "load_s", "first_s", "second_s", "third_s")
        }
        cache = extra.get("JAX_COMPILATION_CACHE_DIR")
        if cache:
            files = [f for f in Path(cache).rglob("*") if f.is_file()]
            result[name]["cache_entries"] = len(files)
            result[name]["cache_bytes"] = sum(f.stat().st_size for f in files)
    return result


def cli_phases(config: Path, threads: int, tmp: Path, repeats: int, cache: str | None = None) -> dict:
    """In-process phases of ``posbias rollout`` (the CLI's own functions wrapped with timers)."""
    extra = (
        {"POSBIAS_JAX_CACHE": "0"}
        if cache is None
        else {"JAX_COMPILATION_CACHE_DIR": cache, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    )
    env = env_with(threads, **extra)
    rows = []
    for _ in range(repeats):
        _, proc = run([PY, "-c", PHASES_CHILD, str(config), str(tmp / "out-phases")], env)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1])["phases"])
    order = [
        "imports (numpy, jax, pydantic, matplotlib, posbias)",
        "config load: parse + validate + build stack",
        "  of which YAML parse (config.read_yaml)",
        "engine run (Model.run)",
        "figure (output.profile_figure)",
        "write files + PNG (files.write_run)",
        "rest of main (summary, printing, lazy imports)",
        "total in process",
    ]
    keys = [k for k in order if k in rows[0]] + [k for k in rows[0] if k not in order]
    return {key: statistics.median(r.get(key, 0.0) for r in rows) for key in keys}


def cprofile_cli(config: Path, threads: int, tmp: Path, top: int = 25) -> str:
    _, proc = run(
        [PY, "-c", CPROFILE_CHILD, str(config), str(tmp / "out-prof"), str(top)],
        env_with(threads, POSBIAS_JAX_CACHE="0"),
        check=False,
    )
    lines = proc.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("ncalls")), 0)
    return "\n".join(re.sub(r"/\S*/site-packages/", "", line) for line in lines[start : start + top + 1])


# ------------------------------------------------------------------------- report


def main() -> int:  # noqa: C901 (one block per benchmark section; split them into functions; issue 20 §4)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="OMP/OpenBLAS/MKL threads for every command (default: all cores)",
    )
    ap.add_argument(
        "--engine",
        default="auto,log",
        help="comma-separated engines for the first-call/steady-state breakdown (log: a JAX engine)",
    )
    ap.add_argument(
        "--skip", default="", help="comma-separated sections to skip: whole,phases,yaml,imports,engine,profile"
    )
    ap.add_argument("--out", type=Path, help="also write the results as JSON")
    args = ap.parse_args()
    if not args.config.is_file():
        print(f"bench_startup: {args.config}: no such file (../shared/data beside the checkout?)", file=sys.stderr)
        return 2
    skip = set(filter(None, args.skip.split(",")))
    results: dict = {
        "config": str(args.config),
        "threads": args.threads,
        "repeats": args.repeats,
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    print(
        f"config {args.config}\nOMP_NUM_THREADS = OPENBLAS_NUM_THREADS = MKL_NUM_THREADS = {args.threads} "
        f"(cores: {os.cpu_count()}); {args.repeats} repeats, medians\n"
    )
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmpdir:
        tmp = Path(tmpdir)
        if "whole" not in skip:
            whole = results["whole_process"] = whole_process(args.config, args.repeats, args.threads, tmp)
            print(
                "## Whole process (wall, interleaved repeats)\n\n"
                "| command | median s | min s | max s |\n|---|---|---|---|"
            )
            for name, row in whole.items():
                if isinstance(row, dict) and "median_s" in row:
                    print(f"| {name} | {row['median_s']:.3f} | {row['min_s']:.3f} | {row['max_s']:.3f} |")
            for name, err in whole["errors"].items():
                print(f"| {name} | failed: {err} | | |")
            print()
            pairs = [
                ("posbias rollout (JAX cache off)", "dense NumPy baseline"),
                ("posbias rollout (JAX cache warm)", "dense NumPy baseline"),
                ("posbias rollout (cache off), config.read_yaml -> yaml_io", "dense NumPy baseline"),
                (
                    "posbias rollout (cache off), config.read_yaml -> yaml_io",
                    "dense NumPy baseline, config.read_yaml -> yaml_io",
                ),
            ]
            for ours, theirs in pairs:
                if ours in whole and theirs in whole:
                    ratio = whole[theirs]["median_s"] / whole[ours]["median_s"]
                    print(f"speed-up, {ours} vs {theirs}: {ratio:.2f}x")
                    results.setdefault("speedups", {})[f"{ours} vs {theirs}"] = ratio
            print(f"JAX cache directory after the runs: {whole['cache_bytes'] / 1024:.0f} KB\n")
        if "phases" not in skip:
            try:
                phases = results["cli_phases"] = cli_phases(args.config, args.threads, tmp, args.repeats)
            except RuntimeError as exc:
                phases = results["cli_phases"] = {"error": str(exc)}
            print("## Phases of `posbias rollout` in process (timers around the CLI's functions, JAX cache off)\n")
            print("| phase | median s |\n|---|---|")
            for name, seconds in phases.items():
                print(f"| {name} | {seconds} |" if isinstance(seconds, str) else f"| {name} | {seconds:.3f} |")
            print()
        if "yaml" not in skip:
            parse = results["yaml_parse"] = yaml_parse(args.config, args.repeats)
            print(f"## YAML parse of {args.config.name} ({args.config.stat().st_size / 1024:.0f} KB), in process\n")
            print("| loader | median s | min s |\n|---|---|---|")
            for name, row in parse.items():
                if "error" in row:
                    print(f"| {name} | {row['error']} | |")
                else:
                    print(f"| {name} | {row['median_s']:.4f} | {row['min_s']:.4f} |")
            print()
        if "imports" not in skip:
            imports = results["imports"] = import_costs(args.repeats, args.threads)
            print("## Imports (fresh process each; wall minus bare interpreter, and -X importtime cumulative)\n")
            print("| module | wall s | importtime s |\n|---|---|---|")
            for name, row in imports.items():
                it = "" if row["importtime_s"] is None else f"{row['importtime_s']:.3f}"
                print(f"| {name} | {row['wall_s']:.3f} | {it} |")
            cli = results["cli_importtime"] = cli_importtime(args.config, args.threads, tmp)
            print(
                f"\n`-X importtime` of the CLI run (exit {cli['returncode']}): {cli['total_s']:.3f} s of imports; "
                "by top-level package:\n\n| package | cumulative s |\n|---|---|"
            )
            for name, seconds in cli["top"].items():
                print(f"| {name} | {seconds:.3f} |")
            print()
        if "engine" not in skip:
            results["engine"] = {}
            for engine in filter(None, args.engine.split(",")):
                eng = results["engine"][engine] = engine_calls(
                    args.config, engine, args.threads, tmp / engine, args.repeats
                )
                print(f"## Engine '{engine}' in a fresh process (first call = tracing + compile + run)\n")
                print(
                    "| JAX cache | imports s | config load s | first call s | second s | third s | entries |\n"
                    "|---|---|---|---|---|---|---|"
                )
                for name, row in eng.items():
                    if "error" in row:
                        print(f"| {name} | failed: {row['error']} | | | | | |")
                        continue
                    entries = (
                        f"{row['cache_entries']} ({row['cache_bytes'] / 1024:.0f} KB)" if "cache_entries" in row else ""
                    )
                    print(
                        f"| {name} | {row['import_s']:.3f} | {row['load_s']:.3f} | {row['first_s']:.3f} | "
                        f"{row['second_s']:.3f} | {row['third_s']:.3f} | {entries} |"
                    )
                print()
        if "profile" not in skip:
            prof = results["cprofile_top"] = cprofile_cli(args.config, args.threads, tmp)
            print("## cProfile of the whole CLI run (JAX cache off), top by cumulative time\n\n```")
            print(prof)
            print("```")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
