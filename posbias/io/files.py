"""How posbias writes a run's files: all of them or none, with the user's permissions.

``write_run(out_dir, texts, figures)`` renders every file into a fresh hidden staging
folder inside ``out_dir`` (``.posbias-run-PID-*``, same file system) first; only when all
are complete does it move them into ``out_dir`` (each by an atomic rename, under an
exclusive lock on the folder), so an error, a full disk or a kill while rendering leaves
``out_dir`` as it was (a folder it had to create is removed again), and two runs writing
into one folder at once leave the complete set of one of them, never a mix. Files of the
same set left by an earlier run and not written by this one (``FILE_SETS``) are removed
under the same lock. A staging folder left behind by a killed run (its process is gone)
is removed by the next run. Files get the permissions the user's umask gives a new file
(not mkstemp's 0600), also when they replace existing ones.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from posbias.errors import UserError
from posbias.runtime import interrupt


def file_mode() -> int:
    """The permissions the user's umask gives a new file (0o666 minus the umask)."""
    return 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


ROLLOUT_FILES = ("profile.csv", "summary.json", "profile.png", "log_profile.csv", "diagonal.csv", "matrix.csv")
DEMO_FILES = ("profiles.png", "summaries.md", "summaries.json")
COMPARE_FILES = ("compare.json", "compare.png")
FIT_FILES = ("fit.json", "fitted_profile.csv", "fit.png")
BIAS_FIT_FILES = ("fitted_bias.json", "fitted_bias.csv", "fitted_bias_profile.csv")
MEASURE_FILES = (
    "rollout.yaml",
    "kernels.npz",
    "attention.npz",
    "influence.csv",
    "lambda.csv",
    "content.csv",
    "measure.json",
    "lambda.png",
    "bias_fit.json",
)
HF_MEASURE_FILES = ("config.yaml", "kernels.npz", "influence.csv", "lambdas.csv", "report.json", "bias_fit.json")
VALIDATE_FILES = ("report.json", "report.md", "validate.png", "profiles/*/*.csv", "kernels/*.npz")
FILE_SETS = (
    ROLLOUT_FILES,
    DEMO_FILES,
    COMPARE_FILES,
    FIT_FILES,
    BIAS_FIT_FILES,
    MEASURE_FILES,
    HF_MEASURE_FILES,
    VALIDATE_FILES,
)
"""The files one run of a command may write (``*``: any name within one folder, e.g. validate's
profiles/<N>/<panel>.csv). A run that writes a file of a set removes the rest of that set left by an
earlier run (e.g. diagonal.csv of an earlier --diagonal run, or profiles/12/ of an earlier
validate at other lengths), also of another command's set that shares the file (measure's
kernels.npz, report.json), so the folder always holds the files of one run only."""


class OutFolderError(UserError):
    """The output folder cannot take the run: ``label`` (the flag or setting that named it) ``folder``:
    ``detail``. A caller whose folder came from elsewhere (a config's save_dir) names that instead
    (``relabelled``)."""

    def __init__(self, folder: Path, detail: str, label: str = "--out"):
        super().__init__(f"{label} {folder}: {detail}")
        self.folder, self.detail = folder, detail

    def relabelled(self, label: str) -> OutFolderError:
        return OutFolderError(self.folder, self.detail, label)


def _fail(out_dir: Path, what: str, exc: BaseException | None = None) -> OutFolderError:
    reason = "" if exc is None else f" ({getattr(exc, 'strerror', None) or exc})"
    return OutFolderError(out_dir, f"{what}{reason}")


