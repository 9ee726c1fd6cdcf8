"""Measuring Hugging Face checkpoints with a JAX-native forward (no torch, no network).

* ``posbias.hf.checkpoint``: a local checkpoint folder (config.json, *.safetensors with or
  without a sharded index, tokenizer.json) read with the ``safetensors`` and ``tokenizers``
  packages;
* ``posbias.hf.families``: the per-family table of weight names and conventions (BERT,
  BLOOM, Falcon with ALiBi, GPT-2, MPT, and the rotary Llama family: Llama, Mistral, Qwen2);
* ``posbias.hf.weights``: the tensors in one canonical layout, read layer by layer into
  preallocated stacks (one copy of the model);
* ``posbias.hf.memory``: the memory model of a measurement (parameters, capture and
  rematerialised gradient per sequence, host accumulators) and the batch it allows;
* ``posbias.hf.forward``: one forward for every family, returning the logits and what the
  measurements read (block inputs, attention outputs after the output projection, per-head
  attention probabilities, content logits with the ALiBi term separate);
* ``posbias.hf.measure``, ``posbias.hf.data``:
  ``posbias measure CHECKPOINT_DIR`` (lambda_t, kernels, content, influence as in
  ``posbias.lm.measure``).

Nothing here imports JAX at import time.
"""
