"""Tests of the theory layer, posbias.theorem (theorem/): derivations, closed forms, the derive command."""
