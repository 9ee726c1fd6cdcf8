"""What a language-model run may ask for, known without building a config: the byte vocabulary, the slopes
conventions, the seed range and the preset names (``posbias train``'s parser is built on every
``posbias`` command, so this module imports nothing; ``posbias.lm.config`` checks against it)."""

VOCAB = 256  # bytes
SLOPE_CONVENTIONS = ("paper", "hf")
SEED_MAX = 2**32 - 1
"""Seeds are 32-bit: jax.random.PRNGKey takes one unsigned 32-bit word of entropy in its default mode."""
PRESET_NAMES = ("ci", "default")
"""The keys of ``posbias.lm.config.PRESETS``."""
