"""posbias.lm: the JAX ALiBi language model, its training and its measurements.

Each measurement is checked against an independent route: lambda_t against a NumPy
forward written here, influence gradients against central finite differences, measured
kernels against the engine's ALiBi kernels when the content logits vanish, the unigram
baseline recomputed here from pydoc_data. Training and resuming run the CI preset; the
resume test kills a real subprocess with SIGKILL as soon as a checkpoint exists.
"""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posbias.cli import main as posbias_command
from posbias.lm.config import PRESETS, ModelConfig
from posbias.lm.measure import measure
from posbias.lm.model import flatten, init_params, slopes_of
from posbias.measure.quantities import content_fit

REPO = Path(__file__).resolve().parents[2]


def random_params(config: ModelConfig, seed: int = 0, scale: float = 0.5) -> dict:
    """float64 parameters with every entry random (gains and biases too), large enough that
    attention is far from uniform."""
    shapes = {k: np.shape(v) for k, v in flatten(init_params(config, jax.random.PRNGKey(0))).items()}
    rng = np.random.default_rng(seed)
    return {k: (1.0 if k.endswith("_g") else 0.0) + scale * rng.standard_normal(s) for k, s in shapes.items()}


# ---------------------------------------------------------------- NumPy reference forward


def np_layer_norm(x, g, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * g + b


def np_gelu_tanh(u):
    return 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u**3)))


def np_attention(x, p, t, slopes, head_dim):
    """a_t of one sequence, loop over heads and rows (no shared code with posbias.lm.model)."""
    h = np_layer_norm(x, p["blocks/ln1_g"][t], p["blocks/ln1_b"][t])
    n = x.shape[0]
    out = np.zeros_like(x)
    for head, m in enumerate(slopes):
        q = h @ p["blocks/wq"][t][:, head, :]
        k = h @ p["blocks/wk"][t][:, head, :]
        v = h @ p["blocks/wv"][t][:, head, :]
        o = np.zeros((n, head_dim))
        for i in range(n):
            s = np.array([q[i] @ k[j] / math.sqrt(head_dim) - m * (i - j) for j in range(i + 1)])
            w = np.exp(s - s.max())
            o[i] = (w / w.sum()) @ v[: i + 1]
        out += o @ p["blocks/wo"][t][head]
    return out


def np_lambdas(params, config, tokens):
    """(T,) mean over positions of ||a|| / (||x|| + ||a||), by the NumPy forward."""
    x = params["embed"][tokens]
    lam = []
    for t in range(config.layers):
        a = np_attention(x, params, t, slopes_of(config), config.head_dim)
        lam.append(np.mean(np.linalg.norm(a, axis=1) / (np.linalg.norm(x, axis=1) + np.linalg.norm(a, axis=1))))
        y = x + a
        u = np_layer_norm(y, params["blocks/ln2_g"][t], params["blocks/ln2_b"][t])
        x = (
            y
            + np_gelu_tanh(u @ params["blocks/w1"][t] + params["blocks/b1"][t]) @ params["blocks/w2"][t]
            + params["blocks/b2"][t]
        )
    return np.array(lam)


# ---------------------------------------------------------------- measurements

SMALL = ModelConfig(layers=2, heads=2, width=8, context=16, mlp_ratio=2)


def test_lambda_equals_numpy_hand_computation():
    params = random_params(SMALL, seed=1)
    seqs = np.random.default_rng(2).integers(0, 256, size=(3, 7))
    m = measure(params, SMALL, seqs, memory=10**9, influence=False)
    by_hand = np.array([np_lambdas(params, SMALL, s) for s in seqs])  # (S, T)
    assert np.abs(m.lambda_per_sequence - by_hand).max() < 1e-12
    assert np.abs(m.lambdas - by_hand.mean(axis=0)).max() < 1e-12
    assert np.abs(m.lambda_std - by_hand.std(axis=0)).max() < 1e-12
    assert np.all((m.lambdas > 0.05) & (m.lambdas < 0.95))  # a non-degenerate case


