"""The written proofs of the claims (THEORY.md C1-C6), shipped as data: ``posbias proofs --check``
checks every certificate they cite."""

if __name__ != "posbias.proofs":  # the source folder imported from the checkout as a top-level module
    raise ImportError(
        f"this folder is the package posbias.proofs; import posbias.proofs (got {__name__!r}: "
        "a second copy beside the installed one would not share its classes)"
    )
