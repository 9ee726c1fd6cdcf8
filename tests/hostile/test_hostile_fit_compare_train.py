"""Hostile input to ``posbias fit``, ``compare`` and ``train`` (issue 17, items 4, 5, 13, 15, 18, 19, 27).

Every row of the tables ends in one of two ways, as in tests/hostile/test_hostile_cli.py:

* refused: exit code 2, exactly one line on stderr naming the flag or file and what was
  expected, no traceback, and nothing written anywhere under the working folder (the
  listing of names and sizes is the same before and after);
* a correct result: exit code 0 and numbers checked against an independent route (a NumPy
  masked-softmax rollout, scipy's Wasserstein distance, strict JSON parsing).

Memory is checked by the peak resident size of a subprocess (``os.wait4``), never by time.
A hypothesis test per command generates flags and files near the edges of validity; a run
that would do real work is stopped by a budget (``--time-budget``, ``POSBIAS_MEMORY_LIMIT``)
once every input check has passed, and an independent oracle says which refusal is due, so
the fuzz tests take seconds. ``HOSTILE_CLASSES`` counts the rows by command and ending.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from posbias.io.files import set_stamp
from tests.hostile.test_hostile_cli import alibi_kernel, assert_refused, listing, numpy_rollout, png_stamp, run_cli
from tests.peak import peak_rss

REPO = Path(__file__).resolve().parents[2]
SMALL = REPO / "examples" / "small.yaml"
BLOOM = REPO.parent / "shared" / "data" / "official-configs" / "no_content" / "bloom.yaml"
CONSOLE = Path(sys.executable).with_name("posbias")


def small_profile(n: int, diagonal: float = 1.0, temperature: float = 1.0) -> np.ndarray:
    """examples/small.yaml (4 layers, slopes 2^-2 .. 2^-8, lambda_t = 0.8 / (t+1)^0.5) at N = n by NumPy."""
    slopes = [0.25, 0.0625, 0.015625, 0.00390625]
    lambdas = [0.8 / (t + 1) ** 0.5 for t in range(4)]
    k = alibi_kernel(n, slopes, [diagonal] * 4, [1.0] * 4, tau=temperature)
    return numpy_rollout(np.stack([k] * 4), lambdas)


def csv_text(p) -> str:
    return "token_position,probability\n" + "".join(f"{k},{float(v)!r}\n" for k, v in enumerate(p))


def w1_scipy(p, q) -> float:
    pos = np.arange(len(p))
    return stats.wasserstein_distance(pos, pos, p, q) / (len(p) - 1)


def w1_exact(p, q) -> float:
    """sum_{k < N-1} |F_p(k) - F_q(k)| / (N - 1) in exact rationals (no normalisation: scipy's
    distance rescales the weights, which differs for a profile summing to 1 - 9e-10)."""
    from fractions import Fraction

    fp = fq = Fraction(0)
    total = Fraction(0)
    for a, b in list(zip(p, q))[:-1]:
        fp, fq = fp + Fraction(float(a)), fq + Fraction(float(b))
        total += abs(fp - fq)
    return float(total / (len(p) - 1))


def read_column(path: Path) -> np.ndarray:
    return np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)[:, 1]


def strict_json(path: Path) -> dict:
    def refuse(name):
        raise AssertionError(f"{path} holds {name}: not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def read_only(tmp: Path) -> str:
    """A folder nothing can be created in: chmod 555 for a normal user; root ignores modes, so
    as root a path inside /proc stands in."""
    if os.geteuid() != 0:
        (tmp / "ro").mkdir()
        (tmp / "ro").chmod(0o555)
        return "ro/run"
    return "/proc/self/posbias-run"


# ---------------------------------------------------------------- setups (run in the test's folder)


def files(**texts: str | Callable[[], str]):
    def setup(tmp: Path) -> None:
        for name, text in texts.items():
            (tmp / name.replace("_", ".")).write_text(text() if callable(text) else text)

    return setup


def sparse(name: str, size: int, head: str = "token_position,probability\n"):
    def setup(tmp: Path) -> None:
        with open(tmp / name, "w") as f:
            f.write(head)
            f.truncate(size)

    return setup


def both(*setups):
    def setup(tmp: Path) -> None:
        for s in setups:
            s(tmp)

    return setup


def plain_file(tmp: Path) -> None:
    (tmp / "plain").write_text("x")


P16 = lambda: csv_text(small_profile(16, 2.5))  # noqa: E731
FIT_FILES = files(m_csv=P16)
UNIFORM_512 = files(u_csv=lambda: csv_text(np.full(512, 1 / 512)))
TWO = files(m_csv=csv_text([0.5, 0.5]), q_csv=csv_text([0.25, 0.75]))
FIT = ["fit", "m.csv", str(SMALL)]
CI = ["train", "--preset", "ci", "--quiet"]
NONE = lambda tmp: None  # noqa: E731  (nothing to set up)


@dataclass(frozen=True)
class Refused:
    id: str
    cls: str  # fit | compare | train
    setup: Callable[[Path], None]
    argv: list
    message: str
    env: dict = field(default_factory=dict)
    add_out: bool = True


def _r(id, cls, setup, argv, message, **kw) -> Refused:
    return Refused(id, cls, setup, list(argv), message, **kw)


REFUSED = [
    # ---- fit (item 4: learning rates; item 18: steps and time; item 13: memory of layers x heads)
    _r(
        "fit --learning-rate inf",
        "fit",
        FIT_FILES,
        [*FIT, "--learning-rate", "inf"],
        "argument --learning-rate: expected a finite number > 0, got 'inf'",
    ),
    _r("fit --learning-rate nan", "fit", FIT_FILES, [*FIT, "--learning-rate", "nan"], "got 'nan'"),
    _r("fit --learning-rate 1e400", "fit", FIT_FILES, [*FIT, "--learning-rate", "1e400"], "got '1e400'"),
    _r("fit --learning-rate 0", "fit", FIT_FILES, [*FIT, "--learning-rate", "0"], "expected a finite number > 0"),
    _r("fit --learning-rate -1", "fit", FIT_FILES, [*FIT, "--learning-rate=-1"], "expected a finite number > 0"),
    _r("fit --steps 0", "fit", FIT_FILES, [*FIT, "--steps", "0"], "argument --steps: expected a positive integer"),
    _r(
        "fit --steps 10^9",
        "fit",
        FIT_FILES,
        [*FIT, "--steps", "1000000000"],
        "m.csv: 1000000000 steps of a fit of T = 4 layers, H = 4 heads at N = 16 would take about",
    ),
    _r("fit --steps 10^30", "fit", FIT_FILES, [*FIT, "--steps", "1" + "0" * 30], "more than --time-budget 3600 s"),
    _r(
        "fit --time-budget 1 (500 steps)", "fit", FIT_FILES, [*FIT, "--time-budget", "1"], "more than --time-budget 1 s"
    ),
    _r(
        "fit --time-budget inf",
        "fit",
        FIT_FILES,
        [*FIT, "--time-budget", "inf"],
        "argument --time-budget: expected a finite number > 0",
    ),
    _r(
        "fit BLOOM at N = 512, default steps (time)",
        "fit",
        UNIFORM_512,
        ["fit", "u.csv", str(BLOOM)],
        "500 steps of a fit of T = 70 layers, H = 112 heads at N = 512 would take about",
    ),
    _r(
        "fit BLOOM at N = 512, memory limit 600M",
        "fit",
        UNIFORM_512,
        ["fit", "u.csv", str(BLOOM), "--steps", "1", "--time-budget", "1e9"],
        "a fit of T = 70 layers, H = 112 heads at N = 512 needs about",
        env={"POSBIAS_MEMORY_LIMIT": "600M"},
    ),
    _r(
        "fit held-out profile too long for memory",
        "fit",
        both(FIT_FILES, files(h_csv=lambda: csv_text(np.full(2**14, 2.0**-14)))),
        [*FIT, "--heldout", "h.csv", "--steps", "1"],
        "needs about",
        env={"POSBIAS_MEMORY_LIMIT": "1G"},
    ),
    _r(
        "fit measured NaN",
        "fit",
        files(m_csv="token_position,probability\n0,nan\n1,0.5\n"),
        FIT,
        "m.csv: line 2 has value nan, expected a finite value >= 0",
    ),
    _r("fit measured 300 MB", "fit", sparse("m.csv", 300 * 2**20), FIT, "larger than the 256 MiB"),
    _r("fit --out empty", "fit", FIT_FILES, [*FIT, "--out", ""], "expected a file or folder name", add_out=False),
    # ---- compare (item 19: bounded memory)
    _r(
        "compare 300 MB file (refused from its size)",
        "compare",
        both(TWO, sparse("big.csv", 300 * 2**20)),
        ["compare", "m.csv", "big.csv"],
        "big.csv: 314572800 bytes, larger than the 256 MiB",
    ),
    _r(
        "compare 2^20 + 1 rows",
        "compare",
        both(TWO, files(big_csv=lambda: csv_text(np.full(2**20 + 1, 1 / (2**20 + 1))))),
        ["compare", "big.csv", "m.csv"],
        "big.csv: more than 1048576 rows",
    ),
    _r(
        "compare one 5000-character line",
        "compare",
        both(TWO, files(w_csv="token_position,p\n0," + "1" * 5000)),
        ["compare", "m.csv", "w.csv"],
        "w.csv: line 2 is longer than 4096 characters",
    ),
    _r(
        "compare /dev/zero",
        "compare",
        TWO,
        ["compare", "m.csv", "/dev/zero"],
        "/dev/zero: line 1 is longer than 4096 characters",
    ),
    _r(
        "compare a folder",
        "compare",
        both(TWO, lambda tmp: (tmp / "d").mkdir()),
        ["compare", "m.csv", "d"],
        "d: cannot be read (is a directory)",
    ),
    _r(
        "compare value 1e400",
        "compare",
        both(TWO, files(b_csv="token_position,p\n0,1e400\n1,0\n")),
        ["compare", "m.csv", "b.csv"],
        "b.csv: line 2 has value inf",
    ),
    _r(
        "compare NA value",
        "compare",
        both(TWO, files(b_csv="token_position,p\n0,NA\n1,1\n")),
        ["compare", "m.csv", "b.csv"],
        "b.csv: line 2 is '0,NA', expected 'position,value'",
    ),
    _r(
        "compare hex float",
        "compare",
        both(TWO, files(b_csv="token_position,p\n0,0x1p-1\n1,0.5\n")),
        ["compare", "m.csv", "b.csv"],
        "b.csv: line 2 is '0,0x1p-1', expected 'position,value'",
    ),
    _r(
        "compare not UTF-8",
        "compare",
        both(TWO, lambda tmp: (tmp / "b.csv").write_bytes(b"token_position,p\n0,1\xff\n")),
        ["compare", "m.csv", "b.csv"],
        "b.csv: line 2 is not UTF-8 text",
    ),
    _r(
        "compare sums to 1 + 2e-9",
        "compare",
        both(TWO, files(b_csv=csv_text([0.5, 0.5 + 2e-9]))),
        ["compare", "m.csv", "b.csv"],
        "b.csv: profile sums to 1.000000002",
    ),
    _r(
        "compare memory estimate",
        "compare",
        TWO,
        ["compare", "m.csv", "q.csv"],
        "comparing 1 profiles of N = 2 needs about",
        env={"POSBIAS_MEMORY_LIMIT": "100"},
    ),
    _r(
        "compare --out is a file",
        "compare",
        both(TWO, plain_file),
        ["compare", "m.csv", "q.csv", "--out", "plain"],
        "--out plain: exists and is not a folder",
        add_out=False,
    ),
    _r(
        "compare --out read-only",
        "compare",
        TWO,
        ["compare", "m.csv", "q.csv", "--out", read_only],
        "cannot create the folder",
        add_out=False,
    ),
    # ---- train (items 5, 15, 27)
    _r("train --lr inf", "train", NONE, [*CI, "--lr", "inf"], "argument --lr: expected a finite number > 0"),
    _r("train --lr nan", "train", NONE, [*CI, "--lr", "nan"], "got 'nan'"),
    _r("train --lr 0", "train", NONE, [*CI, "--lr", "0"], "got '0'"),
    _r(
        "train --seed 10^23",
        "train",
        NONE,
        [*CI, "--seed", "1" + "0" * 23],
        "argument --seed: expected an integer in [0, 4294967295], got '1" + "0" * 23 + "'",
    ),
    _r("train --seed 2^32", "train", NONE, [*CI, "--seed", str(2**32)], "in [0, 4294967295]"),
    _r("train --seed -1", "train", NONE, [*CI, "--seed=-1"], "in [0, 4294967295]"),
    _r(
        "train --width 16384",
        "train",
        NONE,
        [*CI, "--width", "16384"],
        "training T = 2, H = 4, D = 16384, context 64, batch 16 needs about",
    ),
    _r("train --context 40000", "train", NONE, [*CI, "--context", "40000"], "context 40000, batch 16 needs about"),
    _r("train --batch 10^6", "train", NONE, [*CI, "--batch", "1000000"], "batch 1000000 needs about"),
    _r(
        "train --context 10^6 (longer than the corpus)",
        "train",
        NONE,
        [*CI, "--context", "1000000"],
        "context 1000000 is longer than the corpus splits allow",
    ),
    _r("train --width 30 --heads 4", "train", NONE, [*CI, "--width", "30"], "width 30 is not a multiple of heads 4"),
    _r("train --out read-only", "train", NONE, [*CI, "--out", read_only], "cannot create the folder", add_out=False),
    _r(
        "train --out is a file",
        "train",
        plain_file,
        [*CI, "--out", "plain"],
        "--out plain: exists and is not a folder",
        add_out=False,
    ),
    _r(
        "train --out below a file",
        "train",
        plain_file,
        [*CI, "--out", "plain/run"],
        "--out plain/run: cannot create",
        add_out=False,
    ),
    _r("train --out empty", "train", NONE, [*CI, "--out", ""], "expected a file or folder name", add_out=False),
]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _argv(case: Refused, tmp: Path) -> list[str]:
    argv = [a(tmp) if callable(a) else a for a in case.argv]
    return argv if not case.add_out else [*argv, "--out", "out"]


@pytest.mark.parametrize("case", REFUSED, ids=[c.id for c in REFUSED])
def test_refused(case: Refused, in_tmp, capsys, monkeypatch):
    if "BLOOM" in case.id and not BLOOM.exists():
        pytest.skip(f"reference data not found at {BLOOM}")
    case.setup(in_tmp)
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)
    argv = _argv(case, in_tmp)
    before = listing(in_tmp)
    code, _, err = run_cli(argv, capsys)
    assert_refused(code, err, case.message)
    assert listing(in_tmp) == before  # no --out folder, no config.json, nothing anywhere else


# ---------------------------------------------------------------- correct results


def test_fit_learning_rate_100_returns_its_best_finite_iterate(in_tmp, capsys):
    """Item 4: the run that gave NaN parameters, invalid JSON and an all-NaN profile with exit 0.
    Now: strict JSON, finite values, the returned iterate named, and the fitted profile equal
    to a NumPy rollout at the returned values, with W1 no worse than the start's (scipy)."""
    FIT_FILES(in_tmp)
    code, out, err = run_cli([*FIT, "--steps", "20", "--learning-rate", "100", "--out", "out"], capsys)
    assert code == 0, err
    assert "Traceback" not in err
    report = strict_json(in_tmp / "out" / "fit.json")
    values = report["values"]
    assert all(math.isfinite(v) for v in values.values())
    assert report["returned_iterate"] <= report["steps_done"] <= 20
    assert "iterate" in report["returned"] and "returned: iterate" in out
    fitted = read_column(in_tmp / "out" / "fitted_profile.csv")
    expected = small_profile(16, values["diagonal"], values["temperature"])
    assert np.max(np.abs(fitted - expected)) < 1e-12
    measured = small_profile(16, 2.5)
    assert report["w1_after"] == pytest.approx(w1_scipy(fitted, measured), abs=1e-12)
    assert report["w1_before"] == pytest.approx(w1_scipy(small_profile(16), measured), abs=1e-12)
    assert report["w1_after"] <= report["w1_before"]


