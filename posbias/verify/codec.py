"""The JSON form of a drawn example, both ways (``encode`` / ``decode``), and the
reference-schema rollout YAML of an AlibiStack (``config_yaml``): what a counterexample
file holds, exact where the example is (Fractions stay Fractions, non-finite floats keep
their repr).

Examples
--------
>>> from fractions import Fraction
>>> import numpy as np
>>> data = encode({"r": Fraction(1, 5), "K": np.array([[1.0, 0.0], [0.5, np.inf]])})
>>> data["items"]["r"], data["items"]["K"]["nonfinite"]
({'type': 'fraction', 'value': '1/5'}, [[1, 1, 'inf']])
>>> back = decode(data)
>>> back["r"], back["K"].tolist()
(Fraction(1, 5), [[1.0, 0.0], [0.5, inf]])
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def encode(value):
    """JSON-ready form of an example: arrays (float or Fraction), AlibiStack, masks, Fractions."""
    from posbias.numerics.stack import AlibiStack

    if isinstance(value, dict):
        return {"type": "dict", "items": {str(k): encode(v) for k, v in value.items()}}
    if isinstance(value, AlibiStack):
        return {
            "type": "AlibiStack",
            "lambdas": encode(value.lambdas),
            "slopes": encode(value.slopes),
            "diagonal": encode(value.diagonal),
            "head_weights": encode(value.head_weights),
            "temperature": float(value.temperature),
            "mask": value.mask.spec,
        }
    if isinstance(value, Fraction):
        return {"type": "fraction", "value": str(value)}
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return {"type": "fractions", "data": np.vectorize(str, otypes=[object])(value).tolist()}
        if value.dtype == bool:
            return {"type": "bools", "data": value.tolist()}
        data = np.where(np.isfinite(value), value, 0.0).tolist() if value.size else value.tolist()
        bad = np.argwhere(~np.isfinite(value)) if value.size else []
        return {"type": "array", "data": data, "nonfinite": [[*map(int, i), repr(float(value[tuple(i)]))] for i in bad]}
    if isinstance(value, (tuple, list)):
        return {"type": "tuple" if isinstance(value, tuple) else "list", "items": [encode(v) for v in value]}
    if hasattr(value, "spec") and hasattr(value, "bidirectional_length"):
        return {"type": "mask", "spec": value.spec}
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        return x if math.isfinite(x) else {"type": "float", "value": repr(x)}
    if value is None or isinstance(value, str):
        return value
    return {"type": "repr", "value": repr(value)}


def decode(data):
    """Inverse of ``encode``."""
    from posbias.numerics import masks
    from posbias.numerics.stack import AlibiStack

    if not isinstance(data, dict):
        return data
    kind = data.get("type")
    if kind == "dict":
        return {k: decode(v) for k, v in data["items"].items()}
    if kind == "list":
        return [decode(v) for v in data["items"]]
    if kind == "tuple":
        return tuple(decode(v) for v in data["items"])
    if kind == "fraction":
        return Fraction(data["value"])
    if kind == "fractions":
        return np.vectorize(Fraction, otypes=[object])(np.array(data["data"], dtype=object))
    if kind == "bools":
        return np.array(data["data"], dtype=bool)
    if kind == "array":
        arr = np.array(data["data"], dtype=np.float64)
        for *idx, text in data.get("nonfinite", []):
            arr[tuple(idx)] = float(text)
        return arr
    if kind == "float":
        return float(data["value"])
    if kind == "mask":
        return masks.parse(data["spec"])
    if kind == "AlibiStack":
        return AlibiStack.build(
            decode(data["lambdas"]),
            decode(data["slopes"]),
            decode(data["diagonal"]),
            decode(data["head_weights"]),
            data["temperature"],
            masks.parse(data["mask"]),
        )
    if kind == "repr":
        return data["value"]
    raise ValueError(f"unknown encoded type {kind!r}")


def config_yaml(stack, num_tokens: int) -> str:
    """The reference-schema rollout YAML of an AlibiStack (``posbias rollout FILE`` reads it).
    Values are written at full repr precision; the lambdas as a custom schedule."""

    def rows(a):
        return "[" + ", ".join("[" + ", ".join(repr(float(x)) for x in row) + "]" for row in np.asarray(a)) + "]"

    mask = stack.mask
    mask_lines = {"causal": '  mask_type: "causal"', "full": '  mask_type: "full"'}.get(mask.spec)
    if mask_lines is None:
        kind, _, arg = mask.spec.partition(":")
        mask_lines = (
            f'  mask_type: "sliding_window"\n  window_size: {arg}'
            if kind == "window"
            else f'  mask_type: "prefix"\n  prefix_length: {arg}'
        )
    return (
        f"# counterexample written by posbias verify\n"
        f"sequence_length: {int(num_tokens)}\nnum_layers: {stack.num_layers}\n"
        f"mask_config:\n{mask_lines}\n"
        f"attention_config:\n  num_heads: {stack.num_heads}\n  alibi_slopes: {rows(stack.slopes)}\n"
        f"  head_weights: {rows(stack.head_weights)}\n  softmax_temperature: {float(stack.temperature)!r}\n"
        f"content_config:\n  diagonal_scores: {rows(stack.diagonal)}\n  base_scores: [[0.0]]\n"
        f'lambda_schedule_config:\n  schedule_type: "custom"\n'
        f"  lambdas_custom: [{', '.join(repr(float(x)) for x in stack.lambdas)}]\n"
    )
