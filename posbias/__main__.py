"""``python -m posbias ...``: the ``posbias`` command (the console script's ``posbias.entry.main``)."""

import sys

from posbias.entry import main

if __name__ == "__main__":
    sys.exit(main())