def prepare(out_dir: Path) -> list[Path]:
    """Make ``out_dir`` (and missing parents), refusing (UserError, one line) a path that is a file,
    too long, or not writable; return the folders created, innermost last (``remove_created`` undoes it).

    Another posbias process may create the same folder, or remove one it created (``check_writable``
    undoing its probe), at the same moment: the type is read with one ``stat`` (never an exists/is-dir
    pair that a removal can fall between), and a folder that vanishes under the creation is created
    again, a few times, so only a path that really is something else is refused."""
    vanished = None  # the folders missing when a creation last failed for want of its parent
    for _ in range(_RACE_RETRIES):
        try:
            try:
                kind = os.stat(out_dir).st_mode
            except FileNotFoundError:
                kind = None
            if kind is not None and not stat.S_ISDIR(kind):
                raise _fail(out_dir, "exists and is not a folder")
            missing = []
            folder = out_dir
            while not os.path.lexists(folder):
                missing.append(folder)
                if folder.parent == folder:
                    break
                folder = folder.parent
            _make_folders(out_dir, missing)
        except FileExistsError as exc:
            if os.path.lexists(out_dir):  # a dangling link, or a file made meanwhile: refused
                raise _fail(out_dir, "cannot create the folder", exc) from None
            continue  # created and removed again by another process between the two calls
        except FileNotFoundError as exc:
            if not os.path.isdir(folder):  # the nearest existing parent is no folder (e.g. a dangling link)
                raise _fail(out_dir, "cannot create the folder", exc) from None
            if vanished == missing:  # the same again: the file system refuses (/proc/x), no race
                raise _fail(out_dir, "cannot create the folder", exc) from None
            vanished = missing
            continue  # a folder made here was removed by another process meanwhile: all again
        except OSError as exc:
            raise _fail(out_dir, "cannot create the folder", exc) from None
        except RecursionError:  # not expected (no recursion above); one line, never a traceback
            raise _fail(out_dir, f"cannot create the folder (nested {len(missing)} folders deep)") from None
        break
    else:
        raise _fail(out_dir, f"cannot create the folder (removed by another process {_RACE_RETRIES} times)")
    if not os.access(out_dir, os.W_OK | os.X_OK):
        remove_created(missing[::-1])
        raise _fail(out_dir, "the folder is not writable")
    return missing[::-1]


def _make_folders(out_dir: Path, missing: list[Path]) -> None:
    """Create the missing parents (``missing`` lists ``out_dir`` and them, innermost first, as ``prepare``
    finds them) outermost first, one ``os.mkdir`` each, then ``out_dir`` itself: ``Path.mkdir(parents=True)``
    recurses once per missing parent, and a path a thousand folders deep (legal while it is shorter than
    PATH_MAX) exceeded Python's recursion limit. A parent another process made meanwhile is accepted; a
    file in its place raises FileExistsError. On an error the folders made here are removed again."""
    made: list[Path] = []
    try:
        for folder in reversed(missing[1:]):
            try:
                os.mkdir(folder)
                made.append(folder)
            except FileExistsError:
                if not os.path.isdir(folder):
                    raise
        out_dir.mkdir(exist_ok=True)
    except OSError:
        remove_created(made)
        raise


_RACE_RETRIES = 8
"""How often ``prepare`` and the staging step start again when another process removes the
folder under them (each retry follows a removal, so the loop ends unless removals keep coming)."""


def remove_created(folders: list[Path]) -> None:
    """Undo prepare: remove the folders it created, if still empty (innermost first)."""
    for folder in reversed(folders):
        try:
            os.rmdir(folder)
        except OSError:
            return


def _retired(out_dir: Path, names: list[str]) -> list[Path]:
    """The files in ``out_dir`` of every set (``FILE_SETS``) that shares a name with ``names``,
    less ``names`` themselves."""
    from fnmatch import fnmatchcase

    written, old = set(names), set()
    for family in FILE_SETS:
        if any(fnmatchcase(name, member) for name in names for member in family):
            old.update(
                p for member in family for p in out_dir.glob(member) if p.relative_to(out_dir).as_posix() not in written
            )
    return sorted(old)


def _remove_retired(out_dir: Path, names: list[str], old_set=()) -> None:
    """Unlink ``_retired`` files and ``old_set`` (names of an earlier set, from ``write_run``'s
    ``retire``), then the folders (profiles/12/) they leave empty."""
    for old in [*_retired(out_dir, names), *(out_dir / name for name in old_set)]:
        if old.is_file() or old.is_symlink():
            old.unlink()
            folder = old.parent
            while folder != out_dir and not any(folder.iterdir()):
                folder.rmdir()
                folder = folder.parent


STAMP_KEY = "posbias-set"
"""PNG text key holding ``set_stamp`` of the text files written with the figure: which run a
figure belongs to can be checked from the files alone (tests/hostile/test_hostile_cli.py does)."""


