"""The power engine's thread control (numerics/blas_threads.py; numerics/power.py, Threads): BLAS runs
on the threads the engine sets (one while squaring), whatever the environment asked; the thread count comes from the
engine option, else POSBIAS_BLAS_THREADS, else the cores the process may use; and the profile does not
depend on it (each row block and panel is computed as serially: compared bit for bit)."""

import os

import numpy as np
import pytest
from threadpoolctl import threadpool_info

import posbias.numerics as nx
from posbias.errors import UserError
from posbias.numerics import blas_threads as threads_module
from posbias.numerics.blas_threads import blas_threads
from posbias.numerics.periodic import PeriodicStack
from posbias.numerics.power import Power


def _stack(t=10**6):
    return PeriodicStack.build(nx.AlibiStack.build([0.5], nx.alibi_slopes(8)), t)


def _blas_threads_now():
    return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}


def test_thread_count_from_option_environment_and_affinity(monkeypatch):
    monkeypatch.delenv(threads_module.THREADS_ENV, raising=False)
    assert blas_threads() == len(os.sched_getaffinity(0))
    monkeypatch.setenv(threads_module.THREADS_ENV, "3")
    assert blas_threads() == 3
    assert blas_threads(1) == 1  # the engine option wins
    for bad in ("0", "-2", "two", ""):
        monkeypatch.setenv(threads_module.THREADS_ENV, bad)
        with pytest.raises(UserError, match=threads_module.THREADS_ENV):
            blas_threads()
    with pytest.raises(UserError, match="threads"):
        blas_threads(0)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_blas_runs_on_one_thread_while_squaring_and_is_restored(threads):
    if not _blas_threads_now():
        pytest.skip("no BLAS library seen by threadpoolctl")
    before = _blas_threads_now()
    seen = []
    Power(threads=threads).profile(_stack(10**4), 512, progress=lambda done, total: seen.append(_blas_threads_now()))
    assert seen and all(s == {1} for s in seen)
    assert _blas_threads_now() == before


def test_profile_is_the_same_bit_for_bit_on_any_thread_count():
    stack = _stack()
    # N = 512 at 10^6 layers: blocks of 32 to 512 rows, so both the row-block and the panel sharing run
    one = Power(threads=1).profile(stack, 512)
    assert "blocks of" in one.notes[0] and "to 512 rows" in one.notes[0]
    for threads in (2, 3):
        other = Power(threads=threads).profile(stack, 512)
        np.testing.assert_array_equal(other.log_probabilities, one.log_probabilities)
        assert other.notes == one.notes
