"""``posbias proofs --check``: every proof's cited certificates exist and hold, and the
command fails loudly otherwise. Also: importing ``theorem`` never imports JAX."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from posbias.cli.proofs import PROOFS_DIR, cited_certificates, proofs_command
from posbias.theorem.certificate import Check
from posbias.theorem.claims import CLAIMS, Registry, certificate_registry

REPO = Path(__file__).resolve().parents[2]


def test_every_claim_has_its_proof_file_in_the_default_folder(capsys):
    """Every claim's proof file is listed by ``posbias proofs --list`` (default --dir) with that claim."""
    assert proofs_command(["--list"]) == 0
    listed = {line.split(":", 1)[0]: line for line in capsys.readouterr().out.splitlines()}
    for claim in CLAIMS.values():
        name = Path(claim.proof).name
        assert name in listed and claim.label in listed[name], (claim.label, name)


def test_check_passes_on_the_repository_proofs(capsys):
    assert proofs_command(["--check"]) == 0
    out = capsys.readouterr().out
    for claim in CLAIMS.values():
        for name in claim.certificates:
            assert f"pass     {name}  ({Path(claim.proof).name})" in out


def test_list(capsys):
    assert proofs_command(["--list"]) == 0
    out = capsys.readouterr().out
    assert "C2.md: claims C2(a), C2(b), C2(c)" in out


def test_citation_parser():
    text = "Proof.\nCertificate: `drift:causal-cdf-identity`\n- Certificate: `a:b` and `c:d`\nnot `x:y`\n"
    assert cited_certificates(text) == ["drift:causal-cdf-identity", "a:b", "c:d"]


@pytest.fixture
def proofs_copy(tmp_path):
    dest = tmp_path / "proofs"
    shutil.copytree(PROOFS_DIR, dest)
    return dest


def test_nonexistent_certificate_fails(proofs_copy, capsys, memoised_certificates):
    with open(proofs_copy / "C1.md", "a", encoding="utf-8") as f:
        f.write("\nCertificate: `drift:no-such-certificate`\n")
    assert proofs_command(["--check", "--dir", str(proofs_copy)]) == 1
    out, err = capsys.readouterr()
    assert "MISSING  drift:no-such-certificate  (C1.md)" in out
    assert err.startswith("posbias proofs: error:") and "does not exist" in err


def test_failing_certificate_fails(proofs_copy, capsys, memoised_certificates):
    reg = certificate_registry()
    fake = dict(reg.certificates)
    fake["drift:causal-cdf-identity"] = lambda: Check("drift:causal-cdf-identity", False, "forced failure")
    assert proofs_command(["--check", f"--dir={proofs_copy}"], registry=Registry(fake, {})) == 1
    out, err = capsys.readouterr()
    assert "FAIL     drift:causal-cdf-identity  (C1.md): forced failure" in out
    assert "does not hold" in err


def test_uncited_claim_certificate_fails(proofs_copy, capsys, memoised_certificates):
    c1 = proofs_copy / "C1.md"
    c1.write_text(
        c1.read_text(encoding="utf-8").replace(
            "Certificate: `drift:causal-cdf-identity`", "Certificate: `drift:residual-cdf-mixture`"
        )
    )
    assert proofs_command(["--check", "--dir", str(proofs_copy)]) == 1
    assert "UNCITED  drift:causal-cdf-identity  (claim C1, C1.md)" in capsys.readouterr().out


def test_missing_proof_file_and_citation_free_proof_fail(proofs_copy, capsys, memoised_certificates):
    (proofs_copy / "C6.md").unlink()
    (proofs_copy / "extra.md").write_text("# A proof that cites nothing\n")
    assert proofs_command(["--check", "--dir", str(proofs_copy)]) == 1
    out = capsys.readouterr().out
    assert "MISSING  proof C6.md for claim C6" in out
    assert "FAIL     extra.md: cites no certificate" in out


@pytest.mark.parametrize(
    "argv", [[], ["--bogus"], ["--check", "--dir", "/no/such/folder"], ["--check", "--list"], ["--check", "--dir"]]
)
def test_bad_arguments(argv, capsys):
    assert proofs_command(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("posbias proofs: error:")


def test_importing_theorem_does_not_import_jax():
    """theorem may import the pure-NumPy numerics modules (schedules, shape), never JAX."""
    code = (
        "import sys, posbias.theorem, posbias.theorem.claims, posbias.theorem.queries\n"
        "import posbias.cli.derive, posbias.cli.proofs\n"
        "from posbias.theorem.queries import derivations\n"
        "from posbias.theorem.claims import certificate_registry\n"
        "derivations(); certificate_registry()\n"
        "bad = sorted(m for m in sys.modules if m == 'jax' or m.startswith('jax.') or m == 'jaxlib'\n"
        "             or m.startswith('jaxlib.'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "", f"imported at load time: {out.stdout.strip()}"


def test_every_registered_certificate_is_cited_by_a_proof():
    reg = certificate_registry()
    assert reg.missing == {}
    cited = {name for f in PROOFS_DIR.glob("*.md") for name in cited_certificates(f.read_text(encoding="utf-8"))}
    assert set(reg.certificates) - cited == set()
