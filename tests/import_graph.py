"""The import graph of posbias's modules and the layering rule it must follow (tests/test_layering.py).

Every import counts, at the top of a module or inside a function (a function-level import is a
dependency all the same, only a later one), and so does ``importlib.import_module("posbias....")`` with
a literal name. Nodes are module names (``posbias.hf.checkpoint``); ``from posbias.hf import checkpoint``
is an edge to ``posbias.hf.checkpoint``, ``from posbias.hf.checkpoint import load`` too.

``RULES`` is the layering, each rule a (who, may not import, why) triple of name patterns: a pattern
``posbias.hf.*`` covers the package and everything below it; ``*.cli`` any module named ``cli``.
``violations(graph)`` lists every edge that breaks a rule; ``cycles(graph)`` every strongly connected
set of two or more modules (an import circle).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from fnmatch import fnmatchcase
from pathlib import Path

# (importer pattern, imported pattern, why): no module matching the first may import one matching the second.
# The layers, lowest first (docs/architecture.md, "Layers and the import rule"): numerics and theorem; errors
# and runtime; io; the model API at the package root and the model families (lm, hf); measure (quantities
# below the families, the pipeline and its backends above them); fit and validate; the commands (cli, and
# the command modules of sweep and verify).
_MEASURE_ABOVE_FAMILIES = "posbias.measure.[bcopt]*"  # backend, checkpoint, outputs, pipeline, trained, transformers
RULES = [
    ("posbias.numerics.*", "posbias.*", "numerics is the engine layer: it imports nothing else of posbias"),
    ("posbias.theorem.*", "posbias.*", "theorem imports only itself and numerics' pure-NumPy modules"),
    ("posbias.runtime.*", "posbias.*", "runtime (interrupts, budgets, progress) sits below everything but errors"),
    ("posbias.io.*", "posbias.*", "io (file formats) imports only errors, runtime and the engines' types"),
    ("posbias.hf.*", "posbias.validate*", "a measurement backend does not know the validation built on it"),
    ("posbias.lm.*", "posbias.validate*", "a measurement backend does not know the validation built on it"),
    ("posbias.measure.*", "posbias.validate*", "a measurement backend does not know the validation built on it"),
    ("posbias.hf.*", _MEASURE_ABOVE_FAMILIES, "a model family is driven by the pipeline, never drives it"),
    ("posbias.lm.*", _MEASURE_ABOVE_FAMILIES, "a model family is driven by the pipeline, never drives it"),
    ("posbias.fit.*", "posbias.validate*", "fitting does not know the validation built on it"),
    ("posbias.*", "posbias.cli*", "a library is called by commands, never calls them"),
    ("posbias.*", "*.cli", "a library is called by commands, never calls them"),
]
# importer, imported: the exceptions the rules above allow
ALLOWED = [
    ("posbias.numerics.*", "posbias.numerics.*"),
    ("posbias.theorem.*", "posbias.theorem.*"),
    ("posbias.theorem.*", "posbias.numerics.schedules"),
    ("posbias.theorem.*", "posbias.numerics.shape"),
    ("posbias.theorem.*", "posbias.numerics.sink_transform"),  # pure NumPy: C8's predicates apply S_K
    ("posbias.numerics.*", "posbias.errors"),  # the project's error base (UserError), a leaf module
    ("posbias.theorem.*", "posbias.errors"),
    ("posbias.runtime.*", "posbias.runtime.*"),
    ("posbias.runtime.*", "posbias.errors"),
    ("posbias.io.*", "posbias.io.*"),
    ("posbias.io.*", "posbias.errors"),
    ("posbias.io.*", "posbias.runtime.*"),
    ("posbias.io.*", "posbias.numerics.*"),  # the engines' stack types a kernel file becomes, budgets
    ("posbias.cli*", "posbias.cli*"),  # the dispatcher and the command modules, which share argtypes
    ("*.cli", "posbias.cli*"),  # sweep's and verify's command modules: the shared argtypes, posbias's main
    ("posbias.sweep.plot", "posbias.cli*"),  # a command module too (posbias sweep-plot)
    ("posbias.verify.__main__", "*.cli"),  # python -m posbias.verify
    ("posbias.entry", "posbias.cli*"),  # the console script
    ("posbias.__main__", "posbias.entry"),  # python -m posbias
]
# the old `python -m posbias.X.cli` forms and the console script hand the same arguments to posbias.cli.main
COMMAND = "posbias.cli"
ENTRY_POINTS = {
    "posbias.__main__",
    "posbias.cli.__main__",
    "posbias.entry",
    "posbias.sweep.cli",
    "posbias.sweep.plot",
    "posbias.verify.cli",
}


def sources() -> dict[str, str]:
    """Module name -> source text of every module of posbias's packages (``tests.project_packages``: the
    package folder, numerics/ and theorem/, as installed)."""
    import importlib
    import importlib.util
    import pkgutil

    from tests.project_packages import packages

    out = {}
    for package in packages():
        module = importlib.import_module(package)
        out[package] = Path(str(module.__file__)).read_text(encoding="utf-8")
        for info in pkgutil.iter_modules(module.__path__, prefix=package + "."):
            spec = importlib.util.find_spec(info.name)
            if not info.ispkg and spec is not None and spec.origin:
                out[info.name] = Path(spec.origin).read_text(encoding="utf-8")
    return out


def _resolve(name: str, known: set[str]) -> str | None:
    """The longest module name that ``name`` starts with (``posbias.hf.checkpoint.load`` -> the module)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        isinstance(test, ast.Name)
        and test.id == "TYPE_CHECKING"
        or isinstance(test, ast.Attribute)
        and test.attr == "TYPE_CHECKING"
    )


