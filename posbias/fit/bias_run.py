"""``posbias fit MEASUREMENT_DIR --bias FAMILY``: the relative-bias fit (``posbias.fit.bias``) of a folder
written by ``posbias measure``, and the files it writes.

The folder gives the mean raw content logits (T, H, N, N), the per-layer softmax scales s_t, the ALiBi
slopes, the mask, the measured lambda_t and ``logits_note`` (a measurement whose content is not what the
softmax sees is refused with that reason, e.g. BLOOM through the transformers backend): ``attention.npz``
and ``kernels.npz`` of a ``posbias train`` model's measurement, or ``kernels.npz`` alone of a Hugging Face
checkpoint's. Written with
``posbias.io.files.write_run`` (all or none):

* ``fitted_bias.json``: the folder, the family, the smoothness, per layer and head the parameters, d, s
  and R^2 (``BiasFit.summary``), and the rollout profile's first and last entries;
* ``fitted_bias.csv``: ``layer,head,side,distance,b`` the fitted b(g) at every distance g = 0 .. N-1
  (side ``past``, and ``future`` under the full mask), whatever the family;
* ``fitted_bias_profile.csv``: ``token_position,probability``, the profile of the fitted ``BiasStack``
  with the measured lambda_t (the bias engine, ``posbias.numerics.profile``): validate's panel (i).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from posbias.fit.bias import DEFAULT_SMOOTHNESS, BiasFit, BiasFitError, check_family, fit_bias, pre_softmax_logits


@dataclass(frozen=True)
class MeasuredLogits:
    """What a measurement folder holds for the bias fit: content (T, H, N, N) raw q.k, scales (T,),
    slopes (H,), lambdas (T,), causal."""

    content: np.ndarray
    scales: np.ndarray
    slopes: np.ndarray
    lambdas: np.ndarray
    causal: bool


def is_measurement(folder: Path) -> bool:
    """True when ``folder`` is a folder (the bias route of ``posbias fit``)."""
    return Path(folder).is_dir()


def _arrays(path: Path, names: tuple[str, ...], folder: Path) -> dict[str, np.ndarray]:
    from posbias.numerics import budget

    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in names if k not in npz.files]
            if missing:
                raise BiasFitError(
                    f"{folder}: {path.name} has no {', '.join(missing)} (measured by an older "
                    "posbias? run posbias measure again)"
                )
            need = sum(npz.zip.getinfo(f"{k}.npy").file_size for k in names)
            reason = budget.check(f"reading {path}", need)
            if reason is not None:
                raise BiasFitError(reason)
            return {k: np.asarray(npz[k]) for k in names}
    except (OSError, ValueError, zipfile.BadZipFile, KeyError) as exc:
        raise BiasFitError(f"{folder}: {path.name} cannot be read as a posbias measure file ({exc})") from None


def read_measurement(folder: Path) -> MeasuredLogits:
    """The arrays of a ``posbias measure`` folder (module docstring), checked for shape and finiteness."""
    folder = Path(folder)
    attention, kernels = folder / "attention.npz", folder / "kernels.npz"
    if attention.is_file():
        a = _arrays(attention, ("content_logits", "scales", "slopes", "causal", "logits_note"), folder)
        lam = _arrays(kernels, ("lambdas",), folder) if kernels.is_file() else None
        if lam is None:
            raise BiasFitError(f"{folder}: no kernels.npz beside attention.npz (not a complete posbias measure folder)")
        a["lambdas"] = lam["lambdas"]
    elif kernels.is_file():
        a = _arrays(kernels, ("content_logits", "scales", "slopes", "causal", "logits_note", "lambdas"), folder)
    else:
        raise BiasFitError(f"{folder}: not a folder written by posbias measure (no attention.npz or kernels.npz)")
    note = str(np.asarray(a["logits_note"]).item())
    if note:
        raise BiasFitError(f"{folder}: no bias fit: {note}")
    content = np.asarray(a["content_logits"], np.float64)
    if content.ndim != 4 or content.shape[2] != content.shape[3] or min(content.shape) < 1:
        raise BiasFitError(f"{folder}: content_logits has shape {content.shape}, expected (T, H, N, N)")
    t, h = content.shape[:2]
    scales, slopes = np.asarray(a["scales"], np.float64), np.asarray(a["slopes"], np.float64)
    lambdas = np.asarray(a["lambdas"], np.float64)
    for name, value, shape in (("scales", scales, (t,)), ("slopes", slopes, (h,)), ("lambdas", lambdas, (t,))):
        if value.shape != shape or not np.all(np.isfinite(value)):
            raise BiasFitError(
                f"{folder}: {name} has shape {value.shape} or non-finite values, expected {shape} finite numbers"
            )
    return MeasuredLogits(content, scales, slopes, lambdas, bool(np.asarray(a["causal"]).item()))


def fit_folder(measured: MeasuredLogits, family: str, smoothness: float) -> BiasFit:
    t, h, n, _ = measured.content.shape
    return fit_bias(
        lambda layer: pre_softmax_logits(measured.content, measured.scales, measured.slopes, layer),
        t,
        h,
        n,
        family=family,
        causal=measured.causal,
        smoothness=smoothness,
    )


def bias_csv(fit: BiasFit) -> str:
    """fitted_bias.csv (module docstring)."""
    t, h = fit.diagonal.shape
    lines = ["layer,head,side,distance,b"]
    for layer in range(t):
        for head in range(h):
            past, future = fit.bias(layer, head).values(fit.num_tokens)
            sides = (("past", past),) if fit.causal else (("past", past), ("future", future))
            for side, values in sides:
                lines += [f"{layer},{head},{side},{g},{float(v)!r}" for g, v in enumerate(values)]
    return "\n".join(lines) + "\n"


def run(args) -> int:
    """The bias route of ``posbias fit`` (``args.measured`` a folder)."""
    import posbias.numerics as nx
    from posbias.io.files import write_run
    from posbias.io.output import position_csv
    from posbias.numerics.stack import StackError

    if args.config is not None:
        raise BiasFitError(
            f"{args.measured}: a measurement folder takes no CONFIG (the model is the measurement's); "
            "give the folder alone"
        )
    family = args.bias or "table"
    if args.smoothness is not None and family != "table":
        raise BiasFitError(f"--smoothness: applies to --bias table only, not to --bias {family}")
    smoothness = DEFAULT_SMOOTHNESS if args.smoothness is None else args.smoothness
    check_family(family, smoothness)
    measured = read_measurement(args.measured)
    fit = fit_folder(measured, family, smoothness)
    try:
        prof = nx.profile(fit.stack(measured.lambdas), fit.num_tokens)
    except StackError as exc:
        raise BiasFitError(f"{args.measured}: the fitted stack is refused ({exc})") from None
    total = float(prof.probabilities.sum())
    if abs(total - 1) > 1e-9 or prof.unresolved().any():
        raise BiasFitError(
            f"{args.measured}: the fitted stack's profile is not determined in float64 at N = {fit.num_tokens}"
        )
    p = prof.probabilities / total
    record = {
        "measurement": str(args.measured),
        **fit.summary(),
        "lambdas": measured.lambdas.tolist(),
        "profile": {"first": float(p[0]), "last": float(p[-1]), "engine": prof.engine},
    }
    text = json.dumps(record, indent=1, allow_nan=False) + "\n"
    files = {
        "fitted_bias.json": text,
        "fitted_bias.csv": bias_csv(fit),
        "fitted_bias_profile.csv": position_csv(probability=p),
    }
    written = write_run(args.out or Path("posbias-out"), files)
    if args.json:
        print(text, end="")
        return 0
    t, h = fit.diagonal.shape
    print(
        f"bias fit of {args.measured}: family {family}, T = {t}, H = {h}, N = {fit.num_tokens}, "
        f"{'causal' if fit.causal else 'full'} mask" + (f", smoothness {smoothness:g}" if family == "table" else "")
    )
    print(
        f"  R^2 mean {fit.r2.mean():.4f} (min {fit.r2.min():.4f}); d mean {fit.diagonal.mean():+.4g}, "
        f"s mean {fit.sink.mean():+.4g}"
    )
    if family != "table":
        for k, name in enumerate(fit.parameter_names):
            print(
                f"  {name} per head (mean over layers): "
                + ", ".join(f"{v:.4g}" for v in fit.parameters[:, :, k].mean(axis=0))
            )
    print(f"  fitted-stack profile: p(0) = {p[0]:.4g}, p(N-1) = {p[-1]:.4g}")
    print("  wrote " + ", ".join(str(w) for w in written))
    return 0
