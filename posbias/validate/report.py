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
    matrices: dict | None = None,
    shapes: dict | None = None,
    bootstrap=None,
    sink_fit: dict | None = None,
) -> str:
    """report.md: the model, the notes, and per N the table of (a), (b), (c), (e) and the rows of
    ``posbias.validate.panels`` against (d), with whether each beats the flat baseline (decided on the
    bootstrap interval), the matrix of every prediction against every influence measure on all positions and
    without token 0 (``matrices``, ``shapes``: ``posbias.validate.matrix``), and the sink diagnostics
    (``sinks``: N -> ``posbias.measure.sinks.sink_diagnostics``), and the sink-aware fit (``sink_fit``: report.json's
    ``sink_fit``, ``posbias.validate.sink_fit``)."""
    from posbias.validate.panels import BASELINES, sinks_markdown

    lines = [f"# posbias validate: {source}", "", model_line, ""]
    lines += [f"- {note}" for note in notes] + ([""] if notes else [])
    if bootstrap is not None:
        pct = f"{100 * bootstrap.level:g}%"
        lines += [
            f"Intervals: {pct} percentile bootstrap over the sequences, {bootstrap.resamples} resamples, seed "
            f"{bootstrap.seed} (the same resamples for every prediction and measure at one N). A prediction "
            f"beats the flat profile when the whole {pct} interval of its W1 minus the flat profile's lies "
            "below 0.",
            "",
        ]
    for n, rows in report.items():
        best = min((k for k in rows if k not in BASELINES), key=lambda k: rows[k]["w1"])
        lines += [f"## N = {n}", ""]
        if lambdas is not None:
            lam = np.asarray(lambdas[n])
            lines += ["Measured lambda_t: " + ", ".join(f"{v:.4f}" for v in lam) + f" (sum {lam.sum():.4f}).", ""]
        lines += [
            "| panel | prediction | W1/(N-1) vs (d) | its interval | Spearman vs (d) | TV vs (d) | beats flat |",
            "|---|---|---|---|---|---|---|",
        ]
        for key, row in rows.items():
            rho = "n/a" if row["spearman"] is None else f"{row['spearman']:.4f}"
            mark = " (best W1)" if key == best else ""
            flat = {True: "yes", False: "no"}.get(row.get("beats_flat"), "—")
            ci = f"[{row['w1_ci'][0]:.5f}, {row['w1_ci'][1]:.5f}]" if "w1_ci" in row else "—"
            lines.append(
                f"| ({key}) | {PANELS[key]}{mark} | {row['w1']:.5f} | {ci} | {rho} | {row['tv']:.5f} | {flat} |"
            )
        beats = [k for k in ("b", "c") if rows[k]["w1"] < rows["a"]["w1"]]
        verdict = ("Neither (b) nor (c) beats", f"({''.join(beats)}) beats", "Both (b) and (c) beat")[len(beats)]
        lines += ["", f"{verdict} the attention-only rollout (a) in W1."]
        if "flat" in rows:
            winners = [f"({k})" for k, row in rows.items() if k not in BASELINES and row.get("beats_flat")]
            lines += [
                f"{', '.join(winners) if winners else 'No prediction'} "
                f"{'beat' if len(winners) > 1 else 'beats'} the flat profile 1/N in W1 "
                "(the whole interval of the difference below 0)."
            ]
        lines += [""]
        if matrices is not None and n in matrices:
            lines += matrix_markdown(matrices[n])
        if shapes is not None and n in shapes:
            lines += shape_markdown(shapes[n])
        if sinks is not None and n in sinks:
            lines += sinks_markdown(sinks[n])
    if sink_fit is not None:
        from posbias.validate.sink_fit import markdown

        lines += markdown(sink_fit)
    return "\n".join(lines) + "\n"


VIEW_TITLES = {
    "all": "all positions",
    "without_token_0": "positions 1..N-1 only (token 0, the sink, left out; both profiles renormalised)",
}


def _interval(row: dict, key: str) -> str:
    lo, hi = row[f"{key}_ci"]
    return f"{row[key]:.4f} [{lo:.4f}, {hi:.4f}]"


