"""Ctrl-C on the command line (posbias/runtime/interrupt.py): one line, exit code 130, no traceback, and no file
of the run, even when the KeyboardInterrupt is swallowed on the way (a garbage-collector callback
prints it as "ignored": found by an audit, the run then wrote its files and exited 0)."""

import os
import signal

import pytest

from posbias.cli import main
from posbias.runtime import interrupt

ROLLOUT = ["rollout", "--layers", "3", "--heads", "2", "--tokens", "8", "--schedule", "constant:0.5"]


def _check_interrupted(code: int, capsys, out) -> None:
    err = capsys.readouterr().err
    assert code == 130
    assert err.splitlines() == ["posbias: interrupted"]
    assert not out.exists()


def test_an_interrupt_during_the_run_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    import posbias.rollout

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(posbias.rollout, "run_stack", interrupted)
    out = tmp_path / "out"
    _check_interrupted(main([*ROLLOUT, "--out", str(out)]), capsys, out)


def test_a_swallowed_interrupt_still_stops_the_run_before_its_files(tmp_path, monkeypatch, capsys):
    import posbias.rollout

    real = posbias.rollout.run_stack

    def swallowing(*args, **kwargs):
        try:  # what a garbage-collector callback does with an exception: print "ignored", go on
            os.kill(os.getpid(), signal.SIGINT)
        except KeyboardInterrupt:
            pass
        return real(*args, **kwargs)

    monkeypatch.setattr(posbias.rollout, "run_stack", swallowing)
    out = tmp_path / "out"
    _check_interrupted(main([*ROLLOUT, "--out", str(out)]), capsys, out)


def test_without_an_interrupt_the_run_writes_its_files(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*ROLLOUT, "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["profile.csv", "profile.png", "summary.json"]


def test_an_interrupt_while_the_files_move_into_place_comes_after_them():
    moved = []
    with pytest.raises(KeyboardInterrupt), interrupt.handling():
        with interrupt.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            moved.append("all")  # still running: the signal is held back
    assert moved == ["all"]


def test_handling_restores_the_previous_handler():
    before = signal.getsignal(signal.SIGINT)
    with interrupt.handling():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before


def test_an_interrupt_a_callback_swallowed_is_not_printed(monkeypatch):
    class Unraisable:  # what the interpreter hands sys.unraisablehook for "Exception ignored in ..."
        def __init__(self, exc):
            self.exc_type, self.exc_value, self.exc_traceback, self.err_msg, self.object = (
                type(exc),
                exc,
                None,
                None,
                None,
            )

    import sys

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_type))  # the hook before posbias's
    with interrupt.handling():
        sys.unraisablehook(Unraisable(KeyboardInterrupt()))
        sys.unraisablehook(Unraisable(ValueError("shown")))
    assert seen == [ValueError]


def _interrupt_when_loaded(argv: list[str], cwd, library: str) -> tuple[int, str]:
    """Start ``argv``, wait until the process has mapped a shared library whose path contains
    ``library`` (so it is importing that package now), send SIGINT, and return (exit code, stderr)."""
    import subprocess
    import time

    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60  # a hang detector, not a timing assertion
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                maps = open(f"/proc/{proc.pid}/maps").read()
            except OSError:
                maps = ""
            if library in maps:
                proc.send_signal(signal.SIGINT)
                break
            time.sleep(0.002)
        else:
            pytest.fail(f"{argv[0]} never loaded {library} (exit {proc.poll()})")
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, err


@pytest.mark.parametrize("library", ["numpy", "ft2font"])
def test_an_interrupt_while_the_command_starts_is_one_line_and_exit_130(tmp_path, library):
    """Issue 29 item 3: Ctrl-C while ``posbias`` imports its modules (before ``main`` runs: NumPy)
    printed a KeyboardInterrupt traceback; the console script (posbias/entry.py) now ends it with the
    command's one line, as the command's own handling does later (matplotlib's ft2font loads while
    the run draws its figure). The signal is sent once the process has mapped the library, so it
    lands inside that import, deterministically, whatever the machine's load."""
    import sys
    from pathlib import Path

    console = Path(sys.executable).with_name("posbias")
    code, err = _interrupt_when_loaded([str(console), *ROLLOUT, "--out", "out"], tmp_path, library)
    assert code == 130, err
    assert err.splitlines() == ["posbias: interrupted"], err
    assert not (tmp_path / "out").exists()