def test_influence_gradients_match_central_differences():
    from posbias.lm.model import forward

    params = random_params(SMALL, seed=3)
    tokens = np.array([[5, 77, 200, 31, 9]])
    m = measure(params, SMALL, tokens, memory=10**9)
    with jax.enable_x64(True):
        p = jax.tree_util.tree_map(
            jnp.asarray, __import__("posbias.lm.model", fromlist=["unflatten"]).unflatten(params)
        )
        top = int(np.argmax(np.asarray(jax.nn.softmax(forward(p, tokens[0], SMALL)[-1]))))
        f = jax.jit(lambda e: jax.nn.softmax(forward(p, tokens[0], SMALL, embedded=e)[-1])[top])
        e0 = np.asarray(params["embed"])[tokens[0]]
        h = 1e-5
        fd = np.zeros_like(e0)
        for j in range(e0.shape[0]):
            for k in range(e0.shape[1]):
                plus, minus = e0.copy(), e0.copy()
                plus[j, k] += h
                minus[j, k] -= h
                fd[j, k] = (float(f(plus)) - float(f(minus))) / (2 * h)
    norms = np.linalg.norm(fd, axis=1)
    assert norms.min() > 1e-6
    assert np.abs(m.grad_norms[0] - norms).max() < 1e-7 * max(1.0, norms.max())
    assert abs(m.influence.sum() - 1) < 1e-12
    assert np.abs(m.influence - norms / norms.sum()).max() < 1e-7


def test_measured_kernels_are_row_stochastic_and_causal():
    params = random_params(SMALL, seed=4)
    seqs = np.random.default_rng(5).integers(0, 256, size=(5, 12))
    m = measure(params, SMALL, seqs, memory=10**9, influence=False)
    for k in (m.kernels, m.kernels_per_head):
        assert k.dtype == np.float64
        assert np.abs(k.sum(axis=-1) - 1).max() < 1e-12
        assert np.abs(np.triu(k, 1)).max() < 1e-12
        assert k.min() >= 0


@pytest.mark.parametrize("heads,convention", [(4, "paper"), (6, "hf")])
def test_zero_content_reproduces_the_engine_alibi_kernel(heads, convention):
    """Set W_Q = 0: every content logit vanishes and each head's kernel is THEORY.md's ALiBi
    kernel softmax(-m_h (i - j)) that posbias.numerics.alibi_kernels builds."""
    from posbias.numerics import AlibiStack, alibi_kernels, alibi_slopes

    config = ModelConfig(layers=2, heads=heads, width=2 * heads, context=32, slopes=convention)
    params = random_params(config, seed=6)
    params["blocks/wq"] = np.zeros_like(params["blocks/wq"])
    seqs = np.random.default_rng(7).integers(0, 256, size=(3, 20))
    m = measure(params, config, seqs, memory=10**9, influence=False)
    slopes = alibi_slopes(heads, convention)
    engine = np.asarray(alibi_kernels(AlibiStack.build([0.5, 0.5], slopes), 20))
    assert np.abs(m.kernels - engine).max() < 1e-14
    for h, slope in enumerate(slopes):
        single = np.asarray(alibi_kernels(AlibiStack.build([0.5, 0.5], [slope]), 20))
        assert np.abs(m.kernels_per_head[:, h] - single).max() < 1e-14
    assert np.abs(m.content_mean).max() == 0.0
    assert np.abs(m.content.diagonal_raw).max() == 0.0


def test_content_fit_recovers_background_and_diagonal():
    n, dh = 9, 16
    b = np.array([[1.5, -2.0]])
    d = np.array([[0.25, 3.0]])
    logits = b[..., None, None] + d[..., None, None] * np.eye(n)
    logits = logits + np.triu(np.full((n, n), 99.0), 1)  # entries above the diagonal are ignored
    fit = content_fit(logits, np.full(1, 1 / np.sqrt(dh)))
    assert np.allclose(fit.background_raw, b, atol=1e-14) and np.allclose(fit.diagonal_raw, d, atol=1e-14)
    assert np.allclose(fit.background_scaled, b / 4, atol=1e-14) and np.allclose(fit.diagonal_scaled, d / 4)
    assert np.allclose(fit.r2, 1.0)
    noisy = logits + np.tril(np.random.default_rng(0).standard_normal((n, n)))
    assert np.all(content_fit(noisy, np.full(1, 1 / np.sqrt(dh))).r2 < 1.0)


