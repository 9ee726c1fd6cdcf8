"""The written proofs of the claims (THEORY.md C1-C6), shipped as data: ``posbias proofs --check``
checks every certificate they cite."""
