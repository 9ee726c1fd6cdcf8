"""Shared test setup: float64 JAX for the tests' own arrays, strict dtype promotion, hypothesis profiles,
the reference data location.

posbias scopes float64 to its own calls; the tests switch it on globally for the
arrays they build themselves (an explicit test-suite setting, not a side effect of
importing posbias; tests/product/test_api.py checks a caller's float32 stays float32).

Hypothesis profiles (select with HYPOTHESIS_PROFILE): ``ci`` (default) is
deterministic (derandomize, no database, no deadline); ``fast`` is ``ci`` with 10
examples where a test does not set its own count (``scripts/test --fast``, the
edit-test loop; CI runs ``ci``); ``deep`` runs many more examples for verification runs.
"""

import ctypes
import ctypes.util
import os
import shutil
import tempfile
from pathlib import Path

import jax
import pytest
from hypothesis import HealthCheck, configuration, settings

from posbias.runtime.jax_cache import enable_compilation_cache
from tests.alone_files import ALONE_FILES  # files whose tests need the whole machine (scripts/test reads it too)

# The memory guard (issue 34): ends the run in one line when a test takes the pytest process past
# POSBIAS_TEST_MAX_GB (default 6) or a process it starts past POSBIAS_TEST_SUBPROCESS_MAX_GB (default 4);
# POSBIAS_TEST_MAX_GB=off switches it off.
pytest_plugins = ["tests.memory_guard"]

# JAX's persistent compilation cache, as every posbias command has it (posbias.runtime.jax_cache: the user's
# cache folder unless POSBIAS_JAX_CACHE=0), on from the start of each pytest process: an engine compiled by one
# test file, worker or command is read back by the others (and by later runs) instead of compiled again.
# Before, a worker had it only from the first test that ran a command in process, by chance of the order.
enable_compilation_cache()
jax.config.update("jax_enable_x64", True)
# Strict promotion (issue 20): an operation mixing dtypes (float64 by int64, a weak Python scalar aside)
# raises instead of promoting silently, so the library's casts are explicit. Tests only, never the library.
jax.config.update("jax_numpy_dtype_promotion", "strict")

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("fast", settings.get_profile("ci"), max_examples=10)  # scripts/test --fast only
settings.register_profile(
    "deep",
    deadline=None,
    max_examples=2000,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
# hypothesis writes its home folder (./.hypothesis: caches, even with no database) into the working
# folder; the tests write only under temporary folders, so it goes to one for the session.
HYPOTHESIS_HOME = Path(tempfile.mkdtemp(prefix="posbias-tests-hypothesis-"))
configuration.set_hypothesis_home_dir(HYPOTHESIS_HOME)


def pytest_unconfigure(config):
    shutil.rmtree(HYPOTHESIS_HOME, ignore_errors=True)


_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


RELEASE_FROM_BYTES = 2**30  # a test process's resident size from which compiled functions go


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_functions():
    """After a test file, once the process holds more than ``RELEASE_FROM_BYTES`` (1 GiB): drop JAX's compiled
    functions and tracing caches (every shape the files' tests compiled, kept for the rest of the process;
    issue 34) and collect what they held. Below it they stay, for the next files that compile the same
    shapes: clearing after every file cost about 8% of the fast tier's time in recompilations."""
    yield
    if _resident_bytes() < RELEASE_FROM_BYTES:
        return
    import gc

    jax.clear_caches()
    gc.collect()
    _LIBC.malloc_trim(0)  # hand the freed heap back to the system (glibc keeps it otherwise)


REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "official-configs").is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA} (../shared beside the checkout)")
    return SHARED_DATA


