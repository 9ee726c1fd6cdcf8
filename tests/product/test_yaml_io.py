"""posbias.io.yaml_io: the libyaml fast path reads what ruamel.yaml reads, and the limits hold.

"Identical" here is strict: same keys in the same order, same types (1, 1.0 and
True differ), floats equal bit for bit (repr), NaN equal to NaN.
"""

from __future__ import annotations

import random
import tracemalloc
import warnings
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from posbias.errors import UserError
from posbias.io import yaml_io
from posbias.io.yaml_io import YamlError, loads, read_yaml

yaml = pytest.importorskip("yaml")

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
FILES = sorted(DATA.rglob("*.yaml")) if DATA.is_dir() else []
FAST_AVAILABLE = bool(getattr(yaml, "__with_libyaml__", False))
needs_libyaml = pytest.mark.skipif(not FAST_AVAILABLE, reason="PyYAML was built without libyaml")


def ruamel_load(text: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return YAML(typ="safe", pure=True).load(text)


def same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and all(same(ka, kb) and same(a[ka], b[kb]) for ka, kb in zip(a, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return repr(a) == repr(b)
    return a == b


def outcome(fn, text):
    """('ok', data) or ('error', message); YAML errors of either library count as errors."""
    try:
        return "ok", fn(text)
    except UserError as exc:
        return "error", str(exc)
    except Exception as exc:  # ruamel's own exceptions
        return "error", f"{type(exc).__name__}"


# ------------------------------------------------------------------ reference data


def test_reference_data_present(shared_data):
    assert len(FILES) >= 22, FILES
    assert any("\t" in f.read_text(encoding="utf-8") for f in FILES), "expected the TAB files the README lists"


@needs_libyaml
@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_reference_file_identical_to_ruamel(path):
    text = path.read_text(encoding="utf-8")
    expected = ruamel_load(text)
    assert same(loads(text, str(path), loader="fast"), expected)  # no silent fallback
    assert same(read_yaml(path), expected)
    assert same(loads(text, str(path), loader="reference"), expected)


@pytest.mark.parametrize(
    "path", [p for p in FILES if "\t" in p.read_text(encoding="utf-8")], ids=lambda p: str(p.relative_to(DATA))
)
def test_tab_file_falls_back_to_ruamel(path, monkeypatch):
    """A libyaml that rejects TABs in flow lists (pure PyYAML stands in for one) falls back."""
    text = path.read_text(encoding="utf-8")
    strict = yaml_io.make_fast_loader(yaml.SafeLoader)
    with pytest.raises(yaml.YAMLError):
        yaml_io.load_fast(text, str(path), loader=strict)
    monkeypatch.setattr(yaml_io, "_c_loader", lambda: strict)
    assert same(read_yaml(path), ruamel_load(text))
    with pytest.raises(YamlError, match="not valid YAML"):
        loads(text, str(path), loader="fast")


@needs_libyaml
def test_fallback_when_libyaml_rejects_what_ruamel_accepts():
    text = "k: [a:]\n"  # YAML 1.2 lets a plain scalar end in ':' inside a flow list
    with pytest.raises(YamlError):
        loads(text, loader="fast")
    assert same(loads(text), ruamel_load(text)) and loads(text) == {"k": ["a:"]}


# ----------------------------------------------------------------------- scalars

SCALARS = [
    # floats: YAML 1.2 reads these as floats; PyYAML 1.1 would give strings for most
    "1e-3",
    "1E3",
    "1e3",
    "-1e-3",
    "+1e+3",
    "1.0e3",
    "1.0e-3",
    "1.0E+3",
    "1.",
    "-1.",
    ".5",
    "-.5",
    "+.5",
    ".5e-3",
    ".5e3",
    "0.",
    "-0.0",
    "+0.0",
    "1_000.5",
    "1__0.0_1",
    "0.1000000000000000055511151231257827",
    "1e400",
    "-1e400",
    "1e-400",
    "123456789012345678901234567890.0",
    ".inf",
    "-.inf",
    "+.inf",
    ".Inf",
    ".INF",
    ".nan",
    ".NaN",
    ".NAN",
    "-.nan",
    "inf",
    "nan",
    "NaN",
    "Infinity",
    # ints
    "0",
    "-0",
    "+0",
    "7",
    "+7",
    "-7",
    "017",
    "-017",
    "0o17",
    "0o19",
    "0x1F",
    "0X1F",
    "-0x1f",
    "0b101",
    "0B101",
    "1_000",
    "_1",
    "1_",
    "-_",
    "+_",
    "08",
    "09",
    "12345678901234567890123",
    "0x_",
    "0b",
    "0o",
    # bools and nulls: 1.2 has only true/false (three spellings) and null/~/empty
    "true",
    "True",
    "TRUE",
    "false",
    "False",
    "FALSE",
    "tRue",
    "yes",
    "no",
    "Yes",
    "NO",
    "on",
    "off",
    "On",
    "y",
    "n",
    "Y",
    "N",
    "null",
    "Null",
    "NULL",
    "nULL",
    "~",
    "",
    # YAML 1.1 only forms
    "1:30",
    "190:20:30",
    "1:30.5",
    "-1:30",
    "=",
    "<<",
    # timestamps (the fast path leaves them to ruamel)
    "2024-01-01",
    "2001-12-14t21:59:43.10-05:00",
    "2001-12-14 21:59:43.10 -5",
    "2024-1-1",
    # strings that look numeric
    "1.2.3",
    "1e",
    "e3",
    "1e3.5",
    "0x",
    "-",
    "+",
    ".",
    "..",
    "1-2",
    "1,5",
    "v1",
    "1 2",
    "0.1 # comment",
]


@needs_libyaml
@pytest.mark.parametrize("scalar", SCALARS)
@pytest.mark.parametrize("template", ["k: {}\n", "k: [{}]\n", "{}: 1\n", "k: {{a: {}}}\n", "k:\n  - {}\n"])
def test_scalar_like_ruamel(template, scalar):
    text = template.format(scalar)
    expected = outcome(ruamel_load, text)
    got = outcome(loads, text)
    assert got[0] == expected[0], (got, expected)
    if got[0] == "ok":
        assert same(got[1], expected[1]), (got, expected)
    fast = outcome(lambda t: loads(t, loader="fast"), text)
    if fast[0] == "ok":  # the fast path either refuses or agrees, never differs
        assert same(fast[1], expected[1]), (fast, expected)


@needs_libyaml
def test_schema_numbers_fast_path():
    data = loads("a: 1e-3\nb: 1.0e3\nc: 017\nd: 0o17\ne: yes\nf: 1_000\ng: .5\nh: -.inf\n", loader="fast")
    assert data == {"a": 0.001, "b": 1000.0, "c": 17, "d": 15, "e": "yes", "f": 1000, "g": 0.5, "h": float("-inf")}
    assert [type(v) for v in data.values()] == [float, float, int, int, str, int, float, float]


@pytest.mark.parametrize("tag", ["!!float", "!!int", "!!bool", "!!str", "!!null"])
@pytest.mark.parametrize("scalar", ["1", "017", "0o17", "1e3", "1:30", "yes", "y", "TRUE", "", "~", "0x1F", "_"])
def test_explicit_tags_like_ruamel(tag, scalar):
    text = f"k: {tag} {scalar}\n"
    expected, got = outcome(ruamel_load, text), outcome(loads, text)
    assert got[0] == expected[0], (got, expected)
    if got[0] == "ok":
        assert same(got[1], expected[1])


@needs_libyaml
def test_random_scalars_like_ruamel():
    rng = random.Random(20260)
    alphabet = "0123456789+-._eExXoObB:yYnNtTfF~aAlLsSuUiI"
    for _ in range(1500):
        scalar = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 7)))
        for text in (f"k: {scalar}\n", f"k: [{scalar}]\n", f"{scalar}: 1\n"):
            expected, got = outcome(ruamel_load, text), outcome(loads, text)
            assert got[0] == expected[0], (text, got, expected)
            if got[0] == "ok":
                assert same(got[1], expected[1]), (text, got, expected)


