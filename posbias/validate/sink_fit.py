"""The sink-aware predictions of ``posbias validate --sink-fit`` (C8: docs/theory.md, "Claims beyond
THEORY.md"; proofs/C8.md), scored out of sample.

(l) the measured kernels under S_K (in every row outside the sink set K the mass on K's keys moved to the
    diagonal: ``posbias.numerics.sink_transform``), rolled out with the measured lambda_t;
(m) the same with an effective mixing strength, lambda_t -> c lambda_t: one scalar c per influence measure;
(n) the control: the plain rollout of the measured kernels (e) with c lambda_t, c fitted the same way, so that
    what (m) gains over flat can be told apart from what one fitted scalar gains by itself.

The fit. c is fitted on a *fit set*: S windows at the fit length N_fit (the smallest of --lengths) that share
no text position with any scored window at any length (``Backend.fit_windows``,
``posbias.lm.data.disjoint_sequences``). For each measure, c minimises W1/(N_fit - 1) between the fit set's
measured profile and the (m) (or (n)) profile over [0, c_max], c_max = 1 / max_t lambda_t (so every c lambda_t <= 1):
a grid of ``GRID`` points, then a bounded Brent refinement inside the best grid cell
(``scipy.optimize.minimize_scalar``). A c within ``EDGE`` c_max of either end is refused in one line: the
structure does not fit that measure (c = 0 is no mixing at all, the profile e_{N-1}; c = c_max saturates the
strongest layer). The fit's own W1 is in-sample and reported as such, never as the result.

The test. At every scored length the (m) row uses that measure's c with the lambda_t measured there (c
lambda_t clipped at 1 where it would exceed it, said in the notes); its scores, bootstrap interval and
"beats flat" come from ``posbias.validate.matrix`` like every other row, on windows disjoint from the fit
set: out of sample, at the fit length and at the others.

Paired comparisons. Each row is also compared with the plain rollout (e), and (m) with its control (n): the
interval of W1(row) - W1(reference) over the same resamples (``VERSUS``, ``posbias.validate.matrix``).

On by default. ``posbias validate`` adds the rows unless ``--no-sink-fit``; where the text leaves no room for
the fit set, where a measure's c lies at the edge, or where the fit set's measurement is refused, (m) and (n)
are left out (for that measure, or for all) with the reason in report.json's ``sink_fit.omitted`` and a note,
and (l) stays. ``--sink-fit`` requires them: each of those cases is then refused in one line.

Floating point: the profiles are float64 rollouts of the renormalised kernels (``kernel_profile``); W1 is
exact to ~1e-15 on them; the fitted c is determined to ~1e-6 c_max (Brent's tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posbias.errors import UserError
from posbias.measure.influence import profile as influence_profile

GRID = 33
EDGE = 1e-3
DEFAULT_SINKS = (0,)


@dataclass(frozen=True)
class StrengthFit:
    """One measure's fit: ``c`` in [0, ``c_max``], the in-sample W1/(N_fit - 1) of (m) with it and of (l)
    (c = 1) and of the flat profile, on the fit set."""

    c: float
    c_max: float
    w1: float
    w1_plain: float
    w1_flat: float


def parse_sinks(text: str) -> tuple[int, ...]:
    """``--sinks 0`` or ``0,1``: the sink set's key positions (non-negative integers, at least one)."""
    try:
        keys = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise UserError(f"--sinks: expected comma-separated key positions, got {text!r}") from None
    if not keys or min(keys) < 0:
        raise UserError(f"--sinks: expected non-negative key positions, got {text!r}")
    return keys


def check_sinks(sinks: tuple[int, ...], lengths) -> tuple[int, ...]:
    """The sink set, checked inside every window and before its last position (the profile's own row); one line
    otherwise."""
    from posbias.numerics.sink_transform import sink_set

    n = min(lengths)
    try:
        keys = tuple(int(k) for k in sink_set(sinks, n))
    except ValueError as exc:
        raise UserError(f"--sinks: {exc} (N = {n})") from None
    if keys[-1] >= n - 1:
        raise UserError(f"--sinks: key {keys[-1]} is the last position of the N = {n} window (the profile's row)")
    return keys