# The slow tier (issue 20): whole-process, multi-process and multi-device runs, documentation and wheel
# builds, language-model training, Hugging Face scale and real-model checks, and the few tests of other
# files that cost the most time or memory. ``scripts/test --fast`` runs the rest (``-m "not slow"``, a
# developer's edit-test loop: every file but the slow ones, each area kept by its cheaper tests); CI runs
# everything. Paths are relative to tests/; tests/test_tiers.py checks that every entry names a test.
SLOW_FILES = {
    "test_readme.py": "executes every README and docs example",
    "test_docs_site.py": "builds the documentation site",
    "test_wheel.py": "builds a wheel and installs it into a fresh environment",
    "test_bench_gpu.py": "runs benchmarks/bench_gpu.py --smoke: five child processes",
    "product/test_sweep_distributed.py": "two jax.distributed processes",
    "numerics/test_xla_parallel.py": "fake multi-device XLA runs",
    "product/test_lm.py": "trains the language model",
    "product/test_validate.py": "trains and validates the language model",
    "product/test_validate_checkpoint.py": "validates checkpoints end to end",
    "product/test_validate_panels.py": "validate panels on trained models",
    "product/test_hf_scale.py": "Hugging Face models at scale",
    "product/test_hf_llama.py": "Llama-family forwards",
    "product/test_smollm2.py": "the real SmolLM2-135M model",
    "product/test_minilm.py": "the real MiniLM-L6 model",
    "product/test_torch_backend.py": "the transformers backend",
    "product/test_gguf.py": "GGUF files through two readers",
    "hostile/test_hostile_cli.py": "hundreds of refused command processes",
    "hostile/test_hostile_fit_compare_train.py": "refused command processes",
    "hostile/test_hostile_measure_validate.py": "refused command processes",
    "hostile/test_hostile_out.py": "refused command processes",
    "hostile/test_hostile_sweep.py": "refused command processes",
    "hostile/test_hostile_verify.py": "refused command processes and memory limits",
    "hostile/test_fuzz_inputs.py": "command processes on fuzzed inputs",
    "hostile/test_hostile_gguf.py": "measure processes on hostile GGUF files and texts, both backends",
    "hostile/test_hostile_checkpoint.py": "measure processes on hostile checkpoint folders, both backends",
    "hostile/test_hostile_bias.py": "rollouts of hostile and generated bias formulas on four engines",
    "hostile/test_derive_hostile.py": "every derive query in its own interpreter, up to its time budget",
    "hostile/test_hostile_derive_bias.py": "derive monotone --bias processes on hostile formulas, two at budget",
    "product/test_cli_defaults.py": "every default as a user types it, each command its own process",
    "claims/test_verify.py": "whole verification runs",
    "numerics/test_power_range.py": "deep power-engine runs",
}

