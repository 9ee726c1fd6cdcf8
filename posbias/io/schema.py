"""The one validation style of posbias's user files (rollout configs, sweep specs, language-model configs):
frozen pydantic models that refuse unknown keys, NaN and infinity, and one formatter that
turns a ``pydantic.ValidationError`` into the one line the CLI prints (exit 2): where (the key
path), what was wrong and what was expected, and the offending value, shortened.

>>> from typing import Annotated
>>> class Box(pydantic.BaseModel):
...     model_config = STRICT
...     size: Annotated[int, NOT_BOOL, pydantic.Field(gt=0)]
>>> try:
...     Box.model_validate({"size": True})
... except pydantic.ValidationError as err:
...     print(first_error(err))
size: expected a number, got the boolean true
>>> try:
...     Box.model_validate({"size": 2, "colour": "red"})
... except pydantic.ValidationError as err:
...     print(first_error(err))
colour: unknown key
"""

from __future__ import annotations

import pydantic
import pydantic_core

STRICT = pydantic.ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, strict=False)
"""Frozen, unknown keys refused, NaN/inf refused; lax types (a YAML 2 is a valid float)."""


def _reject_bool(value):
    # YAML true/false would otherwise pass as 1/0 (Python's bool is an int): a typo, not a number.
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got the boolean {str(value).lower()}")
    return value


NOT_BOOL = pydantic.BeforeValidator(_reject_bool)
"""Annotate a numeric field with this to refuse booleans before pydantic converts them."""


def refusal(message: str, at: str = "") -> pydantic_core.PydanticCustomError:
    """A validator's complete message, shown as it is after the key path; ``at`` continues the path
    inside the value (``[0][1]``: an element of a nested list)."""
    return pydantic_core.PydanticCustomError("refused", message, {"at": at})


def shown(value, width: int = 40) -> str:
    """repr of an offending value, shortened: a 400-digit number stays one readable line."""
    text = " ".join(repr(value).split())
    return text if len(text) <= width else f"{text[: width - 12]}... ({len(text)} characters)"


def _location(loc, tags: tuple[str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in tags:
            continue  # a discriminated union's tag, which pydantic inserts into the path
        else:
            out += ("." if out else "") + str(part)
    return out


def _names(quoted: str) -> list[str]:
    return [name.strip().strip("'") for name in quoted.split(",")]


def first_error(
    err: pydantic.ValidationError,
    tags: tuple[str, ...] = (),
    *,
    keys: dict[str, tuple[str, ...]] | None = None,
    notes: dict[str, str] | None = None,
) -> str:
    """One line for the first error: ``key.path[i]: what, got VALUE``. A rule of the whole model
    (a ``model_validator`` at the top level) states its own fields and is shown as it is;
    ``tags`` are the discriminator values of the models' unions, left out of key paths.

    With ``keys`` (key path of a mapping -> its keys; ``""`` the top level), unknown keys are
    reported before any other error, with the keys expected there; ``notes`` (key path -> text)
    says what a missing required key would hold."""
    errors = err.errors()
    if keys is not None:
        errors = sorted(errors, key=lambda e: e["type"] != "extra_forbidden")  # a typo first: stable
    e = errors[0]
    msg = e["msg"].removeprefix("Value error, ")
    where = _location(e["loc"], tags)
    if e["type"] == "refused":
        where += e["ctx"]["at"]
        return f"{where}: {msg}" if where else msg
    if not where and e["type"] == "value_error":
        return msg
    where = where or "(top level)"
    if e["type"] == "extra_forbidden":
        expected = (keys or {}).get(_location(e["loc"][:-1], tags))
        return f"{where}: unknown key" + (f", expected one of {', '.join(expected)}" if expected else "")
    if e["type"] == "missing":
        note = (notes or {}).get(where)
        return f"{where}: required key is missing" + (f" ({note})" if note else "")
    if e["type"] == "union_tag_invalid":
        expected = _names(e["ctx"]["expected_tags"])
        choices = ", ".join(expected[:-1]) + " or " + expected[-1] if len(expected) > 1 else expected[0]
        return f"{where}.{e['ctx']['discriminator'].strip(chr(39))}: expected {choices}"
    got = e.get("input")
    tail = "" if isinstance(got, (dict, list)) or ", got " in msg else f", got {shown(got)}"
    return f"{where}: {msg[0].lower() + msg[1:]}{tail}"
