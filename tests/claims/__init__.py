"""Tests of the claims C1-C7 (THEORY.md): statements, certificates, proofs and their property runs (posbias.verify)."""