def test_fit_whose_lambda_scale_overflows_writes_finite_json(in_tmp, capsys):
    """Issue 29 item 1: a profile with most mass on token 0 drives s = e^theta up; at rate 200 theta
    passed 709.78 while theta and the loss stayed finite (lambda' = min(1, s lambda)), and the report
    raised 'Out of range float values are not JSON compliant: inf' (a traceback, exit 1, no files).
    Now the iterate whose values overflow stops the fit like a non-finite one; every value written is
    finite, and the written W1 is scipy's for the written profile."""
    first = np.full(16, 0.01)
    first[0] = 0.85
    (in_tmp / "first.csv").write_text(csv_text(first))
    argv = ["fit", "first.csv", str(SMALL), "--lambda-scale", "--steps", "20", "--learning-rate", "200"]
    code, out, err = run_cli([*argv, "--out", "out"], capsys)
    assert code == 0, err
    assert "Traceback" not in err and "non-finite parameters" in err
    report = strict_json(in_tmp / "out" / "fit.json")
    assert all(math.isfinite(v) for v in report["values"].values()), report["values"]
    assert math.isfinite(report["w1_before"]) and math.isfinite(report["w1_after"])
    fitted = read_column(in_tmp / "out" / "fitted_profile.csv")
    assert abs(fitted.sum() - 1) < 1e-12
    assert report["w1_after"] == pytest.approx(w1_scipy(fitted, first), abs=1e-12)
    assert report["w1_after"] <= report["w1_before"]


