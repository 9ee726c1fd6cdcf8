"""``python -m posbias.verify ...``: the ``verify`` subcommand on its own."""

import sys

from posbias.verify.cli import main

if __name__ == "__main__":
    sys.exit(main())