def _walk(tree: ast.AST) -> Iterable[ast.AST]:
    """``ast.walk`` without the bodies of ``if TYPE_CHECKING:`` (imports for annotations only, never run)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if _type_checking(node):
            todo.extend(getattr(node, "orelse", []))
            continue
        todo.extend(ast.iter_child_nodes(node))


def _imported_names(tree: ast.AST) -> Iterable[str]:
    """Every absolute name an import statement or ``importlib.import_module("literal")`` names, outside
    ``if TYPE_CHECKING:`` blocks; a relative import as its dots and module."""
    for node in _walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                yield "." * node.level + (node.module or "")
                continue
            yield from (f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value


def graph(modules: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the posbias modules it imports (anywhere in its source); a relative import is an edge to
    the name "relative import" (refused by the test)."""
    known = set(modules)
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, text in modules.items():
        for target in _imported_names(ast.parse(text)):
            if target.startswith("."):
                edges[name].add("relative import")
                continue
            resolved = _resolve(target, known) if target.startswith("posbias") else None
            if resolved is not None and resolved != name:
                edges[name].add(resolved)
    return edges


def _matches(name: str, pattern: str) -> bool:
    if pattern.endswith(".*"):
        return name == pattern[:-2] or name.startswith(pattern[:-1])
    return fnmatchcase(name, pattern)


def violations(edges: dict[str, set[str]]) -> list[str]:
    """'importer -> imported: why' for every edge a rule forbids and no exception allows, and for every
    import of the command module outside the entry points."""
    found = []
    for importer, imported_set in sorted(edges.items()):
        for imported in sorted(imported_set):
            if imported == COMMAND and importer not in ENTRY_POINTS:
                found.append(f"{importer} -> {imported}: only the entry point imports the command module")
            if any(_matches(importer, a) and _matches(imported, b) for a, b in ALLOWED):
                continue
            for who, what, why in RULES:
                if _matches(importer, who) and _matches(imported, what):
                    found.append(f"{importer} -> {imported}: {why}")
                    break
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle: the strongly connected sets of two or more modules (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found
