"""Tests of the numbers layer, posbias.numerics (numerics/): stacks, masks, schedules, engines, summaries."""
