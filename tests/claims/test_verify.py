"""posbias.verify: every claim's property holds on the ci profile, every necessity search finds
and shrinks its counterexample, the verify command runs end to end (exit codes, JSON,
replayable counterexample files), and user-registered claims run through the same machinery."""

import argparse
import contextlib
import io
import json
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

import posbias
from posbias import verify as pv
from posbias.theorem.claims import CLAIMS
from posbias.verify import cli as verify_cli

PROPS = pv.properties()
HOLDS = [name for name, p in PROPS.items() if p.expect == "holds"]
SEARCHES = [name for name, p in PROPS.items() if p.expect == "counterexample"]


def _cli(argv, capsys=None):
    parser = argparse.ArgumentParser(prog="posbias")
    sub = parser.add_subparsers(dest="command", required=True)
    verify_cli.add_parser(sub)
    return verify_cli.run(parser.parse_args(["verify", *argv]))


def test_importing_the_package_and_building_the_parser_loads_neither_hypothesis_nor_jax():
    code = (
        "import argparse, sys, posbias, posbias.verify.cli as pv, posbias.verify.__main__\n"
        "pv.add_parser(argparse.ArgumentParser().add_subparsers())\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'hypothesis', 'jax', 'jaxlib', 'sympy'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_registered_claim_has_a_property_and_the_named_searches_exist():
    assert set(CLAIMS) <= set(HOLDS)
    for label in CLAIMS:
        assert PROPS[label].claim == label and PROPS[label].check is not None
    assert {
        "C1 w/o causality",
        "C2(b) w/o monotonicity",
        "C3(c) w/ non-monotone layer",
        "C4(a) w/ non-constant shift",
        "C6 old: steep => monotone",
        "C8(b) w/o monotonicity",
    } <= set(SEARCHES)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """One `posbias verify --json --out DIR` over every property (profile ci): the end-to-end run
    the per-claim tests below read."""
    out = tmp_path_factory.mktemp("verify")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = _cli(["--json", "--out", str(out)])
    report = json.loads(buf.getvalue())
    return code, {r["name"]: r for r in report["results"]}, out


def test_the_whole_ci_run_is_as_expected(full_run):
    code, results, _ = full_run
    assert code == 0 and set(results) == set(PROPS)


@pytest.mark.parametrize("name", HOLDS)
def test_claim_property_holds_on_the_ci_profile(name, full_run):
    res = full_run[1][name]
    assert res["verdict"] == "held" and res["ok"], f"{name}: {res['verdict']} {res['detail']}\n{res['explanation']}"
    assert res["examples"] == 25 and res["counterexample"] is None


# Largest shrunk size per search: (tokens, layers) where they apply.
SMALL = {
    "C1 w/o causality": (2, None),
    "C2(b) w/o monotonicity": (3, 3),
    "C3(c) w/ non-monotone layer": (4, 4),
    "C4(a) w/ non-constant shift": (2, None),
    "C6 old: steep => monotone": (4, 8),
    "C6 U-shapes exist": (3, 2),
    "C2(b) w/ non-log-concave bias": (4, 3),
    "C8(b) w/o monotonicity": (4, 3),
}


def _size(example):
    if "stack" in example:
        return example["n"], example["stack"].num_layers
    if "kernels" in example:
        return example["kernels"].shape[-1], example["kernels"].shape[0]
    if "flat" in example:
        return example["flat"].shape[-1], example["flat"].shape[0]
    if "K" in example:
        return len(example["K"]), None
    if "logits" in example:
        return len(example["logits"]), None
    return example["n"], example["layers"]


@pytest.mark.parametrize("name", SEARCHES)
def test_necessity_search_finds_and_shrinks_a_counterexample(name, full_run):
    res, out = full_run[1][name], full_run[2]
    assert res["verdict"] == "found" and res["ok"], f"{name}: {res['verdict']} {res['detail']}"
    assert res["shrinks"] > 0
    # the file is replayable: the loaded example still fails the check
    ce = pv.load_counterexample(out / f"{pv.slug(name)}.json")
    assert ce.property == name and ce.replay() is False
    n, t = _size(ce.example)
    max_n, max_t = SMALL[name]
    assert n <= max_n and (max_t is None or t <= max_t), (name, n, t)
    if name.startswith(("C1", "C2(b)", "C3(c)")):  # exact matrices and an exact negative CDF gap
        assert ce.example[{"C1": "K", "C2": "kernels", "C3": "flat"}[name[:2]]].dtype == object
        assert " < 0: " in res["explanation"]


def test_counterexample_models_are_files_posbias_rollout_reads(full_run):
    out = full_run[2]
    # the ALiBi counterexample is a reference-schema config (posbias rollout CONFIG, load_config)
    model = posbias.load_config(out / "c6-old-steep-monotone-stack.yaml")
    d = np.diff(model.profile("structured").probabilities)
    assert not (np.all(d >= 0) or np.all(d <= 0))
    ce = pv.load_counterexample(out / "c6-old-steep-monotone.json")
    assert isinstance(ce.example["r"], Fraction) and ce.stacks()["stack"][0] == "alibi"
    # the kernel counterexample is a pair of .npz files (posbias rollout --kernels FILE --causal)
    from posbias.io.kernel_file import load_kernels

    before, _ = load_kernels(out / "c2-b-w-o-monotonicity-before.npz", None, True)
    after, _ = load_kernels(out / "c2-b-w-o-monotonicity-after.npz", None, True)
    p0, p1 = pv.last_row(before.kernels, before.lambdas), pv.last_row(after.kernels, after.lambdas)
    assert np.any(np.cumsum(p1) < np.cumsum(p0) - 1e-12)  # raising a lambda did not move p earlier


def test_the_known_c6_counterexample_is_exact():
    # THEORY.md C6: N = 8, r = 1/5, d = 0, T = 8, lambda = 3/4 ends 0.2136, 0.3078, 0.2725
    p = pv.c6_old_profile(8, Fraction(1, 5), 8, Fraction(3, 4))
    assert all(isinstance(x, Fraction) for x in p) and sum(p) == 1
    assert [round(float(x), 4) for x in p[-3:]] == [0.2136, 0.3078, 0.2725]
    assert PROPS["C6 old: steep => monotone"].check(8, Fraction(1, 5), 8, Fraction(3, 4)) is False
    stack = posbias.AlibiStack.build([0.75] * 8, [np.log(5.0)])
    assert np.allclose(pv.engine_profile(stack, 8), [float(x) for x in p], atol=1e-13)


def test_the_numpy_kernels_agree_with_the_engines():
    stack = posbias.AlibiStack.build(
        [0.9, 0.3],
        [[0.5, 0.1], [2.0, 0.0]],
        diagonal=[[1.0, -2.0], [0.0, 3.0]],
        head_weights=[1.0, 3.0],
        temperature=0.7,
        mask=posbias.SlidingWindow(4),
    )
    assert np.allclose(pv.alibi_kernels(stack, 9), np.asarray(posbias.alibi_kernels(stack, 9)), atol=1e-14)
    assert np.allclose(pv.last_row(pv.alibi_kernels(stack, 9), stack.lambdas), pv.engine_profile(stack, 9), atol=1e-14)


def test_cli_selects_claims_prints_json_and_a_table(tmp_path, capsys):
    code = _cli(["C1", "C4(a)", "--json", "--out", str(tmp_path)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["exit_code"] == 0
    assert [r["name"] for r in out["results"]] == ["C1", "C1 w/o causality", "C4(a)", "C4(a) w/ non-constant shift"]
    assert {r["verdict"] for r in out["results"]} == {"held", "found"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c1-w-o-causality.json", "c4-a-w-non-constant-shift.json"]
    assert _cli(["C1", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    for word in ("claim", "hypotheses", "examples", "verdict", "time", "found (expected)", "all as expected"):
        assert word in text
    assert "[0  1]" in text  # the shrunk counterexample, as an exact matrix


def test_cli_model_mode_config_and_kernels(tmp_path, capsys):
    stack = posbias.AlibiStack.build([0.6, 0.4, 0.2], [0.5, 0.125], diagonal=1.0)
    cfg = tmp_path / "model.yaml"
    cfg.write_text(pv.config_yaml(stack, 24))
    assert _cli(["--stack", str(cfg), "--json", "--out", str(tmp_path / "o")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"]["causal"] and out["model"]["monotone_layers"]
    verdicts = {r["name"]: r["verdict"] for r in out["results"]}
    assert verdicts["C2(c)"] == verdicts["C5(a)"] == verdicts["C3(c)"] == verdicts["C4(b)"] == "held"
    assert verdicts["cesaro"] == "n/a"
    # non-monotone causal kernels: C2(b) does not apply, the identities still do
    kernels = np.array([[[1, 0, 0], [0, 1, 0], [1, 0, 0]], [[1, 0, 0], [0, 1, 0], [0, 1, 0]]], dtype=float)
    npz = tmp_path / "k.npz"
    np.savez(npz, kernels=kernels, lambdas=np.array([0.125, 0.125]))
    assert _cli(["--kernels", str(npz), "--causal", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    verdicts = {r["name"]: r["verdict"] for r in out["results"]}
    assert out["model"]["monotone_layers"] is False and out["model"]["non_monotone_layers"] == [0]
    assert verdicts["C2(b)"] == "n/a" and verdicts["C2(c)"] == "held" and verdicts["C1"] == "held"


def test_cesaro_model_is_checked_against_the_closed_form(capsys):
    report = pv.verify_model(posbias.AlibiStack.build([0.5, 0.25, 1.0], [0.0]), 40)
    assert report.exit_code == 0
    assert {r.name: r.verdict for r in report.results}["cesaro"] == "held"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["C9"], "unknown claim 'C9'"),
        (["--stack", "/nonexistent.yaml"], "no such file"),
        (["--examples", "0"], "--examples"),
        (["--tokens", "5"], "apply to --stack"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert _cli(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_seeds_make_runs_reproducible():
    prop = PROPS["C1 w/o causality"]
    a = pv.run_property(prop, profile="dev", seed=11)
    b = pv.run_property(prop, profile="dev", seed=11)
    assert a.verdict == b.verdict == "found"
    assert pv.encode(a.counterexample) == pv.encode(b.counterexample)


def test_user_claims_register_run_and_fail_the_exit_code(tmp_path, capsys):
    from hypothesis import strategies as st

    @pv.claim("user: lambda mix stays stochastic", strategy=st.floats(0.0, 1.0), hypotheses=("lambda in [0, 1]",))
    def mix(lam):
        k = (1 - lam) * np.eye(3) + lam * np.tri(3) / np.arange(1, 4)[:, None]
        return bool(np.allclose(k.sum(axis=1), 1.0))

    pv.register_claim("user: false", lambda x, y: x + y < 10, st.tuples(st.integers(0, 100), st.integers(0, 100)))
    try:
        with pytest.raises(ValueError, match="already registered"):
            pv.register_claim("user: false", lambda x, y: True, st.just((0, 0)))
        report = pv.verify(["user: lambda mix stays stochastic", "user: false"], out=tmp_path)
        held, refuted = report.results
        assert (held.verdict, refuted.verdict, report.exit_code) == ("held", "refuted", 1)
        assert sum(refuted.counterexample) == 10  # shrunk to the boundary
        # the same machinery and output through the command
        assert _cli(["user: false", "--out", str(tmp_path)]) == 1
        out = capsys.readouterr().out
        assert "refuted" in out and "not as expected: user: false" in out
        assert pv.load_counterexample(tmp_path / "user-false.json").replay() is False
    finally:
        pv.unregister("user: lambda mix stays stochastic")
        pv.unregister("user: false")