def matrix_markdown(matrix: dict) -> list[str]:
    """Per view, W1/(N-1) with its interval of every prediction (rows) against every measure (columns); a
    cell marked "beats flat" when the interval of its difference to the flat profile lies below 0. All
    positions against the gradient norm alone is the per-length table, not repeated."""
    lines = []
    for view, by_measure in matrix.items():
        if not by_measure:
            continue
        where = VIEW_TITLES[view].split(" (")[0]
        if view == "all" and list(by_measure) == ["grad"]:  # all positions against (d) alone: the table above
            lines += versus_markdown(by_measure, where)
            continue
        measures = list(by_measure)
        keys = list(next(iter(by_measure.values())))
        lines += [
            f"W1/(N-1) [interval], {VIEW_TITLES[view]}:",
            "",
            "| panel | " + " | ".join(measures) + " |",
            "|---|" + "---|" * len(measures),
        ]
        for key in keys:
            cells = []
            for name in measures:
                row = by_measure[name][key]
                cells.append(_interval(row, "w1") + (" **beats flat**" if row.get("beats_flat") else ""))
            lines.append(f"| ({key}) | " + " | ".join(cells) + " |")
        winners = sorted({f"({k}) vs {m}" for m in measures for k, r in by_measure[m].items() if r.get("beats_flat")})
        lines += ["", f"Beats flat ({where}): {', '.join(winners) if winners else 'none'}.", ""]
        lines += versus_markdown(by_measure, where)
    return lines


def versus_markdown(by_measure: dict, where: str) -> list[str]:
    """The paired comparisons of one view (``posbias.validate.matrix.score_matrix``'s ``versus``): W1 of a row
    minus W1 of its reference, with the interval; "lower" when the whole interval lies below 0."""
    measures = list(by_measure)
    pairs = list(
        dict.fromkeys((k, ref) for m in measures for k, r in by_measure[m].items() for ref in r.get("versus", {}))
    )
    if not pairs:
        return []
    lines = [
        f"W1/(N-1) of a row minus its reference's, paired over the same resamples [interval], {where}:",
        "",
        "| row | minus | " + " | ".join(measures) + " |",
        "|---|---|" + "---|" * len(measures),
    ]
    for key, ref in pairs:
        cells = []
        for m in measures:
            d = by_measure[m].get(key, {}).get("versus", {}).get(ref)
            cells.append(
                "—"
                if d is None
                else f"{d['w1_minus']:.4f} [{d['w1_minus_ci'][0]:.4f}, {d['w1_minus_ci'][1]:.4f}]"
                + (" **lower**" if d["lower"] else "")
            )
        lines.append(f"| ({key}) | ({ref}) | " + " | ".join(cells) + " |")
    return [*lines, ""]


def shape_markdown(shape: dict) -> list[str]:
    """Per view, the measured profiles' primacy / recency / U verdicts with head and tail intervals, and the
    predictions' shapes (``posbias.validate.matrix.shape``)."""
    lines = []
    for view, parts in shape.items():
        measured = {k: v for k, v in parts["measures"].items() if v["head"] is not None}
        if not measured:
            continue
        lines += [
            f"Shape, {VIEW_TITLES[view]} (head, tail: mean of the first and last tenth over the middle's):",
            "",
            "| profile | head [interval] | tail [interval] | primacy | recency | U | argmin/(L-1) |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, row in measured.items():
            lines.append(
                f"| measured {name} | {_interval(row, 'head')} | {_interval(row, 'tail')} | {row['primacy']} | "
                f"{row['recency']} | {row['u_shape']} | {row['argmin']:.3f} [{row['argmin_ci'][0]:.3f}, "
                f"{row['argmin_ci'][1]:.3f}] |"
            )
        yes = {True: "yes", False: "no"}
        for key, row in parts["predictions"].items():
            if row["head"] is None:
                continue
            lines.append(
                f"| ({key}) | {row['head']:.4g} | {row['tail']:.4g} | {yes[row['primacy']]} | "
                f"{yes[row['recency']]} | {yes[row['u_shape']]} | {row['argmin']:.3f} |"
            )
        lines += [""]
    return lines
