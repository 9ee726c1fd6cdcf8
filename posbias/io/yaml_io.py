"""Reading YAML config files: fast (libyaml through PyYAML) with ruamel.yaml semantics.

``read_yaml(path)`` returns the top-level mapping of a config file, or raises
:class:`YamlError` (a :class:`posbias.errors.UserError`) whose message is one
line: the file, the line when known, and what was wrong or expected.

Two loaders, one meaning
------------------------
* The fast path composes the document with libyaml (PyYAML's ``CSafeLoader``)
  and constructs it with a resolver and constructors that follow YAML 1.2 the
  way ``ruamel.yaml`` (``typ="safe"``) reads it, not PyYAML's YAML 1.1:

  ======================  ==================  ===============  =============
  plain scalar            PyYAML (YAML 1.1)   ruamel (1.2)     this module
  ======================  ==================  ===============  =============
  ``1e-3``, ``1E3``       str                 float            float
  ``1.0e3``               str                 float            float
  ``yes no on off y n``   bool (not y/n)      str              str
  ``017``                 int 15 (octal)      int 17           int 17
  ``0o17``                str                 int 15           int 15
  ``1:30``                int 90              str              str
  duplicate keys          last one wins       error            error
  ======================  ==================  ===============  =============

* The reference path is ``ruamel.yaml`` (``typ="safe"``, pure Python), the
  loader the original tool is compatible with. It is used when the fast path
  cannot be (PyYAML or libyaml missing), when libyaml rejects a document
  (ruamel accepts TAB characters inside flow sequences, which pure PyYAML and
  older libyaml builds reject; the libyaml 0.2.5 in PyYAML 6 wheels accepts
  the reference files' TABs; ruamel also accepts ``[a:]``, libyaml does not),
  and for features where the two libraries construct different
  objects and the schema has no use for them: ``%YAML`` directives, merge keys
  ``<<``, timestamps, ``!!binary``/``!!set``/``!!omap``/``!!pairs``, local
  tags, the non-specific tag ``!``, non-scalar mapping keys, the ``=`` value
  key, anchor/alias names outside ``[A-Za-z0-9_-]`` (and any other ``&``/``*``
  not followed by such a name), ``?:``. Either way the result is
  what ruamel.yaml returns (tests/product/test_yaml_io.py checks every file under
  ../shared/data). libyaml 0.2.5 is slightly more lenient than ruamel in a few
  places (a TAB before ``:`` or after a value, ``|#`` block headers): such
  files load here although ruamel refuses them.

Limits (checked on both paths, before any Python object is built)
-----------------------------------------------------------------
* :data:`MAX_BYTES`: files larger than this are refused before they are read.
* :data:`MAX_NODES`: files whose text could write more nodes than this (counted from
  the separators, before parsing) are refused.
* :data:`MAX_DEPTH`: nesting deeper than this is refused (no RecursionError).
* :data:`MAX_ALIAS_EXPANSION`: aliases (``*name``) may add at most this many
  nodes to the document beyond those written out; a "billion laughs" file of a
  few hundred bytes is refused in milliseconds. Recursive aliases are refused.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from pathlib import Path
from typing import Any

from posbias.errors import UserError

MAX_BYTES = 64 * 1024 * 1024
"""Largest config file read, in bytes (the BLOOM all_content file is 314 KB)."""

MAX_DEPTH = 100
"""Deepest nesting accepted, counting the top-level mapping and the scalars (the schema needs 4)."""

MAX_ALIAS_EXPANSION = 1_000_000
"""Most nodes that alias references may add beyond the nodes written in the file."""

MAX_NODES = 1_000_000
"""Bound on the nodes a file may write, checked on the text before parsing (the largest
reference file writes about 25,000). Parsing costs ~5 microseconds and ~400 bytes a node,
so a 64 MB flow list of 30 million numbers is refused in milliseconds instead of taking
minutes and gigabytes."""

# Two nodes written in a document are always separated by one of these (flow ',', key ':',
# block '-', '?', an opening bracket or a line break), so 1 + 2 * (their count) bounds the
# number of nodes from above (generously: quoted text and comments count too).
_SEPARATORS = ",:-[{?\n"


def node_bound(text: str) -> int:
    """An upper bound on the nodes YAML ``text`` writes (aliases count as one), without parsing."""
    return 1 + 2 * sum(text.count(c) for c in _SEPARATORS)


class YamlError(UserError):
    """A config file that cannot be read as YAML: one line, file and line first."""


# --------------------------------------------------------------------------- tags

_T = "tag:yaml.org,2002:"
STR, INT, FLOAT, BOOL, NULL = _T + "str", _T + "int", _T + "float", _T + "bool", _T + "null"
SEQ, MAP = _T + "seq", _T + "map"
_TIMESTAMP, _MERGE, _VALUE = _T + "timestamp", _T + "merge", _T + "value"
_NON_SPECIFIC = "!"

# Tags the fast path constructs exactly as ruamel.yaml does. Anything else sends
# the document to the reference loader.
_FAST_TAGS = frozenset({STR, INT, FLOAT, BOOL, NULL, SEQ, MAP})

# YAML 1.2 implicit typing of plain scalars, as ruamel.yaml applies it (checked
# against ruamel in tests/product/test_yaml_io.py). Underscores are allowed in numbers.
_BOOL_RE = re.compile(r"true|True|TRUE|false|False|FALSE")
_FLOAT_RE = re.compile(
    r"[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?"  # 1.5  1.  1.5e3  1.5E-3
    r"|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+"  # 1e3  1e-3 (no dot)
    r"|[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?"  # .5  .5e-3 (signed exponent only)
    r"|[-+]?\.(?:inf|Inf|INF)"
    r"|\.(?:nan|NaN|NAN)"
)
_INT_RE = re.compile(r"[-+]?(?:0b[01_]+|0o[0-7_]+|0x[0-9a-fA-F_]+|[0-9_]+)")
_NULL_RE = re.compile(r"~|null|Null|NULL|")
# Deliberately wider than the timestamp forms ruamel recognises (they all start
# with YYYY-): a false positive only costs a trip through the reference loader.
_TIMESTAMP_RE = re.compile(r"[0-9]{4}-.*", re.S)

# An anchor or alias whose name is not [A-Za-z0-9_-]+ followed by a space, a flow
# indicator or the end: libyaml stops the name earlier than ruamel does. Also
# matches '&' or '*' inside strings, which only costs a trip through ruamel.
_ODD_ANCHOR = re.compile(r"[&*](?![A-Za-z0-9_-]+(?:[\s,\]}]|\Z))")

_IMPLICIT: dict[str, list[tuple[str, re.Pattern]]] = {}


def _add_implicit(tag: str, pattern: re.Pattern, first: str) -> None:
    for ch in first:
        _IMPLICIT.setdefault(ch, []).append((tag, pattern))


# Order matters (first match wins), as in ruamel: bool, float, int, merge, null, timestamp, value.
_add_implicit(BOOL, _BOOL_RE, "tTfF")
_add_implicit(FLOAT, _FLOAT_RE, "-+0123456789.")
_add_implicit(INT, _INT_RE, "-+0123456789")
_add_implicit(_MERGE, re.compile("<<"), "<")
_add_implicit(NULL, _NULL_RE, "~nN")
_IMPLICIT[""] = [(NULL, _NULL_RE)]
_add_implicit(_TIMESTAMP, _TIMESTAMP_RE, "0123456789")
_add_implicit(_VALUE, re.compile("="), "=")


def resolve_plain(value: str) -> str:
    """The tag YAML 1.2 (as ruamel.yaml reads it) gives a plain scalar."""
    for tag, pattern in _IMPLICIT.get(value[:1], ()):
        if pattern.fullmatch(value):
            return tag
    return STR


# ------------------------------------------------------------------ construction

_BOOL_WORDS = {"yes": True, "no": False, "y": True, "n": False, "true": True, "false": False, "on": True, "off": False}


def _to_int(text: str) -> int:
    digits = text.replace("_", "")
    sign = -1 if digits[:1] == "-" else 1
    if digits[:1] in ("-", "+"):
        digits = digits[1:]
    if digits == "0":
        return 0
    for prefix, base in (("0b", 2), ("0x", 16), ("0o", 8)):
        if digits.startswith(prefix):
            return sign * int(digits[2:], base)
    return sign * int(digits)  # YAML 1.2: a leading 0 is not octal


def _to_float(text: str) -> float:
    digits = text.replace("_", "").lower()
    sign = -1 if digits[:1] == "-" else 1
    if digits[:1] in ("-", "+"):
        digits = digits[1:]
    if digits == ".inf":
        return sign * math.inf
    if digits == ".nan":
        return math.nan
    return sign * float(digits)


def _to_bool(text: str) -> bool:
    return _BOOL_WORDS[text.lower()]


_fast_loader_cache: dict[type, type] = {}


def make_fast_loader(base: type) -> type:
    """A loader class on PyYAML ``base`` (``yaml.CSafeLoader``; tests also use the pure
    ``yaml.SafeLoader``) that resolves and constructs scalars like ruamel.yaml."""
    if base in _fast_loader_cache:
        return _fast_loader_cache[base]
    import yaml
    from yaml.constructor import ConstructorError
    from yaml.nodes import ScalarNode, SequenceNode

    def scalar(convert, kind):
        def construct(self, node):
            text = self.construct_scalar(node)
            try:
                return convert(text)
            except (ValueError, KeyError, IndexError, OverflowError):
                raise ConstructorError(None, None, f"cannot read {text!r} as {kind}", node.start_mark) from None

        return construct

    class Loader(base):
        yaml_implicit_resolvers: dict = {}
        yaml_path_resolvers: dict = {}

        def resolve(self, kind, value, implicit):
            if kind is ScalarNode:
                if implicit[0]:
                    return resolve_plain(value)
                # quoted (implicit[1]) -> str; the non-specific tag "!" (neither) is
                # read differently by ruamel (an empty "!" scalar is null there)
                return STR if implicit[1] else _NON_SPECIFIC
            return SEQ if kind is SequenceNode else MAP

        def construct_mapping(self, node, deep=False):
            if not isinstance(node, yaml.MappingNode):
                raise ConstructorError(None, None, f"expected a mapping node, but found {node.id}", node.start_mark)
            mapping = {}
            for key_node, value_node in node.value:
                key = self.construct_object(key_node, deep=True)
                if key in mapping:
                    raise ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
                mapping[key] = self.construct_object(value_node, deep=deep)
            return mapping

    Loader.__name__ = Loader.__qualname__ = f"Ruamel12{base.__name__}"
    Loader.add_constructor(INT, scalar(_to_int, "an integer"))
    Loader.add_constructor(FLOAT, scalar(_to_float, "a float"))
    Loader.add_constructor(BOOL, scalar(_to_bool, "a boolean"))
    _fast_loader_cache[base] = Loader
    return Loader


def _c_loader() -> type | None:
    try:
        import yaml
    except ImportError:
        return None
    if not getattr(yaml, "__with_libyaml__", False):
        return None
    return make_fast_loader(yaml.CSafeLoader)


# ------------------------------------------------------------------- the limits


class _NeedsReference(Exception):
    """The fast path cannot promise ruamel's result for this document."""