def test_fit_returns_the_best_iterate_not_the_last():
    """fit() on its own: a rate of 100 makes the later iterates worse than the start; the result
    is the iterate of smallest loss in its own history, and its W1 is recomputed here."""
    import posbias.numerics as nx
    from posbias.fit.profile import FitSpec, fit

    stack = nx.AlibiStack.build([0.8 / (t + 1) ** 0.5 for t in range(4)], [0.25, 0.0625, 0.015625, 0.00390625], 1.0)
    measured = small_profile(16, 2.5)
    result = fit(stack, measured, FitSpec(steps=20, learning_rate=100.0))
    finite = [h for h in result.history if math.isfinite(h)]
    assert result.history[result.returned_step] == min(finite)
    assert result.loss_after == pytest.approx(w1_scipy(result.after, measured), abs=1e-12)
    assert result.loss_after <= result.loss_before
    assert result.loss_after == pytest.approx(min(finite), abs=1e-12)
    if result.returned_step < result.steps_done or result.stopped:
        assert "best" in result.returned


def _peak_rss_run(argv: list[str], cwd: Path, env: dict) -> tuple[int, str, int]:
    """(exit code, stderr, peak resident bytes) of the console script with ``env`` added."""
    return peak_rss([str(CONSOLE), *argv], cwd=cwd, env={**os.environ, **env})


