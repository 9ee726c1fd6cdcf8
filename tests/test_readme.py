"""README.md's examples run and print what README.md shows (tests/readme_runner.py has the
conventions), and the runner itself catches a mismatch."""

import sys
import warnings
from pathlib import Path

import pytest

from tests import readme_runner as rr

REPO = Path(__file__).resolve().parents[1]

# README.md is short (issue 20): its one example is executed; the manual's examples live in docs/.
# The docs pages together must keep at least this many executed blocks (console sessions + python
# blocks); raise it when examples are added, never lower it to make a failing page pass.
MIN_EXECUTED_BLOCKS = 1
MIN_PYTHON_BLOCKS = 1
MIN_DOCS_EXECUTED_BLOCKS = 52

PY = Path(sys.executable).name

PASSING = """\
# Synthetic

```console
$ echo "p(0) = 0.0202892   argmin = 61   wrote $PWD/out/x.csv"
p(0) = 0.02028920000001  argmin   =  61   wrote out/x.csv
$ printf 'a\\nb\\nc\\nd\\n'
a
...
d
$ mkdir -p out && echo 0.5 > out/v.txt && sh -c 'echo "bad input" >&2; exit 2'
bad input
exit status 2
```

A later block sees earlier files; tolerance from a directive; table borders may change width:

<!-- readme-test: rtol=1e-2 -->
```console
$ cat out/v.txt; echo "┏━━━━━┓ 1.0e-60"
0.501
┏━━┓ 1.001e-60
```

<!-- readme-test: reflow -->
```console
$ printf '{\\n  "a": 1,\\n  "b": 2.5\\n}\\n'
{"a": 1, "b": 2.5}
```

<!-- readme-test: skip-output -->
```console
$ date
Mon Jan  1 00:00:00 UTC 2001
```

<!-- readme-test: skip -->
```console
$ this-command-does-not-exist
```

```console
scripts/demo   # a list of commands, not a session
```

```python
import json
print(json.dumps({"x": 1.0}))
```
<!-- readme-test: output -->
```text
{"x": 1.0000000001}
```

```yaml
key: value   # other blocks are not run
```
"""


def _run(markdown, tmp_path):
    return rr.run_markdown(markdown, repo=REPO, scratch_root=tmp_path)


def test_runner_passes_matching_examples(tmp_path):
    report = _run(PASSING, tmp_path)
    assert report.ok, report.summary(verbose=True)
    assert [r.status for r in report.results] == [
        "passed",
        "passed",
        "passed",
        "passed",
        "skipped",
        "not-a-session",
        "passed",
    ]
    assert report.executed == 5
    assert "1 skipped" in report.summary() and "1 console blocks without commands" in report.summary()
    assert not (REPO / "out" / "v.txt").exists()  # outputs land in the scratch folder


@pytest.mark.parametrize(
    "block, reason",
    [
        ("```console\n$ echo 'p(0) = 0.0202892'\np(0) = 0.0202893\n```", "relative difference"),
        ("```console\n$ echo 'U-shaped: no'\nU-shaped: yes\n```", "text differs"),
        ("```console\n$ echo one\none\ntwo\n```", "expected line 2 is missing"),
        ("```console\n$ printf 'one\\ntwo\\n'\none\n```", "unexpected extra output"),
        ("```console\n$ sh -c 'echo x; exit 2'\nx\n```", "exit status 2, expected 0"),
        ("```console\n$ echo x\nx\nexit status 2\n```", "exit status 0, expected 2"),
        ("```console\n$ printf 'a\\nb\\n'\n...\nc\n```", "around an '...' line"),
        ("<!-- readme-test: rtol=1e-3 -->\n```console\n$ echo 1.0\n1.01\n```", "relative difference"),
        ("```python\nraise SystemExit(3)\n```", "exit status 3, expected 0"),
        ("```python\nprint(2.0)\n```\n<!-- readme-test: output -->\n```\n3.0\n```", "relative difference"),
        ("<!-- readme-test: reflow -->\n```console\n$ printf 'a\\nb\\n'\na c\n```", "text differs"),
    ],
)
def test_runner_catches_mismatch(tmp_path, block, reason):
    report = _run("# Synthetic\n\n" + block + "\n", tmp_path)
    assert not report.ok and report.executed == 1
    assert reason in report.summary(), report.summary()


