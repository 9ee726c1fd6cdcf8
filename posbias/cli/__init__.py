"""The ``posbias`` command: a thin layer over numerics/ (rollout, demo) and theorem/ (derive, proofs).

Bad input gets one line on stderr (what, where, what was expected) and exit
code 2; nothing is written before the input has been validated.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from posbias.cli import argtypes
from posbias.cli.argtypes import at_least
from posbias.errors import UserError
from posbias.numerics.engines import CHOOSABLE as ENGINE_NAMES  # the one engine table

EXIT_USAGE = 2


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line instead of usage + message + SystemExit
        raise UsageError(f"{self.prog}: {message}")


_positive_int = at_least(1)


def _content(text: str):
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number or comma-separated numbers (one per layer), got {text!r}"
        ) from None
    return values[0] if len(values) == 1 else values


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("posbias")
    except PackageNotFoundError:
        return "unknown (not installed)"


ROLLOUT_EPILOG = """\
examples:
  posbias rollout ../shared/data/official-configs/no_content/bloom.yaml --out results/bloom
  posbias rollout --layers 32 --heads 32 --tokens 256 --schedule power_decay:0.6,0.5
  posbias rollout CONFIG --tokens 4096 --slopes hf        (flags override the file)
  posbias rollout --kernels examples/kernels.npz --causal

