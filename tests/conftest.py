"""Shared test setup: float64 JAX for the tests' own arrays, strict dtype promotion, hypothesis profiles,
the reference data location.

posbias scopes float64 to its own calls; the tests switch it on globally for the
arrays they build themselves (an explicit test-suite setting, not a side effect of
importing posbias; tests/test_api.py checks a caller's float32 stays float32).

Hypothesis profiles (select with HYPOTHESIS_PROFILE): ``ci`` (default) is
deterministic (derandomize, no database, no deadline); ``deep`` runs many more
examples for verification runs.
"""

import os
from pathlib import Path

import jax
import pytest
from hypothesis import HealthCheck, settings

jax.config.update("jax_enable_x64", True)
# Strict promotion (issue 20): an operation mixing dtypes (float64 by int64, a weak Python scalar aside)
# raises instead of promoting silently, so the library's casts are explicit. Tests only, never the library.
jax.config.update("jax_numpy_dtype_promotion", "strict")

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


# The slow tier (issue 20): whole-process, multi-process and multi-device runs, documentation and wheel
# builds, language-model training, Hugging Face scale and real-model checks. ``scripts/test --fast`` runs
# the rest (``-m "not slow"``); CI runs everything.
SLOW_FILES = {
    "test_readme.py": "executes every README and docs example",
    "test_docs_site.py": "builds the documentation site",
    "test_wheel.py": "builds a wheel and installs it into a fresh environment",
    "test_sweep_distributed.py": "two jax.distributed processes",
    "test_xla_parallel.py": "fake multi-device XLA runs",
    "test_lm.py": "trains the language model",
    "test_validate.py": "trains and validates the language model",
    "test_validate_checkpoint.py": "validates checkpoints end to end",
    "test_validate_panels.py": "validate panels on trained models",
    "test_hf_scale.py": "Hugging Face models at scale",
    "test_hf_llama.py": "Llama-family forwards",
    "test_smollm2.py": "the real SmolLM2-135M model",
    "test_torch_backend.py": "the transformers backend",
    "test_gguf.py": "GGUF files through two readers",
    "test_hostile_cli.py": "hundreds of refused command processes",
    "test_hostile_fit_compare_train.py": "refused command processes",
    "test_hostile_measure_validate.py": "refused command processes",
    "test_hostile_out.py": "refused command processes",
    "test_hostile_sweep.py": "refused command processes",
    "test_hostile_verify.py": "refused command processes and memory limits",
    "test_fuzz_inputs.py": "command processes on fuzzed inputs",
    "test_verify.py": "whole verification runs",
    "test_power_range.py": "deep power-engine runs",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
