"""Shared test setup: float64 JAX, hypothesis profiles, the reference data location.

Hypothesis profiles (select with HYPOTHESIS_PROFILE): ``ci`` (default) is
deterministic (derandomize, no database, no deadline); ``deep`` runs many more
examples for verification runs.
"""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from posbias import numerics  # noqa: F401  (switches JAX to float64)

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
