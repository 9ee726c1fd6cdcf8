"""Files whose tests need the whole machine (issue 34): ``scripts/test`` runs every other test on
pytest-xdist workers first, then these in one process, with nothing beside them. Each is slow too.
Paths relative to tests/. No imports: ``scripts/test`` reads this list without loading the suite."""

ALONE_FILES = {
    "product/test_sweep_distributed.py": "two jax.distributed processes on local ports, four fake devices each",
    "product/test_smollm2.py": "the real 135M model in process, in JAX and in torch: 2 to 3 GB",
}
