"""Measuring a model: one pipeline for every subject and command.

* ``quantities``: what is measured (lambda_t, kernels, content, value norms, influence) and its reduction
  over batches, the ``Measurement`` record;
* ``backend``: the ``Backend`` protocol a model implements to be measured, and the ``Options`` it takes;
* ``trained``, ``checkpoint``, ``transformers``: the three backends (the model ``posbias train`` writes;
  Hugging Face folders and GGUF files through posbias's JAX forward; the same through transformers);
* ``pipeline``: windows, memory plans, loading, batches with progress, the output folder, for
  ``posbias measure`` and ``posbias validate``; ``outputs``: the files of a measurement;
* ``defaults``, ``sinks``: default sizes and the attention-sink diagnostics.

The model families that compute the forwards live beside it (``posbias.lm``, ``posbias.hf``) and import
only ``quantities``, ``defaults`` and ``sinks`` of it; ``posbias.validate`` is built on it.
"""