def _stamp(files: dict[str, tuple[int, Iterable[bytes]]]) -> str:
    """SHA-256 over each name, sorted, and its content (name -> (size in bytes, the content's blocks)), each
    preceded by its length."""
    import hashlib

    digest = hashlib.sha256()
    for name in sorted(files):
        encoded = name.encode("utf-8")
        size, blocks = files[name]
        digest.update(len(encoded).to_bytes(8, "little") + encoded + size.to_bytes(8, "little"))
        for block in blocks:
            digest.update(block)
    return digest.hexdigest()


def set_stamp(texts: dict[str, str | bytes]) -> str:
    """SHA-256 over the names and contents of a run's text (and binary) files."""
    encoded = {name: part.encode("utf-8") if isinstance(part, str) else part for name, part in texts.items()}
    return _stamp({name: (len(data), [data]) for name, data in encoded.items()})


def _blocks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            yield block


def _files_stamp(folder: Path, names: list[str]) -> str:
    """``set_stamp`` of the files ``names`` as written in ``folder``, read back in blocks (a text written
    chunk by chunk is never held whole)."""
    return _stamp({name: ((folder / name).stat().st_size, _blocks(folder / name)) for name in names})


class Chunked(Protocol):
    """A text produced in pieces (``posbias.io.output.PositionTable``): written without being held whole."""

    def chunks(self) -> Iterator[str]: ...


def _write_text(path: Path, text: str | Chunked) -> None:
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
        return
    with open(path, "w", encoding="utf-8") as f:
        for chunk in text.chunks():
            f.write(chunk)


def check_out(out_dir: Path, names=()) -> None:
    """Refuse, before any work, an ``out_dir`` that ``write_run`` would refuse after it: a path that is
    not a folder, or one of ``names`` there that is not a regular file (UserError, one line)."""
    out_dir = Path(out_dir)
    try:
        if os.path.lexists(out_dir) and not out_dir.is_dir():
            raise _fail(out_dir, "exists and is not a folder")
        for name in names:
            target = out_dir / name
            if os.path.lexists(target) and not (target.is_file() or target.is_symlink()):
                raise _fail(out_dir, f"{name} exists and is not a regular file")
    except OSError as exc:
        raise _fail(out_dir, "cannot use this path", exc) from None


def _bbox(fig) -> str | None:
    """savefig's ``bbox_inches``: a figure laid out by a layout engine (posbias's figures use the constrained
    layout, which fits every label and legend inside the figure) is saved as it is; any other is cropped to its
    artists ("tight", which draws the whole figure once more: 0.4 to 0.9 s of a validate figure)."""
    return None if fig.get_layout_engine() is not None else "tight"


