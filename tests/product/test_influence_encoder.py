"""The influence measures of an encoder without a language-model head (posbias.measure.influence, module
docstring: f = u . y with u the unit direction of the unperturbed output, occlusion-shift) on the BERT fixture,
in float64, against independent routes: gradient x input against central differences of u . y, integrated
gradients against the trapezoid rule written out here, occlusion-shift against a loop of single plain forwards;
the gradient norm (the Jacobian's Frobenius norm) the same with or without the other measures; the measures
that need a next-token distribution refused on an encoder, occlusion-shift refused on a language model, each
in one line with exit 2."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posbias.hf import forward, weights
from posbias.hf.measure import measure
from posbias.hf.source import open_checkpoint
from posbias.measure.influence import Influence
from tests.hf_folders import measure_command
from tests.product.test_influence import assert_adaptive_ig

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
N, S = 9, 2


@pytest.fixture(scope="module")
def model():
    ck = open_checkpoint(FIXTURES / "bert")
    assert not ck.spec.lm_head and not ck.spec.causal
    ids = np.random.default_rng(3).integers(0, ck.spec.vocab, (S, N)).astype(np.int32)
    with jax.enable_x64(True):
        params = jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float64), weights.params(ck, None))
        plain = jax.jit(lambda i, e: forward.forward(params, i, ck.spec, embedded=e)[-1])
    return ck, weights.params(ck, None), params, ids, plain


def _output(model, s, embedded) -> np.ndarray:
    """y (D,): the final hidden state at the last position, one plain forward (no rematerialisation)."""
    _, _, _, ids, plain = model
    with jax.enable_x64(True):
        return np.asarray(plain(jnp.asarray(ids[s]), jnp.asarray(embedded)))


def _measured(model, influence: Influence):
    ck, raw, _, ids, _ = model
    return measure(raw, ck.spec, ids, influence=influence)


def test_gradient_times_input_equals_central_differences_of_the_output_direction(model):
    _, _, params, ids, _ = model
    m = _measured(model, Influence(("gradxinput", "gradxinput-norm")))
    for s in range(S):
        e = np.asarray(params["embed"])[ids[s]]
        y = _output(model, s, e)
        u = y / np.linalg.norm(y)
        h, expected = 1e-5, []
        for j in range(N):
            step = np.zeros_like(e)
            step[j] = h * e[j]  # the derivative along e_j itself: e_j . grad_j (u . y)
            expected.append(abs(u @ _output(model, s, e + step) - u @ _output(model, s, e - step)) / (2 * h))
        np.testing.assert_allclose(m.scores["gradxinput"][s], expected, rtol=1e-6, atol=1e-12)
    d = np.asarray(params["embed"]).shape[1]
    assert np.all(m.scores["gradxinput-norm"] >= m.scores["gradxinput"] / np.sqrt(d) - 1e-15)


def test_integrated_gradients_equal_the_rule_written_here_and_complete(model):
    ck, _, params, ids, _ = model
    steps = 16
    m = _measured(model, Influence(("ig",), ig_steps=steps))
    with jax.enable_x64(True):
        for s in range(S):
            e = params["embed"][ids[s]]
            y = _output(model, s, np.asarray(e))
            u = jnp.asarray(y / np.linalg.norm(y))

            def f(x, s=s, u=u):
                return forward.forward(params, jnp.asarray(ids[s]), ck.spec, embedded=x)[-1] @ u

            assert_adaptive_ig(f, e, steps, m.scores["ig"][s], m.ig_error[s])
    fine = _measured(model, Influence(("ig",), ig_steps=128)).ig_error
    assert np.all(fine < m.ig_error) and np.all(fine < 1e-3), (m.ig_error, fine)


@pytest.mark.parametrize("baseline", ["zero", "mean"])
def test_occlusion_shift_equals_a_loop_of_single_forwards(model, baseline):
    _, _, params, ids, _ = model
    m = _measured(model, Influence(("occlusion-shift",), baseline=baseline))
    table = np.asarray(params["embed"])
    for s in range(S):
        e = table[ids[s]]
        y = _output(model, s, e)
        for j in range(N):
            occluded = e.copy()
            occluded[j] = 0.0 if baseline == "zero" else table.mean(axis=0)
            want = np.linalg.norm(_output(model, s, occluded) - y) / np.linalg.norm(y)
            assert m.scores["occlusion-shift"][s, j] == pytest.approx(want, rel=1e-9, abs=1e-13)


def test_the_gradient_norm_is_the_jacobians_frobenius_norm_with_or_without_the_other_measures(model):
    _, _, params, ids, _ = model
    alone = _measured(model, Influence())
    together = _measured(model, Influence(("gradxinput", "ig", "occlusion-shift"), ig_steps=4))
    np.testing.assert_allclose(together.grad_norms, alone.grad_norms, rtol=1e-12)
    with jax.enable_x64(True):
        e = params["embed"][ids[0]]
        jacobian = np.asarray(jax.jacrev(lambda x: _output_jax(model, 0, x))(e))  # (D, N, D)
    np.testing.assert_allclose(alone.grad_norms[0], np.sqrt((jacobian**2).sum(axis=(0, 2))), rtol=1e-10)


def _output_jax(model, s, embedded):
    ck, _, params, ids, _ = model
    return forward.forward(params, jnp.asarray(ids[s]), ck.spec, embedded=embedded)[-1]


@pytest.mark.parametrize(
    ("folder", "measures", "message"),
    [
        ("bert", "occlusion", "--influence occlusion-logp: an encoder without a language-model head (bert)"),
        ("bert", "occlusion-kl", "has no next-token distribution; occlusion-shift"),
        ("gpt2", "occlusion-shift", "--influence occlusion-shift: applies to an encoder without a language-model"),
    ],
)
def test_a_measure_the_output_does_not_define_is_refused_in_one_line(folder, measures, message, tmp_path, capsys):
    out = tmp_path / "o"
    code = measure_command(
        [str(FIXTURES / folder), "--tokens", "8", "--samples", "2", "--influence", measures, "--out", str(out)]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err  # refused before the weights are read
    assert not out.exists()


def test_the_transformers_backend_refuses_occlusion_shift_before_reading_weights(tmp_path, capsys):
    out = tmp_path / "o"
    argv = [str(FIXTURES / "gpt2"), "--tokens", "8", "--samples", "2", "--influence", "occlusion-shift"]
    code = measure_command([*argv, "--backend", "transformers", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--influence occlusion-shift: applies to an encoder" in err[0], err
    assert not out.exists()
