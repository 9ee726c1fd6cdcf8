"""Ctrl-C on the command line (posbias/interrupt.py): one line, exit code 130, no traceback, and no file
of the run, even when the KeyboardInterrupt is swallowed on the way (a garbage-collector callback
prints it as "ignored": found by an audit, the run then wrote its files and exited 0)."""

import os
import signal

import pytest

from posbias import interrupt
from posbias.cli import main

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
