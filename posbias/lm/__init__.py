"""posbias.lm: a byte-level ALiBi language model in plain JAX, trained on CPython's reference text,
and the measurements that connect it to the theory (lambda_t, kernels, content, influence).

Modules: ``config`` (frozen model/training configs, presets), ``data`` (the corpus and its
fixed split by topic), ``model`` (the forward with its measurement outputs), ``train``
(optax loop, atomic checkpoints via ``checkpoint``), ``measure`` (the measurements),
``outputs`` (the files of a measurement), ``cli`` (``posbias train``, ``posbias measure``).
Importing this package imports no JAX.
"""