@pytest.mark.skipif(not BLOOM.exists(), reason="reference data not found")
def test_fit_bloom_memory_is_refused_before_allocating(in_tmp):
    """Item 13 by peak memory: BLOOM's 70 x 112 heads at N = 512 under a 600 MiB limit is refused
    from the estimate; the process never grows past what importing posbias takes."""
    UNIFORM_512(in_tmp)
    code, err, peak = _peak_rss_run(
        ["fit", "u.csv", str(BLOOM), "--steps", "1", "--time-budget", "1e9", "--out", "o"],
        in_tmp,
        {"POSBIAS_MEMORY_LIMIT": "600M"},
    )
    assert code == 2 and "needs about" in err and err.count("\n") == 1, err
    assert peak < 400 * 2**20, peak
    assert not (in_tmp / "o").exists()


@pytest.mark.skipif(not BLOOM.exists(), reason="reference data not found")
def test_fit_bloom_layers_and_heads_run_within_the_stated_budget(in_tmp):
    """BLOOM's 70 layers x 112 heads at N = 128, one step, under a 1 GiB limit the estimate
    accepts: the whole process (interpreter included) stays within the limit."""
    from posbias.fit.profile import memory_bytes

    limit = 2**30
    assert memory_bytes(70, 112, 128) <= limit
    (in_tmp / "u.csv").write_text(csv_text(np.full(128, 1 / 128)))
    code, err, peak = _peak_rss_run(
        ["fit", "u.csv", str(BLOOM), "--steps", "1", "--out", "o"], in_tmp, {"POSBIAS_MEMORY_LIMIT": str(limit)}
    )
    assert code == 0, err
    assert peak <= limit, peak
    report = strict_json(in_tmp / "o" / "fit.json")
    assert report["w1_after"] <= report["w1_before"]


