"""Tests of the product layer (posbias/): the API, commands, configs, sweeps, fits, the LM, Hugging Face."""
