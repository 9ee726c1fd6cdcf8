"""Counterexample files, both ways: ``write_counterexample`` writes <out>/<slug>.json plus
the models it compares (rollout YAML / kernel .npz that ``posbias rollout`` reads);
``load_counterexample`` reads the JSON back as a ``Counterexample`` whose ``replay()``
re-runs the property's check.

>>> slug("C2(b) w/o monotonicity")
'c2-b-w-o-monotonicity'
"""

from __future__ import annotations

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


def write_counterexample(prop: Property, res: Result, out, *, profile: str, seed) -> list[Path]:
    """<out>/<slug>.json (``load_counterexample`` reads it), and per model it names
    <slug>-<part>.yaml (an AlibiStack, reference schema) or .npz ('kernels', 'lambdas')."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = slug(prop.name)
    files: dict[str, str] = {}
    written = []
    if prop.artifacts is not None:
        for part, art in apply_example(prop.artifacts, res.counterexample).items():
            if art[0] == "alibi":
                path = out / f"{stem}-{part}.yaml"
                path.write_text(config_yaml(art[1], art[2]))
            else:
                path = out / f"{stem}-{part}.npz"
                np.savez(path, kernels=art[1], lambdas=art[2])
            files[part] = path.name
            written.append(path)
    payload = {"format": FORMAT, "property": prop.name, "claim": prop.claim, "expect": prop.expect,
               "verdict": res.verdict, "hypotheses": list(prop.hypotheses), "dropped": prop.dropped,
               "statement": prop.statement, "profile": profile, "seed": seed, "example": encode(res.counterexample),
               "explanation": res.text, "files": files}
    path = out / f"{stem}.json"
    path.write_text(json.dumps(payload, indent=1) + "\n")
    return [path, *written]


def write_model_counterexample(res: Result, out) -> Path:
    """<out>/model-<slug>.json for a model-mode result (``load_counterexample`` reads it)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"model-{slug(res.name)}.json"
    path.write_text(json.dumps({"format": FORMAT, "property": res.name, "claim": res.claim, "expect": res.expect,
                                "verdict": res.verdict, "example": encode(res.counterexample),
                                "explanation": res.text, "files": {}}, indent=1) + "\n")
    return path


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
    """Read a counterexample JSON written by ``posbias verify`` (or ``verify(out=...)``)."""
    data = json.loads(Path(path).read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a posbias counterexample (format {data.get('format')!r}, expected {FORMAT})")
    return Counterexample(data["property"], data.get("claim"), decode(data["example"]), data)
