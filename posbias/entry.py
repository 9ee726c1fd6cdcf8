"""The ``posbias`` console script: Ctrl-C gives one line and exit code 130 from the first instant.

The command's own handling (``posbias.runtime.interrupt``, inside ``posbias.cli.main``) starts only once the
command's modules are imported, which takes a second or more (NumPy, JAX); an interrupt before then
printed a KeyboardInterrupt traceback. This module imports nothing heavy: it installs a handler that
ends the process at once (nothing has been written yet), imports the command, and hands over.
Only Python's own start-up, before this module runs, is left uncovered.
"""

from __future__ import annotations

import os
import signal
import sys

from posbias.runtime.interrupt import EXIT_INTERRUPTED  # standard library only, as this module
from posbias.runtime.pages import prefer_small_pages


def _interrupted_while_starting(signum, frame) -> None:
    os.write(2, b"posbias: interrupted\n")
    os._exit(EXIT_INTERRUPTED)


def main() -> int:
    signal.signal(signal.SIGINT, _interrupted_while_starting)
    prefer_small_pages()  # before NumPy is imported: it reads the switch then
    from posbias.cli import main as command

    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = command()
    except KeyboardInterrupt:  # between the hand-over and the command's own handling
        print("posbias: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    if code == EXIT_INTERRUPTED:
        # An interrupt can leave a half-initialised extension module behind (one stopped inside
        # matplotlib's ft2font import aborted at interpreter shutdown: "PyThreadState_Get ... GIL is
        # released", exit -6): the run wrote nothing, so leave without the interpreter's finalisation.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