schedules: constant:L | power_decay:L0,BETA (L0/(t+1)^BETA) | geometric:L0,Q | custom:L0,L1,...
masks:     causal | full | window:W | prefix:K
biases:    alibi:M | kerple-log:R1,R2 | kerple-power:R1,R2 | t5:NB,MD:V0,... | t5-bidirectional:NB,MD:V0,...
           | table:V0,... | window-table:V0,... | expr:EXPR[;NAME=VALUE,...] (EXPR in g); PAST|FUTURE: two-sided
  posbias rollout --layers 12 --heads 4 --tokens 512 --schedule constant:0.5 --bias kerple-log:1,0.5 --sink 2
  posbias rollout --layers 6 --heads 2 --tokens 128 --schedule constant:0.5 --bias "expr:-a*sqrt(g);a=0.7/alibi:0.25"
  posbias rollout CONFIG --bias kerple-power:0.5,0.8 --sink 1        (a relative bias instead of the file's slopes)
  posbias rollout --layers 1000000000 --heads 2 --tokens 64 --schedule custom:0.6,0.3 --periodic --bias kerple-log:1,0.5
  posbias rollout --layers 12 --heads 4 --tokens 32768 --schedule constant:0.5 --bias kerple-log:1,0.5 --engine bias-fft
"""


def _parser() -> _Parser:
    top = _Parser(prog="posbias", description=__doc__.splitlines()[0])
    top.add_argument("--version", action="version", version=f"posbias {_version()}")
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)

    ro = sub.add_parser(
        "rollout",
        help="profile of a model: a config file, flags, or measured kernels",
        description="The profile p = e_{N-1}^T R^(T-1)...R^(0) of a model (which input positions "
        "feed the last token), its summary and figure.",
        epilog=ROLLOUT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ro.add_argument(
        "config", nargs="?", type=Path, help="rollout YAML (the reference schema); omit to build from flags"
    )
    ro.add_argument(
        "--out", type=argtypes.path, help="output folder (default: the config's save_dir, else ./posbias-out)"
    )
    model = ro.add_argument_group("model (without CONFIG these build it; with CONFIG they override its fields)")
    model.add_argument("--layers", type=_positive_int, metavar="T", help="number of layers")
    model.add_argument("--heads", type=_positive_int, metavar="H", help="heads per layer")
    model.add_argument("--tokens", type=_positive_int, metavar="N", help="sequence length")
    model.add_argument("--schedule", metavar="SPEC", help="lambda schedule (see below)")
    model.add_argument(
        "--slopes",
        choices=("paper", "hf"),
        help="ALiBi slopes generated from H: paper 2^(-8h/H), or the transformers construction "
        "(default without CONFIG: paper)",
    )
    model.add_argument(
        "--content-diagonal",
        type=_content,
        metavar="D",
        help="content diagonal excess d: one number, or one per layer (comma-separated); default 0",
    )
    model.add_argument("--mask", metavar="MASK", help="attention mask (see below; default causal)")
    model.add_argument(
        "--bias",
        metavar="SPEC",
        help="a relative positional bias instead of ALiBi slopes (THEORY.md C7; see below): one spec "
        "for every head, or one per head separated by /",
    )
    model.add_argument(
        "--sink",
        type=_content,
        metavar="S",
        help="with --bias (or a CONFIG with a bias): first-token logit s added where j = 0 (one number, "
        "or one per layer; with --periodic one per layer of the period); default 0",
    )
    model.add_argument(
        "--periodic",
        action="store_true",
        help="--schedule custom:L0,...,L(p-1) lists one period of p layers, repeated up to --layers "
        "(any depth: the power engine squares the block product; ALiBi or --bias layers); "
        "constant schedules at T >= 100000 are compact without it",
    )
    ro.add_argument(
        "--content-broadcast",
        choices=("all", "first-head"),
        default="all",
        help="a single content value in a config goes to every head (all) or, as the reference "
        "tool does, to head 0 only",
    )
    ro.add_argument("--precision", choices=("float64", "float32"), default="float64")
    ro.add_argument(
        "--engine",
        choices=ENGINE_NAMES,
        default="auto",
        help="auto (default): the native structured engine on the CPU, fft at N >= 16384 elsewhere; "
        "re-runs with extended range where entries underflow; with --bias: bias (exact), "
        "bias-fft (large N, causal or window masks; auto picks it by a cost model)",
    )
    ro.add_argument("--full", action="store_true", help="also form the full P by dense products (N <= 8192)")
    ro.add_argument(
        "--diagonal",
        action="store_true",
        help="also write P_ii = prod_t (1 - lambda_t (1 - A_ii)) in O(T N) (causal and sliding-window masks)",
    )
    ro.add_argument("--kernels", type=Path, help="measured kernels (T, N, N) as .npy or .npz ('kernels', 'lambdas')")
    ro.add_argument("--causal", action="store_true", help="declare --kernels causal (checked)")
    ro.add_argument("--json", action="store_true", help="print the summary JSON instead of text")

    de = sub.add_parser(
        "demo",
        help="the main job on a built-in 32-layer ALiBi model",
        description="Three variants of a 32-layer, 32-head ALiBi model at N = 256: attention-only, "
        "residual-aware, residual + content. Writes a figure and summaries.",
    )
    de.add_argument(
        "--out", type=argtypes.path, default=Path("posbias-demo"), help="output folder (default ./posbias-demo)"
    )

    # derive/proofs parse their own arguments (posbias/cli/derive.py, posbias/cli/proofs.py); listed here for --help.
    sub.add_parser(
        "derive", help="symbolic derivations (posbias derive --list; posbias derive NAME --help)", add_help=False
    )
    sub.add_parser("proofs", help="check every certificate the proofs cite (posbias proofs --check)", add_help=False)
    for module in SUBCOMMAND_MODULES:  # each adds its subcommands; they dispatch to its run(args)
        _add_module_commands(sub, module)
    return top


SUBCOMMAND_MODULES = (
    "posbias.verify.cli",
    "posbias.cli.compare",
    "posbias.cli.fit",
    "posbias.sweep.cli",
    "posbias.sweep.plot",
    "posbias.cli.train",
    "posbias.cli.measure",
    "posbias.cli.validate",
)
"""Modules with ``add_parser(subparsers)`` and ``run(args) -> int`` (imported when the parser is built:
keep their top level light)."""


def _add_module_commands(sub, module_name: str) -> None:
    import importlib

    module = importlib.import_module(module_name)
    before = set(sub.choices)
    module.add_parser(sub)
    for name in set(sub.choices) - before:
        sub.choices[name].set_defaults(run_command=module.run)


def _fmt(x, spec: str) -> str:
    return "unresolved" if x is None else format(x, spec)


def _prob(s: dict, which: str, spec: str) -> str:
    """p_<which>, as e^(log p) where it is below the float64 range but its log is known."""
    p, logp = s[f"p_{which}"], s[f"log_p_{which}"]
    if p is not None and p < 1e-300 and logp is not None:
        return f"e^{logp:.6g}"
    return _fmt(p, spec)


def _ratio(s: dict) -> str:
    """middle_mass_ratio, as e^(log) where it is below the float64 range."""
    ratio, log_ratio = s["middle_mass_ratio"], s["log_middle_mass_ratio"]
    if ratio is not None and ratio < 1e-300 and log_ratio is not None:
        return f"e^{log_ratio:.6g}"
    return _fmt(ratio, ".4g")


def _print_summary(title: str, s: dict, written: list[Path]) -> None:
    atom = "n/a (non-causal mask)" if s["last_token_atom"] is None else f"{s['last_token_atom']:.6g}"
    heads = "" if s.get("num_heads") is None else f", H={s['num_heads']}"
    print(
        f"{title}  (T={s['num_layers']}{heads}, N={s['num_tokens']}, {s['mask']}, "
        f"engine {s['engine']} [{s['path']}], {s['precision']})"
    )
    shape = {True: "yes", False: "no", None: "unresolved"}[s["u_shape"]]
    print(
        f"  p(0) = {_prob(s, 'first', '.6g')}   p(N-1) = {_prob(s, 'last', '.6g')}   "
        f"argmin = {_fmt(s['argmin'], 'd')} (p = {_prob(s, 'min', '.3g')})   U-shaped: {shape}"
    )
    lost = {True: "yes", False: "no", None: "n/a"}[s["lost_in_middle"]]
    depth = (
        "unresolved"
        if s["log_dip_depth"] is None
        else f"{s['dip_depth']:.4g}"
        if s["dip_depth"] is not None
        else f"e^{s['log_dip_depth']:.6g}"
    )
    print(
        f"  argmin / (N-1) = {_fmt(s['argmin_relative'], '.4f')}   dip depth = {depth}   "
        f"middle third = {_ratio(s)} x uniform   lost in the middle: {lost}"
    )
    print(
        f"  entropy = {s['entropy']:.4f} nats   sum lambda = {s['sum_lambda']:.4f}   "
        f"sum lambda*delta = {s['sum_lambda_delta']:.4f}   last-token atom = {atom}"
    )
    if s.get("matrix"):
        m = s["matrix"]
        print(
            f"  P: min_i P_ii = {m['min_diagonal']:.6g}   max_i P_i0 = {m['max_first_column']:.6g}   "
            f"mean row entropy = {m['mean_row_entropy']:.4f} nats"
        )
    if written:
        print("  wrote " + ", ".join(str(p) for p in written))


def _short(spec: str | None) -> str | None:
    """A schedule spec for a figure: as given, or only its kind when it lists many values."""
    return spec if spec is None or len(spec) <= 48 else spec.split(":", 1)[0]


def _model_from_args(args):
    """The Model the rollout flags describe (with or without a config file)."""
    from posbias import config as cfg
    from posbias.model import build_model

    flags = dict(
        tokens=args.tokens,
        layers=args.layers,
        heads=args.heads,
        slopes=args.slopes,
        schedule=args.schedule,
        content_diagonal=args.content_diagonal,
        mask=args.mask,
    )
    if args.sink is not None and args.bias is None and args.config is None:
        raise UserError("--sink: applies with --bias (a relative-bias model)")
    if args.bias is not None and args.slopes is not None:
        raise UserError("--bias: a relative bias replaces the ALiBi slopes; it does not combine with --slopes")
    if args.config is not None:
        if args.periodic:
            raise UserError(
                "--periodic: applies to models from flags (--layers ... --schedule custom:...), not to a CONFIG file"
            )
        return cfg.load(args.config, content_broadcast=args.content_broadcast, bias=args.bias, sink=args.sink, **flags)
    missing = [f"--{k}" for k in ("layers", "heads", "tokens", "schedule") if flags[k] is None]
    if missing:
        raise UserError(f"missing CONFIG (a rollout YAML), --kernels FILE, or model flags {' '.join(missing)}")
    _checked_sink(args.sink)
    return build_model(
        layers=args.layers,
        heads=args.heads,
        tokens=args.tokens,
        schedule=args.schedule,
        slopes=args.slopes or "paper",
        content_diagonal=0.0 if args.content_diagonal is None else args.content_diagonal,
        mask=args.mask or "causal",
        periodic=args.periodic,
        bias=args.bias,
        sink=0.0 if args.sink is None else _per_layer_sink(args.sink, args.layers, args.heads, args.periodic),
    )


def _checked_sink(sink):
    """--sink from flags (temperature 1): finite and not overflowing, refused naming the flag and the value."""
    from posbias.config import check_sink

    if sink is not None:
        check_sink("--sink", sink)
    return sink


def _per_layer_sink(sink, layers: int, heads: int, periodic: bool = False):
    """--sink: one number, or one per layer (as (T, 1) for every head); with --periodic one per layer of
    the period (build_model checks the count against it)."""
    import numpy as np

    if isinstance(sink, float):
        return sink
    if len(sink) != layers and not periodic:
        raise UserError(f"--sink: {len(sink)} values, expected one number or --layers = {layers} values")
    return np.asarray(sink)[:, None] * np.ones((1, heads))


def _rollout(args) -> int:
    import json

    if args.out is not None and str(args.out).strip() == "":
        raise UserError("--out: expected a folder name, got an empty string")

    from posbias.io import output
    from posbias.io.files import OutFolderError, write_run
    from posbias.io.kernel_file import load_kernels
    from posbias.rollout import run_stack

    if args.kernels is not None:
        if args.config is not None:
            raise UserError("give either CONFIG or --kernels, not both")
        model_flags = [
            f
            for f in ("layers", "heads", "tokens", "slopes", "content_diagonal", "mask", "bias", "sink")
            if getattr(args, f) is not None
        ] + (["periodic"] if args.periodic else [])
        if model_flags:
            raise UserError(
                f"--{model_flags[0].replace('_', '-')} describes an ALiBi model; "
                "it does not apply to --kernels (only --schedule does)"
            )
        stack, warnings = load_kernels(args.kernels, args.schedule, args.causal)
        result = run_stack(
            stack,
            engine=args.engine,
            precision=args.precision,
            full_matrix=args.full,
            diagonal=args.diagonal,
            show_progress=not args.json,
        )
        summary = result.summary.with_provenance(source=str(args.kernels))
        out_dir, title, schedule = args.out or Path("posbias-out"), str(args.kernels), args.schedule
        stack_lambdas = stack.lambdas
    else:
        if args.causal:
            raise UserError("--causal applies to --kernels only")
        model = _model_from_args(args)
        result = model.run(
            args.engine,
            precision=args.precision,
            full_matrix=args.full,
            diagonal=args.diagonal,
            show_progress=not args.json,
        )
        summary = result.summary.with_provenance(
            content_broadcast=args.content_broadcast, slopes=args.slopes or ("file" if args.config else "paper")
        )
        out_dir = args.out or Path(model.save_dir or "posbias-out")
        title = str(args.config) if args.config else "model from flags"
        warnings, schedule = model.warnings, model.schedule
        stack_lambdas = getattr(model.stack, "lambdas", None)  # None: a compact stack labels itself
    for w in warnings:
        print(f"posbias: warning: {w}", file=sys.stderr)
    s = summary.to_dict()
    if s["mass_defect"] > 1e-12:
        print(
            f"posbias: warning: profile mass differs from 1 by {s['mass_defect']:.2e} before renormalisation",
            file=sys.stderr,
        )
    if s["unresolved"]:
        print(
            f"posbias: warning: {s['unresolved']} profile entries are not determined by engine {s['engine']} "
            "(below the float64 range or the engine's resolution); extremes among them are reported as "
            "unresolved",
            file=sys.stderr,
        )

    files: dict[str, str | output.PositionTable] = {
        "profile.csv": output.position_table(probability=result.profile),
        "summary.json": summary.to_json() + "\n",
    }
    if result.diagonal is not None:
        files["diagonal.csv"] = output.position_table(P_diagonal=result.diagonal)
    if result.log_profile is not None:
        files["log_profile.csv"] = output.position_table(log_probability=result.log_profile)
    if result.matrix_rows is not None:
        rows = result.matrix_rows
        files["matrix.csv"] = output.position_table(
            P_diagonal=rows[:, 0], P_first_column=rows[:, 1], row_entropy=rows[:, 2]
        )
    heads = "" if s.get("num_heads") is None else f", H={s['num_heads']}"
    label = f"T={s['num_layers']}{heads}, N={s['num_tokens']}, {s['mask']}"
    shown = result.profile if result.log_profile is None else result.log_profile
    figure = output.profile_figure(
        [(label, shown)],
        title=output.config_label(title),
        subtitle=(
            output.lambda_label(stack_lambdas, _short(schedule))
            if stack_lambdas is not None
            else model.stack.lambda_label(_short(schedule))
        ),
        log_values=result.log_profile is not None,
    )
    try:
        written = write_run(out_dir, files, {"profile.png": figure})
    except OutFolderError as exc:  # the folder came from the config's save_dir, not from --out: say so
        if args.out is None and args.config is not None and model.save_dir:
            raise exc.relabelled(f"{args.config}: save_dir") from None
        raise
    if args.json:
        print(json.dumps(s, indent=2))
    else:
        _print_summary(title, s, written)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The ``posbias`` command; Ctrl-C ends it with one line and exit code 130 (``posbias.runtime.interrupt``)."""
    from posbias.runtime import interrupt

    with interrupt.handling():
        try:
            return _main(argv)
        except KeyboardInterrupt:
            print("posbias: interrupted", file=sys.stderr)
            return interrupt.EXIT_INTERRUPTED
        except Exception:
            if not interrupt.seen():
                raise
            print("posbias: interrupted", file=sys.stderr)  # the interrupt, turned into another error
            return interrupt.EXIT_INTERRUPTED


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("derive", "proofs"):
        if argv[0] == "derive":
            from posbias.cli.derive import derive_command

            return derive_command(argv[1:])
        from posbias.cli.proofs import proofs_command

        return proofs_command(argv[1:])
    try:
        args = _parser().parse_args(argtypes.join_negative_values(argv))
        from posbias.runtime.jax_cache import enable_compilation_cache

        enable_compilation_cache()
        if args.command == "rollout":
            return _rollout(args)
        if getattr(args, "run_command", None) is not None:
            return args.run_command(args)
        from posbias.demo import run_demo

        return run_demo(args.out)
    except UsageError as exc:
        print(f"{exc}", file=sys.stderr)
        return EXIT_USAGE
    except UserError as exc:
        print(f"posbias: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # e.g. `posbias ... | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
