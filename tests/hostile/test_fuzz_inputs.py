"""Generated configs and kernel files near the edges of validity, through ``posbias rollout``.

Every run must either succeed with a profile that sums to 1 within 1e-12 and agrees
within 1e-12 with an independent NumPy rollout written here (masked softmax by
log-sum-exp, heads averaged, R = (1 - lambda) I + lambda A), or refuse cleanly: exit code
2, one stderr line, no traceback, nothing written. Refusals are only accepted for reasons
the input really has (checked per case), and a valid input on the default engine must
never be refused.

Sizes 1..40 tokens, 1..6 layers, 1..4 heads; slopes 0 / tiny / huge; lambda 0, 1 and
beyond (clipped); content +-large; masks including window 1 and prefix 0 / 1 / N and
beyond; temperatures tiny and huge; head weights with zeros; float32 / float64 kernels
with rows summing to 1 +- small. ``posbias.cli.main`` runs in-process.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from posbias.cli import main
from posbias.numerics.stack import kernel_tolerance

TOL = 1e-12


# ------------------------------------------------------------------ the reference


def layer_kernel(n, slopes, diag, weights, tau, mask, size):
    """Head-averaged kernel: softmax over allowed j of (d [i = j] - m |i - j|) / tau."""
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    if mask == "causal":
        ok = j <= i
    elif mask == "full":
        ok = np.ones((n, n), bool)
    elif mask == "sliding_window":
        ok = (j <= i) & (i - j < size)
    else:  # prefix: bidirectional among the first `size` tokens, causal elsewhere
        ok = (j <= i) | ((i < size) & (j < size))
    dist = np.abs(i - j).astype(float)
    out = np.zeros((n, n))
    for m, d, w in zip(slopes, diag, weights):
        if w == 0:
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            s, dd = m / tau, d / tau
            logits = np.where(ok, np.where(i == j, dd, -s * dist), -np.inf)
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        out += w * e / e.sum(axis=1, keepdims=True)
    return out


def rollout(kernels, lambdas):
    n = kernels[0].shape[0]
    v = np.zeros(n)
    v[-1] = 1.0
    for t in range(len(kernels) - 1, -1, -1):
        v = (1 - lambdas[t]) * v + lambdas[t] * (v @ kernels[t])
    return v


def broadcast(rows, t, h):
    """Outer list 1 or T, inner 1 or H -> (T, H) (content broadcast 'all')."""
    return np.array(
        [
            [rows[min(k, len(rows) - 1)][min(j, len(rows[min(k, len(rows) - 1)]) - 1)] for j in range(h)]
            for k in range(t)
        ],
        dtype=float,
    )


# ------------------------------------------------------------------ running the CLI


def run(argv, folder: Path):
    """main(argv) in ``folder`` (the cwd); returns (exit code, stderr, profile or None)."""
    err = io.StringIO()
    old = os.getcwd()
    os.chdir(folder)
    try:
        with (
            contextlib.redirect_stderr(err),
            contextlib.redirect_stdout(io.StringIO()),
            warnings.catch_warnings(record=True) as caught,
        ):
            warnings.simplefilter("always")
            code = main(["rollout", *argv, "--out", "out"])
    finally:
        os.chdir(old)
    text = err.getvalue()
    assert "Traceback" not in text
    assert not caught, [str(w.message) for w in caught]
    out = folder / "out"
    if code == 2:
        assert text.count("\n") == 1 and text.startswith("posbias"), text
        assert not out.exists()
        return code, text, None
    assert code == 0, text
    assert "error" not in text, text
    p = np.loadtxt(out / "profile.csv", delimiter=",", skiprows=1, ndmin=2)[:, 1]
    return code, text, p


def fmt(x: float) -> str:
    return repr(float(x))


# ------------------------------------------------------------------ configs

SLOPES = [0.0, 1e-300, 1e-9, 0.03, 0.5, 2.0, 30.0, 650.0, 1e4, 1e308]
DIAG = [0.0, 1.0, -1.0, 5.0, -5.0, 40.0, -40.0, 700.0, -700.0, 1e300, -1e300]
WEIGHTS = [0.0, 1e-300, 0.5, 1.0, 1e308]
TAUS = [1e-300, 1e-8, 0.05, 1.0, 10.0, 1e8, 1e300]
LAMBDAS = [0.0, 1e-300, 0.3, 1 - 1e-16, 1.0, -0.5, 1.5]


def nested(draw, values, t, h):
    outer = draw(st.sampled_from([1, t]))
    inner = draw(st.sampled_from([1, h]))
    return [[draw(st.sampled_from(values)) for _ in range(inner)] for _ in range(outer)]


@st.composite
def configs(draw):
    n, t, h = draw(st.integers(1, 40)), draw(st.integers(1, 6)), draw(st.integers(1, 4))
    slopes = nested(draw, SLOPES, t, h)
    diag = nested(draw, DIAG, t, h)
    weights = nested(draw, WEIGHTS, t, h) if draw(st.booleans()) else None
    tau = draw(st.sampled_from(TAUS))
    kind = draw(st.sampled_from(["constant", "power_decay", "custom"]))
    if kind == "constant":
        lam = draw(st.sampled_from(LAMBDAS))
        sched, lambdas = f"{{schedule_type: constant, lambda_const: {fmt(lam)}}}", [lam] * t
    elif kind == "power_decay":
        l0, beta = draw(st.sampled_from(LAMBDAS)), draw(st.sampled_from([-3.0, 0.0, 0.5, 2.0]))
        sched = f"{{schedule_type: power_decay, lambda_0: {fmt(l0)}, beta: {fmt(beta)}}}"
        lambdas = [l0 / (k + 1.0) ** beta for k in range(t)]
    else:
        lambdas = [draw(st.sampled_from(LAMBDAS)) for _ in range(t)]
        sched = "{schedule_type: custom, lambdas_custom: [" + ", ".join(map(fmt, lambdas)) + "]}"
    mask = draw(st.sampled_from(["causal", "full", "sliding_window", "prefix"]))
    size = None
    if mask == "sliding_window":
        size = draw(st.sampled_from([1, 2, n, n + 3]))
        mask_yaml = f"{{mask_type: sliding_window, window_size: {size}}}"
    elif mask == "prefix":
        size = draw(st.sampled_from([0, 1, n // 2, n, n + 5]))
        mask_yaml = f"{{mask_type: prefix, prefix_length: {size}}}"
    else:
        mask_yaml = f"{{mask_type: {mask}}}"
    engine = draw(st.sampled_from(["auto", "auto", "auto", "structured", "log", "fft", "dense"]))

    def flow(rows):
        return "[" + ", ".join("[" + ", ".join(fmt(x) for x in r) + "]" for r in rows) + "]"

    text = (
        f"sequence_length: {n}\nnum_layers: {t}\nmask_config: {mask_yaml}\n"
        f"attention_config: {{num_heads: {h}, alibi_slopes: {flow(slopes)}, "
        f"head_weights: {'null' if weights is None else flow(weights)}, softmax_temperature: {fmt(tau)}}}\n"
        f"content_config: {{diagonal_scores: {flow(diag)}, base_scores: [[0.0]]}}\n"
        f"lambda_schedule_config: {sched}\n"
    )
    return dict(
        text=text,
        n=n,
        t=t,
        h=h,
        slopes=slopes,
        diag=diag,
        weights=weights,
        tau=tau,
        lambdas=lambdas,
        mask=mask,
        size=size,
        engine=engine,
    )


def why_invalid(c) -> str | None:
    """The reason the config must be refused whatever the engine, or None if it is valid."""
    t, h = c["t"], c["h"]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        lam = np.array(c["lambdas"], dtype=float)
        if not np.all(np.isfinite(lam)):
            return "non-finite lambda"
        if c["weights"] is not None and np.any(broadcast(c["weights"], t, h).max(axis=1) <= 0):
            return "no positive weight"
        s = broadcast(c["slopes"], t, h) / c["tau"]
        d = broadcast(c["diag"], t, h) / c["tau"]
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(d))):
        return "too small"
    return None


# What an explicitly chosen engine may refuse, and why. "computes reliably" is posbias/rollout.py's
# guard against an engine returning a non-probability on extreme input (an engine bug, refused
# cleanly rather than printed; auto falls back to dense instead, so it never refuses).
# LINEAR_RANGE: slopes m/tau above 700, whose e^(-m) underflows in linear arithmetic (the log
# engine, and auto, take them).
UNRELIABLE = "beyond what the engine computes reliably"
LINEAR_RANGE = "the float64 range in linear arithmetic"
ENGINE_REFUSALS = {
    "fft": ("handles causal and sliding-window masks only", "clipping of d is not exact", LINEAR_RANGE, UNRELIABLE),
    "log": ("sliding-window masks need subtraction", UNRELIABLE),
    "structured": ("clipping of d is not exact", LINEAR_RANGE, UNRELIABLE),
    "dense": (UNRELIABLE,),
}


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_generated_configs(c):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "c.yaml").write_text(c["text"])
        code, err, p = run(["c.yaml", "--engine", c["engine"]], folder)
    invalid = why_invalid(c)
    event(
        f"{c['engine']}: {'refused' if code == 2 else 'result'}"
        + (f" ({invalid})" if invalid else "")
        + (" (engine guard)" if UNRELIABLE in err else "")
    )
    if code == 2:
        if invalid is not None:
            messages = {
                "non-finite lambda": "non-finite lambda",
                "no positive weight": "has no positive weight",
                "too small": "is too small for the slopes or diagonal",
            }
            assert messages[invalid] in err, (invalid, err)
        else:
            assert c["engine"] != "auto", f"a valid config was refused by auto: {err}\n{c['text']}"
            assert any(m in err for m in ENGINE_REFUSALS[c["engine"]]), (err, c["text"])
        return
    assert invalid is None, f"an invalid config ({invalid}) was accepted:\n{c['text']}"
    t, h, n = c["t"], c["h"], c["n"]
    slopes, diag = broadcast(c["slopes"], t, h), broadcast(c["diag"], t, h)
    weights = np.ones((t, h)) if c["weights"] is None else broadcast(c["weights"], t, h)
    weights = weights / weights.max(axis=1, keepdims=True)
    weights = weights / weights.sum(axis=1, keepdims=True)
    lambdas = np.clip(np.array(c["lambdas"], dtype=float), 0.0, 1.0)
    kernels = [layer_kernel(n, slopes[k], diag[k], weights[k], c["tau"], c["mask"], c["size"]) for k in range(t)]
    expected = rollout(kernels, lambdas)
    assert abs(p.sum() - 1.0) <= TOL
    assert np.max(np.abs(p - expected)) <= TOL, (np.max(np.abs(p - expected)), c["engine"], c["text"], p, expected)


# ------------------------------------------------------------------ kernel files

DEFECTS = [0.0, 1e-13, 1e-11, 3e-8, 1e-6, 1e-4, 1e-2]


@st.composite
def kernel_files(draw):
    n, t = draw(st.integers(1, 40)), draw(st.integers(1, 6))
    causal = draw(st.booleans())
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    k = rng.exponential(size=(t, n, n)) * (rng.random((t, n, n)) < draw(st.sampled_from([0.3, 1.0])))
    if causal:
        k = np.tril(k)
    k[:, np.arange(n), np.arange(n)] += 1e-3  # every row has mass
    k /= k.sum(axis=2, keepdims=True)
    defect = draw(st.sampled_from(DEFECTS)) * draw(st.sampled_from([1.0, -1.0]))
    row = draw(st.integers(0, n - 1))
    k[t - 1, row, row] += defect  # the diagonal: stays causal; a negative defect may make it < 0
    stored = k.astype(dtype)
    lambdas = [draw(st.sampled_from([0.0, 0.25, 1.0, 1 - 1e-16])) for _ in range(t)]
    schedule = draw(st.sampled_from([None, "constant:0.5", "constant:2", "custom:" + ",".join(["0.7"] * t)]))
    return dict(kernels=stored, lambdas=lambdas, schedule=schedule, causal=causal, defect=defect, row=row)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(kernel_files())
def test_generated_kernel_files(c):
    k = c["kernels"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        np.savez(folder / "k.npz", kernels=k, lambdas=np.array(c["lambdas"]))
        argv = ["--kernels", "k.npz", *(["--causal"] if c["causal"] else [])]
        if c["schedule"]:
            argv += ["--schedule", c["schedule"]]
        code, err, p = run(argv, folder)
    n = k.shape[1]
    tol = kernel_tolerance(k.dtype, n)
    err_sum = float(np.max(np.abs(k.astype(np.float64).sum(axis=2) - 1.0)))
    negative = bool(np.any(k < -tol))
    event(f"{k.dtype}: {'refused' if code == 2 else 'result'}")
    if code == 2:
        assert err_sum > tol / 2 or negative, f"rows off by {err_sum:.3g} (tolerance {tol:.3g}) refused: {err}"
        assert "sums to" in err or "is negative" in err, err
        return
    assert err_sum <= tol and not negative, f"rows off by {err_sum:.3g} (tolerance {tol:.3g}) accepted"
    kernels = k.astype(np.float64)
    if k.dtype != np.float64:  # stored below float64: renormalised rows (posbias/io/kernel_file.py)
        kernels = np.clip(kernels, 0.0, None)
        kernels = kernels / kernels.sum(axis=2, keepdims=True)
    if c["schedule"] is None:
        lambdas = np.array(c["lambdas"])
    elif c["schedule"].startswith("constant"):
        lambdas = np.full(k.shape[0], min(1.0, float(c["schedule"].split(":")[1])))
        if c["schedule"] == "constant:2":
            assert "lambda clipped to [0, 1]" in err
    else:
        lambdas = np.full(k.shape[0], 0.7)
    expected = rollout(kernels, lambdas)
    expected = expected / expected.sum()
    assert abs(p.sum() - 1.0) <= TOL
    assert np.max(np.abs(p - expected)) <= TOL, np.max(np.abs(p - expected))