def test_two_fits_into_one_folder_leave_one_complete_set(in_tmp):
    """Two fits of different --steps started together into one --out: the folder holds the
    complete set of one of them (fit.json, fitted_profile.csv and the figure's stamp agree),
    never a mix, and no staging folder."""
    FIT_FILES(in_tmp)
    procs = [
        subprocess.Popen(
            [str(CONSOLE), *FIT, "--steps", str(steps), "--out", "o", "--json"],
            cwd=in_tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for steps in (2, 3)
    ]
    outputs = [p.communicate() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outputs]
    texts = {name: (in_tmp / "o" / name).read_text() for name in ("fit.json", "fitted_profile.csv")}
    assert png_stamp(in_tmp / "o" / "fit.png") == set_stamp(texts)
    report = strict_json(in_tmp / "o" / "fit.json")
    assert texts["fit.json"] in [o[0].decode() for o in outputs]  # exactly one run's report
    values = report["values"]
    expected = small_profile(16, values["diagonal"], values["temperature"])
    assert np.max(np.abs(read_column(in_tmp / "o" / "fitted_profile.csv") - expected)) < 1e-12
    assert sorted(os.listdir(in_tmp / "o")) == ["fit.json", "fit.png", "fitted_profile.csv"]


def test_compare_ten_million_rows_bounded_memory(in_tmp):
    """Item 19: a 10^7-row profile (the one that took 2.1 GB) is refused at its 2^20 + 1-th row
    by a reader that holds one block at a time: the process stays under 600 MiB."""
    n = 10**7
    with open(in_tmp / "big.csv", "w") as f:
        f.write("token_position,probability\n")
        for start in range(0, n, 10**6):
            f.write("".join(f"{k},1e-07\n" for k in range(start, start + 10**6)))
    TWO(in_tmp)
    code, err, peak = _peak_rss_run(["compare", "big.csv", "m.csv", "--out", "o"], in_tmp, {})
    assert code == 2 and "big.csv: more than 1048576 rows" in err and err.count("\n") == 1, err
    assert peak < 600 * 2**20, peak
    assert not (in_tmp / "o").exists()


COMPARE_CORRECT = [
    ("blank lines and CRLF", "token_position,p\r\n\r\n0,0.25\r\n\r\n1,0.75\r\n", [0.25, 0.75]),
    ("spaces around cells", "token_position , p\n 0 , 0.25 \n1,0.75\n", [0.25, 0.75]),
    ("four columns with NaN beside", "token_position,influence,mean,sem\n0,0.25,3,nan\n1,0.75,9,nan\n", [0.25, 0.75]),
    ("no final newline", "token_position,p\n0,0.25\n1,0.75", [0.25, 0.75]),
    ("sums to 1 - 9e-10", "token_position,p\n0,0.25\n1,0.7499999991\n", [0.25, 0.7499999991]),
    ("subnormal and zero", "token_position,p\n0,5e-324\n1,1.0\n2,0\n", [5e-324, 1.0, 0.0]),
]


@pytest.mark.parametrize("name,text,values", COMPARE_CORRECT, ids=[c[0] for c in COMPARE_CORRECT])
def test_compare_correct(name, text, values, in_tmp, capsys):
    m = np.zeros(len(values))
    m[0] = 1.0
    (in_tmp / "m.csv").write_text(csv_text(m))
    (in_tmp / "b.csv").write_text(text)
    code, out, err = run_cli(["compare", "m.csv", "b.csv", "--json", "--out", "o"], capsys)
    assert code == 0 and err == "", err
    row = json.loads(out)["rows"][0]
    q = np.array(values)
    assert row["w1"] == pytest.approx(w1_exact(m, q), abs=1e-15)
    assert row["total_variation"] == pytest.approx(0.5 * np.abs(m - q).sum(), abs=1e-15)


def test_compare_long_profile_fast_reader_and_binned_figure(in_tmp, capsys):
    """2^17 rows: read by the streaming reader, the figure drawn from bin means; W1 and TV
    against scipy and NumPy on the same numbers."""
    rng = np.random.default_rng(5)
    p, q = rng.random(2**17), rng.random(2**17)
    p, q = p / p.sum(), q / q.sum()
    (in_tmp / "p.csv").write_text(csv_text(p))
    (in_tmp / "q.csv").write_text(csv_text(q))
    p, q = read_column(in_tmp / "p.csv"), read_column(in_tmp / "q.csv")  # the numbers as written
    code, out, err = run_cli(["compare", "p.csv", "q.csv", "--json", "--out", "o"], capsys)
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert row["w1"] == pytest.approx(w1_scipy(p, q), rel=1e-9)
    assert row["total_variation"] == pytest.approx(0.5 * np.abs(p - q).sum(), rel=1e-12)
    assert row["spearman"] == pytest.approx(stats.spearmanr(p, q).statistic, abs=1e-12)
    assert (in_tmp / "o" / "compare.png").stat().st_size > 0


def test_train_diverging_lr_leaves_nothing(in_tmp, capsys):
    """Item 5: --lr 1000 gave "bits per byte: train nan" and a NaN checkpoint with exit 0. Now
    training stops at the first non-finite loss, exit 2, one line, and the run folder it
    created is gone (no checkpoint, no config.json)."""
    code, _, err = run_cli([*CI, "--steps", "20", "--lr", "1000", "--out", "run"], capsys)
    assert_refused(code, err, "training diverged: the training loss is nan at step")
    assert "nothing of the run is kept" in err
    assert not (in_tmp / "run").exists()


def test_train_second_writer_is_refused(in_tmp, capsys):
    """A folder another process holds (the folder lock of posbias.io.files) is refused, not mixed."""
    (in_tmp / "run").mkdir()
    (in_tmp / "run" / "mine.txt").write_text("keep\n")
    before = listing(in_tmp)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; fd = os.open('run', os.O_RDONLY); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()",
        ],
        cwd=in_tmp,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline() == b"held\n"
        code, _, err = run_cli([*CI, "--steps", "2", "--out", "run"], capsys)
    finally:
        holder.stdin.close()
        holder.wait()
    assert_refused(code, err, "--out run: another posbias process is writing into this folder")
    assert listing(in_tmp) == before