# Single tests ("file::name" marks every parametrization, "file::name[id]" one of them), measured in
# one fast-tier run: each costs seconds (or gigabytes) where most of the tier's tests cost milliseconds.
_PROOFS_RUN = "a whole proofs --check (claims/test_proofs.py keeps the repository's in the fast tier)"
# Kept unformatted: one entry a line pair, the node id and then why.
# fmt: off
SLOW_TESTS = {
    "product/test_influence.py::test_integrated_gradients_equal_the_rule_written_here": "K compiled gradients",
    "product/test_influence.py::test_the_completeness_error_shrinks_with_the_steps": "two integrated-gradient runs",
    "test_lint.py::test_pyright_finds_nothing_in_numerics_and_theorem":
        "pyright over both folders (pre-commit runs it on the files changed)",
    "claims/test_claims_statements.py::test_sabotaged_c5c_fails_the_statement_check_and_proofs_check":
        "a whole proofs --check on each of six sabotaged copies",
    "claims/test_claims_statements.py::test_proofs_check_prints_every_statement": _PROOFS_RUN,
    "claims/test_proofs.py::test_nonexistent_certificate_fails": _PROOFS_RUN,
    "claims/test_proofs.py::test_failing_certificate_fails": _PROOFS_RUN,
    "claims/test_proofs.py::test_missing_proof_file_and_citation_free_proof_fail": _PROOFS_RUN,
    "claims/test_proofs.py::test_uncited_claim_certificate_fails": _PROOFS_RUN,
    "claims/test_c7.py::test_proofs_check_covers_c7": _PROOFS_RUN,
    "claims/test_theorem_claims.py::test_claim_certificates_exist_and_hold":
        "every claim's certificates, which the repository's proofs --check (claims/test_proofs.py) runs too",
    "product/test_hf.py::test_falcon_position_term_equals_transformers_alibi_tensor":
        "N = 3000 position terms for up to 71 heads: 13.7 GiB",
    "theorem/test_cesaro.py::test_large_exact_profile_n1024_t64": "exact rationals at N = 1024, T = 64: 1.5 GiB",
    "product/test_bias_fit.py::test_validate_panel_i_on_the_trained_model_route": "trains the language model",
    "product/test_bias_fit.py::test_kerple_families_recover_planted_parameters": "eight planted-parameter fits",
    "numerics/test_batch.py::test_sharded_batch_equals_one_device_bit_for_bit": "fake multi-device XLA runs",
    "numerics/test_batch.py::test_xla_batch_is_one_vmapped_call_equal_to_single_profiles":
        "compiles one vmapped XLA call per generated batch",
    "product/test_sweep.py::test_kill_9_mid_sweep_then_resume_equals_an_uninterrupted_run":
        "a sweep process killed and resumed",
    "product/test_api.py::test_audit_case_mpt7b_lambda_one_huge_negative_content": "four engines at N = 1024",
    "numerics/test_bias.py::test_engines_agree_with_dense_on_generated_stacks":
        "30 generated stacks, each compiled and run densely",
    "numerics/test_bias.py::test_alibi_biases_agree_with_the_structured_engine": "30 generated stacks, each compiled",
    "numerics/test_bias.py::test_engines_agree_with_dense_at_a_few_hundred_tokens": "dense references at N = 300",
    "numerics/test_bias_extended.py::test_extended_equals_the_linear_mode_on_generated_stacks":
        "30 generated stacks through two modes",
    "numerics/test_bias_extended.py::test_a_bias_rising_by_more_than_600_nats": "log-space dense references",
    "numerics/test_bias_extended.py::test_extended_range_without_the_native_kernel_runs_in_xla":
        "compiles the log-space scan in XLA (the C kernel's route stays)",
    "product/test_bias_fit.py::test_transformers_backend_bloom_is_refused_in_one_line": "imports transformers",
    "product/test_yaml_io.py::test_reference_file_identical_to_ruamel": "every file of ../shared/data, two parsers",
    "product/test_yaml_io.py::test_jax_cache_on_under_xdg_cache_home": "a fresh interpreter",
    "product/test_yaml_io.py::test_jax_cache_off_by_environment": "a fresh interpreter for each value",
    "product/test_yaml_io.py::test_jax_cache_keeps_users_own_directory": "a fresh interpreter",
    "product/test_hf.py::test_regenerated_fixture_matches": "rebuilds each fixture with torch and transformers",
    "product/test_hf.py::test_forward_imports_no_torch": "a fresh interpreter",
    "numerics/test_bias_fft.py::test_agrees_with_the_dense_reference_and_the_exact_engine_on_generated_stacks":
        "40 generated stacks, each compiled and run densely",
    "numerics/test_engines.py::test_fft_engine_at_moderate_n": "FFT against dense at N in the hundreds",
    "numerics/test_engines.py::test_large_n_structured_equals_dense": "dense references at N in the thousands",
}
# fmt: on


def _relative_id(item) -> tuple[str, str]:
    """("dir/test_file.py", "dir/test_file.py::name[params]") relative to tests/."""
    path = item.path.relative_to(Path(__file__).parent).as_posix()
    return path, f"{path}::{item.nodeid.split('::', 1)[1]}"


# Whole files whose tests take the longest (seconds, measured with --durations on this machine, 2026-12-07),
# collected first so that the two workers start them early and end together instead of one worker
# running a two-minute test while the other has finished (a file moves whole: its module-scoped fixtures
# are set up once). scripts/test distributes with --dist worksteal, which rebalances what is left.
FIRST_FILES = (
    "test_readme.py",  # about 330 s: every docs page's examples
    "test_wheel.py",  # 70 to 120 s: a wheel built and installed
    "test_lint.py",  # 20 to 100 s: ruff and pyright (pyright installs Node.js on first use)
    "hostile/test_hostile_derive_bias.py",  # 42 s: its table in one child interpreter
    "hostile/test_derive_hostile.py",  # 33 s: one query at its budget
    "numerics/test_bias.py",  # 55 s: generated stacks on every engine
)


def pytest_collection_modifyitems(config, items):
    rank = {name: k for k, name in enumerate(FIRST_FILES)}
    items.sort(key=lambda item: rank.get(_relative_id(item)[0], len(rank)))  # stable: the rest keep their order
    for item in items:
        path, node = _relative_id(item)
        if path in SLOW_FILES or node in SLOW_TESTS or node.split("[", 1)[0] in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
        if path in ALONE_FILES:
            item.add_marker(pytest.mark.alone)
