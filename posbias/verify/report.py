"""The table ``posbias verify`` prints: one row per property (claim, hypotheses, examples,
verdict, time), the model's facts in model mode, and every counterexample in exact form."""

from __future__ import annotations

import sys

from posbias.verify.types import Report

# rich styles of the verdict column
_VERDICT_STYLE = {
    "held": "green",
    "found": "green",
    "observed": "cyan",
    "n/a": "dim",
    "refuted": "red",
    "not found": "red",
    "error": "red",
}


def print_report(report: Report, file=None) -> None:
    """The table (claim, hypotheses, examples, verdict, time) and every counterexample, with rich."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file or sys.stdout, width=max(120, Console().width), highlight=False)
    if report.model is not None:
        m = report.model
        yes = {True: "yes", False: "no", None: "unknown"}
        console.print(
            f"model: {m['kind']}, T = {m['num_layers']}, N = {m['num_tokens']}; causal: {yes[m['causal']]}; "
            f"every layer stochastically monotone: {yes[m['monotone_layers']]}"
            + (f" ({m['monotone_note']})" if m.get("monotone_note") else "")
            + f"; sum lambda = {m['sum_lambda']:.4g}"
            + (
                ""
                if m["sum_lambda_delta"] is None
                else f"; sum lambda delta = {m['sum_lambda_delta']:.4g} (max {m['max_lambda_delta']:.3g})"
            )
        )
    seed = "derandomized" if report.seed is None else report.seed
    table = Table(title=f"posbias verify (profile {report.profile}, seed {seed})")
    for col in ("claim", "hypotheses", "examples", "verdict", "time"):
        table.add_column(
            col,
            justify="right" if col in ("examples", "time") else "left",
            overflow="fold",
            max_width=None if col != "hypotheses" else 52,
        )
    for r in report.results:
        style = _VERDICT_STYLE.get(r.verdict, "")
        if r.verdict in ("refuted", "found") and not r.ok:
            style = "red"
        note = " (expected)" if r.expect == "counterexample" and r.verdict == "found" else ""
        table.add_row(
            r.name,
            "; ".join(r.hypotheses),
            f"{r.examples}" + (f" +{r.shrinks} shrink" if r.shrinks else ""),
            f"[{style}]{r.verdict}{note}[/]",
            f"{r.seconds:.2f}s",
        )
    console.print(table)
    for r in report.results:
        if r.detail:
            console.print(f"[bold]{r.name}[/]: {r.detail}")
        if r.counterexample is not None:
            kind = "counterexample" if r.expect == "counterexample" else "REFUTED by"
            console.print(f"[bold]{r.name}[/] — {kind}:")
            console.print(r.text, markup=False)
            if r.files:
                console.print("  wrote " + ", ".join(str(f) for f in r.files), markup=False)
    bad = [r.name for r in report.results if not r.ok]
    console.print("all as expected" if not bad else f"[red]not as expected: {', '.join(bad)}[/]")