@pytest.mark.parametrize(
    "text",
    [
        "b: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3\n",  # merge keys
        "%YAML 1.1\n---\na: yes\nb: 017\n",  # version directive: ruamel switches to 1.1 typing
        "a: !!binary aGk=\n",
        "a: !!set {x, y}\n",
        "? [1, 2]\n: x\n",  # non-scalar key (ruamel: tuple)
        "a: &x 1\nb: &x 2\nc: *x\n",  # reused anchor: libyaml refuses, ruamel takes the last
        "k: ! \n",  # non-specific tag
        "k: &a:b 1\n",  # anchor name libyaml ends earlier
        "=: 1\n",
    ],
)
def test_features_left_to_ruamel(text):
    expected, got = outcome(ruamel_load, text), outcome(loads, text)
    assert got[0] == expected[0] == "ok", (got, expected)
    assert same(got[1], expected[1])


@pytest.mark.parametrize("text", ["a: 1\na: 2\n", "a: 1\nb:\n  c: 1\n  c: 1\n", "1: x\n1.0: y\n", "true: x\n1: y\n"])
def test_duplicate_keys_refused_like_ruamel(text):
    assert outcome(ruamel_load, text)[0] == "error"
    with pytest.raises(YamlError, match="duplicate key"):
        loads(text, "d.yaml")


