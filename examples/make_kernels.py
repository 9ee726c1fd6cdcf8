"""Regenerate the example kernel files in this folder (deterministic, NumPy only).

    python examples/make_kernels.py            # writes examples/kernels.npz, examples/bad-kernels.npy
    python examples/make_kernels.py --check    # exit 1 if the files' arrays differ from what it makes

``kernels.npz`` stands in for head-averaged attention kernels measured on a model:
arrays ``kernels`` (T, N, N) = (4, 16, 16), float64, causal (upper triangle exactly 0),
every row summing to 1, and ``lambdas`` (T,) = 0.6 / (t + 1)^0.5. Layer t averages two
heads, each a causal softmax of an ALiBi logit plus a content pattern:

    logit_h[i, j] = -m_h,t (i - j) + d_t [i = j] + 0.5 sin(1.7 i + 2.3 j + t)      (j <= i)
    m_(0,t) = 0.5 / (t + 1),  m_(1,t) = 0.05 / (t + 1),  d_t = 1.0 - 0.25 t,
    A^(t) = (softmax_row(logit_0) + softmax_row(logit_1)) / 2.

The sine term plays the part of content that varies from token to token; it makes the
kernels no longer Toeplitz, as measured kernels are not.

``bad-kernels.npy`` is the same construction with T = 2, N = 8, except that row 5 of
layer 1 is scaled to sum to 1.01: ``posbias rollout --kernels`` must reject it.

Both files are written byte for byte the same on every run (fixed zip timestamps).
"""

from __future__ import annotations

import io
import sys
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
LAYERS, TOKENS = 4, 16


def causal_kernels(layers: int, tokens: int) -> np.ndarray:
    i = np.arange(tokens)[:, None].astype(np.float64)
    j = np.arange(tokens)[None, :].astype(np.float64)
    causal = j <= i
    kernels = np.zeros((layers, tokens, tokens))
    for t in range(layers):
        content = (1.0 - 0.25 * t) * (i == j) + 0.5 * np.sin(1.7 * i + 2.3 * j + t)
        heads = []
        for slope in (0.5 / (t + 1), 0.05 / (t + 1)):
            logits = np.where(causal, -slope * (i - j) + content, -np.inf)
            w = np.exp(logits - logits.max(axis=1, keepdims=True))
            heads.append(w / w.sum(axis=1, keepdims=True))
        kernels[t] = (heads[0] + heads[1]) / 2
    kernels[:, ~causal] = 0.0
    return kernels


def lambdas(layers: int) -> np.ndarray:
    return 0.6 / np.sqrt(np.arange(1, layers + 1, dtype=np.float64))


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def npz_bytes(**arrays: np.ndarray) -> bytes:
    """An .npz (a zip of .npy files, what ``np.load`` reads) with fixed timestamps."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, _npy_bytes(array))
    return buf.getvalue()


def bad_kernels() -> np.ndarray:
    bad = causal_kernels(2, 8)
    bad[1, 5] *= 1.01
    return bad


def arrays() -> dict[Path, dict[str, np.ndarray]]:
    return {
        HERE / "kernels.npz": {"kernels": causal_kernels(LAYERS, TOKENS), "lambdas": lambdas(LAYERS)},
        HERE / "bad-kernels.npy": {"": bad_kernels()},
    }


def _matches(path: Path, expected: dict[str, np.ndarray]) -> bool:
    """Same arrays within 1e-13 (sin/exp may differ in the last bit between NumPy builds)."""
    if not path.is_file():
        return False
    data = np.load(path, allow_pickle=False)
    if isinstance(data, np.ndarray):
        stored = {"": data}
    else:
        with data:
            stored = {k: data[k] for k in data.files}
    return stored.keys() == expected.keys() and all(
        stored[k].shape == a.shape and stored[k].dtype == a.dtype and np.allclose(stored[k], a, rtol=0, atol=1e-13)
        for k, a in expected.items()
    )


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, content in arrays().items():
        if check:
            if not _matches(path, content):
                stale.append(path.name)
        else:
            data = _npy_bytes(content[""]) if path.suffix == ".npy" else npz_bytes(**content)
            path.write_bytes(data)
            print(f"wrote {path.relative_to(HERE.parent)}")
    if stale:
        print(f"out of date: {', '.join(stale)} (run python examples/make_kernels.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