# ---------------------------------------------------------------- training, CLI


def unigram_validation_bits() -> float:
    """Recomputed here from pydoc_data and docs/lm.md's validation topics: add-one byte
    frequencies of the train topics, cross-entropy on the validation topics."""
    from pydoc_data.topics import topics

    val = {"execmodel", "formatstrings", "typesmapping"}
    train = b"\n\n".join(topics[k].encode() for k in sorted(topics) if k not in val)
    valid = b"\n\n".join(topics[k].encode() for k in sorted(topics) if k in val)
    counts = np.bincount(np.frombuffer(train, np.uint8), minlength=256) + 1.0
    return float(-np.log2(counts / counts.sum())[np.frombuffer(valid, np.uint8)].mean())


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lm") / "ci"
    assert posbias_command(["train", "--preset", "ci", "--out", str(out), "--quiet"]) == 0
    return out


def test_ci_training_beats_the_unigram_baseline(ci_run, capsys):
    summary = json.loads((ci_run / "train.json").read_text())
    unigram = unigram_validation_bits()
    assert abs(summary["unigram_val_bpb"] - unigram) < 1e-12
    assert summary["history"][0]["val_bpb"] > summary["val_bpb"]  # it learned during the run
    assert summary["val_bpb"] < unigram - 1.0  # well below the baseline
    assert jax.config.jax_enable_x64  # the caller's (conftest's) global setting is untouched
    params = np.load(ci_run / "checkpoint.npz")
    assert params["params/embed"].dtype == np.float32


