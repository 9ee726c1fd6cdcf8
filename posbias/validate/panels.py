"""What ``posbias validate`` compares beyond the paper's panels (a)-(e): kernel variants, baselines, sinks.

For one measurement (``posbias.measure.quantities.Measurement``) at N tokens, each profile the last row
of a rollout, p = e_{N-1}^T R^(T-1) ... R^(0), R^(t) = (1 - lambda_t) I + lambda_t K^(t)
(THEORY.md Notation):

(f) the measured head-mean kernels K = A^(t), attention-only (lambda_t = 1): (e) without the residual;
(g) the value-norm-weighted kernels (Kobayashi et al. 2020, "Attention is not only a weight"): per
    sequence and head A_hij ||W_O^h v_hj||, rows renormalised, the head mean, the data-set mean
    (``posbias.measure.quantities.value_weighted``), with the measured lambda_t;
(h) (g) attention-only (lambda_t = 1);
(i) the fitted relative bias (``posbias.fit.bias``, THEORY.md C7): every head's mean pre-softmax logits
    (scaled content plus the ALiBi term) fitted as c_i + b_h(g) + d_h [i = j] + s_h [j = 0] with the
    table family (default smoothness), the fitted ``BiasStack`` rolled out by the bias engine
    (``posbias.numerics.profile``) with the measured lambda_t: the structural prediction from the
    per-head bias alone, for ALiBi, rotary and learned-position models alike (omitted, with a note,
    at an N too short to determine the fit);
(j) the measured kernels with the sink removed: in every row i >= 1 the mass on key 0 set to 0 and the
    row renormalised (row 0, which under a causal mask can read only key 0, unchanged), rolled out with the
    measured lambda_t: the rollout "without the sink" (``sinkless_kernels``); token 0 then feeds the last
    row only through row 0, which no other row reads, so (j) puts exactly 0 there and is the rollout of the
    kernels restricted to positions 1..N-1;
(k) the residual-norm kernels (``posbias.measure.quantities.residual_norm_kernel``: token j's share of the
    attention block's output at i, ||[i = j] r_i + sum_h A_hij W_O^h v_hj||, rows normalised; the residual
    and a post-LN block's norm folded in, in the manner of Kobayashi et al. 2021, GlobEnc and ALTI), rolled
    out with lambda_t = 1 since the residual is already inside (only where the backend forms them);
(o) the measured kernels with lambda measured per position: R^(t) = (1 - diag(lambda_t)) I + diag(lambda_t)
    A^(t) with lambda_t,i the mean over sequences of r_t,i = ||a_t,i|| / (||x_t,i|| + ||a_t,i||) at position
    i (``per_position_kernels``), where (e) uses their mean over positions too;
(p) as (o) with the MLP's position-wise path counted: the MLP's output m_t,i is a function of position i's
    state alone (it moves nothing between positions, so in position space it is the identity and enters a
    rollout only through how its output is attributed). Attributed in proportion to the stream it reads,
    it leaves r_t,i and (o) unchanged; attributed to the position itself, the attention's share becomes
    ||a_t,i|| / (||x_t,i|| + ||a_t,i|| + ||m_t,i||) (``posbias.measure.quantities.attention_share``) and (p)
    is (o) with those ratios. The truth lies between (o) and (p) in this sense, so (p) against (o) bounds
    what the MLP can change (only where the backend captures the MLP's output);
baselines, scored like the predictions so that every table says what "better than nothing" is:
(uniform) uniform attention with the measured lambda_t: under a causal mask the Cesàro kernel
    C_ij = 1/(i+1), j <= i, whose rollout has THEORY.md's exact closed form ("An exact closed form");
    an encoder's full mask: 1/N everywhere;
(flat) the flat profile 1/N.

Each prediction's row says whether it ``beats_flat``: the bootstrap interval of its W1 / (N - 1) to the
measured influence minus the flat profile's lies below 0 (``posbias.validate.matrix``).

The sink diagnostics per layer (``posbias.measure.sinks``: mass on key 0, value-weighted, value-norm
ratio) are tabled (``sinks_markdown``) and drawn (``figure``) here.

Rollouts run in float64 through ``posbias.numerics.KernelStack`` (kernel rows renormalised first: a
float32 measurement sums to 1 only within ~1e-6); a profile not determined in float64 is refused.
"""

