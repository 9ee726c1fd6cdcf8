"""Every prediction against every influence measure, with bootstrap intervals over sequences
(``posbias validate``; THEORY.md, "Comparing with measured influence").

For one length N: a measure's per-sequence scores X (S, N) (``Measurement.scores``, non-negative) give the
measured profile m = mean_s X_s / sum(mean_s X_s) (``posbias.measure.influence.profile``). Each prediction q
(a profile of N entries summing to 1) is scored against m by W1 / (N - 1), Spearman's rho and total
variation (``posbias.distances``).

**Intervals.** The sequences are resampled with replacement B times (``Bootstrap``: B resamples, a seed, a
level); resample b gives counts c_b (S,) and the profile m_b = c_b X / sum(c_b X). Every score is computed on
every m_b, and its interval is the percentile interval ((1 - level)/2, (1 + level)/2) of the B values
(Efron's percentile bootstrap). The resamples are the same for every measure and prediction at one N
(drawn by ``numpy.random.default_rng([seed, N])``), so the scores are paired: **a prediction beats the flat
profile** when the whole interval of W1(q, m_b) - W1(flat, m_b) lies below -``TIE`` (below 0 beyond rounding),
not when the point W1 does.
With S = 1 every resample is the one sequence and the intervals collapse to the point.

**Without token 0.** The same scores on positions 1 .. N-1 only, the prediction and every resampled profile
renormalised there (``restrict``): the attention sink on token 0 (``posbias.measure.sinks``) dominates a
whole-profile score, and this view asks whether the shape elsewhere is predicted.

**Shape** (``shape``), the robust form of C6's u_shape for a noisy measured profile: with k = max(1,
floor(L / 10)) of the L positions looked at, head = mean of the first k entries / mean of the middle L - 2k,
tail = mean of the last k / mean of the middle; primacy when head > 1, recency when tail > 1, a U when both,
and the relative position of the minimum argmin / (L - 1). For a measured profile each ratio gets its
interval: the property "holds" when the interval lies above 1, "fails" when below, else "undecided".

Floating point: float64 throughout; W1 and TV are exact to ~N ulp, the percentiles interpolate linearly
between the sorted resampled values (``numpy.quantile``'s default).

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> scores = rng.random((8, 5)) + np.array([3.0, 0, 0, 0, 2.0])   # 8 sequences, ends heavier
>>> table = score_matrix({"flat": np.full(5, 0.2), "ends": np.array([0.4, 0.05, 0.05, 0.1, 0.4])},
...                      {"grad": scores}, Bootstrap(resamples=200, seed=1), num_tokens=5)
>>> row = table["all"]["grad"]["ends"]
>>> bool(row["w1_ci"][0] <= row["w1"] <= row["w1_ci"][1]), row["beats_flat"]
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posbias.errors import UserError

VIEWS = ("all", "without_token_0")
"""The positions scored: all N, or 1 .. N-1 renormalised."""
TIE = 1e-12
"""Differences of W1, and ratios' distances from 1, within TIE are ties, never a verdict: W1 is exact to ~N ulp,
so a prediction equal to the flat profile up to rounding (the attention-only rollout of an encoder's full mask
without positional bias: 1/N to the last bit or two) would otherwise "beat" it by 1e-16 on every resample."""


@dataclass(frozen=True)
class Bootstrap:
    """B ``resamples`` of the sequences, the ``seed`` of their draw, the two-sided interval's ``level``."""

    resamples: int = 1000
    seed: int = 0
    level: float = 0.95

    def __post_init__(self):
        if isinstance(self.resamples, bool) or not isinstance(self.resamples, int) or self.resamples < 1:
            raise UserError(f"--resamples: expected a positive integer, got {self.resamples!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise UserError(f"--seed: expected a non-negative integer, got {self.seed!r}")
        if not 0 < self.level < 1:
            raise UserError(f"bootstrap level: expected a number in (0, 1), got {self.level!r}")

    def counts(self, samples: int, num_tokens: int) -> np.ndarray:
        """(B, S) how often each sequence is drawn in each resample, from ``default_rng([seed, N])``."""
        rng = np.random.default_rng([self.seed, num_tokens])
        draws = rng.integers(0, samples, size=(self.resamples, samples))
        counts = np.zeros((self.resamples, samples))
        np.add.at(counts, (np.arange(self.resamples)[:, None], draws), 1.0)
        return counts

    def interval(self, values: np.ndarray) -> list[float]:
        """The percentile interval of (B,) values at ``level``."""
        tail = (1 - self.level) / 2
        lo, hi = np.quantile(values, [tail, 1 - tail])
        return [float(lo), float(hi)]

    def as_dict(self) -> dict:
        return {"resamples": self.resamples, "seed": self.seed, "level": self.level, "method": "percentile"}


def normalised(rows: np.ndarray, what: str) -> np.ndarray:
    """Rows of non-negative weights -> rows summing to 1; a row with zero or non-finite total is refused."""
    total = rows.sum(axis=-1, keepdims=True)
    if not (np.all(np.isfinite(total)) and np.all(total > 0)):
        raise UserError(f"{what}: the scores are zero or not finite on the positions compared")
    return rows / total


def restrict(profiles: np.ndarray, start: int) -> np.ndarray:
    """Profiles (..., N) on positions start .. N-1, renormalised there (refused when that mass is 0)."""
    return normalised(np.asarray(profiles, np.float64)[..., start:], f"positions {start}..N-1")


def _w1(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    n = p.shape[-1]
    if n < 2:
        return np.zeros(p.shape[:-1])
    return np.abs(np.cumsum(p, axis=-1)[..., :-1] - np.cumsum(q)[:-1]).sum(axis=-1) / (n - 1)


def _tv(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    return 0.5 * np.abs(p - q).sum(axis=-1)


def _centred_ranks(rows: np.ndarray) -> np.ndarray:
    """Each row's average ranks (ties share the mean of their ranks: ``posbias.distances.average_ranks``, here
    scipy's ``rankdata`` over all rows at once; ranks are halves, exact in float64), minus the row's mean."""
    from scipy.stats import rankdata

    ranks = rankdata(np.atleast_2d(rows), axis=-1)
    return ranks - ranks.mean(axis=-1, keepdims=True)


def _spearman(ranks_p: np.ndarray, ranks_q: np.ndarray) -> np.ndarray:
    """Pearson correlation of centred average ranks, row-wise; NaN where a row is constant."""
    denom = np.sqrt((ranks_p**2).sum(axis=-1) * (ranks_q**2).sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denom > 0, (ranks_p @ ranks_q) / np.where(denom > 0, denom, 1.0), np.nan)


def _scores(measured: tuple, q: np.ndarray, bootstrap: Bootstrap) -> tuple[dict, np.ndarray]:
    """One prediction q against one measured profile, ``measured`` = (point (N,), resampled (B, N), and their
    ``_centred_ranks``, computed once for every prediction): point scores and their intervals, and the (B,)
    resampled W1 (for the paired differences)."""
    point, resampled, ranks_point, ranks_resampled = measured
    rq = _centred_ranks(q)[0]
    w1_b, tv_b = _w1(resampled, q), _tv(resampled, q)
    rho_point = float(_spearman(ranks_point, rq)[0])
    rho_b = _spearman(ranks_resampled, rq)
    row = {
        "w1": float(_w1(point, q)),
        "w1_ci": bootstrap.interval(w1_b),
        "spearman": None if np.isnan(rho_point) else rho_point,
        "spearman_ci": None if np.isnan(rho_b).any() else bootstrap.interval(rho_b),
        "tv": float(_tv(point, q)),
        "tv_ci": bootstrap.interval(tv_b),
    }
    return row, w1_b


def _difference(row: dict, w1_b: np.ndarray, reference: dict, reference_b: np.ndarray, bootstrap: Bootstrap) -> dict:
    """W1 of a row minus W1 of a reference row, paired over the same resamples; ``lower`` when the whole interval
    lies below 0."""
    interval = bootstrap.interval(w1_b - reference_b)
    return {"w1_minus": row["w1"] - reference["w1"], "w1_minus_ci": interval, "lower": bool(interval[1] < -TIE)}


def score_matrix(
    predictions: dict[str, np.ndarray | dict[str, np.ndarray]],
    measures: dict[str, np.ndarray],
    bootstrap: Bootstrap,
    *,
    num_tokens: int,
    versus: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, dict[str, dict[str, dict]]]:
    """view -> measure -> prediction -> scores (module docstring): ``predictions`` name -> an (N,) profile, or
    measure name -> (N,) profile for a prediction fitted to each measure separately (scored against that measure
    only); the flat one is added if absent and scored too; ``measures`` name -> (S, N) per-sequence scores.
    Every row has ``w1_minus_flat`` with its interval and ``beats_flat``; ``versus`` maps a prediction to other
    predictions it is compared with the same way (``versus`` -> reference -> ``w1_minus``, ``w1_minus_ci``,
    ``lower``), e.g. a sink-aware row against the plain rollout."""
    n = num_tokens
    predictions = {**predictions, "flat": np.full(n, 1.0 / n)}
    versus = versus or {}
    out: dict[str, dict] = {view: {} for view in VIEWS}
    for name, scores in measures.items():
        scores = np.asarray(scores, np.float64)
        if scores.ndim != 2 or scores.shape[1] != n:
            raise UserError(f"influence {name!r}: expected (sequences, {n}) scores, got shape {scores.shape}")
        counts = bootstrap.counts(scores.shape[0], n)
        point = normalised(scores.mean(axis=0), f"influence {name!r}")
        resampled = normalised(counts @ scores, f"influence {name!r} (a bootstrap resample)")
        profiles = {k: q if not isinstance(q, dict) else q.get(name) for k, q in predictions.items()}
        profiles = {k: np.asarray(q, np.float64) for k, q in profiles.items() if q is not None}
        for view, start in zip(VIEWS, (0, 1)):
            if start >= n:
                continue
            p, rs = (point, resampled) if start == 0 else (restrict(point, start), restrict(resampled, start))
            measured = (p, rs, _centred_ranks(p), _centred_ranks(rs))
            scored = {
                k: _scores(measured, q if start == 0 else restrict(q, start), bootstrap) for k, q in profiles.items()
            }
            flat, flat_b = scored["flat"]
            rows = {}
            for key, (row, w1_b) in scored.items():
                if key != "flat":
                    to_flat = _difference(row, w1_b, flat, flat_b, bootstrap)
                    row.update(w1_minus_flat=to_flat["w1_minus"], w1_minus_flat_ci=to_flat["w1_minus_ci"])
                    row["beats_flat"] = to_flat["lower"]
                else:
                    row.update(w1_minus_flat=0.0, w1_minus_flat_ci=[0.0, 0.0])
                references = [r for r in versus.get(key, ()) if r in scored]
                if references:
                    row["versus"] = {r: _difference(row, w1_b, *scored[r], bootstrap) for r in references}
                rows[key] = row
            out[view][name] = rows
    return out


def _ratios(profiles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = profiles.shape[-1]
    k = max(1, n // 10)
    middle = profiles[..., k : n - k].mean(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return profiles[..., :k].mean(axis=-1) / middle, profiles[..., n - k :].mean(axis=-1) / middle


def _verdict(interval: list[float]) -> str:
    return "holds" if interval[0] > 1 + TIE else "fails" if interval[1] < 1 - TIE else "undecided"


def shape(profile: np.ndarray) -> dict:
    """head and tail ratios, primacy / recency / U, relative argmin of one profile (module docstring);
    needs at least 3 positions (None otherwise)."""
    p = np.asarray(profile, np.float64)
    if p.shape[-1] < 3:
        return {"head": None, "tail": None, "primacy": None, "recency": None, "u_shape": None, "argmin": None}
    head, tail = (float(v) for v in _ratios(p))
    return {
        "head": head,
        "tail": tail,
        "primacy": head > 1 + TIE,
        "recency": tail > 1 + TIE,
        "u_shape": head > 1 + TIE and tail > 1 + TIE,
        "argmin": float(np.argmin(p) / (len(p) - 1)),
    }


def measured_shape(scores: np.ndarray, bootstrap: Bootstrap, *, start: int = 0) -> dict:
    """``shape`` of a measure's profile on positions start .. N-1, with the bootstrap intervals of head, tail
    and argmin and the verdicts "holds" / "fails" / "undecided" for primacy, recency and the U."""
    scores = np.asarray(scores, np.float64)
    n = scores.shape[1]
    point = restrict(normalised(scores.mean(axis=0), "influence"), start)
    out = shape(point)
    if out["head"] is None:
        return out
    resampled = restrict(normalised(bootstrap.counts(scores.shape[0], n) @ scores, "influence"), start)
    head_b, tail_b = _ratios(resampled)
    out["head_ci"], out["tail_ci"] = bootstrap.interval(head_b), bootstrap.interval(tail_b)
    out["argmin_ci"] = bootstrap.interval(np.argmin(resampled, axis=-1) / (resampled.shape[-1] - 1))
    out["primacy"], out["recency"] = _verdict(out["head_ci"]), _verdict(out["tail_ci"])
    both = (out["primacy"], out["recency"])
    out["u_shape"] = "holds" if both == ("holds", "holds") else "fails" if "fails" in both else "undecided"
    return out


def shapes(predictions: dict[str, np.ndarray], measures: dict[str, np.ndarray], bootstrap: Bootstrap) -> dict:
    """view -> {"measures": name -> ``measured_shape``, "predictions": name -> ``shape``}."""
    out = {}
    for view, start in zip(VIEWS, (0, 1)):
        out[view] = {
            "measures": {name: measured_shape(s, bootstrap, start=start) for name, s in measures.items()},
            "predictions": {name: shape(restrict(q, start)) for name, q in predictions.items()},
        }
    return out