def check_graph(  # noqa: C901 (depth, alias, size checks; split per check; issue 20 §4)
    root,
    name: str,
    *,
    fast: bool,
) -> None:
    """Refuse documents nested deeper than MAX_DEPTH, with recursive aliases, or whose
    aliases expand past MAX_ALIAS_EXPANSION nodes. Works on composed nodes (PyYAML's or
    ruamel's), iteratively, in time linear in the number of distinct nodes.
    With ``fast``, raise _NeedsReference for tags and keys only ruamel constructs exactly."""
    info: dict[int, tuple[int, int]] = {}  # id(collection node) -> (expanded size, height)
    open_ids: set[int] = set()  # collections being walked: the path from the root
    written = 0  # nodes written in the file (each distinct node once)
    seen_scalars: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    if root.id == "scalar":
        if fast and root.tag not in _FAST_TAGS:
            raise _NeedsReference
        return
    while stack:
        node, finished = stack.pop()
        ident = id(node)
        if finished:
            open_ids.discard(ident)
            size, height = 1, 1
            children = node.value if node.id == "sequence" else [n for pair in node.value for n in pair]
            for child in children:
                if child.id == "scalar":
                    size += 1
                    height = max(height, 2)
                else:
                    child_size, child_height = info[id(child)]
                    size += child_size
                    height = max(height, child_height + 1)
            if height > MAX_DEPTH:
                raise _too_deep(name, _line(node))
            if size - written > MAX_ALIAS_EXPANSION:
                raise YamlError(
                    f"{name}: {_line(node)}aliases expand the document by more than {MAX_ALIAS_EXPANSION} nodes "
                    "(the limit against alias bombs); write the values out instead"
                )
            info[ident] = (size, height)
            continue
        if ident in info:
            continue
        if ident in open_ids:
            raise YamlError(f"{name}: {_line(node)}recursive alias (a collection contains itself), expected plain data")
        open_ids.add(ident)
        written += 1
        if fast and node.tag not in _FAST_TAGS:
            raise _NeedsReference
        stack.append((node, True))
        if node.id == "sequence":
            children = node.value
        else:
            children = []
            for key, value in node.value:
                if fast and key.id != "scalar":
                    raise _NeedsReference
                children.append(key)
                children.append(value)
        for child in children:
            if child.id == "scalar":
                if fast and child.tag not in _FAST_TAGS:
                    raise _NeedsReference
                cid = id(child)
                if cid not in seen_scalars:
                    seen_scalars.add(cid)
                    written += 1
            elif id(child) not in info:
                stack.append((child, False))