def sink_profile(kernels, lambdas, sinks, *, causal: bool = True, strength: float = 1.0) -> tuple[np.ndarray, bool]:
    """(the profile of S_K(kernels) rolled out with min(1, strength lambda_t), whether any layer was clipped).
    By C8(c) no position outside K reaches K, so the rollout runs on J, the positions outside K (each row of the
    transformed kernels restricted to J sums to 1), and the profile is exactly 0 on K. An empty ``sinks``: the
    plain rollout of the kernels (row (n))."""
    from posbias.numerics.sink_transform import sink_to_diagonal
    from posbias.validate.panels import kernel_profile

    k = np.asarray(kernels, np.float64)
    k = k / k.sum(axis=-1, keepdims=True)
    lam = strength * np.asarray(lambdas, np.float64)
    clipped = bool(np.any(lam > 1.0))
    if not len(sinks):
        return kernel_profile(k, np.minimum(lam, 1.0), causal=causal, label="n"), clipped
    n = k.shape[-1]
    rest = np.setdiff1d(np.arange(n), np.asarray(sinks))
    moved = sink_to_diagonal(k, sinks)[:, rest][:, :, rest]
    out = np.zeros(n)
    out[rest] = kernel_profile(moved, np.minimum(lam, 1.0), causal=causal, label="l, m")
    return out, clipped


def fit_strength(measured: np.ndarray, kernels, lambdas, sinks, *, causal: bool = True, what: str = "") -> StrengthFit:
    """c minimising W1(measured, the row's profile with c) over [0, c_max] (module docstring: (m) with ``sinks``,
    the control (n) with none); an edge c is refused."""
    from scipy.optimize import minimize_scalar

    from posbias.distances import w1

    lam_max = float(np.max(lambdas))
    if not lam_max > 0:
        raise UserError(f"--sink-fit: every measured lambda_t is 0 on the fit set{what}: there is nothing to scale")
    c_max = 1.0 / lam_max

    def loss(c: float) -> float:
        return w1(measured, sink_profile(kernels, lambdas, sinks, causal=causal, strength=c)[0])

    grid = np.linspace(0.0, c_max, GRID)[1:]  # c = 0 is the profile e_(N-1): the edge, never the fit
    values = np.array([loss(c) for c in grid])
    best = int(np.argmin(values))
    lo, hi = (grid[best - 1] if best else EDGE * c_max / 2), grid[min(best + 1, len(grid) - 1)]
    refined = minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"xatol": 1e-6 * c_max})
    c, value = (float(refined.x), float(refined.fun)) if refined.fun <= values[best] else (grid[best], values[best])
    if c <= EDGE * c_max or c >= (1 - EDGE) * c_max:
        raise UserError(
            f"--sink-fit: the effective mixing strength fitted{what} lies at the edge of its range [0, {c_max:.4g}] "
            f"(c = {c:.4g}): this rollout does not fit the measure"
        )
    n = len(measured)
    return StrengthFit(
        c=float(c),
        c_max=c_max,
        w1=float(value),
        w1_plain=float(loss(1.0)),  # (l): c = 1 <= c_max, since every lambda_t <= 1
        w1_flat=float(w1(measured, np.full(n, 1.0 / n))),
    )


FITTED = ("m", "n")
"""The fitted rows: (m) with the sink set, (n) the control without it."""
VERSUS = {"l": ("e",), "m": ("e", "n"), "n": ("e",)}
"""The paired comparisons ``posbias.validate.matrix.score_matrix`` adds to the sink-aware rows: each against the
plain rollout of the measured kernels (e), and (m) against its control (n)."""


def fit_measures(measurement, sinks, *, causal: bool = True, required: bool = True):
    """(row ("m", "n") -> measure name -> its ``StrengthFit`` on the fit set's ``measurement``, the measures left
    out). An edge c is refused when ``required``; otherwise that measure's (m) and (n) are left out, with the
    reason."""
    out: dict[str, dict[str, StrengthFit]] = {row: {} for row in FITTED}
    omitted: dict[str, str] = {}
    for name, scores in measurement.scores.items():
        measured, _ = influence_profile(np.asarray(scores, np.float64))
        try:
            pair = {
                row: fit_strength(
                    measured,
                    measurement.kernels,
                    measurement.lambdas,
                    keys,
                    causal=causal,
                    what=f" for ({row}) to {name} at N = {measurement.num_tokens}",
                )
                for row, keys in zip(FITTED, (sinks, ()))
            }
        except UserError as exc:
            if required:
                raise
            omitted[name] = str(exc).removeprefix("--sink-fit: ")
            continue
        for row, fit in pair.items():
            out[row][name] = fit
    return out, omitted


