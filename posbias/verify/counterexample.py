"""Counterexample files, both ways: ``counterexample_files`` renders <slug>.json plus the
models it compares (rollout YAML / kernel .npz that ``posbias rollout`` reads) and
``write_counterexample`` writes them as one set (``posbias.verify.output``);
``load_counterexample`` reads the JSON back as a ``Counterexample`` whose ``replay()``
re-runs the property's check.

>>> slug("C2(b) w/o monotonicity")
'c2-b-w-o-monotonicity'
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from posbias.verify.codec import config_yaml, decode, encode
from posbias.verify.registry import properties
from posbias.verify.types import FORMAT, Property, Result, apply_example


def slug(name: str) -> str:
    """The file stem of a property name: lower case, runs of other characters as one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def counterexample_files(prop: Property, res: Result, *, profile: str, seed) -> dict[str, dict | str | bytes]:
    """name -> content of a property's counterexample: <slug>.json (``load_counterexample`` reads
    it), and per model it names <slug>-<part>.yaml (an AlibiStack, reference schema) or .npz
    ('kernels', 'lambdas'). Rendered in memory (the JSON as its payload dict);
    ``posbias.verify.output.write_set`` writes them."""
    stem = slug(prop.name)
    files: dict[str, str | bytes] = {}
    parts: dict[str, str] = {}
    if prop.artifacts is not None:
        for part, art in apply_example(prop.artifacts, res.counterexample).items():
            if art[0] == "alibi":
                name, content = f"{stem}-{part}.yaml", config_yaml(art[1], art[2])
            else:
                buf = io.BytesIO()
                np.savez(buf, kernels=art[1], lambdas=art[2])
                name, content = f"{stem}-{part}.npz", buf.getvalue()
            parts[part] = name
            files[name] = content
    payload = {
        "format": FORMAT,
        "property": prop.name,
        "claim": prop.claim,
        "expect": prop.expect,
        "verdict": res.verdict,
        "hypotheses": list(prop.hypotheses),
        "dropped": prop.dropped,
        "statement": prop.statement,
        "profile": profile,
        "seed": seed,
        "example": encode(res.counterexample),
        "explanation": res.text,
        "files": parts,
    }
    return {f"{stem}.json": payload, **files}


def model_counterexample_files(res: Result) -> dict[str, dict]:
    """model-<slug>.json (its payload) for a model-mode result (``load_counterexample`` reads it)."""
    return {
        f"model-{slug(res.name)}.json": {
            "format": FORMAT,
            "property": res.name,
            "claim": res.claim,
            "expect": res.expect,
            "verdict": res.verdict,
            "example": encode(res.counterexample),
            "explanation": res.text,
            "files": {},
        }
    }


def write_counterexample(prop: Property, res: Result, out, *, profile: str, seed) -> list[Path]:
    """Write ``counterexample_files`` into ``out`` as one output set (``posbias.verify.output``);
    returns the paths, the JSON first."""
    from posbias.verify.output import write_set

    return write_set(out, counterexample_files(prop, res, profile=profile, seed=seed))


@dataclass(frozen=True)
class Counterexample:
    """A counterexample file, loaded: property and claim names, the decoded example (numpy
    arrays, Fractions, AlibiStack ...), and the raw JSON. ``replay()`` re-runs the property's
    check (False: it still fails); ``stacks()`` the models it names, ready for the engines."""

    property: str
    claim: str | None
    example: Any
    data: dict

    def replay(self) -> bool:
        prop = properties().get(self.property)
        if prop is None:
            raise KeyError(f"property {self.property!r} is not registered in this process")
        return bool(apply_example(prop.check, self.example))

    def stacks(self) -> dict:
        """part -> ("alibi", AlibiStack, N) or ("kernels", kernels, lambdas, causal): the models the
        counterexample compares (what the YAML / .npz files beside the JSON hold)."""
        prop = properties().get(self.property)
        return {} if prop is None or prop.artifacts is None else apply_example(prop.artifacts, self.example)


def load_counterexample(path) -> Counterexample:
    """Read a counterexample JSON written by ``posbias verify`` (or ``verify(out=...)``); refuse one
    whose folder mixes runs (``posbias.verify.output.check_member``)."""
    from posbias.verify.output import check_member

    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path}: not a posbias counterexample (format {found!r}, expected {FORMAT})")
    check_member(path, data)
    return Counterexample(data["property"], data.get("claim"), decode(data["example"]), data)
