"""Runs: ``run_property`` puts one property through ``hypothesis.find`` (look for an
example where the check is False, shrink it, explain it, write it), ``select`` picks
properties by name or claim label, ``verify`` runs a selection under a profile with a
progress bar, and ``resolve_seed`` fixes the seed every run reports.

A check holds on an example only where it returns True (a ``bool`` or ``numpy.bool_``);
False is a failure, and anything else (the string "False", None, an array) is an error
of the check, reported as the verdict ``error`` (not as held). hypothesis runs with its
home folder (caches) in a private temporary folder, removed afterwards: a run writes
nothing outside the folder its caller names."""

from __future__ import annotations

import contextlib
import random as _random
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from posbias.errors import UserError
from posbias.verify import cost
from posbias.verify.counterexample import counterexample_files, write_counterexample
from posbias.verify.display import show_example
from posbias.verify.lazy import ps
from posbias.verify.registry import properties
from posbias.verify.types import PROFILES, Property, Report, Result, apply_example


def resolve_seed(profile: str, seed: int | None) -> int | None:
    """The seed of a run: ``seed`` if given; None (derandomized) with ``ci``; with ``dev`` /
    ``deep`` one drawn here, so the report names it and the run can be repeated."""
    if profile not in PROFILES:
        raise UserError(f"--profile: {profile!r}, expected one of {', '.join(PROFILES)}")
    if seed is None and profile != "ci":
        seed = _random.SystemRandom().randrange(2**32)
    return seed


def run_property(
    prop: Property,
    *,
    profile: str = "ci",
    examples: int | None = None,
    seed: int | None = None,
    out: str | Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> Result:
    """Run one property through ``hypothesis.find``: look for an example where the check is
    False, shrink it, and (with ``out``) write it as JSON plus YAML / .npz files."""
    from hypothesis import find, target
    from hypothesis.errors import HypothesisWarning, NoSuchExample, Unsatisfiable

    base = ps.settings_for(profile)
    n = max(1, round((examples if examples is not None else base.max_examples) * prop.examples))
    kwargs = {"max_examples": n}
    if seed is not None:
        kwargs["derandomize"] = False
    from hypothesis import settings

    conf = settings(base, **kwargs)
    calls, first = [0], [0]

    def failing(example) -> bool:
        calls[0] += 1
        if progress is not None and not first[0]:
            progress(calls[0])
        if prop.target is not None and not first[0]:
            target(float(apply_example(prop.target, example)))
        bad = not holds(apply_example(prop.check, example))
        if bad and not first[0]:
            first[0] = calls[0]
        return bad

    start = time.perf_counter()
    strategy = prop.strategy_for(ps.SIZES[profile])
    found, error = None, None
    try:
        with warnings.catch_warnings(), private_hypothesis_home():  # no note that a large repr is costly
            warnings.simplefilter("ignore", HypothesisWarning)
            found = find(strategy, failing, settings=conf, random=_random.Random(seed) if seed is not None else None)
    except (NoSuchExample, Unsatisfiable) as exc:
        error = None if isinstance(exc, NoSuchExample) else f"unsatisfiable: {exc}"
    except Exception as exc:  # a crashing check: hypothesis has shrunk the crash
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    seconds = time.perf_counter() - start
    tried = first[0] or calls[0]
    res = Result(
        prop.name, prop.claim, prop.hypotheses, prop.expect, "", False, tried, max(0, calls[0] - tried), seconds
    )
    if error is not None:
        res.verdict, res.detail = "error", error
        return res
    if found is None:
        res.verdict = "held" if prop.expect == "holds" else "not found"
        res.ok = prop.expect == "holds"
        return res
    res.verdict = "refuted" if prop.expect == "holds" else "found"
    res.ok = prop.expect == "counterexample"
    res.counterexample = found
    text = show_example(found)
    if prop.explain is not None:
        try:
            text += "\n" + apply_example(prop.explain, found)
        except Exception as exc:  # the account is a courtesy; the counterexample stands
            text += f"\n(explanation failed: {type(exc).__name__}: {exc})"
    res.text = text
    if out is not None:
        res.files = write_counterexample(prop, res, out, profile=profile, seed=seed)
    return res


def holds(value) -> bool:
    """True for True, False for False (``bool`` or ``numpy.bool_``); anything else raises
    TypeError (the string "False" is truthy: it must not count as held); nothing needs to tell it
    apart from other errors of a check, which all make the verdict "error"."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    raise TypeError(f"the check returned {shown} ({type(value).__name__}), expected True or False")


@contextlib.contextmanager
def private_hypothesis_home():
    """Point hypothesis's home folder (./.hypothesis by default: its constants and unicode caches,
    written even with no example database) at a temporary folder, removed on exit; restore the
    caller's afterwards."""
    from hypothesis import configuration

    previous = getattr(configuration, "__hypothesis_home_directory", None)
    with tempfile.TemporaryDirectory(prefix="posbias-verify-hypothesis-") as home:
        configuration.set_hypothesis_home_dir(home)
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(previous)