def _too_deep(name: str, where: str = "") -> YamlError:
    return YamlError(f"{name}: {where}nested more than {MAX_DEPTH} levels deep, expected a flat config")


def _line(node) -> str:
    mark = getattr(node, "start_mark", None)
    return "" if mark is None else f"line {mark.line + 1}: "


# ---------------------------------------------------------------------- loaders


def _error_text(exc: Exception, text: str) -> tuple[str, str]:
    """(``"line N: "`` or ``""``, a one-line problem) for a PyYAML or ruamel error."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        where = f"line {mark.line + 1}: "
    elif isinstance(getattr(exc, "position", None), int):
        where = f"line {text.count(chr(10), 0, exc.position) + 1}: "
    else:
        where = ""
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc)
    if not _is_yaml_error(exc):
        problem = f"{type(exc).__name__}: {problem}"
    context = getattr(exc, "context", None)
    if context and getattr(exc, "problem", None):
        problem = f"{context}: {problem}"
    return where, " ".join(str(problem).split())


def load_fast(text: str, name: str = "<string>", loader: type | None = None) -> Any:
    """Parse with libyaml (``loader``: a class from make_fast_loader). Raises the PyYAML error
    when libyaml rejects the text, _NeedsReference when ruamel must construct it."""
    if "%YAML" in text and re.search(r"^%YAML", text, re.M):
        raise _NeedsReference  # a version directive changes implicit typing in ruamel
    if ("&" in text or "*" in text) and _ODD_ANCHOR.search(text):
        raise _NeedsReference  # libyaml and ruamel end anchor and alias names differently
    if "?:" in text:
        raise _NeedsReference  # in flow context ruamel reads ":x" after "?" as a plain scalar
    cls = loader or _c_loader()
    if cls is None:
        raise _NeedsReference
    parser = cls(text)
    try:
        node = parser.get_single_node()
        if node is None:
            return None
        check_graph(node, name, fast=True)
        return parser.construct_document(node)
    finally:
        parser.dispose()


def load_reference(text: str, name: str = "<string>") -> Any:
    """Parse with ruamel.yaml (typ="safe", pure Python), under the same limits."""
    from ruamel.yaml import YAML
    from ruamel.yaml.constructor import SafeConstructor

    class Constructor(SafeConstructor):
        def construct_document(self, node):
            check_graph(node, name, fast=False)
            return super().construct_document(node)

    yaml = YAML(typ="safe", pure=True)
    yaml.Constructor = Constructor
    yaml.max_depth = MAX_DEPTH  # recent ruamel stops composing there (older: RecursionError, caught)
    with warnings.catch_warnings():  # e.g. ReusedAnchorWarning: several lines on stderr
        warnings.simplefilter("ignore")
        return yaml.load(text)


def loads(text: str, name: str = "<string>", *, loader: str = "auto") -> Any:
    """Parse YAML text; ``loader``: "auto" (fast, falling back to ruamel), "fast" (libyaml
    only: YamlError where it would fall back) or "reference" (ruamel only)."""
    if loader not in ("auto", "fast", "reference"):
        raise ValueError(f"loader must be auto, fast or reference, not {loader!r}")
    bound = node_bound(text)
    if bound > MAX_NODES:
        raise YamlError(
            f"{name}: holds up to {bound} values (by its separators), more than the {MAX_NODES} "
            "a config file may hold; expected a config of at most a few hundred thousand numbers"
        )
    if loader != "reference":
        try:
            return load_fast(text, name)
        except _NeedsReference:
            if loader == "fast":
                raise YamlError(f"{name}: needs the reference loader (ruamel.yaml)") from None
            return _reference_or_error(text, name, None)
        except YamlError:
            raise
        except RecursionError:
            raise _too_deep(name) from None
        except MemoryError:
            raise
        except Exception as exc:
            where, problem = _error_text(exc, text)
            if not _is_yaml_error(exc):  # not expected from PyYAML; ruamel decides
                if loader == "fast":
                    raise YamlError(f"{name}: {where}not valid YAML ({problem})") from None
                return _reference_or_error(text, name, None)
            if "maximum nesting depth" in problem:  # libyaml's own limit (1000 levels)
                raise _too_deep(name, where) from None
            if loader == "fast" or not _syntax_error(exc):
                raise YamlError(f"{name}: {where}not valid YAML ({problem})") from None
            return _reference_or_error(text, name, f"{name}: {where}not valid YAML ({problem})")
    return _reference_or_error(text, name, None)


def _is_yaml_error(exc: Exception) -> bool:
    return any(cls.__name__ in ("YAMLError", "MarkedYAMLError") for cls in type(exc).__mro__)


def _syntax_error(exc: Exception) -> bool:
    """Errors of libyaml's reader, scanner, parser or composer: ruamel may still accept the text."""
    return type(exc).__name__ in ("ReaderError", "ScannerError", "ParserError", "ComposerError")


