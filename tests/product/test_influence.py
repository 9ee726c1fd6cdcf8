"""The influence measures (posbias.measure.influence) against independent routes on the GPT-2 fixture, in
float64: gradient x input against central differences of the top-1 probability, integrated gradients
against the error-guided trapezoid rule written out here (and its completeness error shrinking with the
steps), occlusion against a loop of single forwards in NumPy; the profiles in influence.csv against the
per-sequence scores; bad input refused in one line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posbias.hf import forward, weights
from posbias.hf.measure import measure
from posbias.hf.source import open_checkpoint
from posbias.measure.influence import Influence, parse
from posbias.measure.quantities import MeasureError
from tests.hf_folders import measure_command

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "gpt2"
N, S = 10, 2


@pytest.fixture(scope="module")
def model():
    ck = open_checkpoint(FIXTURE)
    rng = np.random.default_rng(7)
    ids = rng.integers(0, ck.spec.vocab, (S, N)).astype(np.int32)
    with jax.enable_x64(True):
        params = jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float64), weights.params(ck, None))
    return ck, weights.params(ck, None), params, ids


_FORWARDS: dict = {}


def _logits(params, spec, ids, embedded) -> np.ndarray:
    """The next-token logits at the last position, one plain forward (compiled once; no gradient)."""
    with jax.enable_x64(True):
        if spec not in _FORWARDS:
            _FORWARDS[spec] = jax.jit(lambda p, i, e: forward.forward(p, i, spec, embedded=e)[-1])
        return np.asarray(_FORWARDS[spec](params, jnp.asarray(ids), jnp.asarray(embedded)))


def _probs(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max())
    return z / z.sum()


def _measured(model, influence: Influence):
    ck, raw, _, ids = model
    return measure(raw, ck.spec, ids, influence=influence)


def test_gradient_times_input_equals_central_differences(model):
    ck, _, params, ids = model
    m = _measured(model, Influence(("gradxinput", "gradxinput-norm")))
    for s in range(S):
        e = np.asarray(params["embed"])[ids[s]]
        top = int(np.argmax(_logits(params, ck.spec, ids[s], e)))
        h = 1e-5
        expected = []
        for j in range(N):
            step = np.zeros_like(e)
            step[j] = h * e[j]  # the derivative along e_j itself: e_j . g_j
            up = _probs(_logits(params, ck.spec, ids[s], e + step))[top]
            down = _probs(_logits(params, ck.spec, ids[s], e - step))[top]
            expected.append(abs(up - down) / (2 * h))
        np.testing.assert_allclose(m.scores["gradxinput"][s], expected, rtol=1e-6, atol=1e-12)
    # the norm variant is ||e_j * g_j||: never below |e_j . g_j| / sqrt(D) and never above ||e_j|| ||g_j||
    d = np.asarray(params["embed"]).shape[1]
    assert np.all(m.scores["gradxinput-norm"] >= m.scores["gradxinput"] / np.sqrt(d) - 1e-15)


def assert_adaptive_ig(f, e, steps: int, scores, error) -> None:
    """Integrated gradients of the scalar f from the zero baseline to e by the error-guided trapezoid rule with
    ``steps`` intervals, written out here for one sequence on a sorted list of nodes (start: ceil(K/2) equal
    intervals; then bisect the interval whose |F(c) - F(a) - (h/2)(F'(a) + F'(c))| is largest): the scores are
    |a_j| and the completeness error |sum_j a_j - (f(e) - f(0))| / |...|."""
    value_and_grad = jax.jit(jax.value_and_grad(f))
    e = np.asarray(e)

    def node(alpha):
        value, g = value_and_grad(jnp.asarray(alpha * e))
        s = (e * np.asarray(g)).sum(axis=-1)
        return alpha, float(value), s

    start = (steps + 1) // 2
    nodes = [node(i / start) for i in range(start + 1)]
    while len(nodes) - 1 < steps:
        errors = [abs(c[1] - a[1] - (c[0] - a[0]) / 2 * (a[2].sum() + c[2].sum())) for a, c in zip(nodes, nodes[1:])]
        m = int(np.argmax(errors))
        nodes.insert(m + 1, node((nodes[m][0] + nodes[m + 1][0]) / 2))
    attribution = sum((c[0] - a[0]) / 2 * (a[2] + c[2]) for a, c in zip(nodes, nodes[1:]))
    np.testing.assert_allclose(scores, np.abs(attribution), rtol=1e-9, atol=1e-15)
    gap = float(f(e)) - float(f(jnp.zeros_like(e)))
    assert error == pytest.approx(abs(attribution.sum() - gap) / abs(gap), rel=1e-6, abs=1e-12)


def test_integrated_gradients_equal_the_rule_written_here(model):
    ck, _, params, ids = model
    steps = 16
    m = _measured(model, Influence(("ig",), ig_steps=steps))
    with jax.enable_x64(True):
        for s in range(S):
            e = params["embed"][ids[s]]
            top = int(np.argmax(_logits(params, ck.spec, ids[s], e)))

            def f(x, s=s, top=top):
                return jax.nn.softmax(forward.forward(params, jnp.asarray(ids[s]), ck.spec, embedded=x)[-1])[top]

            assert_adaptive_ig(f, e, steps, m.scores["ig"][s], m.ig_error[s])


def test_integrated_gradients_move_the_progress_bar_node_by_node(model):
    ck, raw, _, ids = model
    seen = []
    measure(raw, ck.spec, ids, influence=Influence(("ig",), ig_steps=8), batch=1, progress=lambda d, t: seen.append(d))
    assert seen == sorted(seen) and seen[-1] == len(ids)  # never backwards, ending at every sequence
    within_batches = [d for d in seen if d != int(d)]
    assert len(within_batches) == len(ids) * 8  # each batch of one reports its 9 nodes, the first at 0


def test_the_completeness_error_shrinks_with_the_steps(model):
    coarse = _measured(model, Influence(("ig",), ig_steps=4)).ig_error
    fine = _measured(model, Influence(("ig",), ig_steps=64)).ig_error
    assert np.all(fine < coarse) and np.all(fine < 1e-3), (coarse, fine)


@pytest.mark.parametrize("baseline", ["zero", "mean"])
def test_occlusion_equals_a_loop_of_single_forwards(model, baseline):
    ck, _, params, ids = model
    m = _measured(model, Influence(("occlusion-logp", "occlusion-kl"), baseline=baseline))
    table = np.asarray(params["embed"])
    for s in range(S):
        e = table[ids[s]]
        logp = _logits(params, ck.spec, ids[s], e)
        logp = logp - np.log(np.exp(logp - logp.max()).sum()) - logp.max()
        top = int(np.argmax(logp))
        for j in range(N):
            occluded = e.copy()
            occluded[j] = 0.0 if baseline == "zero" else table.mean(axis=0)
            logq = _logits(params, ck.spec, ids[s], occluded)
            logq = logq - np.log(np.exp(logq - logq.max()).sum()) - logq.max()
            p = np.exp(logp)
            assert m.scores["occlusion-logp"][s, j] == pytest.approx(abs(logp[top] - logq[top]), rel=1e-9, abs=1e-13)
            assert m.scores["occlusion-kl"][s, j] == pytest.approx(
                float((p * (logp - logq)).sum()), rel=1e-8, abs=1e-13
            )


def test_the_gradient_norm_is_the_same_with_or_without_the_other_measures(model):
    alone = _measured(model, Influence())
    together = _measured(model, Influence(("gradxinput", "occlusion-kl")))
    np.testing.assert_allclose(together.grad_norms, alone.grad_norms, rtol=1e-12)
    np.testing.assert_array_equal(together.influence, together.grad_norms.mean(0) / together.grad_norms.mean(0).sum())


def test_influence_csv_holds_each_profile_and_its_standard_error(tmp_path, capsys):
    out = tmp_path / "m"
    argv = [str(FIXTURE), "--tokens", str(N), "--samples", "3", "--influence", "all", "--out", str(out), "--quiet"]
    assert measure_command(argv) == 0
    header = (out / "influence.csv").read_text().splitlines()[0].split(",")
    table = np.loadtxt(out / "influence.csv", delimiter=",", skiprows=1)
    assert header[:4] == ["token_position", "influence", "grad_norm_mean", "grad_norm_sem"]
    assert header[4:] == [
        "gradxinput", "gradxinput_sem", "gradxinput-norm", "gradxinput-norm_sem", "ig", "ig_sem",
        "occlusion-logp", "occlusion-logp_sem", "occlusion-kl", "occlusion-kl_sem",
    ]  # fmt: skip
    for k in range(4, len(header), 2):
        profile = table[:, k]
        assert np.all(profile >= 0) and abs(profile.sum() - 1) < 1e-12, header[k]
    report = json.loads((out / "report.json").read_text())
    assert report["influence_setup"] == {
        "measures": ["grad", "gradxinput", "gradxinput-norm", "ig", "occlusion-logp", "occlusion-kl"],
        "ig_steps": 64,
        "baseline": "zero",
    }
    assert report["integrated_gradients"]["max_completeness_error"] <= 0.05
    # the profile and its standard error against the same windows' per-sequence scores, averaged here
    from posbias.measure.backend import Options
    from posbias.measure.pipeline import open_backend

    windows = open_backend(FIXTURE, Options()).windows((N,), 3, "--tokens")[N]
    ck = open_checkpoint(FIXTURE)
    scores = measure(weights.params(ck, None), ck.spec, windows, influence=Influence(("gradxinput",))).scores
    mean = scores["gradxinput"].mean(axis=0)
    sem = scores["gradxinput"].std(axis=0, ddof=1) / np.sqrt(3)
    np.testing.assert_allclose(table[:, 4], mean / mean.sum(), rtol=1e-10)
    np.testing.assert_allclose(table[:, 5], sem / mean.sum(), rtol=1e-8)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--influence", "ig,bogus"], "unknown measure 'bogus'"),
        (["--influence", "grad,,ig"], "an empty name"),
        (["--ig-steps", "0"], "--ig-steps: expected a positive integer"),
        (["--baseline", "pad"], "invalid choice: 'pad'"),
        (["--influence", "ig", "--ig-steps", "1"], "completeness is off by"),
    ],
)
def test_bad_influence_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, argv, message):
    out = tmp_path / "o"
    code = measure_command([str(FIXTURE), "--tokens", str(N), "--samples", "2", *argv, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_a_path_that_is_not_finite_is_refused_with_its_cause(tmp_path, capsys, monkeypatch):
    """SmolLM2 (RMSNorm without bias) has a NaN gradient at exactly the zero embedding; no fixture does, so the
    rule's result is made non-finite here and the refusal (one line naming the cause, exit 2, nothing
    written) is what is checked."""
    from posbias.measure import integrated

    rule = integrated.integrate

    def nan_on_one(point, steps, batch):
        attribution, error = rule(point, steps, batch)
        error[-1] = np.nan
        return attribution, error

    monkeypatch.setattr(integrated, "integrate", nan_on_one)
    out = tmp_path / "o"
    argv = [str(FIXTURE), "--tokens", str(N), "--samples", "2", "--influence", "ig", "--out", str(out), "--quiet"]
    code = measure_command(argv)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "integrated gradients: not finite on sequence 1" in err and "use --baseline mean" in err, err
    assert not out.exists()


def test_parse_expands_the_aliases_and_keeps_the_order():
    assert parse("occlusion") == ("occlusion-logp", "occlusion-kl")
    assert Influence(parse("ig,gradxinput")).measures == ("grad", "gradxinput", "ig")
    with pytest.raises(MeasureError, match="--ig-steps"):
        Influence(ig_steps=True)
