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
out = open(sys.argv[2], "w") if sys.argv[2] else subprocess.DEVNULL
proc = subprocess.Popen(sys.argv[3:], stdout=out, stderr=err)
_, status, usage = os.wait4(proc.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024)
"""


def peak_rss(
    argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> tuple[int, str, int]:
    """(exit code, stderr, peak resident bytes) of ``argv`` run in ``cwd`` with the environment
    ``env`` (this process's when None). The stderr file lives beside ``cwd``, so ``cwd`` stays as
    the command left it."""
    code, _, text, peak = peak_rss_output(argv, cwd=cwd, env=env, timeout=timeout, stdout=False)
    return code, text, peak


def peak_rss_output(
    argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600, stdout: bool = True
) -> tuple[int, str, str, int]:
    """(exit code, stdout, stderr, peak resident bytes), as ``peak_rss``; stdout is "" unless asked."""
    err = Path(cwd).parent / f".{Path(cwd).name}.peak-stderr"
    out = Path(cwd).parent / f".{Path(cwd).name}.peak-stdout"
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(err), str(out) if stdout else "", *argv],
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
    printed = out.read_text() if stdout else ""
    out.unlink(missing_ok=True)
    return int(code), printed, text, int(peak)
