"""What every measurement route shares, below the backends that measure (``posbias.lm``: the model
``posbias train`` makes; ``posbias.hf``: Hugging Face folders and GGUF files, in JAX or through
transformers) and above nothing but NumPy: default sizes (``defaults``) and the attention-sink
diagnostics of a measurement (``sinks``). Backends and ``posbias.validate`` import it; it imports
neither."""
