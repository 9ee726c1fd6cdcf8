"""The ``run(args)`` of a command whose refusals name it (``posbias measure: error: ...``), one line on
stderr and exit code 2, where the dispatcher's own line would say only ``posbias: error: ...``."""

from __future__ import annotations

import sys
from collections.abc import Callable

from posbias.errors import UserError

EXIT_USAGE = 2


def named_refusals(work: Callable[..., int]) -> Callable[..., int]:
    """``run(args)``: ``work(args)``, a ``UserError`` printed as ``posbias <command>: error: <line>``, exit 2."""

    def run(args) -> int:
        try:
            return work(args)
        except UserError as exc:
            print(f"posbias {args.command}: error: {exc}", file=sys.stderr)
            return EXIT_USAGE

    run.__doc__ = f"Execute the command from parsed arguments ({work.__name__}); bad input: one line, exit 2."
    return run