# ---------------------------------------------------------------- fuzz: flags and files near the edges

NUMBER_TEXT = st.one_of(
    st.sampled_from(
        [
            "0",
            "-0",
            "inf",
            "-inf",
            "nan",
            "1e400",
            "1e-400",
            "5e-324",
            "1e308",
            "",
            "x",
            "1_0",
            "0x10",
            " 1",
            "1e-9",
            "100",
            "-1",
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
INT_TEXT = st.one_of(
    st.sampled_from(["0", "-1", "1", "2", str(2**32 - 1), str(2**32), str(10**23), "1.5", "", "1e3"]),
    st.integers(-10, 10**12).map(str),
)


def _float_ok(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value) and value > 0


def _int_in(text: str, lo: int, hi: float) -> bool:
    try:
        value = int(text)
    except ValueError:
        return False
    return lo <= value <= hi


def _profile_text(draw) -> tuple[str, bool]:
    """A profile CSV near the edges and whether it is valid (by this module's own rules)."""
    n = draw(st.integers(1, 12))
    raw = draw(
        st.lists(
            st.one_of(st.floats(0, 1), st.sampled_from([0.0, 5e-324, 1e-300, -0.0, -1e-300, math.nan, math.inf])),
            min_size=n,
            max_size=n,
        )
    )
    total = sum(v for v in raw if math.isfinite(v))
    scale = draw(st.sampled_from([1.0, 1 + 2e-9, 1 - 5e-10]))
    values = [v / total * scale if total > 0 and math.isfinite(v) else v for v in raw]
    cells = [repr(v) for v in values]
    if draw(st.booleans()):
        cells[draw(st.integers(0, n - 1))] = draw(st.sampled_from(["", "x", "1,2", "0x1p-1"]))
    lines = [f"{k},{c}" for k, c in enumerate(cells)]
    if draw(st.booleans()) and n > 1:
        i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        lines[i], lines[j] = lines[j], lines[i]
    text = "token_position,probability\n" + "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n"]))
    valid_cells = []
    for k, line in enumerate(lines):
        parts = line.split(",")
        try:
            ok = len(parts) == 2 and int(parts[0]) == k and math.isfinite(float(parts[1])) and float(parts[1]) >= 0
        except ValueError:
            ok = False
        if not ok:
            return text, False
        valid_cells.append(float(parts[1]))
    return text, abs(sum(valid_cells) - 1) <= 1e-9