@dataclass(frozen=True)
class FitSet:
    """The fit set: the sink set (checked inside every window), the fit length (the smallest scored one), the
    (S, N_fit) token ids and their text offsets, disjoint from every scored window (``Backend.fit_windows``);
    ``ids`` None when the text leaves no room for them (then only (l) is scored, ``why`` says so), and
    ``required`` whether a fit that cannot be made is refused (``--sink-fit``) or left out with a note (the
    default)."""

    sinks: tuple[int, ...]
    length: int
    ids: np.ndarray | None
    offsets: np.ndarray | None
    required: bool = True
    why: str = ""

    @classmethod
    def cut(cls, backend, sinks, lengths, samples: int, *, required: bool = True) -> FitSet | None:
        """Checked and cut before any weight is read. Required: one line when the sink set or the text does not
        allow it. Otherwise None when the default sink set does not fit the windows (a set the user named is
        refused), and a fit set without windows when the text is too short for them."""
        try:
            sinks = check_sinks(tuple(sinks), lengths)
        except UserError:
            if required or tuple(sinks) != DEFAULT_SINKS:  # a sink set the user named is refused
                raise
            return None
        length = min(lengths)
        try:
            ids, offsets = backend.fit_windows(length, samples, tuple(lengths))
        except UserError as exc:
            if required:
                raise
            return cls(sinks, length, None, None, required=False, why=str(exc))
        return cls(sinks, length, ids, offsets, required=required)

    def fit(self, measurer, plans: dict, *, show: bool = True, causal: bool = True):
        """Measure the fit set at its length (its own progress bar) and fit c to every influence measure:
        ``fit_measures``' fits and omitted measures (none and none without windows). A refused measurement of
        the fit set is refused when required, else (m) and (n) are left out with its reason."""
        from posbias.measure.pipeline import measure_lengths

        if self.ids is None:
            return {}, {}
        plan = {self.length: plans[self.length]}
        try:
            ((_, m),) = measure_lengths(measurer, plan, {self.length: self.ids}, show=show, label="fit set")
        except UserError as exc:  # e.g. integrated gradients' completeness refused on a fit window
            if self.required:
                raise
            return {}, {"": f"the fit set's measurement was refused: {exc}"}
        return fit_measures(m, self.sinks, causal=causal, required=self.required)


def plan(backend, sinks, lengths, samples: int, *, required: bool) -> tuple[FitSet | None, tuple[str, ...]]:
    """``FitSet.cut`` for ``sinks`` (None: the rows left out, as ``--no-sink-fit`` asks), and a note when the
    default run leaves all three rows out because the sink set does not fit the windows."""
    if sinks is None:
        return None, ()
    fit_set = FitSet.cut(backend, sinks, lengths, samples, required=required)
    if fit_set is None:
        keys = ", ".join(map(str, sinks))
        return None, (f"Rows (l), (m) and (n) omitted: the sink set {{{keys}}} does not fit N = {min(lengths)}.",)
    return fit_set, ()


def fit_report(fits: dict[str, dict[str, StrengthFit]], fit_set: FitSet, omitted: dict[str, str]) -> dict:
    """report.json's ``sink_fit``: the sink set, the split (the fit windows' text offsets), and per measure c with
    its range and the in-sample W1 (labelled in-sample); ``omitted``: why (m) and (n) were left out, for the
    whole run ("") or per measure."""
    out: dict = {"sinks": list(fit_set.sinks), "fit_length": fit_set.length, "omitted": dict(omitted)}
    if fit_set.ids is None:
        return {**out, "omitted": {"": fit_set.why}, "measures": {}}
    return {
        **out,
        "fit_samples": len(fit_set.ids),
        "fit_window_offsets": [int(s) for s in np.asarray(fit_set.offsets)],
        "split": "the fit windows share no text position with any scored window at any length",
        "measures": {
            name: {
                "c": f.c,
                "c_range": [0.0, f.c_max],
                "in_sample_w1": f.w1,
                "in_sample_w1_c_1": f.w1_plain,
                "in_sample_w1_flat": f.w1_flat,
                "control": {"c": fits["n"][name].c, "in_sample_w1": fits["n"][name].w1},
            }
            for name, f in fits.get("m", {}).items()
        },
    }