def _reference_or_error(text: str, name: str, fast_message: str | None) -> Any:
    try:
        return load_reference(text, name)
    except YamlError:
        raise
    except RecursionError:  # ruamel older than max_depth support
        raise _too_deep(name) from None
    except MemoryError:
        raise
    except Exception as exc:  # ruamel on hostile input can also fail with TypeError and the like
        if fast_message is not None:  # both refuse it: libyaml's message is the clearer one
            raise YamlError(fast_message) from None
        where, problem = _error_text(exc, text)
        if "maximum depth" in problem:
            raise _too_deep(name, where) from None
        raise YamlError(f"{name}: {where}not valid YAML ({problem})") from None


def read_yaml(path: str | Path) -> dict:
    """The top-level mapping of a YAML config file (UTF-8, at most MAX_BYTES)."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_BYTES:
                raise YamlError(
                    f"{path}: {size} bytes, larger than the {MAX_BYTES // 2**20} MB limit for a config file"
                )
            raw = handle.read(MAX_BYTES + 1)  # also bounds pipes and devices, whose size is 0
    except FileNotFoundError:
        raise YamlError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise YamlError(f"{path}: cannot read: is a directory, expected a YAML file") from None
    except OSError as exc:
        raise YamlError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_BYTES:
        raise YamlError(f"{path}: larger than the {MAX_BYTES // 2**20} MB limit for a config file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise YamlError(f"{path}: line {line}: byte 0x{raw[exc.start]:02x} is not UTF-8, expected UTF-8 text") from None
    data = loads(text, str(path))
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise YamlError(f"{path}: expected a mapping of configuration keys at the top level, got {got}")
    return data