# ------------------------------------------------------------------------ limits


def write(tmp_path: Path, text: str | bytes, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def one_line(exc_info) -> str:
    message = str(exc_info.value)
    assert "\n" not in message and message
    assert isinstance(exc_info.value, UserError)
    return message


def test_size_limit_constant():
    assert yaml_io.MAX_BYTES == 64 * 1024 * 1024


def test_size_limit_refused_before_parsing(tmp_path, monkeypatch):
    monkeypatch.setattr(yaml_io, "MAX_BYTES", 1000)
    path = write(tmp_path, "a: [" + "1, " * 500 + "\n")  # also not valid YAML: size is checked first
    with pytest.raises(YamlError) as info:
        read_yaml(path)
    message = one_line(info)
    assert str(path) in message and "MB limit" in message
    small = write(tmp_path, "".join(f"k{i}: {i}\n" for i in range(90)), "ok.yaml")
    assert len(read_yaml(small)) == 90


def test_size_limit_sparse_file_is_not_read(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as handle:
        handle.truncate(yaml_io.MAX_BYTES + 1)  # sparse: costs no disk
    tracemalloc.start()
    try:
        with pytest.raises(YamlError) as info:
            read_yaml(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024, peak  # refused from its size: the file was never read
    assert "limit" in one_line(info)


def billion_laughs(levels: int = 9, width: int = 10) -> str:
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("loader", ["auto", "reference"])
def test_alias_bomb_refused_quickly_and_small(tmp_path, loader):
    text = billion_laughs()  # 10**9 strings once expanded, under 1 KB written
    assert len(text) < 1000
    tracemalloc.start()
    try:
        with pytest.raises(YamlError) as info:
            loads(text, "bomb.yaml", loader=loader)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = one_line(info)
    assert message.startswith("bomb.yaml: line ") and "alias" in message
    assert peak < 20 * 1024 * 1024, peak  # refused before expanding (10**9 strings would not fit)
    path = write(tmp_path, text)
    with pytest.raises(YamlError, match="alias"):
        read_yaml(path)


def test_alias_expansion_limit_boundary(monkeypatch):
    monkeypatch.setattr(yaml_io, "MAX_ALIAS_EXPANSION", 1000)
    slopes = "[" + ", ".join(["0.5"] * 9) + "]"  # 10 nodes
    ok = f"a: &s {slopes}\nb: [" + ", ".join(["*s"] * 100) + "]\n"  # aliases add 100 * 10 = 1000 nodes
    assert loads(ok)["b"][99] == [0.5] * 9
    too_many = f"a: &s {slopes}\nb: [" + ", ".join(["*s"] * 101) + "]\n"
    with pytest.raises(YamlError, match="alias"):
        loads(too_many)


@pytest.mark.parametrize("loader", ["auto", "reference"])
def test_recursive_alias_refused(loader):
    with pytest.raises(YamlError, match="recursive alias") as info:
        loads("a: &x [1, *x]\n", "r.yaml", loader=loader)
    one_line(info)


def nested(depth: int) -> str:
    """A mapping whose deepest scalar sits at nesting level ``depth`` (the mapping is 1)."""
    return "a: " + "[" * (depth - 2) + "1" + "]" * (depth - 2) + "\n"


@pytest.mark.parametrize("loader", ["auto", "reference"])
def test_nesting_at_the_limit_is_read(loader):
    data = loads(nested(yaml_io.MAX_DEPTH), loader=loader)
    for _ in range(yaml_io.MAX_DEPTH - 1):
        (data,) = data if isinstance(data, list) else data.values()
    assert data == 1


@pytest.mark.parametrize("loader", ["auto", "reference"])
@pytest.mark.parametrize("depth", [yaml_io.MAX_DEPTH + 1, 999, 1500, 100_000])
def test_deep_nesting_clean_error(loader, depth):
    with pytest.raises(YamlError, match="nested more than") as info:
        loads(nested(depth), "deep.yaml", loader=loader)
    one_line(info)


def test_deep_block_nesting_clean_error():
    text = "".join("  " * i + f"k{i}:\n" for i in range(3000)) + "  " * 3000 + "1\n"
    with pytest.raises(YamlError, match="nested more than") as info:
        loads(text, "deep.yaml")
    one_line(info)


# --------------------------------------------------------------- files and shapes


@pytest.mark.parametrize(
    "text,got",
    [
        ("- 1\n- 2\n", "a list"),
        ("5\n", "a int"),
        ("", "an empty file"),
        ("# only a comment\n", "an empty file"),
        ("just text\n", "a str"),
    ],
)
def test_not_a_mapping(tmp_path, text, got):
    with pytest.raises(YamlError) as info:
        read_yaml(write(tmp_path, text))
    message = one_line(info)
    assert "expected a mapping" in message and message.endswith(got)


def test_missing_file(tmp_path):
    with pytest.raises(YamlError, match="no such file") as info:
        read_yaml(tmp_path / "absent.yaml")
    one_line(info)


def test_directory(tmp_path):
    with pytest.raises(YamlError) as info:
        read_yaml(tmp_path)
    one_line(info)


def test_not_utf8(tmp_path):
    path = write(tmp_path, b"a: 1\nb: caf\xe9\n")  # Latin-1
    with pytest.raises(YamlError) as info:
        read_yaml(path)
    message = one_line(info)
    assert "line 2" in message and "UTF-8" in message and "0xe9" in message


def test_utf8_bom_and_unicode(tmp_path):
    path = write(tmp_path, "\ufeffname: café\nk: [1, 2]\n")
    assert read_yaml(path) == {"name": "café", "k": [1, 2]}


@pytest.mark.parametrize(
    "text,line",
    [
        ("a: 1\nb: [1, 2\nc: 3\n", None),
        ("a: 1\n  b: 2\n", 2),
        ("a: 1\n---\nb: 2\n", 2),
        ("a: \x00\n", 1),
        ("a: 1\nb: '\n", None),
    ],
)
def test_syntax_errors_are_one_line(tmp_path, text, line):
    path = write(tmp_path, text)
    with pytest.raises(YamlError, match="not valid YAML") as info:
        read_yaml(path)
    message = one_line(info)
    assert message.startswith(f"{path}: line ")
    if line is not None:
        assert message.startswith(f"{path}: line {line}: ")


def test_without_libyaml_uses_ruamel(monkeypatch):
    monkeypatch.setattr(yaml_io, "_c_loader", lambda: None)
    text = "a: [0.5\t, 1e-3]\nb: yes\n"
    assert same(loads(text), ruamel_load(text))
    with pytest.raises(YamlError, match="reference loader"):
        loads(text, loader="fast")


@needs_libyaml
def test_official_content_file_takes_the_libyaml_path(shared_data, monkeypatch):
    """The point of the module: the 314 KB BLOOM content file is parsed by libyaml and never
    handed to ruamel (the speed itself is measured by benchmarks/bench_startup.py, not timed
    here), with ruamel's result."""
    assert yaml.__with_libyaml__
    text = (shared_data / "official-configs/all_content/fineweb-edu/bloom.yaml").read_text(encoding="utf-8")
    expected = loads(text, loader="reference")

    def refuse(*args, **kwargs):
        raise AssertionError("the fast path handed the official file to ruamel")

    monkeypatch.setattr(yaml_io, "_reference_or_error", refuse)
    assert loads(text, loader="auto") == expected


# ------------------------------------------- posbias.runtime.jax_cache (startup, same issue)

JAX_CACHE_CHILD = """
import json, os, sys
from posbias.runtime.jax_cache import enable_compilation_cache
path = enable_compilation_cache()
import jax, jax.numpy as jnp
jax.jit(lambda x: jnp.sin(x) * 2.0 + 1.0)(jnp.arange(7.0)).block_until_ready()
files = sorted(os.listdir(path)) if path else []
print(json.dumps({"path": None if path is None else str(path), "files": files}))
"""


def _jax_cache_child(tmp_path, **env):
    import json
    import os
    import subprocess
    import sys

    full = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "POSBIAS_JAX"))}
    full.update(env)
    proc = subprocess.run(
        [sys.executable, "-c", JAX_CACHE_CHILD], env=full, capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_jax_cache_on_under_xdg_cache_home(tmp_path):
    got = _jax_cache_child(tmp_path, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert got["path"] == str(tmp_path / "xdg" / "posbias" / "jax")
    assert got["files"], "a sub-second CPU compilation should be cached (min compile time 0)"


@pytest.mark.parametrize("value", ["0", "off", "False"])
def test_jax_cache_off_by_environment(tmp_path, value):
    got = _jax_cache_child(tmp_path, XDG_CACHE_HOME=str(tmp_path / "xdg"), POSBIAS_JAX_CACHE=value)
    assert got == {"path": None, "files": []}
    assert not (tmp_path / "xdg").exists()


def test_jax_cache_keeps_users_own_directory(tmp_path):
    own = tmp_path / "mine"
    got = _jax_cache_child(tmp_path, XDG_CACHE_HOME=str(tmp_path / "xdg"), JAX_COMPILATION_CACHE_DIR=str(own))
    assert got["path"] == str(own)
    assert not (tmp_path / "xdg").exists()
