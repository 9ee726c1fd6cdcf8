"""Two processes on one ``--out`` folder: one may create it, or remove the folder it created
(``check_writable`` undoing its probe), while the other prepares it (posbias/io/files.py).

CI once saw ``posbias verify C1 --out o`` refused with "exists and is not a folder" while
``posbias verify "C2(b)" --out o`` ran beside it: the folder was removed between an exists()
and an is_dir() call. These tests make both races happen on purpose, deterministically.
"""

from __future__ import annotations

import os
import tempfile
import threading

import pytest

from posbias.errors import UserError
from posbias.io import files as pf


def test_a_folder_removed_between_the_type_check_and_the_creation_is_created_again(tmp_path, monkeypatch):
    out = tmp_path / "o"
    out.mkdir()
    real_mkdir = type(out).mkdir
    calls = []

    def mkdir_after_a_removal(self, *args, **kwargs):
        if self == out and not calls:
            calls.append(1)
            os.rmdir(out)  # the other process's remove_created, just after our stat saw a folder
            raise FileExistsError(17, "File exists")  # ... and our mkdir saw it still there
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(type(out), "mkdir", mkdir_after_a_removal)
    created = pf.prepare(out)
    assert calls == [1]
    assert out.is_dir()
    assert created == [out]


def test_a_folder_removed_before_the_staging_folder_is_made_is_prepared_again(tmp_path, monkeypatch):
    out = tmp_path / "o"
    real_mkdtemp = tempfile.mkdtemp
    removed = []

    def mkdtemp_after_a_removal(*args, **kwargs):
        if not removed:
            removed.append(1)
            os.rmdir(out)  # the other process's check_writable removing the folder it had made
        return real_mkdtemp(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp_after_a_removal)
    written = pf.write_run(out, {"profile.csv": "a\n"})
    assert removed == [1]
    assert [p.name for p in written] == ["profile.csv"]
    assert sorted(os.listdir(out)) == ["profile.csv"]


def test_a_file_in_the_way_is_still_refused(tmp_path):
    (tmp_path / "o").write_text("mine\n")
    with pytest.raises(UserError, match="exists and is not a folder"):
        pf.prepare(tmp_path / "o")
    with pytest.raises(UserError, match="exists and is not a folder"):
        pf.write_run(tmp_path / "o", {"profile.csv": "a\n"})
    assert (tmp_path / "o").read_text() == "mine\n"


def test_probes_and_writes_on_one_folder_at_once_never_refuse(tmp_path):
    """One thread probes the folder (creates and removes it) 300 times while another writes a set
    into it 300 times: every call succeeds, and the folder ends holding the one set."""
    out = tmp_path / "o"
    errors: list[BaseException] = []

    def repeat(job):
        try:
            for _ in range(300):
                job()
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [
        threading.Thread(target=repeat, args=(lambda: pf.check_writable(out),)),
        threading.Thread(target=repeat, args=(lambda: pf.write_run(out, {"profile.csv": "a\n"}),)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    assert sorted(os.listdir(out)) == ["profile.csv"]