@pytest.mark.parametrize(
    "block, reason",
    [
        ("```\n$ echo x\nx\n```", "only ```console blocks are run"),
        ("```bash\n$ echo x\nx\n```", "only ```console blocks are run"),
        ("<!-- readme-test: rtool=1e-3 -->\n```console\n$ echo 1\n1\n```", "unknown readme-test option"),
        ("```console\nx\n$ echo x\n```", "output before its first"),
        ("<!-- readme-test: output -->\n```\nx\n```", "does not directly follow a python block"),
    ],
)
def test_runner_rejects_unchecked_blocks(tmp_path, block, reason):
    report = _run("# Synthetic\n\n" + block + "\n", tmp_path)
    assert not report.ok and reason in report.summary(), report.summary()


def test_number_and_path_normalisation():
    assert rr.line_mismatch("a 1e-09 b", "a 1.0e-9 b", 1e-6, 0) is None
    assert rr.line_mismatch("n = 61", "n = 62", 1e-6, 0) is not None
    assert rr.line_mismatch("x 0", "x 4.4e-16", 1e-6, 1e-15) is None
    assert rr.normalise("wrote /tmp/pytest-7/out/profile.csv, b") == "wrote <tmp>, b"
    assert rr.normalise("  a\t  b  ") == "a b"


def test_readme_examples(tmp_path):
    script = Path(sys.executable).parent / "posbias"
    assert script.exists(), f"README commands run {script}; install the package into this environment"
    report = rr.run_file(REPO / "README.md", scratch_root=tmp_path)
    summary = report.summary()
    skipped = report.of("skipped")
    if skipped:  # allowed only for blocks that cannot run here, but never silently
        warnings.warn("README blocks skipped: " + ", ".join(r.block.label for r in skipped), stacklevel=2)
    print(summary)
    assert report.ok, summary
    assert report.executed >= MIN_EXECUTED_BLOCKS, summary
    python = [r for r in report.results if r.block.kind == "python" and r.status == "passed"]
    assert len(python) >= MIN_PYTHON_BLOCKS, "README.md needs a runnable ```python example\n" + summary


def test_example_inputs(tmp_path):
    """examples/ (inputs the README uses): the kernel files are what examples/make_kernels.py
    makes, the kernels are causal and row-stochastic, small.yaml loads, bad-config.yaml does not."""
    import subprocess

    import numpy as np

    from posbias import config
    from posbias.errors import UserError

    examples = REPO / "examples"
    done = subprocess.run([sys.executable, examples / "make_kernels.py", "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with np.load(examples / "kernels.npz") as data:
        kernels, lambdas = data["kernels"], data["lambdas"]
    assert kernels.shape == (4, 16, 16) and kernels.dtype == np.float64 and lambdas.shape == (4,)
    assert np.all(kernels >= 0) and np.all(np.triu(kernels, 1) == 0)
    assert np.max(np.abs(kernels.sum(axis=2) - 1)) <= 1e-12

    small = config.load(examples / "small.yaml")
    assert small.num_tokens == 64
    with pytest.raises(UserError, match=r"bad-config.yaml: attention_config.alibi_slopes\[0\]\[1\]"):
        config.load(examples / "bad-config.yaml")


DOC_PAGES = sorted((REPO / "docs").glob("*.md"))


def _executable(page: Path) -> int:
    """Blocks the runner executes on ``page``: console sessions and python blocks, none skipped."""
    blocks, errors = rr.parse(page.read_text(encoding="utf-8"))
    assert not errors, errors
    return sum(
        1 for b in blocks if (b.kind == "python" or (b.kind == "console" and b.commands)) and "skip" not in b.options
    )


@pytest.mark.parametrize("page", DOC_PAGES, ids=[p.name for p in DOC_PAGES])
def test_docs_examples(page, tmp_path):
    """Every console session and python block of every docs page runs and prints what the page shows."""
    report = rr.run_file(page, scratch_root=tmp_path)
    assert report.ok, report.summary()
    assert report.executed == _executable(page), report.summary()
    assert not report.of("skipped"), report.summary()


def test_docs_keep_their_examples():
    """The README's manual moved into docs/ (issue 20): its executed examples moved with it."""
    total = sum(_executable(page) for page in DOC_PAGES)
    assert total >= MIN_DOCS_EXECUTED_BLOCKS, total
