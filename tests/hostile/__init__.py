"""Hostile and fuzzed input to every command: each refuses with one line and exit 2, or answers correctly."""
