"""The public Python API (import posbias): models from numbers and from configs, the auto
engine with its fallbacks, typed summaries, and no change to the caller's JAX state."""

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

import posbias
import posbias.numerics as nx
from posbias.model import ModelError


def _dense_last_row(stack, n):
    return np.asarray(nx.rollout_matrix(nx.alibi_kernels(stack, n), stack.lambdas))[-1]


def test_importing_posbias_leaves_callers_float32_alone():
    code = (
        "import jax.numpy as jnp, numpy as np, posbias\n"
        "x = jnp.ones(3, dtype=jnp.float32)\n"
        "m = posbias.build_model(layers=2, heads=2, tokens=8, schedule='constant:0.5')\n"
        "p = m.profile()\n"
        "y = x * 2.0\n"
        "print(x.dtype, y.dtype, jnp.zeros(2).dtype, p.probabilities.dtype)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["float32", "float32", "float32", "float64"]


def test_build_model_equals_hand_built_stack_and_dense_route():
    model = posbias.build_model(
        layers=5,
        heads=4,
        tokens=40,
        schedule="power_decay:0.8,0.5",
        slopes="hf",
        content_diagonal=[0.5, 1.0, -1.0, 0.0, 2.0],
        mask="window:12",
    )
    lambdas = 0.8 / np.arange(1, 6) ** 0.5
    stack = nx.AlibiStack.build(
        lambdas,
        nx.alibi_slopes(4, "hf"),
        np.repeat(np.array([0.5, 1.0, -1.0, 0.0, 2.0])[:, None], 4, axis=1),
        mask=nx.SlidingWindow(12),
    )
    p = model.profile().probabilities
    assert np.max(np.abs(p - _dense_last_row(stack, 40))) <= 1e-12
    assert abs(p.sum() - 1.0) <= 1e-12


def test_content_per_head_and_explicit_slopes():
    d = np.arange(6.0).reshape(2, 3) - 2.0
    model = posbias.build_model(
        layers=2,
        heads=3,
        tokens=9,
        schedule="custom:0.25,1",
        slopes=[0.5, 0.1, 0.0],
        content_diagonal=d,
        mask="prefix:4",
    )
    stack = nx.AlibiStack.build([0.25, 1.0], [0.5, 0.1, 0.0], d, mask=nx.Prefix(4))
    assert np.max(np.abs(model.profile().probabilities - _dense_last_row(stack, 9))) <= 1e-12
    full = model.matrix()
    assert np.max(np.abs(full[-1] - _dense_last_row(stack, 9))) <= 1e-12


def test_load_config_gives_the_same_object(shared_data):
    cfg = shared_data / "official-configs/no_content/bloom.yaml"
    loaded = posbias.load_config(cfg)
    assert isinstance(loaded, posbias.Model) and loaded.source == str(cfg)
    flags = posbias.build_model(
        layers=loaded.stack.num_layers,
        heads=loaded.stack.num_heads,
        tokens=loaded.num_tokens,
        schedule=loaded.schedule,
        slopes=loaded.stack.slopes[0],
    )
    assert np.max(np.abs(loaded.profile().probabilities - flags.profile().probabilities)) <= 1e-15


def test_overrides_are_recorded(shared_data):
    cfg = shared_data / "official-configs/no_content/bloom.yaml"
    model = posbias.load_config(cfg, tokens=64, heads=16, slopes="hf", schedule="constant:0.3")
    assert model.overrides == ("tokens", "heads", "slopes", "schedule")
    assert (model.stack.num_heads, model.num_tokens) == (16, 64)
    summary = model.run().summary.to_dict()
    assert summary["overrides"] == ["tokens", "heads", "slopes", "schedule"] and summary["schedule"] == "constant:0.3"


def test_heads_override_with_per_head_file_slopes_is_refused(shared_data):
    cfg = shared_data / "official-configs/no_content/bloom.yaml"
    with pytest.raises(posbias.config.ConfigError, match="alibi_slopes.*expected 1 or num_heads = 16"):
        posbias.load_config(cfg, heads=16)


def test_summary_is_typed_and_serialises():
    s = posbias.build_model(layers=3, heads=2, tokens=16, schedule="constant:0.5").summary()
    assert isinstance(s, posbias.Summary)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.argmin = 3  # frozen
    data = json.loads(s.to_json())
    assert data["argmin"] == s.argmin and data["engine"] == s.engine and data["source"] == "flags"


def test_diagonal_identity_against_the_matrix():
    model = posbias.build_model(layers=4, heads=4, tokens=24, schedule="constant:0.7", content_diagonal=1.5)
    assert np.max(np.abs(model.diagonal() - np.diag(model.matrix()))) <= 1e-12


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(layers=0, heads=2, tokens=8), "layers: expected a positive integer"),
        (dict(layers=2, heads=2, tokens=8, schedule="linear:3"), "schedule: schedule 'linear:3'"),
        (dict(layers=2, heads=2, tokens=8, mask="window:0"), "mask: mask 'window:0'"),
        (dict(layers=2, heads=2, tokens=8, slopes="gpt"), "slopes: expected one of paper, hf"),
        (dict(layers=2, heads=2, tokens=8, slopes=[0.5, -1.0]), "slopes: layer 0 head 1 is -1"),
        (dict(layers=2, heads=2, tokens=8, content_diagonal=[1.0, 2.0, 3.0]), "content_diagonal: 3 values"),
        (
            dict(layers=2, heads=3, tokens=8, slopes=[0.5, 0.25]),
            "2 explicit values .* for heads = 3: expected one slope per head",
        ),
    ],
)
def test_bad_model_parameters_get_one_line(kwargs, message):
    with pytest.raises(ModelError, match=message):
        posbias.build_model(**{"schedule": "constant:0.5", **kwargs})


