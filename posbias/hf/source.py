"""Open what ``posbias measure`` and ``posbias validate`` are given: a Hugging Face checkpoint folder
(``posbias.hf.checkpoint``) or a GGUF file (``posbias.hf.gguf``), both as a ``Checkpoint`` (config,
``Spec``, tensors read on demand). The one place that knows both readers, so that neither imports the
other."""

from __future__ import annotations

from pathlib import Path


def open_checkpoint(path):
    """A ``*.gguf`` file through ``posbias.hf.gguf.load``, anything else as a checkpoint folder through
    ``posbias.hf.checkpoint.load`` (which refuses what is not one, in one line). No tensor is read."""
    path = Path(path)
    if path.suffix.lower() == ".gguf" and path.is_file():
        from posbias.hf import gguf

        return gguf.load(path)
    from posbias.hf import checkpoint

    return checkpoint.load(path)