def select(names=None) -> list[Property]:
    """Properties by name or claim label (``C2(b)`` selects C2(b) and its necessity search)."""
    props = properties()
    if not names:
        return list(props.values())
    chosen: list[Property] = []
    for name in names:
        hit = [p for p in props.values() if p.name == name or p.claim == name]
        if not hit:
            labels = sorted({p.claim or p.name for p in props.values()})
            raise UserError(f"unknown claim {name!r}; expected one of {', '.join(labels)}")
        chosen += [p for p in hit if p not in chosen]
    return chosen


def verify(
    names=None,
    *,
    profile: str = "ci",
    examples: int | None = None,
    seed: int | None = None,
    out: str | Path | None = None,
    progress: bool = False,
) -> Report:
    """Run the selected properties (all by default). seed: None with ``ci`` is derandomized; with
    ``dev`` / ``deep`` a seed is drawn and reported, so every run can be repeated. The run's time
    is estimated first and refused beyond the limit (``posbias.verify.cost``). out: a folder for
    the counterexample files, checked before the searches and written as one set after them
    (``posbias.verify.output``); None, the default, writes no file anywhere (the command's
    ``--out`` defaults to ./posbias-verify, the library to nothing)."""
    from posbias.verify.output import preflight, write_set

    seed = resolve_seed(profile, seed)
    props = select(names)
    cost.check_run(props, profile, examples)
    if out is not None:
        preflight(out)
    results = []
    with _Progress(progress, props, profile, examples) as bar:
        for prop in props:
            results.append(
                run_property(prop, profile=profile, examples=examples, seed=seed, progress=bar.updater(prop))
            )
            bar.done(prop)
    report = Report(results, profile, seed)
    if out is not None:
        contents = {}
        for prop, res in zip(props, results):
            if res.counterexample is not None:
                files = counterexample_files(prop, res, profile=profile, seed=seed)
                res.files = [Path(out) / name for name in files]
                contents.update(files)
        if contents:
            write_set(out, contents)
    return report


class _Progress:
    """A rich progress bar on stderr (terminals only): one bar over all properties."""

    def __init__(self, enabled, props, profile, examples):
        self.enabled = enabled and sys.stderr.isatty()
        base = ps.settings_for(profile).max_examples
        self.totals = {p.name: max(1, round((examples or base) * p.examples)) for p in props}
        self.offset = 0

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} examples"),
                TimeElapsedColumn(),
                transient=True,
                console=Console(stderr=True),
            )
            self.bar.__enter__()
            self.task = self.bar.add_task("verify", total=sum(self.totals.values()))
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.bar.__exit__(*exc)

    def updater(self, prop):
        if not self.enabled:
            return None

        def update(count):
            if count % 5 == 0:
                self.bar.update(
                    self.task,
                    description=f"verify {prop.name}",
                    completed=self.offset + min(count, self.totals[prop.name]),
                )

        return update

    def done(self, prop):
        self.offset += self.totals[prop.name]
        if self.enabled:
            self.bar.update(self.task, completed=self.offset)
