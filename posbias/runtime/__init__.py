"""What a posbias process needs around its work: one-line interrupts (``interrupt``), time budgets
(``time_limit``), progress bars with ETA (``progress``) and JAX's persistent compilation cache
(``jax_cache``). Standard library only at import time."""
