"""``python -m posbias.hf.cli CHECKPOINT_DIR ...``: ``posbias measure`` itself (its parser and behaviour;
the work is ``posbias.measure.pipeline``'s):

    python -m posbias.hf.cli CHECKPOINT_DIR [--data FILE.txt|FILE.jsonl] [--tokens N] [--samples S] [--out DIR]

Nothing here imports JAX until a command runs.
"""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    """``python -m posbias.hf.cli CHECKPOINT_DIR ...``: ``posbias measure`` (the same parser and behaviour)."""
    from posbias.cli import main as posbias_main

    return posbias_main(["measure", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
