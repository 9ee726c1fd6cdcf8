"""The ``posbias`` command: a thin layer over numerics/ (rollout, demo) and theorem/ (derive, proofs).

Bad input gets one line on stderr (what, where, what was expected) and exit
code 2; nothing is written before the input has been validated.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from posbias.errors import UserError

EXIT_USAGE = 2


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line instead of usage + message + SystemExit
        raise UsageError(f"{self.prog}: {message}")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _parser() -> _Parser:
    top = _Parser(prog="posbias", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)

    ro = sub.add_parser("rollout", help="profile of a rollout config (or of measured kernels)")
    ro.add_argument("config", nargs="?", type=Path, help="rollout YAML (the reference schema)")
    ro.add_argument("--out", type=Path, help="output folder (default: the config's save_dir, else ./posbias-out)")
    ro.add_argument("--tokens", type=_positive_int, help="override sequence_length N")
    ro.add_argument("--layers", type=_positive_int, help="override num_layers T")
    ro.add_argument("--slopes", choices=("paper", "hf"), help="generate ALiBi slopes from num_heads instead of the file's")
    ro.add_argument("--content-broadcast", choices=("all", "first-head"), default="all",
                    help="a single content value goes to every head (all) or, as the reference tool does, to head 0 only")
    ro.add_argument("--precision", choices=("float64", "float32"), default="float64")
    ro.add_argument("--engine", choices=("auto", "structured", "log", "fft", "dense"), default="auto",
                    help="auto: fft for causal/sliding masks at N >= 16384, else structured; log space if the profile underflows")
    ro.add_argument("--full", action="store_true", help="also form the full P by dense products (moderate N)")
    ro.add_argument("--diagonal", action="store_true",
                    help="also write P_ii = prod_t (1 - lambda_t (1 - A_ii)) in O(T N) (causal and sliding-window masks)")
    ro.add_argument("--kernels", type=Path, help="measured kernels (T, N, N) as .npy or .npz ('kernels', 'lambdas')")
    ro.add_argument("--schedule", help="lambda schedule for --kernels: constant:L | power_decay:L0,BETA | custom:L0,L1,...")
    ro.add_argument("--causal", action="store_true", help="declare --kernels causal (checked)")
    ro.add_argument("--json", action="store_true", help="print the summary JSON instead of text")

    de = sub.add_parser("demo", help="the main job on a built-in 32-layer ALiBi model")
    de.add_argument("--out", type=Path, default=Path("posbias-demo"))

    # derive/proofs parse their own arguments (theorem/cli.py); listed here for --help.
    sub.add_parser("derive", help="symbolic derivations (posbias derive --list)", add_help=False)
    sub.add_parser("proofs", help="check every certificate the proofs cite (posbias proofs --check)", add_help=False)
    return top


def _print_summary(title: str, summary: dict, written: list[Path]) -> None:
    s = summary
    atom = "n/a (non-causal mask)" if s["last_token_atom"] is None else f"{s['last_token_atom']:.6g}"
    heads = "" if s.get("num_heads") is None else f", H={s['num_heads']}"
    print(f"{title}  (T={s['num_layers']}{heads}, N={s['num_tokens']}, {s['mask']}, "
          f"engine {s['engine']}, {s['precision']})")
    print(f"  p(0) = {s['p_first']:.6g}   p(N-1) = {s['p_last']:.6g}   "
          f"argmin = {s['argmin']} (p = {s['p_min']:.3g})   U-shaped: {'yes' if s['u_shape'] else 'no'}")
    print(f"  entropy = {s['entropy']:.4f} nats   sum lambda = {s['sum_lambda']:.4f}   "
          f"sum lambda*delta = {s['sum_lambda_delta']:.4f}   last-token atom = {atom}")
    if "matrix" in s:
        m = s["matrix"]
        print(f"  P: min_i P_ii = {m['min_diagonal']:.6g}   max_i P_i0 = {m['max_first_column']:.6g}   "
              f"mean row entropy = {m['mean_row_entropy']:.4f} nats")
    if written:
        print("  wrote " + ", ".join(str(p) for p in written))


def _rollout(args) -> int:
    from posbias import config as cfg
    from posbias import output
    from posbias.run import InputError, load_kernels, run_kernels, run_stack

    if args.kernels is not None:
        if args.config is not None:
            raise InputError("give either CONFIG or --kernels, not both")
        kernels, lambdas = load_kernels(args.kernels, args.schedule, args.causal)
        result = run_kernels(kernels, lambdas, causal=args.causal, precision=args.precision)
        out_dir, title, warnings = args.out or Path("posbias-out"), str(args.kernels), ()
    else:
        if args.config is None:
            raise InputError("missing CONFIG (a rollout YAML) or --kernels FILE")
        if args.schedule is not None or args.causal:
            raise InputError("--schedule and --causal apply to --kernels only")
        loaded = cfg.load(args.config, tokens=args.tokens, layers=args.layers, slopes=args.slopes,
                          content_broadcast=args.content_broadcast)
        result = run_stack(loaded.stack, loaded.num_tokens, engine=args.engine, precision=args.precision,
                           full_matrix=args.full, diagonal=args.diagonal, show_progress=not args.json)
        out_dir = args.out or Path(loaded.save_dir or "posbias-out")
        title, warnings = str(args.config), loaded.warnings
        result.summary["content_broadcast"] = args.content_broadcast
        result.summary["slopes"] = args.slopes or "file"
    for w in warnings:
        print(f"posbias: warning: {w}", file=sys.stderr)
    if result.summary["mass_defect"] > 1e-12:
        print(f"posbias: warning: profile mass differs from 1 by {result.summary['mass_defect']:.2e} "
              "before renormalisation", file=sys.stderr)

    files = [out_dir / "profile.csv", out_dir / "summary.json", out_dir / "profile.png"]
    output.write_text(files[0], output.position_csv(probability=result.profile))
    output.write_json(files[1], result.summary)
    s = result.summary
    heads = "" if s.get("num_heads") is None else f", H={s['num_heads']}"
    label = f"{Path(title).name}: T={s['num_layers']}{heads}, N={s['num_tokens']}"
    fig = output.profile_figure([(label, result.profile)])
    output.write_figure(files[2], fig)
    if result.diagonal is not None:
        files.append(out_dir / "diagonal.csv")
        output.write_text(files[-1], output.position_csv(P_diagonal=result.diagonal))
    if result.log_profile is not None:
        files.append(out_dir / "log_profile.csv")
        output.write_text(files[-1], output.position_csv(log_probability=result.log_profile))
    if result.summary.get("underflow_below_1e-280"):
        print(f"posbias: warning: {result.summary['underflow_below_1e-280']} profile entries are below 1e-280 "
              "(float64 underflow); --engine log gives their logarithms", file=sys.stderr)
    if result.matrix_rows is not None:
        rows = result.matrix_rows
        files.append(out_dir / "matrix.csv")
        output.write_text(files[-1], output.position_csv(
            P_diagonal=rows[:, 0], P_first_column=rows[:, 1], row_entropy=rows[:, 2]))
    if args.json:
        print(json.dumps(result.summary, indent=2))
    else:
        _print_summary(title, result.summary, files)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("derive", "proofs"):
        from posbias.theorem import cli as theorem_cli

        command = theorem_cli.derive_command if argv[0] == "derive" else theorem_cli.proofs_command
        return command(argv[1:])
    try:
        args = _parser().parse_args(argv)
        if args.command == "rollout":
            return _rollout(args)
        from posbias.demo import run_demo

        return run_demo(args.out)
    except UsageError as exc:
        print(f"{exc}", file=sys.stderr)
        return EXIT_USAGE
    except UserError as exc:
        print(f"posbias: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
