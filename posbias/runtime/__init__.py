"""What a posbias process needs around its work: one-line interrupts (``interrupt``), time budgets
(``time_limit``), progress bars with ETA (``progress``), JAX's persistent compilation cache
(``jax_cache``) and NumPy's huge-page advice (``pages``). Standard library only at import time."""
