"""The derivation interface: typed parameters and ``compute``, the CLI built from them
(``--help``, ``NAME --help``, ``--list --format json``), ``proofs --help``, the certificate
decorator, the three-valued dichotomy verdict (C5(c)), and module privacy in theorem/."""

import ast
import json
from fractions import Fraction
from pathlib import Path

import pytest

from posbias.cli.derive import derive_command
from posbias.cli.proofs import proofs_command
from posbias.numerics import schedules
from posbias.theorem.alibi_row import AlibiRowParams
from posbias.theorem.certificate import Check, certificate, check, registered
from posbias.theorem.claims import CLAIMS, Registry, certificate_registry, run_certificate
from posbias.theorem.derivation import DeriveError
from posbias.theorem.dichotomy import DichotomyParams, compute
from posbias.theorem.dichotomy_analysis import Verdict, analyse
from posbias.theorem.queries import derivations
from posbias.theorem.schedule_expr import ExpressionSchedule, family_of, parse_schedule

THEOREM = Path(__file__).resolve().parents[2] / "theorem"


def test_derive_help_lists_every_derivation(capsys):
    assert derive_command(["--help"]) == 0
    out = capsys.readouterr().out
    for name in derivations():
        assert name in out


@pytest.mark.parametrize("name", list(derivations()))
def test_derive_name_help_lists_each_parameter_with_meaning_default_and_example(name, capsys):
    assert derive_command([name, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: posbias derive {name}")
    der = derivations()[name]
    for info in der.describe()["parameters"]:
        assert info["flag"] in out or info["type"] in out
        assert info["meaning"] in out and info["example"] in out
        assert ("required" if info["default"] is None else f"default {info['default']}") in out


def test_list_as_json_is_machine_readable(capsys):
    assert derive_command(["--list", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in listed] == list(derivations())
    row = next(d for d in listed if d["name"] == "alibi-row")
    assert row["claims"] == ["C3(a)", "C4(b)"]
    assert {p["flag"] for p in row["parameters"]} == {"--row", "--slope", "--diag"}
    assert all(p["meaning"] and p["example"] for d in listed for p in d["parameters"])
    assert derive_command(["--list", "--format", "latex"]) == 2


def test_proofs_help_exits_zero(capsys):
    assert proofs_command(["--help"]) == 0
    assert "--check" in capsys.readouterr().out


def test_params_refuse_bad_values_from_python_callers():
    with pytest.raises(DeriveError, match="--row must be >= 0"):
        AlibiRowParams(row=-1)
    with pytest.raises(DeriveError, match="integer"):
        AlibiRowParams(row=2.5)
    with pytest.raises(DeriveError):
        DichotomyParams(schedules.Custom((0.1, 0.2)))
    assert DichotomyParams("constant:0.3", delta=0.5).delta.expr == Fraction(1, 2)
    with pytest.raises(DeriveError, match="outside C5"):
        DichotomyParams("constant:0.3", delta=1)


def test_compute_equals_parse_then_compute():
    der = derivations()["alibi-row"]
    params = der.parse(["--row", "3", "--slope", "0.5", "--diag", "1"])
    assert params == AlibiRowParams(row=3, slope=0.5, diag=1.0)
    assert der.compute(params) == der.compute(AlibiRowParams(row=3, slope=0.5, diag=1.0))


def test_c5c_verdict_is_an_enum_with_a_reason_when_undecided():
    assert analyse(parse_schedule("constant:0.3")).verdict is Verdict.COLLAPSE
    assert analyse(parse_schedule("power_decay:0.5,1.5")).verdict is Verdict.NO_COLLAPSE
    undecided = analyse(parse_schedule("1/(t+1)**(1+sin(t)**2)"))
    assert undecided.verdict is Verdict.UNDECIDED and "SymPy" in undecided.reason
    conditional = analyse(parse_schedule("lambda_0/(t+1)**beta"))
    assert conditional.verdict is Verdict.CONDITIONAL and conditional.verdict_text == "collapse iff beta <= 1"
    assert compute(DichotomyParams(schedules.Geometric(0.5, 0.9))).data["verdict"] == "no collapse"


def test_named_schedules_are_the_numerics_types_and_expressions_share_their_views():
    import numpy as np
    import sympy as sp

    assert parse_schedule("power_decay:0.8,1.5") == schedules.PowerDecay(0.8, 1.5)
    expr = parse_schedule("0.8/(t+1)**1.5")
    assert isinstance(expr, ExpressionSchedule) and family_of(expr) == family_of(schedules.PowerDecay(0.8, 1.5))
    np.testing.assert_allclose(expr.values(30), schedules.PowerDecay(0.8, 1.5).values(30), rtol=1e-15)
    t = sp.Symbol("t", integer=True, nonnegative=True)
    assert sp.simplify(expr.symbolic(t) - schedules.PowerDecay(0.8, 1.5).symbolic(t)) == 0


def test_certificate_decorator_names_registers_and_refuses_duplicates():
    @certificate("testing:always-true", claims=("C1",))
    def always_true() -> Check:
        return check(True, "trivially")

    assert always_true() == Check("testing:always-true", True, "trivially")
    assert registered()["testing:always-true"].claims == ("C1",)
    with pytest.raises(ValueError, match="declared twice"):

        @certificate("testing:always-true")
        def other() -> Check:
            return check(True, "again")

    with pytest.raises(ValueError, match="module:check-name"):
        certificate("no colon")

    @certificate("testing:returns-a-bool")
    def returns_bool():
        return True

    with pytest.raises(TypeError, match="expected a Check"):
        returns_bool()
    reg = Registry({"testing:returns-a-bool": returns_bool, "testing:tuple": lambda: (True, "x")}, {})
    assert not run_certificate("testing:returns-a-bool", reg).holds
    assert not run_certificate("testing:tuple", reg).holds


def test_claim_certificates_come_from_the_declarations():
    reg = certificate_registry()
    assert len(reg.certificates) == 49  # 36, the 7 of C7 (c7_certificates), the 6 of C8 (sink_certificates)
    for label, claim in CLAIMS.items():
        assert claim.certificates == tuple(n for n, labels in reg.claims.items() if label in labels)
    assert CLAIMS["C4(a)"].certificates == ("softmax-shift:background-cancels",)


def _private_reaches(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("posbias"):
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
            modules |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("posbias")}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
        ):
            found.append(f"{node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", sorted(THEOREM.glob("*.py")), ids=lambda p: p.name)
def test_no_theorem_module_uses_another_modules_private_names(path):
    assert _private_reaches(path) == []
