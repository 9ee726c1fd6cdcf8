"""posbias: the structural theory of positional bias in transformers."""