@st.composite
def profiles(draw):
    return _profile_text(draw)


@settings(max_examples=25)
@given(lr=NUMBER_TEXT, steps=INT_TEXT, budget=NUMBER_TEXT, measured=profiles())
def test_fuzz_fit(tmp_path_factory, lr, steps, budget, measured):
    """Every input check passes or refuses; a fully valid input meets a time budget of 1e-9 s,
    so the fuzz never fits. The oracle (this module's reading of the flags and file) says
    which: invalid input is refused by its own check, valid input by the time budget."""
    tmp = tmp_path_factory.mktemp("fit")
    text, file_ok = measured
    (tmp / "m.csv").write_text(text)
    budget_flag = budget if not _float_ok(budget) else "1e-9"
    argv = [
        "fit",
        str(tmp / "m.csv"),
        str(SMALL),
        f"--learning-rate={lr}",
        f"--steps={steps}",
        f"--time-budget={budget_flag}",
        "--out",
        str(tmp / "o"),
    ]
    code, err = _in_process(argv)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    flags_ok = _float_ok(lr) and _int_in(steps, 1, math.inf) and _float_ok(budget_flag)
    assert ("more than --time-budget" in err) == (flags_ok and file_ok), err
    assert not (tmp / "o").exists()


@settings(max_examples=20)
@given(measured=profiles(), predicted=profiles())
def test_fuzz_compare(tmp_path_factory, measured, predicted):
    """Valid pairs of one length give W1 and TV equal to scipy's and NumPy's; anything else is refused."""
    tmp = tmp_path_factory.mktemp("compare")
    (tmp / "m.csv").write_text(measured[0])
    (tmp / "q.csv").write_text(predicted[0])
    code, err = _in_process(["compare", str(tmp / "m.csv"), str(tmp / "q.csv"), "--json", "--out", str(tmp / "o")])
    ok = measured[1] and predicted[1]
    if ok:
        p, q = (
            np.array([float(line.split(",")[1]) for line in t.splitlines()[1:] if line.strip()])
            for t in (measured[0], predicted[0])
        )
        ok = len(p) == len(q)
    if not ok:
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert not (tmp / "o").exists()
        return
    assert code == 0, err
    row = json.loads((tmp / "o" / "compare.json").read_text())["rows"][0]
    expected = w1_scipy(p, q) if len(p) > 1 else 0.0
    assert row["w1"] == pytest.approx(expected, abs=1e-12)
    assert row["total_variation"] == pytest.approx(0.5 * np.abs(p - q).sum(), abs=1e-12)


