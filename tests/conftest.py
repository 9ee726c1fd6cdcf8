"""Shared test setup: float64 JAX for the tests' own arrays, hypothesis profiles, the reference data location.

posbias scopes float64 to its own calls; the tests switch it on globally for the
arrays they build themselves (an explicit test-suite setting, not a side effect of
importing posbias; tests/test_api.py checks a caller's float32 stays float32).

Hypothesis profiles (select with HYPOTHESIS_PROFILE): ``ci`` (default) is
deterministic (derandomize, no database, no deadline); ``deep`` runs many more
examples for verification runs.
"""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import jax

jax.config.update("jax_enable_x64", True)

settings.register_profile(
    "ci", derandomize=True, database=None, deadline=None, max_examples=40,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "deep", deadline=None, max_examples=2000, suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "official-configs").is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA} (../shared beside the checkout)")
    return SHARED_DATA