from __future__ import annotations

import numpy as np

PAPER_PANELS = {
    "a": "attention-only (lambda = 1)",
    "b": "residual-aware (measured lambda)",
    "c": "residual + measured content",
    "d": "measured influence",
    "e": "rollout of measured kernels",
}
"""The paper's panels (a)-(e) (``posbias.validate.predict.PANELS`` adds the ones below)."""
PANELS = {
    "f": "measured kernels, attention-only (lambda = 1)",
    "g": "value-norm-weighted kernels, measured lambda",
    "h": "value-norm-weighted kernels, attention-only",
    "i": "fitted relative bias (b_h(g) + d_h + s_h), measured lambda",
    "j": "measured kernels without key 0 (rows renormalised), measured lambda",
    "k": "residual-norm kernels (residual and norm folded in), lambda = 1",
    "l": "measured kernels, sink keys moved to the diagonal (C8), measured lambda",
    "m": "as (l) with c lambda, c fitted per measure on disjoint windows (out of sample)",
    "n": "control: (e) with c lambda, c fitted as for (m), no sink transform (out of sample)",
    "o": "measured kernels, lambda measured per position (lambda_t,i)",
    "p": "as (o) with the MLP's output counted as the position's own",
    "uniform": "baseline: uniform attention (causal: Cesàro), measured lambda",
    "flat": "baseline: flat 1/N",
}
PREDICTIONS = ("f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "uniform", "flat")
BASELINES = ("uniform", "flat")
VERSUS = {"o": ("e",), "p": ("o",)}
"""The paired comparisons of these rows (``posbias.validate.matrix.score_matrix``'s ``versus``): (o) against
the rollout (e) it refines, (p) against (o)."""


def kernel_profile(kernels, lambdas, *, causal: bool = True, label: str = "kernels") -> np.ndarray:
    """The float64 profile of the rollout of (T, N, N) kernels with (T,) lambdas (rows renormalised)."""
    import posbias.numerics as nx
    from posbias.errors import UserError

    kernels = np.asarray(kernels, np.float64)
    kernels = kernels / kernels.sum(axis=-1, keepdims=True)
    prof = nx.profile(nx.KernelStack.build(kernels, np.asarray(lambdas, np.float64), causal=causal))
    total = prof.probabilities.sum()
    if abs(total - 1) > 1e-9 or prof.unresolved().any():
        raise UserError(f"panel ({label}): the profile is not determined in float64 at N = {kernels.shape[-1]}")
    return prof.probabilities / total


def bias_prediction(m) -> np.ndarray:
    """Profile (i) of one measurement (module docstring). ``posbias.fit.bias.BiasFitError`` (validate omits the
    panel with a note, the measured panels stand) when the logits do not determine the fit at this N, the
    measurement's content is not what the softmax sees (``Measurement.logits_note``), the fitted stack is
    refused (``StackError``: e.g. a logit beyond the engines' range) or its profile is not determined in
    float64."""
    import posbias.numerics as nx
    from posbias.fit.bias import BiasFitError, fit_measurement
    from posbias.numerics.stack import StackError

    try:
        prof = nx.profile(fit_measurement(m).stack(np.asarray(m.lambdas, np.float64)), m.num_tokens)
    except StackError as exc:
        raise BiasFitError(f"panel (i): the fitted stack is refused ({exc})") from None
    total = prof.probabilities.sum()
    if abs(total - 1) > 1e-9 or prof.unresolved().any():
        raise BiasFitError(f"panel (i): the profile is not determined in float64 at N = {m.num_tokens}")
    return prof.probabilities / total


def per_position_kernels(kernels, lambdas) -> np.ndarray:
    """(T, N, N) R^(t) = (1 - diag(lambda_t)) I + diag(lambda_t) K^(t) of (T, N, N) kernels (rows renormalised)
    and (T, N) mixing ratios per position: row i mixes with its own lambda_t,i (panels (o), (p)); rolled out
    with lambda = 1 they give the rollout with a position-dependent residual. Each row sums to 1 where the
    kernel's does."""
    kernels = np.asarray(kernels, np.float64)
    kernels = kernels / kernels.sum(axis=-1, keepdims=True)
    lam = np.asarray(lambdas, np.float64)[..., None]
    n = kernels.shape[-1]
    return lam * kernels + (1 - lam) * np.eye(n)


def uniform_kernels(layers: int, num_tokens: int, *, causal: bool = True) -> np.ndarray:
    """(T, N, N) uniform attention: Cesàro C_ij = 1/(i+1) on j <= i, or 1/N everywhere (full mask)."""
    n = num_tokens
    if causal:
        one = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    else:
        one = np.full((n, n), 1.0 / n)
    return np.broadcast_to(one, (layers, n, n))


def sinkless_kernels(kernels) -> np.ndarray:
    """(T, N, N) kernels with key 0 removed from every row i >= 1 and those rows renormalised (panel (j));
    row 0 unchanged. Refused (``UserError``) when a row i >= 1 has all its mass on key 0.

    >>> sinkless_kernels(np.array([[[1.0, 0.0], [0.75, 0.25]]])).tolist()
    [[[1.0, 0.0], [0.0, 1.0]]]
    """
    from posbias.errors import UserError

    out = np.array(kernels, np.float64)
    out[:, 1:, 0] = 0.0
    total = out[:, 1:].sum(axis=-1)
    if not np.all(total > 0):
        layer, row = np.argwhere(~(total > 0))[0]
        raise UserError(f"panel (j): row {row + 1} of layer {layer} has all its mass on key 0")
    out[:, 1:] /= total[..., None]
    return out


def extra_predictions(m, *, causal: bool = True) -> dict[str, np.ndarray]:
    """Profiles (f), (g), (h), (j), (k), (o), (p), (uniform), (flat) of one measurement (module docstring); (g)
    and (h) only when the measurement has value-norm-weighted kernels, (k) only with residual-norm kernels, (o)
    and (p) only with the ratios per position and the MLP-as-self ratios, (j) only for N >= 2."""
    t, n = len(m.lambdas), m.num_tokens
    ones = np.ones(t)
    out = {"f": kernel_profile(m.kernels, ones, causal=causal, label="f")}
    if n >= 2:
        # rows 1..N-1 no longer read key 0, so the rollout on positions 1..N-1 is that of the kernels
        # restricted there (a block-triangular product), and position 0 gets exactly 0
        rest = kernel_profile(sinkless_kernels(m.kernels)[:, 1:, 1:], m.lambdas, causal=causal, label="j")
        out["j"] = np.concatenate([[0.0], rest])
    if m.kernels_value is not None:
        out["g"] = kernel_profile(m.kernels_value, m.lambdas, causal=causal, label="g")
        out["h"] = kernel_profile(m.kernels_value, ones, causal=causal, label="h")
    if m.kernels_norm is not None:
        out["k"] = kernel_profile(m.kernels_norm, ones, causal=causal, label="k")
    for key, ratios in (("o", m.lambda_positions), ("p", m.lambda_self)):
        if ratios is not None:
            out[key] = kernel_profile(per_position_kernels(m.kernels, ratios), ones, causal=causal, label=key)
    out["uniform"] = kernel_profile(uniform_kernels(t, n, causal=causal), m.lambdas, causal=causal, label="uniform")
    out["flat"] = np.full(n, 1.0 / n)
    return out


def sinks_markdown(sinks: dict[str, list]) -> list[str]:
    """The per-layer sink table of report.md."""
    cols = [
        ("key0_mass", "kernel mass on key 0"),
        ("key0_mass_value_weighted", "value-weighted mass on key 0"),
        ("value_norm_ratio", "value norm, token 0 / rest"),
    ]
    cols = [(k, label) for k, label in cols if k in sinks]
    lines = [
        "Sink diagnostics per layer:",
        "",
        "| layer | " + " | ".join(label for _, label in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for t in range(len(sinks["key0_mass"])):
        cells = ["n/a" if sinks[k][t] is None else f"{sinks[k][t]:.4f}" for k, _ in cols]
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    return lines + [""]


def figure(panels_by_n: dict[int, dict[str, np.ndarray]], sinks_by_n: dict[int, dict], title: str):
    """One row per N: (a), (b), (c) and (d) with (e) dashed, as before; then the kernel variants and the
    baselines over (d); then the sink diagnostics per layer."""
    from matplotlib.figure import Figure

    rows = len(panels_by_n)
    fig = Figure(figsize=(21, 3.3 * rows + 0.5), layout="constrained")
    axes = fig.subplots(rows, 6, squeeze=False)
    for r, (n, panels) in enumerate(panels_by_n.items()):
        x = np.arange(n)
        for c, key in enumerate("abcd"):
            ax = axes[r][c]
            ax.plot(x, panels[key], color="C3" if key == "d" else "C0", lw=1.4, label=f"({key})")
            if key == "d":
                ax.plot(x, panels["e"], color="C2", lw=1.0, ls="--", label="(e) measured kernels")
                ax.legend(fontsize=7, loc="upper center")
            ax.set_yscale("log")
            ax.set_title(f"({key}) {PAPER_PANELS[key]}, N = {n}", fontsize=9)
            ax.set_xlabel("token position j")
            if c == 0:
                ax.set_ylabel("p(j)")
        ax = axes[r][4]
        ax.plot(x, panels["d"], color="C3", lw=1.6, label="(d) measured")
        for i, key in enumerate(k for k in ("e", "f", "g", "h", "i", "j", "k", "uniform", "flat") if k in panels):
            ax.plot(
                x,
                panels[key],
                lw=1.0,
                ls="-" if key in ("e", "g", "i") else "--",
                color=f"C{(i + 4) % 10}",
                label=f"({key})",
            )
        ax.set_yscale("log")
        measured = panels["d"][panels["d"] > 0]
        if measured.size:  # the view of (d): a collapsed attention-only rollout would squash it to a line
            ax.set_ylim(bottom=measured.min() * 1e-3)
        ax.set_title(f"kernel variants, fitted bias (i) and baselines, N = {n}", fontsize=9)
        ax.set_xlabel("token position j")
        ax.legend(fontsize=6, loc="best")
        ax = axes[r][5]
        sinks = sinks_by_n[n]
        layers = np.arange(len(sinks["key0_mass"]))
        ax.plot(layers, sinks["key0_mass"], "o-", label="kernel mass on key 0")
        if "key0_mass_value_weighted" in sinks:
            ax.plot(layers, sinks["key0_mass_value_weighted"], "s-", label="value-weighted mass on key 0")
        ax.set_ylim(0, 1)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel("layer t")
        ax.set_title(f"sinks, N = {n}", fontsize=9)
        if "value_norm_ratio" in sinks:
            twin = ax.twinx()
            ratio = [np.nan if v is None else v for v in sinks["value_norm_ratio"]]
            twin.plot(layers, ratio, "^:", color="C3", label="value norm ratio, token 0 / rest")
            twin.set_yscale("log")
            twin.legend(fontsize=6, loc="lower right")
        ax.legend(fontsize=6, loc="upper right")
    fig.suptitle(title)
    return fig


def kernels_npz(m) -> bytes:
    """kernels/<N>.npz of validate: ``kernels`` (T, N, N) head-mean and, where measured,
    ``kernels_value`` (T, N, N) value-norm-weighted and ``value_norms`` (T, H, N), ``kernels_norm`` (T, N, N)
    residual-norm, ``lambda_positions`` and ``lambda_self`` (T, N) (``posbias.measure.quantities.EXTRAS``);
    ``lambdas`` (T,) and
    ``influence`` (N,): what (e)-(h) and the sink diagnostics are computed from (the ``posbias rollout
    --kernels`` format for ``kernels`` and ``lambdas``)."""
    import io

    from posbias.measure.quantities import EXTRAS

    arrays = {"kernels": m.kernels, "lambdas": m.lambdas, "influence": m.influence}
    arrays.update({name: getattr(m, name) for name in EXTRAS if getattr(m, name) is not None})
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()