def test_measure_writes_files_rollout_reads(ci_run, tmp_path, capsys):
    from posbias.cli import main as posbias_main
    from posbias.config import load as load_config
    from posbias.io.kernel_file import load_kernels

    out = tmp_path / "m"
    assert (
        posbias_command(["measure", str(ci_run), "--tokens", "48", "--samples", "6", "--out", str(out), "--quiet"]) == 0
    )
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        [
            "rollout.yaml",
            "kernels.npz",
            "attention.npz",
            "influence.csv",
            "lambda.csv",
            "content.csv",
            "measure.json",
            "lambda.png",
            "bias_fit.json",
        ]
    )
    model = load_config(out / "rollout.yaml")
    lam = np.loadtxt(out / "lambda.csv", delimiter=",", skiprows=1)
    assert model.num_tokens == 48 and model.stack.num_layers == 2 and model.stack.num_heads == 4
    assert np.array_equal(model.stack.lambdas, lam[:, 1])
    stack, _ = load_kernels(out / "kernels.npz", None, causal=True)
    assert stack.kernels.shape == (2, 48, 48)
    infl = np.loadtxt(out / "influence.csv", delimiter=",", skiprows=1)
    assert abs(infl[:, 1].sum() - 1) < 1e-12 and infl.shape == (48, 4)
    capsys.readouterr()
    assert posbias_main(["rollout", str(out / "rollout.yaml"), "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "profile.csv").is_file()


def test_resume_after_sigkill_equals_uninterrupted(ci_run, tmp_path):
    out = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "posbias",
        "train",
        "--preset",
        "ci",
        "--out",
        str(out),
        "--quiet",
        "--checkpoint-every",
        "1",
    ]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while not (out / "checkpoint.npz").exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed_at = json.loads(str(np.load(out / "checkpoint.npz")["meta"][()]))["step"]
    assert 1 <= killed_at < PRESETS["ci"].train.steps
    assert not (out / "train.json").exists()
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "resumed at step" in done.stdout
    with np.load(out / "checkpoint.npz") as a, np.load(ci_run / "checkpoint.npz") as b:
        keys = [k for k in a.files if k.startswith(("params/", "opt/"))]
        assert keys and sorted(keys) == sorted(k for k in b.files if k.startswith(("params/", "opt/")))
        for k in keys:
            assert np.array_equal(a[k], b[k]), k


def _one_error_line(capsys, rc, needle):
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err


def test_bad_measure_input_one_line_exit_2_nothing_written(ci_run, tmp_path, capsys):
    out = tmp_path / "never"
    cases = [
        (["measure", str(tmp_path / "missing"), "--out", str(out)], "no such checkpoint"),
        (["measure", str(ci_run), "--tokens", "65", "--out", str(out)], "longer than the model's context length 64"),
        (["measure", str(ci_run), "--samples", "0", "--out", str(out)], "--samples"),
        # a budget below one sequence is refused before anything is measured (the batch never goes below 1)
        (["measure", str(ci_run), "--memory", "1", "--out", str(out)], "--memory 1 bytes: one sequence of N = 64"),
    ]
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "checkpoint.npz").write_bytes(b"PK\x03\x04 not really a zip")
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    data = (ci_run / "checkpoint.npz").read_bytes()
    (truncated / "checkpoint.npz").write_bytes(data[: len(data) // 2])
    cases += [
        (["measure", str(garbage), "--out", str(out)], "corrupt checkpoint"),
        (["measure", str(truncated), "--out", str(out)], "corrupt checkpoint"),
    ]
    for argv, needle in cases:
        _one_error_line(capsys, posbias_command(argv), needle)
        assert not out.exists()
    assert sorted(p.name for p in garbage.iterdir()) == ["checkpoint.npz"]


def test_bad_train_input_one_line_exit_2(ci_run, tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    _one_error_line(capsys, posbias_command(["train", "--preset", "ci", "--out", str(a_file)]), "not a folder")
    _one_error_line(
        capsys,
        posbias_command(["train", "--preset", "ci", "--out", str(ci_run), "--seed", "1"]),
        "another run (train.seed",
    )
    _one_error_line(
        capsys,
        posbias_command(["train", "--preset", "ci", "--heads", "3", "--out", str(tmp_path / "h")]),
        "not a multiple of heads",
    )
    assert not (tmp_path / "h").exists()


def test_posbias_command_has_measure(ci_run, tmp_path, capsys):
    """Through the posbias command itself (posbias/cli/__init__.py wires posbias.cli.train)."""
    from posbias.cli import main as posbias_main

    _one_error_line(
        capsys, posbias_main(["measure", str(ci_run), "--samples", "0", "--out", str(tmp_path / "o")]), "--samples"
    )
    assert not (tmp_path / "o").exists()


def test_influence_measures_on_the_trained_model_equal_single_forwards(ci_run):
    """The trained model's route computes the measures of posbias.measure.influence too: occlusion against a
    loop of single forwards of posbias.lm.model (zero baseline), gradient x input against central
    differences, each score non-negative and the gradient norm unchanged by the other measures."""
    from posbias.lm import checkpoint as ckpt
    from posbias.lm.model import forward, unflatten
    from posbias.measure.influence import Influence

    loaded = ckpt.load(ci_run)
    tokens = np.frombuffer(b"def measure(x): return x + 1  # bytes", np.uint8)[:16].astype(np.int32)[None]
    every = Influence(("gradxinput", "occlusion-logp", "occlusion-kl"))
    m = measure(loaded.params, loaded.model, tokens, influence=every)
    alone = measure(loaded.params, loaded.model, tokens)
    np.testing.assert_allclose(m.grad_norms, alone.grad_norms, rtol=1e-12)
    with jax.enable_x64(True):
        params = jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float64), unflatten(loaded.params))
        run = jax.jit(
            lambda e: jax.nn.log_softmax(forward(params, jnp.asarray(tokens[0]), loaded.model, embedded=e)[-1])
        )
        e = np.asarray(params["embed"])[tokens[0]]
        logp = np.asarray(run(e))
        top = int(np.argmax(logp))
        for j in range(tokens.shape[1]):
            occluded = e.copy()
            occluded[j] = 0.0
            logq = np.asarray(run(occluded))
            assert m.scores["occlusion-logp"][0, j] == pytest.approx(abs(logp[top] - logq[top]), rel=1e-9, abs=1e-13)
            kl = float((np.exp(logp) * (logp - logq)).sum())
            assert m.scores["occlusion-kl"][0, j] == pytest.approx(kl, rel=1e-8, abs=1e-13)
            h = 1e-5
            step = np.zeros_like(e)
            step[j] = h * e[j]
            up, down = np.exp(np.asarray(run(e + step))[top]), np.exp(np.asarray(run(e - step))[top])
            assert m.scores["gradxinput"][0, j] == pytest.approx(abs(up - down) / (2 * h), rel=1e-6, abs=1e-12)
