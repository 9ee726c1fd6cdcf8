"""``python -m posbias.cli ...``: the ``posbias`` command, as ``python -m posbias`` (``posbias.entry.main``)."""

import sys

from posbias.entry import main

if __name__ == "__main__":
    sys.exit(main())
