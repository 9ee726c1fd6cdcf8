"""``posbias demo``: the main job on a built-in model, no input files needed.

A 32-layer, 32-head ALiBi stack (paper slopes, N = 256) in three variants:
(a) attention-only (lambda = 1: collapse onto the first token, C5),
(b) residual-aware with the power-decay schedule lambda_t = 0.6 / (t+1)^0.5,
(c) as (b) plus a content diagonal d = 2 on every head (C4: recency).
"""

from __future__ import annotations

from pathlib import Path

from posbias.model import Model, build_model

LAYERS, HEADS, TOKENS = 32, 32, 256
SCHEDULE = "power_decay:0.6,0.5"
CONTENT = 2.0


def variants() -> list[tuple[str, Model]]:
    common = dict(layers=LAYERS, heads=HEADS, tokens=TOKENS, slopes="paper")
    return [
        ("(a) attention-only, lambda = 1", build_model(schedule="constant:1", **common)),
        ("(b) residual-aware", build_model(schedule=SCHEDULE, **common)),
        ("(c) residual + content d = 2", build_model(schedule=SCHEDULE, content_diagonal=CONTENT, **common)),
    ]


COLUMNS = (
    "p_first",
    "p_last",
    "argmin",
    "p_min",
    "entropy",
    "sum_lambda",
    "sum_lambda_delta",
    "last_token_atom",
    "u_shape",
    "engine",
)


def run_demo(out: Path) -> int:
    """Compute the three variants and write their set into ``out`` (posbias.io.files.write_run: all files
    or none, one complete set when runs race); an unusable ``out`` is refused before any work."""
    from posbias.io import output
    from posbias.io.files import DEMO_FILES, check_out, write_run

    check_out(out, DEMO_FILES)
    results = [(title, model.run()) for title, model in variants()]
    summaries = {title: r.summary.to_dict() for title, r in results}
    rows = [["variant", *COLUMNS]] + [
        [title, *(f"{s[c]:.6g}" if isinstance(s[c], float) else str(s[c]) for c in COLUMNS)]
        for title, s in summaries.items()
    ]
    table = "\n".join("| " + " | ".join(row) + " |" for row in [rows[0], ["---"] * len(rows[0]), *rows[1:]])
    import json

    fig = output.profile_figure(
        [(t, r.profile) for t, r in results],
        log_scale=True,
        title=f"posbias demo: T={LAYERS}, H={HEADS}, N={TOKENS}, paper slopes",
        subtitle=output.lambda_label(variants()[1][1].stack.lambdas, SCHEDULE) + " in (b), (c)",
    )
    figure, summary_md = out / "profiles.png", out / "summaries.md"
    write_run(
        out,
        {
            "summaries.md": f"# posbias demo: T={LAYERS}, H={HEADS}, N={TOKENS}\n\n{table}\n",
            "summaries.json": json.dumps(summaries, indent=2) + "\n",
        },
        {"profiles.png": fig},
    )

    from rich.console import Console
    from rich.table import Table

    view = Table(
        title=f"posbias demo: {LAYERS} layers, {HEADS} heads, N = {TOKENS}, lambda_t = 0.6/(t+1)^0.5 in (b), (c)"
    )
    for c in ("variant", "p(0)", "p(N-1)", "argmin", "p_min", "entropy", "U-shaped"):
        view.add_column(c)
    for title, s in summaries.items():
        view.add_row(
            title,
            f"{s['p_first']:.4g}",
            f"{s['p_last']:.4g}",
            str(s["argmin"]),
            f"{s['p_min']:.3g}",
            f"{s['entropy']:.3f}",
            "yes" if s["u_shape"] else "no",
        )
    console = Console(width=110)
    console.print(view)
    console.print(f"figure:    {figure}\nsummaries: {summary_md} (and summaries.json)")
    return 0
