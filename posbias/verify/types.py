"""The records of a verification run: ``Property`` (a checkable statement), ``Result`` (one
property's run), ``Report`` (a whole run), the run constants,
and ``apply_example``, the one rule for passing a drawn example to a check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from posbias.verify.codec import encode

FORMAT = "posbias-counterexample/1"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
PROFILES = ("ci", "dev", "deep")
EXPECTS = ("holds", "counterexample")


def apply_example(fn, example):
    """``fn`` on a drawn example: a dict as keywords, a tuple as positional arguments, else one argument."""
    if isinstance(example, dict):
        return fn(**example)
    if isinstance(example, tuple):
        return fn(*example)
    return fn(example)


@dataclass(frozen=True)
class Property:
    """A checkable statement. name: table key; claim: the registry label it tests (None for a
    user claim); hypotheses: what the strategy guarantees; strategy: a hypothesis strategy or
    a function ``Sizes -> strategy``; check: ``example -> bool`` (True where the statement
    holds); expect: "holds" or "counterexample"; dropped: the hypothesis a necessity search
    drops; explain: ``example -> str`` an exact account of a violation; artifacts:
    ``example -> {name: ("alibi", stack, N) | ("kernels", kernels, lambdas, causal)}`` files
    that ``posbias rollout`` reads; examples: a multiplier of the profile's example count;
    target: ``example -> float`` that hypothesis.target maximises (steers a search toward
    failure: e.g. minus the smallest CDF gap)."""

    name: str
    claim: str | None
    hypotheses: tuple[str, ...]
    strategy: Any
    check: Callable[..., bool]
    expect: str = "holds"
    statement: str = ""
    dropped: str = ""
    explain: Callable[..., str] | None = None
    artifacts: Callable[..., dict] | None = None
    examples: float = 1.0
    target: Callable[..., float] | None = None

    def strategy_for(self, sizes):
        from hypothesis.strategies import SearchStrategy

        s = self.strategy
        return s if isinstance(s, SearchStrategy) else s(sizes)


@dataclass
class Result:
    """One property's run. verdict: held | refuted (expected to hold) | found | not found
    (necessity search) | error | n/a; ok: as expected; examples: cases tried before the
    first failing one (all, when none failed); shrinks: evaluations while shrinking."""

    name: str
    claim: str | None
    hypotheses: tuple[str, ...]
    expect: str
    verdict: str
    ok: bool
    examples: int = 0
    shrinks: int = 0
    seconds: float = 0.0
    counterexample: Any = None
    text: str = ""
    detail: str = ""
    files: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "claim": self.claim,
            "hypotheses": list(self.hypotheses),
            "expect": self.expect,
            "verdict": self.verdict,
            "ok": self.ok,
            "examples": self.examples,
            "shrinks": self.shrinks,
            "seconds": round(self.seconds, 4),
            "detail": self.detail,
            "counterexample": None if self.counterexample is None else encode(self.counterexample),
            "explanation": self.text,
            "files": [str(f) for f in self.files],
        }


@dataclass
class Report:
    """results: one ``Result`` per property; model: what the model checks found (or None)."""

    results: list
    profile: str
    seed: int | None
    model: dict | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_OK if all(r.ok for r in self.results) else EXIT_FAILED

    def to_dict(self) -> dict:
        return {
            "profile": self.profile,
            "seed": self.seed,
            "exit_code": self.exit_code,
            "model": self.model,
            "results": [r.to_dict() for r in self.results],
        }
