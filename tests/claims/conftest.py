"""``memoised_certificates``: each certificate's result computed once per test process, for the tests of
``proofs --check``'s other parts (a sabotaged claim statement, a missing or uncited certificate, a
proof file without citations), which otherwise re-run all 43 certificates (about 8 s) each time.

The results are real: the first such test in a process runs every certificate through the unchanged
``run_certificate``; later ones reuse a result only for the same name *and* the same function (a test
that plants a failing certificate gets its planted function run). The certificates themselves are
run unmemoised by ``test_proofs.py::test_check_passes_on_the_repository_proofs`` and, claim by claim,
``test_theorem_claims.py::test_claim_certificates_exist_and_hold``.
"""

from __future__ import annotations

import pytest

from posbias.theorem import claims
from posbias.theorem.certificate import Check

_RESULTS: dict[tuple[str, object], Check] = {}


@pytest.fixture
def memoised_certificates(monkeypatch):
    real = claims.run_certificate

    def run(name: str, registry: claims.Registry | None = None) -> Check:
        reg = registry if registry is not None else claims.certificate_registry()
        key = (name, reg.certificates.get(name))
        if key not in _RESULTS:
            _RESULTS[key] = real(name, reg)
        return _RESULTS[key]

    monkeypatch.setattr(claims, "run_certificate", run)