def test_equal_huge_head_weights_equal_default_weights():
    """Issue 8: 32 equal weights of 1e308 must give the default (equal) weights, not NaN or e_{N-1}."""
    slopes = nx.alibi_slopes(32)
    a = nx.AlibiStack.build(np.ones(4), slopes, head_weights=np.full(32, 1e308))
    b = nx.AlibiStack.build(np.ones(4), slopes)
    assert np.array_equal(a.head_weights, b.head_weights)


def test_zero_head_weight_row_is_refused():
    with pytest.raises(nx.StackError, match="head_weights: layer 1 has no positive weight"):
        nx.AlibiStack.build([0.5, 0.5], [0.5, 0.25], head_weights=[[1.0, 1.0], [0.0, 0.0]])


def test_log_route_is_exact_at_huge_negative_content():
    """Issue 8: lambda = 1, d = -1e300 (content avoids the diagonal): every engine agrees with dense."""
    stack = nx.AlibiStack.build(np.ones(6), nx.alibi_slopes(8), -1e300)
    dense = _dense_last_row(stack, 64)
    for engine in ("auto", "structured", "log", "fft"):
        p = nx.profile(stack, 64, engine=engine).probabilities
        assert np.max(np.abs(p - dense)) <= 1e-12, engine


def test_auto_keeps_entries_below_float64_range():
    """Uniform causal attention, lambda = 1, T = 300: p(N-1) = N^-T underflows float64.
    Independent route: the Cesaro closed form p(N-1) = prod_t (1 - (N-1)/N) = N^-T (C2(c))."""
    stack = nx.AlibiStack.build(np.ones(300), [0.0])
    res = nx.profile(stack, 24)
    assert res.extended_range and np.all(np.isfinite(res.log_probabilities))
    assert abs(res.log_probabilities[-1] - (-300 * np.log(24))) <= 1e-9
    summary = nx.summarize(res, stack)
    assert summary.argmin == int(np.argmin(res.log_probabilities)) and summary.log_p_min < -700
    assert res.notes and res.notes[-1].startswith("auto: structured")


def test_auto_without_native_kernel_retries_in_log_space(monkeypatch):
    """Where the C kernel is unavailable (GPU, no compiler) auto runs XLA and redoes an underflowed
    profile in log space, and says so."""
    from posbias.numerics import native

    monkeypatch.setattr(native, "available", lambda: False)
    stack = nx.AlibiStack.build(np.ones(300), [0.0])
    res = nx.profile(stack, 24)
    assert res.path == "xla-log" and any("re-ran with extended range" in n for n in res.notes)
    assert abs(res.log_probabilities[-1] - (-300 * np.log(24))) <= 1e-9


def test_auto_never_reports_an_extreme_from_fft_round_off(monkeypatch):
    """Without the native kernel auto takes the FFT at large N; entries below its absolute
    resolution are recomputed exactly, and the summary's argmin comes from exact values."""
    from posbias.numerics import native

    monkeypatch.setattr(native, "available", lambda: False)
    stack = nx.AlibiStack.build(np.full(12, 0.5), nx.alibi_slopes(8))
    fft = nx.profile(stack, 16384, engine="fft")
    assert fft.unresolved().any()  # the profile spans more than the FFT's absolute resolution
    summary_fft = nx.summarize(fft, stack)
    assert summary_fft.argmin is None and summary_fft.u_shape is None
    res = nx.profile(stack, 16384, engine=nx.Auto(fft_from_tokens=16384))
    assert res.path != "fft" and any("FFT's resolution" in n for n in res.notes)
    exact = nx.profile(stack, 16384, engine=nx.Structured(native=False, ring="log"))
    assert nx.summarize(res, stack).argmin == int(np.argmin(exact.log_probabilities))


def test_audit_case_mpt7b_lambda_one_huge_negative_content(shared_data):
    """Issue 8's worst case: mpt-7b with lambda = 1, N = 1024 and diagonal_scores [[-1e300]] gave
    p(0) = 0.0183 with exit 0 (the dense engine and an independent NumPy rollout give 0.6429)."""
    cfg = shared_data / "official-configs/no_content/mpt-7b.yaml"
    model = posbias.load_config(cfg, tokens=1024, schedule="constant:1", content_diagonal=-1e300)
    auto = model.profile()
    dense = model.profile("dense").probabilities
    assert round(float(dense[0]), 4) == 0.6429
    assert np.max(np.abs(auto.probabilities - dense)) <= 1e-12
    for engine in ("structured", "log", "fft"):
        assert np.max(np.abs(model.profile(engine).probabilities - dense)) <= 1e-12, engine