@settings(max_examples=30)
@given(
    lr=NUMBER_TEXT,
    seed=INT_TEXT,
    width=INT_TEXT,
    heads=st.sampled_from(["1", "3", "4", "0", "-2", "x"]),
    context=INT_TEXT,
    batch=INT_TEXT,
)
def test_fuzz_train(tmp_path_factory, lr, seed, width, heads, context, batch):
    """Train flags near the edges under a 1 KiB memory limit: a valid model is refused by the
    memory estimate (so nothing is trained), an invalid one by its own check; never a traceback,
    never a run folder left."""
    from posbias.lm.data import load_corpus

    tmp = tmp_path_factory.mktemp("train")
    argv = [
        "train",
        "--preset",
        "ci",
        "--quiet",
        f"--lr={lr}",
        f"--seed={seed}",
        f"--width={width}",
        f"--heads={heads}",
        f"--context={context}",
        f"--batch={batch}",
        "--out",
        str(tmp / "run"),
    ]
    old = os.environ.get("POSBIAS_MEMORY_LIMIT")
    os.environ["POSBIAS_MEMORY_LIMIT"] = "1K"  # (monkeypatch is function-scoped: not per example)
    try:
        code, err = _in_process(argv)
    finally:
        if old is None:
            del os.environ["POSBIAS_MEMORY_LIMIT"]
        else:
            os.environ["POSBIAS_MEMORY_LIMIT"] = old
    corpus = load_corpus()
    shortest = min(corpus.train.size, corpus.validation.size)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    flags_ok = (
        _float_ok(lr)
        and _int_in(seed, 0, 2**32 - 1)
        and _int_in(width, 1, math.inf)
        and _int_in(heads, 1, math.inf)
        and _int_in(context, 1, math.inf)
        and _int_in(batch, 1, math.inf)
    )
    model_ok = flags_ok and int(width) % int(heads) == 0 and int(context) + 2 <= shortest
    assert ("needs about" in err) == model_ok, err
    assert not (tmp / "run").exists()


def _in_process(argv: list[str]) -> tuple[int, str]:
    """posbias.cli.main(argv) with stderr captured (hypothesis tests cannot use capsys per example)."""
    import contextlib
    import io

    from posbias.cli import main

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(argv)
    return code, err.getvalue()


HOSTILE_CLASSES = {
    cls: {"refused": sum(c.cls == cls for c in REFUSED), "correct": 0} for cls in ("fit", "compare", "train")
}
HOSTILE_CLASSES["fit"]["refused"] += 1  # BLOOM memory by peak RSS
HOSTILE_CLASSES["fit"]["correct"] += 4  # learning rate 100 (CLI and fit()), BLOOM within budget, two writers
HOSTILE_CLASSES["compare"]["refused"] += 1  # 10^7 rows by peak RSS
HOSTILE_CLASSES["compare"]["correct"] += len(COMPARE_CORRECT) + 1
HOSTILE_CLASSES["train"]["refused"] += 2  # diverging --lr 1000, a second writer