def write_run(
    out_dir: Path,
    texts: Mapping[str, str | Chunked],
    figures: dict | None = None,
    binaries: dict[str, bytes] | None = None,
    retire=None,
) -> list[Path]:
    """Write ``texts`` (name -> text, or a ``Chunked`` text written piece by piece), ``binaries`` (name ->
    bytes, e.g. .npz) and ``figures`` (name -> matplotlib Figure, PNG) into ``out_dir`` as one set; returns
    the written paths in order. On any failure raise UserError (one line) and leave ``out_dir`` as it was
    (absent if it was absent). ``retire``: ``out_dir -> names`` of an earlier set (e.g. read
    from its manifest), called under the folder lock; those not written now are removed."""
    out_dir = Path(out_dir)
    figures = figures or {}
    binaries = binaries or {}
    names = [*texts, *binaries, *figures]
    for name in names:
        target = out_dir / name
        try:
            odd = os.path.lexists(target) and not (target.is_file() or target.is_symlink())
        except OSError as exc:
            raise _fail(out_dir, "cannot use this path", exc) from None
        if odd:
            raise _fail(out_dir, f"{name} exists and is not a regular file")
    mode = file_mode()
    staging = None
    created: list[Path] = []
    try:
        created, staging = _prepared(
            out_dir, lambda: Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=out_dir))
        )
        _remove_stale_staging(out_dir)
        for name in names:  # names may hold sub-folders (profiles/128/a.csv)
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            _write_text(staging / name, text)
        for name, data in binaries.items():
            (staging / name).write_bytes(data)
        stamp = _files_stamp(staging, [*texts, *binaries])
        for name, fig in figures.items():
            with warnings.catch_warnings():  # layout notes (e.g. "constrained_layout not applied") are
                warnings.simplefilter("ignore")  # not the user's business: stderr stays one line or empty
                fig.savefig(staging / name, dpi=150, bbox_inches=_bbox(fig), format="png", metadata={STAMP_KEY: stamp})
        for name in names:
            os.chmod(staging / name, mode)
        written = []
        interrupt.check()  # Ctrl-C seen on the way (perhaps swallowed by a callback): no set is committed
        with interrupt.deferred(), locked(out_dir):  # the set moves into place whole, Ctrl-C or not
            for name in names:
                (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
                os.replace(staging / name, out_dir / name)
                written.append(out_dir / name)
            old_set = [] if retire is None else [n for n in retire(out_dir) if n not in names]
            _remove_retired(out_dir, names, old_set)
        return written
    except OSError as exc:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
            staging = None
        remove_created(created)
        raise _fail(out_dir, "cannot write", exc) from None
    except BaseException:  # an interrupt: nothing of this run stays (an earlier set is untouched)
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
            staging = None
        remove_created(created)
        raise
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


STAGING_PREFIX = ".posbias-run-"


def check_writable(out_dir: Path) -> None:
    """Raise UserError (one line) unless ``write_run`` could create files in ``out_dir``: checked
    before a long computation by creating the folder and a probe file, then removing both (the
    folder is left as it was)."""
    out_dir = Path(out_dir)
    created: list[Path] = []
    try:
        created, (fd, probe) = _prepared(
            out_dir, lambda: tempfile.mkstemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-probe-", dir=out_dir)
        )
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise _fail(out_dir, "cannot write", exc) from None
    finally:
        remove_created(created)


def _prepared(out_dir: Path, make):
    """``prepare(out_dir)``, then ``make()`` (a staging folder or probe inside it); where another
    process removed the folder between the two (FileNotFoundError), both again (``_RACE_RETRIES``).
    Returns the created folders and what ``make`` returned."""
    for attempt in range(_RACE_RETRIES):
        created = prepare(out_dir)
        try:
            return created, make()
        except FileNotFoundError:
            if attempt == _RACE_RETRIES - 1:
                raise
        except BaseException:
            remove_created(created)
            raise
    raise AssertionError("unreachable")


@contextmanager
def exclusive_folder(out_dir: Path):
    """For a writer that fills ``out_dir`` over a long time (``posbias train``): create the
    folder (and missing parents), hold its exclusive lock without waiting (a folder another
    process holds is refused, UserError) and, when the block raises, remove the folders
    this call created if they are empty again."""
    out_dir = Path(out_dir)
    created = prepare(out_dir)
    try:
        with locked(out_dir, wait=False):
            yield out_dir
    except BaseException:
        remove_created(created)
        raise


@contextmanager
def locked(out_dir: Path, wait: bool = True):
    """An exclusive flock on the folder itself (no lock file left behind), held for the block: the
    one lock of posbias's output sets (``write_run``'s moves, a sweep's manifest claim and merge).
    With ``wait=False`` a folder another process holds is refused (UserError) instead of waited for."""
    fd = os.open(out_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise _fail(out_dir, "another posbias process is writing into this folder") from None
        yield
    finally:
        os.close(fd)


def _remove_stale_staging(out_dir: Path) -> None:
    """Remove staging folders whose writing process no longer exists (a kill -9 mid-run)."""
    for folder in out_dir.glob(STAGING_PREFIX + "*"):  # glob ignores unreadable entries
        pid = folder.name[len(STAGING_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (its leftovers are not stale)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def atomic_write(path: Path, write, *, binary: bool = True) -> None:
    """Call ``write(handle)`` on a temporary file beside ``path``, fsync it, give it the user's
    permissions and rename it over ``path``: readers see the old file or the new one, never a
    part (a kill -9 leaves at most a hidden ``.NAME.*.tmp``)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
