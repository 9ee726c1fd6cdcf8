"""report.md of ``posbias validate``: the model, the notes and, per length, the scores of every prediction
against the measured influence (d), whether each beats the flat profile, and the sink diagnostics."""

from __future__ import annotations

import numpy as np

from posbias.validate.predict import PANELS


def report_markdown(
    report: dict,
    *,
    source: str,
    model_line: str,
    notes: tuple[str, ...] = (),
    lambdas: dict | None = None,
    sinks: dict | None = None,
) -> str:
    """report.md: the model, the notes, and per N the table of (a), (b), (c), (e) and the rows of
    ``posbias.validate.panels`` against (d), with whether each beats the flat baseline, and the sink
    diagnostics (``sinks``: N -> ``posbias.validate.panels.sink_diagnostics``)."""
    from posbias.validate.panels import BASELINES, sinks_markdown

    lines = [f"# posbias validate: {source}", "", model_line, ""]
    lines += [f"- {note}" for note in notes] + ([""] if notes else [])
    for n, rows in report.items():
        best = min((k for k in rows if k not in BASELINES), key=lambda k: rows[k]["w1"])
        lines += [f"## N = {n}", ""]
        if lambdas is not None:
            lam = np.asarray(lambdas[n])
            lines += ["Measured lambda_t: " + ", ".join(f"{v:.4f}" for v in lam) + f" (sum {lam.sum():.4f}).", ""]
        lines += [
            "| panel | prediction | W1/(N-1) vs (d) | Spearman vs (d) | TV vs (d) | beats flat |",
            "|---|---|---|---|---|---|",
        ]
        for key, row in rows.items():
            rho = "n/a" if row["spearman"] is None else f"{row['spearman']:.4f}"
            mark = " (best W1)" if key == best else ""
            flat = {True: "yes", False: "no"}.get(row.get("beats_flat"), "—")
            lines.append(f"| ({key}) | {PANELS[key]}{mark} | {row['w1']:.5f} | {rho} | {row['tv']:.5f} | {flat} |")
        beats = [k for k in ("b", "c") if rows[k]["w1"] < rows["a"]["w1"]]
        verdict = ("Neither (b) nor (c) beats", f"({''.join(beats)}) beats", "Both (b) and (c) beat")[len(beats)]
        lines += ["", f"{verdict} the attention-only rollout (a) in W1."]
        if "flat" in rows:
            winners = [f"({k})" for k, row in rows.items() if k not in BASELINES and row.get("beats_flat")]
            lines += [
                f"{', '.join(winners) if winners else 'No prediction'} "
                f"{'beat' if len(winners) > 1 else 'beats'} the flat profile 1/N in W1."
            ]
        lines += [""]
        if sinks is not None and n in sinks:
            lines += sinks_markdown(sinks[n])
    return "\n".join(lines) + "\n"
