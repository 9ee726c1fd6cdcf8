"""The layering of posbias's modules (docs/architecture.md, "Layers"), enforced on the import graph
(tests/import_graph.py): no import circle anywhere in posbias, numerics or theorem, and no import the
layering rule forbids. Each check also fails on a violation planted into a copy of the real sources,
so neither can pass by reading nothing."""

from __future__ import annotations

import pytest

from tests import import_graph


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return import_graph.sources()


def test_the_graph_reads_every_module_and_their_imports(sources):
    edges = import_graph.graph(sources)
    assert {"posbias.cli", "posbias.numerics.engine", "posbias.theorem.claims", "posbias.hf.checkpoint"} <= set(edges)
    assert "posbias.numerics.engine" in edges["posbias.numerics.auto"]  # a top-level import
    assert "posbias.hf.gguf" in edges["posbias.hf.source"]  # imported inside a function
    assert len(edges) > 150


def test_no_import_circle(sources):
    circles = import_graph.cycles(import_graph.graph(sources))
    assert circles == [], "\n".join(" <-> ".join(c) for c in circles)


def test_no_import_breaks_the_layering(sources):
    found = import_graph.violations(import_graph.graph(sources))
    assert found == [], "\n".join(found)


def test_no_relative_import(sources):
    edges = import_graph.graph(sources)
    assert [m for m, targets in edges.items() if "relative import" in targets] == []


@pytest.mark.parametrize(
    "module, planted, expected",
    [
        ("posbias.numerics.engine", "def _f():\n    from posbias.cli import main\n", "numerics is the engine layer"),
        ("posbias.hf.weights", "import posbias.validate.predict\n", "a measurement backend does not know"),
        ("posbias.measure.pipeline", "from posbias.validate import run\n", "a measurement backend does not know"),
        ("posbias.lm.measure", "from posbias.measure import pipeline\n", "a model family is driven by the pipeline"),
        ("posbias.lm.measure", "from posbias.sweep import cli\n", "a library is called by commands"),
        ("posbias.validate.run", "import posbias.cli.validate\n", "a library is called by commands"),
        ("posbias.io.files", "from posbias import model\n", "io (file formats) imports only"),
        ("posbias.runtime.progress", "from posbias.io import files\n", "runtime (interrupts, budgets, progress)"),
        ("posbias.fit.bias", "from posbias.validate import panels\n", "fitting does not know the validation"),
        ("posbias.model", "import posbias.cli\n", "only the entry point imports the command module"),
    ],
    ids=[
        "numerics-cli",
        "family-validate",
        "pipeline-validate",
        "family-pipeline",
        "family-command",
        "validate-command",
        "io-model",
        "runtime-io",
        "fit-validate",
        "model-cli",
    ],  # fmt: skip
)
def test_a_planted_forbidden_import_is_found(sources, module, planted, expected):
    copy = {**sources, module: sources[module] + "\n" + planted}
    found = import_graph.violations(import_graph.graph(copy))
    assert any(line.startswith(f"{module} -> ") and expected in line for line in found), found


def test_a_planted_circle_is_found(sources):
    """posbias.errors imports nothing; planting a function-level import of a module that imports it
    closes a circle."""
    planted = "def _later():\n    import importlib\n    importlib.import_module('posbias.io.files')\n"
    copy = {**sources, "posbias.errors": sources["posbias.errors"] + "\n" + planted}
    circles = import_graph.cycles(import_graph.graph(copy))
    assert ["posbias.errors", "posbias.io.files"] in circles, circles


def test_imports_for_annotations_only_are_no_edges():
    text = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from posbias.cli import main\n"
    edges = import_graph.graph({"posbias.a": text, "posbias.cli": ""})
    assert edges["posbias.a"] == set()
