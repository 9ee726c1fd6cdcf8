"""``posbias demo``: the main job on a built-in model, no input files needed.

A 32-layer, 32-head ALiBi stack (paper slopes, N = 256) in three variants:
(a) attention-only (lambda = 1: collapse onto the first token, C5),
(b) residual-aware with the power-decay schedule lambda_t = 0.6 / (t+1)^0.5,
(c) as (b) plus a content diagonal d = 2 on every head (C4: recency).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import posbias.numerics as nx
from posbias import output
from posbias.run import run_stack

LAYERS, HEADS, TOKENS = 32, 32, 256
SCHEDULE = nx.PowerDecay(0.6, 0.5)
CONTENT = 2.0


def variants() -> list[tuple[str, nx.AlibiStack]]:
    slopes = nx.alibi_slopes(HEADS, "paper")
    lambdas, _ = nx.schedules.evaluate(SCHEDULE, LAYERS)
    return [
        ("(a) attention-only, lambda = 1", nx.AlibiStack.build(np.ones(LAYERS), slopes)),
        ("(b) residual-aware", nx.AlibiStack.build(lambdas, slopes)),
        ("(c) residual + content d = 2", nx.AlibiStack.build(lambdas, slopes, CONTENT)),
    ]


COLUMNS = ("p_first", "p_last", "argmin", "p_min", "entropy", "sum_lambda", "sum_lambda_delta",
           "last_token_atom", "u_shape", "engine")


def run_demo(out: Path) -> int:
    results = [(title, run_stack(stack, TOKENS)) for title, stack in variants()]
    rows = [["variant", *COLUMNS]] + [
        [title, *(str(r.summary[c]) if not isinstance(r.summary[c], float) else f"{r.summary[c]:.6g}"
                  for c in COLUMNS)]
        for title, r in results
    ]
    table = "\n".join("| " + " | ".join(row) + " |" for row in [rows[0], ["---"] * len(rows[0]), *rows[1:]])
    fig = output.profile_figure([(t, r.profile) for t, r in results], log_scale=True)
    figure, summaries = out / "profiles.png", out / "summaries.md"
    output.write_figure(figure, fig)
    output.write_text(summaries, f"# posbias demo: T={LAYERS}, H={HEADS}, N={TOKENS}\n\n{table}\n")
    output.write_json(out / "summaries.json", {t: r.summary for t, r in results})

    from rich.console import Console
    from rich.table import Table

    view = Table(title=f"posbias demo: {LAYERS} layers, {HEADS} heads, N = {TOKENS}, "
                       f"lambda_t = 0.6/(t+1)^0.5 in (b), (c)")
    for c in ("variant", "p(0)", "p(N-1)", "argmin", "p_min", "entropy", "U-shaped"):
        view.add_column(c)
    for title, r in results:
        s = r.summary
        view.add_row(title, f"{s['p_first']:.4g}", f"{s['p_last']:.4g}", str(s["argmin"]),
                     f"{s['p_min']:.3g}", f"{s['entropy']:.3f}", "yes" if s["u_shape"] else "no")
    console = Console(width=110)
    console.print(view)
    console.print(f"figure:    {figure}\nsummaries: {summaries} (and summaries.json)")
    return 0
