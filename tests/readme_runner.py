"""Run the examples in a Markdown file (README.md) and compare them with the output shown.

Usage (also what ``tests/test_readme.py`` does)::

    .venv/bin/python tests/readme_runner.py [README.md ...] [-v] [--repo DIR]

prints what failed (``-v``: every block) and a count, and exits 1 if any block
fails. ``--repo`` names the checkout to mirror when the Markdown file lies
elsewhere (a draft: ``tests/readme_runner.py /tmp/draft.md --repo .``).

Conventions for authors of README.md
====================================

**Console sessions.** A fenced block whose info string is ``console`` and that
contains lines beginning with ``$ `` is a session: each ``$ COMMAND`` line is a
command, and the lines up to the next ``$ `` line (or the end of the block) are
its expected output, stdout and stderr together, as a terminal shows them::

    ```console
    $ posbias rollout ../shared/data/official-configs/no_content/bloom.yaml --out out/bloom
    ../shared/data/official-configs/no_content/bloom.yaml  (T=70, H=112, ...)
      p(0) = 0.0202892 ...
    $ head -3 out/bloom/profile.csv
    token_position,probability
    0,0.02028915884383778
    ```

- A command line ending in ``\\`` continues on the next line (a leading ``> `` on
  the continuation line is dropped).
- Each command runs in its own ``bash -c`` in the scratch folder (below), so ``cd``
  or ``export`` do not carry over to the next command; ``posbias`` resolves to the
  console script beside the running interpreter (``sys.executable``'s folder is
  put first on PATH), so it is the package under test.
- Exit status: expected 0, unless the command's output ends with a line
  ``exit status N`` (that line is not output; it states the expected status).
- A line consisting of ``...`` alone matches any number of output lines (zero or
  more), e.g. to show only the first and last lines of a long listing.
- Lines are compared after normalising whitespace (runs of blanks collapse to one
  space; leading/trailing blanks and blank lines are ignored; a run of the same
  box-drawing character collapses to one, so table borders may change width).
- Numbers (``12``, ``-0.5``, ``1.84e-60``) are compared with a relative tolerance
  (default ``rtol=1e-6``, absolute tolerance ``atol=0``); all other text must be equal.
- Paths: in the actual output, the scratch folder's absolute path is replaced by
  nothing (so absolute paths under it read as relative ones), and on both sides
  any absolute path under the system temporary folder (``/tmp/...``) reads as
  ``<tmp>``. Prefer relative output folders (``--out out/bloom``) in the README.
- A console block without any ``$ `` line (e.g. a list of commands to copy) is not
  run; the report lists it as "not a session".
- A fenced block of any other kind whose first non-blank line starts with ``$ ``
  is an error (it looks like a session but would not be checked): fence it as
  ``console``, or as ``text`` without the ``$``.

**Python blocks.** Every fenced block with info string ``python`` runs as one
script (``sys.executable FILE``) and must exit with status 0. The first python
block in the README must be a complete, runnable example (the wheel test runs it
too, from a fresh install). If the block immediately after a python block (only
blank lines between) is preceded by ``<!-- readme-test: output -->``, that block
is the python block's expected output, compared like a console command's output.

**Where commands run.** All blocks of one file run in order in one scratch
folder that mirrors the checkout: ``SCRATCH/<repo-name>/`` holds a symbolic link
to every top-level entry of the repository (``examples/``, ``proofs/``,
``scripts/``, ``.venv`` ...; not ``.git``, build outputs or earlier outputs), and
``SCRATCH/shared`` links to the ``shared`` folder beside the checkout. So a README
command is written exactly as a newcomer types it in the repository root
(``../shared/data/...``, ``examples/kernels.npz``), and files it writes under
relative paths (``out/...``, ``posbias-demo/``) land in the scratch folder, not in
the checkout; a later block sees the files an earlier block wrote.

**Directives.** An HTML comment on the last non-blank line before the opening
fence sets options for that block (space-separated; unknown options are errors)::

    <!-- readme-test: rtol=1e-3 -->        numbers to a looser relative tolerance
    <!-- readme-test: atol=1e-15 -->       and/or an absolute tolerance
    <!-- readme-test: skip-output -->      run, check exit statuses, ignore the output (timings ...)
    <!-- readme-test: reflow -->           line breaks do not matter (e.g. JSON re-wrapped for width):
                                           the whole output is compared as one line (blanks just inside
                                           brackets ignored); no '...' lines
    <!-- readme-test: timeout=600 -->      seconds per command (default 300)
    <!-- readme-test: skip -->             do not run (only for what cannot run here); reported and counted
    <!-- readme-test: output -->           this block is the expected output of the python block before it

Nothing is skipped silently: the report counts executed, skipped and
not-a-session blocks, and ``tests/test_readme.py`` asserts a minimum number of
executed blocks.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_RTOL = 1e-6
DEFAULT_TIMEOUT = 300.0

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*([^\s`]*)[^`]*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*readme-test:\s*(.*?)\s*-->\s*$")
_EXIT = re.compile(r"^exit status (\d+)$")
_NUMBER = re.compile(r"([-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)")
_BOX_RUN = re.compile(r"([\u2500-\u257f])\1+")
_TMP_PATH = re.compile(r"(?<![\w.~])" + re.escape(tempfile.gettempdir().rstrip("/")) + r"/[^\s,;:'\"()\[\]]*")

_FLAGS = {"skip", "skip-output", "output", "reflow"}
_VALUED = {"rtol", "atol", "timeout"}

# Top-level entries of the checkout not mirrored into the scratch folder.
_NOT_MIRRORED = {
    ".git",
    "build",
    "dist",
    "out",
    "posbias-demo",
    "posbias-out",
    "results",
    "runs",
    ".pytest_cache",
    ".hypothesis",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
}


class ReadmeFormatError(ValueError):
    """The Markdown breaks a convention of this runner (message names the line)."""


@dataclass
class Command:
    line: int  # 1-based line of the ``$`` in the Markdown file
    text: str
    expected: list[str]
    exit_status: int = 0


@dataclass
class Block:
    kind: str  # "console" | "python" | other info string
    line: int  # 1-based line of the opening fence
    body: str
    options: dict = field(default_factory=dict)
    commands: list[Command] = field(default_factory=list)
    expected_output: list[str] | None = None  # python: from a following ``output`` block

    @property
    def label(self) -> str:
        return f"line {self.line} ({self.kind})"


@dataclass
class BlockResult:
    block: Block
    status: str  # "passed" | "failed" | "skipped" | "not-a-session"
    messages: list[str] = field(default_factory=list)


@dataclass
class Report:
    path: str
    results: list[BlockResult]
    errors: list[str]  # convention violations found while parsing

    def of(self, status: str) -> list[BlockResult]:
        return [r for r in self.results if r.status == status]

    @property
    def executed(self) -> int:
        return len(self.of("passed")) + len(self.of("failed"))

    @property
    def ok(self) -> bool:
        return not self.errors and not self.of("failed")

    def summary(self, verbose: bool = False) -> str:
        out = []
        for r in self.results:
            if verbose or r.status != "passed":
                first = r.block.commands[0].text if r.block.commands else r.block.body.strip().split("\n")[0]
                out.append(f"{r.status.upper():14s} {self.path}:{r.block.line} ({r.block.kind}) {first[:90]}")
                out.extend("    " + m for msg in r.messages for m in msg.splitlines())
        out.extend(f"ERROR          {self.path}: {e}" for e in self.errors)
        out.append(
            f"{self.path}: {self.executed} blocks executed ({len(self.of('passed'))} passed, "
            f"{len(self.of('failed'))} failed), {len(self.of('skipped'))} skipped, "
            f"{len(self.of('not-a-session'))} console blocks without commands, {len(self.errors)} format errors"
        )
        return "\n".join(out)


# --------------------------------------------------------------------------- parsing


def _parse_options(text: str, line: int) -> dict:
    options = {}
    for word in text.split():
        key, eq, value = word.partition("=")
        if key in _FLAGS and not eq:
            options[key] = True
        elif key in _VALUED and eq:
            try:
                options[key] = float(value)
            except ValueError:
                raise ReadmeFormatError(f"line {line}: readme-test option {word!r}: expected a number") from None
        else:
            raise ReadmeFormatError(
                f"line {line}: unknown readme-test option {word!r} "
                f"(known: {', '.join(sorted(_FLAGS))}, {', '.join(k + '=X' for k in sorted(_VALUED))})"
            )
    return options


def _split_expected(lines: list[str]) -> tuple[list[str], int]:
    """Drop blank lines; a final ``exit status N`` line gives the expected status."""
    kept = [ln for ln in lines if ln.strip()]
    status = 0
    if kept and (m := _EXIT.match(kept[-1].strip())):
        status = int(m.group(1))
        kept.pop()
    return kept, status


def _parse_session(block: Block) -> None:
    lines = block.body.split("\n")
    commands: list[Command] = []
    if not any(line.startswith("$ ") for line in lines):
        return  # not a session (e.g. a list of commands to copy)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            at = block.line + 1 + i
            text = line[2:]
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                nxt = lines[i]
                text = text[:-1] + "\n" + (nxt[2:] if nxt.startswith("> ") else nxt)
            commands.append(Command(at, text.strip(), []))
        elif commands:
            commands[-1].expected.append(line)
        elif line.strip():
            raise ReadmeFormatError(
                f"line {block.line + 1 + i}: console block has output before its first '$ ' command"
            )
        i += 1
    for c in commands:
        c.expected, c.exit_status = _split_expected(c.expected)
    block.commands = commands


def parse(markdown: str) -> tuple[list[Block], list[str]]:
    """Fenced blocks of ``markdown`` with their directives; and convention errors."""
    blocks: list[Block] = []
    errors: list[str] = []
    lines = markdown.split("\n")
    last_nonblank = ""
    i = 0
    pending_output_for: Block | None = None
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                last_nonblank = lines[i]
                pending_output_for = None if not _DIRECTIVE.match(lines[i]) else pending_output_for
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).lower()
        start = i
        body = []
        i += 1
        while i < len(lines):
            close = lines[i].strip()
            if close.startswith(fence[0] * len(fence)) and set(close) == {fence[0]}:
                break
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        else:
            errors.append(f"line {start + 1}: fenced block is never closed")
        i += 1
        block = Block(info or "(none)", start + 1, "\n".join(body))
        d = _DIRECTIVE.match(last_nonblank)
        try:
            block.options = _parse_options(d.group(1), start) if d else {}
            if block.options.get("output"):
                if pending_output_for is None:
                    raise ReadmeFormatError(f"line {start + 1}: 'output' block does not directly follow a python block")
                pending_output_for.expected_output = [ln for ln in body if ln.strip()]
                last_nonblank, pending_output_for = "```", None
                continue
            if info == "console":
                _parse_session(block)
            elif info != "python":
                first = next((ln for ln in body if ln.strip()), "")
                if first.startswith("$ "):
                    raise ReadmeFormatError(
                        f"line {start + 1}: block fenced as ```{info} starts with a '$ ' command but only "
                        "```console blocks are run; fence it as ```console (or drop the '$ ')"
                    )
        except ReadmeFormatError as exc:
            errors.append(str(exc))
            last_nonblank = "```"
            continue
        blocks.append(block)
        pending_output_for = block if info == "python" else None
        last_nonblank = "```"
    return blocks, errors


# --------------------------------------------------------------------------- comparing


def normalise(line: str, scratch: Path | None = None) -> str:
    if scratch is not None:
        line = line.replace(str(scratch) + "/", "").replace(str(scratch), ".")
    line = _TMP_PATH.sub("<tmp>", line)
    line = _BOX_RUN.sub(r"\1", line)
    return " ".join(line.split())


def _reflow(lines: list[str]) -> str:
    """All lines as one, without blanks just inside brackets (``{ "a"`` reads as ``{"a"``)."""
    text = " ".join(ln for ln in lines if ln)
    return re.sub(r"\s+(?=[\]})])", "", re.sub(r"(?<=[\[{(])\s+", "", text))


def _close(a: str, b: str, rtol: float, atol: float) -> bool:
    x, y = float(a), float(b)
    if x == y:
        return True
    return math.isfinite(x) and math.isfinite(y) and abs(x - y) <= atol + rtol * max(abs(x), abs(y))


def line_mismatch(expected: str, actual: str, rtol: float, atol: float) -> str | None:
    """None when the (normalised) lines agree, else the reason."""
    e, a = _NUMBER.split(expected), _NUMBER.split(actual)
    if len(e) != len(a):
        return "text differs"
    for k, (x, y) in enumerate(zip(e, a)):
        if k % 2 == 0:
            if x != y:
                return "text differs"
        elif not _close(x, y, rtol, atol):
            rel = abs(float(x) - float(y)) / max(abs(float(x)), abs(float(y)))
            return f"number {x} vs {y}: relative difference {rel:.2g} > rtol {rtol:g} (atol {atol:g})"
    return None


def compare(expected: list[str], actual: list[str], rtol: float, atol: float) -> str | None:
    """Match normalised lines, ``...`` matching any run of lines; None or a readable diff."""
    exp = [ln for ln in expected if ln]
    act = [ln for ln in actual if ln]
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        if (i, j) in memo:
            return memo[i, j]
        if i == len(exp):
            ok = j == len(act)
        elif exp[i] == "...":
            ok = any(match(i + 1, k) for k in range(j, len(act) + 1))
        else:
            ok = j < len(act) and line_mismatch(exp[i], act[j], rtol, atol) is None and match(i + 1, j + 1)
        memo[i, j] = ok
        return ok

    if match(0, 0):
        return None
    # Explain the first difference along the straightforward alignment.
    j = 0
    for i, e in enumerate(exp):
        if e == "...":
            return "output does not match around an '...' line:\n" + _show(exp, act)
        if j >= len(act):
            return f"expected line {i + 1} is missing: {e!r}\n" + _show(exp, act)
        why = line_mismatch(e, act[j], rtol, atol)
        if why:
            return f"line {i + 1}: {why}\n  expected: {e}\n  actual:   {act[j]}\n" + _show(exp, act)
        j += 1
    return f"unexpected extra output from line {j + 1}: {act[j]!r}\n" + _show(exp, act)


def _show(exp: list[str], act: list[str], limit: int = 40) -> str:
    cut = lambda ls: ls[:limit] + ([f"... ({len(ls) - limit} more lines)"] if len(ls) > limit else [])  # noqa: E731
    return (
        "  --- expected\n"
        + "".join(f"  | {ln}\n" for ln in cut(exp))
        + "  --- actual\n"
        + "".join(f"  | {ln}\n" for ln in cut(act))
    )


# --------------------------------------------------------------------------- running


def make_scratch(repo: Path, root: Path) -> Path:
    """``root/<repo-name>/`` mirroring ``repo`` by symbolic links, ``root/shared`` -> ``repo/../shared``."""
    repo = repo.resolve()
    work = root / repo.name
    work.mkdir(parents=True, exist_ok=True)
    for entry in repo.iterdir():
        if entry.name in _NOT_MIRRORED or entry.name.endswith(".egg-info"):
            continue
        link = work / entry.name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(entry)
    if not (work / ".venv").exists():
        (work / ".venv").symlink_to(Path(sys.prefix))
    shared = repo.parent / "shared"
    if shared.exists() and not (root / "shared").exists():
        (root / "shared").symlink_to(shared)
    return work


def command_env() -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONIOENCODING"] = "utf-8"
    env.setdefault("COLUMNS", "100")
    env.pop("PYTHONPATH", None)
    return env


def _run(argv: list[str], cwd: Path, timeout: float) -> tuple[int, list[str]]:
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=command_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        text = (exc.stdout or b"").decode("utf-8", "replace")
        return -1, text.splitlines() + [f"<timed out after {timeout:g} s>"]
    return done.returncode, done.stdout.decode("utf-8", "replace").splitlines()


def run_block(block: Block, cwd: Path) -> BlockResult:
    opts = block.options
    if opts.get("skip"):
        return BlockResult(block, "skipped", ["readme-test: skip"])
    if block.kind == "console" and not block.commands:
        return BlockResult(block, "not-a-session")
    rtol, atol = opts.get("rtol", DEFAULT_RTOL), opts.get("atol", 0.0)
    timeout = opts.get("timeout", DEFAULT_TIMEOUT)
    messages = []
    if block.kind == "python":
        script = cwd / f".readme_block_line{block.line}.py"
        script.write_text(block.body + "\n", encoding="utf-8")
        status, out = _run([sys.executable, script.name], cwd, timeout)
        runs = [(f"python block at line {block.line}", block.expected_output, 0, status, out)]
    else:
        runs = []
        for c in block.commands:
            status, out = _run(["bash", "-c", c.text], cwd, timeout)
            runs.append((f"$ {c.text}  (line {c.line})", c.expected, c.exit_status, status, out))
    for title, expected, want, status, out in runs:
        problems = []
        if status != want:
            tail = "".join(f"  | {ln}\n" for ln in out[-15:])
            problems.append(f"exit status {status}, expected {want}; last output lines:\n{tail}")
        if expected is not None and not opts.get("skip-output"):
            exp, act = [normalise(ln) for ln in expected], [normalise(ln, cwd) for ln in out]
            if opts.get("reflow"):  # line breaks do not matter: one line each
                exp, act = [_reflow(exp)], [_reflow(act)]
            diff = compare(exp, act, rtol, atol)
            if diff and not problems:
                problems.append(diff)
        if problems:
            messages.append(title + "\n" + "\n".join(problems))
    return BlockResult(block, "failed" if messages else "passed", messages)


def run_markdown(markdown: str, *, repo: Path, scratch_root: Path, name: str = "README.md") -> Report:
    blocks, errors = parse(markdown)
    cwd = make_scratch(repo, scratch_root)
    results = [run_block(b, cwd) for b in blocks if b.kind in ("console", "python")]
    return Report(name, results, errors)


def run_file(path: Path, *, scratch_root: Path | None = None, repo: Path | None = None) -> Report:
    """Run ``path``'s blocks in a scratch mirror of ``repo`` (default: the nearest folder above the
    file that holds a pyproject.toml, else the file's folder), so a docs page's commands run from
    the repository root as a newcomer types them."""
    path = Path(path).resolve()
    if repo is None:
        repo = next((d for d in path.parents if (d / "pyproject.toml").exists()), path.parent)
    repo = Path(repo)
    if scratch_root is None:
        scratch_root = Path(tempfile.mkdtemp(prefix="readme-run-"))
    return run_markdown(path.read_text(encoding="utf-8"), repo=repo, scratch_root=scratch_root, name=path.name)


def first_python_block(markdown: str) -> str:
    """The first ```python block's code (the wheel test runs it); ReadmeFormatError if none."""
    blocks, _ = parse(markdown)
    for b in blocks:
        if b.kind == "python":
            return b.body + "\n"
    raise ReadmeFormatError("no ```python block (its first one must be a complete, runnable example)")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Run a Markdown file's console and python examples.")
    parser.add_argument("files", nargs="*", type=Path, default=[Path("README.md")])
    parser.add_argument("-v", "--verbose", action="store_true", help="list passed blocks too")
    parser.add_argument("--repo", type=Path, help="checkout to mirror (default: each file's folder)")
    args = parser.parse_args(argv)
    ok = True
    for f in args.files:
        root = Path(tempfile.mkdtemp(prefix="readme-run-"))
        try:
            report = run_file(f, scratch_root=root, repo=args.repo)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(report.summary(args.verbose))
        ok &= report.ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