def length_rows(measurement, sinks, fits: dict[str, dict[str, StrengthFit]], *, causal: bool = True):
    """One scored length's (l) profile, the fitted rows' profiles (row -> measure -> profile, each with its c and
    the lambda_t measured here), and where c lambda_t was clipped at 1 ("(m) grad", ...)."""
    m = measurement
    plain, _ = sink_profile(m.kernels, m.lambdas, sinks, causal=causal)
    fitted: dict[str, dict[str, np.ndarray]] = {row: {} for row in fits}
    clipped = []
    for row, by_measure in fits.items():
        keys = sinks if row == "m" else ()
        for name, fit in by_measure.items():
            fitted[row][name], over = sink_profile(m.kernels, m.lambdas, keys, causal=causal, strength=fit.c)
            if over:
                clipped.append(f"({row}) {name}")
    return plain, fitted, clipped


def profile_files(num_tokens: int, fitted: dict[str, dict[str, np.ndarray]]) -> dict[str, str]:
    """profiles/<N>/<row>-<measure>.csv of the fitted rows (the written form of every other panel)."""
    from posbias.io.output import position_csv

    return {
        f"profiles/{num_tokens}/{row}-{name}.csv": position_csv(probability=profile)
        for row, by_measure in fitted.items()
        for name, profile in by_measure.items()
    }


def notes(report: dict, clipped: list[str]) -> tuple[str, ...]:
    """report.md's notes on the fit: where it came from, what was left out and why, and any length where
    c lambda_t was clipped at 1."""
    sinks = ", ".join(map(str, report["sinks"]))
    if "" in report["omitted"]:
        return (
            f"Row (l): sink set K = {{{sinks}}} moved to the diagonal (C8), measured lambda_t. Rows (m) and (n) "
            f"omitted: {report['omitted']['']}.",
        )
    fitted = ", ".join(f"{name} {m['c']:.4g}" for name, m in report["measures"].items())
    out = (
        f"Rows (l) and (m): sink set K = {{{sinks}}} moved to the diagonal (C8); "
        f"(m)'s c fitted per measure ({fitted or 'none'}) on {report['fit_samples']} windows of N = "
        f"{report['fit_length']} that share no text position with any scored window, so every (m) score here is out "
        "of sample; (n), the control, is (e) with c lambda_t fitted the same way; the in-sample fits are in "
        "report.json's sink_fit.",
    )
    out += tuple(f"(m) and (n) omitted for {name}: {why}." for name, why in report["omitted"].items())
    if clipped:
        out += (f"(m): c lambda_t exceeded 1 and was clipped at 1 in some layer at {'; '.join(clipped)}.",)
    return out


def markdown(report: dict) -> list[str]:
    """report.md's section on the fit (in-sample numbers, labelled so); nothing when no measure was fitted."""
    if not report["measures"]:
        return []
    lines = [
        "## Sink-aware fit (in sample)",
        "",
        f"Fit set: {report['fit_samples']} windows of N = {report['fit_length']} at text offsets "
        f"{', '.join(map(str, report['fit_window_offsets']))}, disjoint from every scored window. These W1/(N-1) "
        "are in sample (the fit's own windows); the scores of (m) in the tables above are out of sample.",
        "",
        "| measure | c of (m) | range | W1 (m), in sample | W1 (l), c = 1 | c of (n) | W1 (n), in sample | W1 flat |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, m in report["measures"].items():
        lines.append(
            f"| {name} | {m['c']:.4f} | [0, {m['c_range'][1]:.4f}] | {m['in_sample_w1']:.5f} | "
            f"{m['in_sample_w1_c_1']:.5f} | {m['control']['c']:.4f} | {m['control']['in_sample_w1']:.5f} | "
            f"{m['in_sample_w1_flat']:.5f} |"
        )
    return [*lines, ""]
