"""Peak resident memory of one command, measured as its own process.

A process forked from pytest carries pytest's high-water mark across ``exec`` (Linux copies the
parent's ``hiwater_rss`` into the child's ``signal->maxrss``), so ``os.wait4`` on a direct child
reports pytest's size, not the command's (CI saw 17 GiB for a command that refuses at once). The
command is therefore started by a small launcher interpreter: the launcher's own memory map is new
after its exec, and the command forked from it inherits only the launcher's few megabytes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LAUNCHER = """\
import os, subprocess, sys
err = open(sys.argv[1], "w")
proc = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=err)
_, status, usage = os.wait4(proc.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024)
"""


def peak_rss(
    argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> tuple[int, str, int]:
    """(exit code, stderr, peak resident bytes) of ``argv`` run in ``cwd`` with the environment
    ``env`` (this process's when None). The stderr file lives beside ``cwd``, so ``cwd`` stays as
    the command left it."""
    err = Path(cwd).parent / f".{Path(cwd).name}.peak-stderr"
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(err), *argv],
        cwd=cwd,
        env=os.environ if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    code, peak = done.stdout.split()[-2:]
    text = err.read_text()
    err.unlink()
    return int(code), text, int(peak)
