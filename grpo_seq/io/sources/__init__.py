"""Prompt sources that are not files: procedural task generators with their own scorers.

``--dataset reasoning_gym:TASK`` (any reasoning-gym task, :mod:`grpo_seq.io.sources.reasoning_gym`)
is resolved by :func:`grpo_seq.io.prompt_data.read_rows`, so every door that reads a dataset reads it.
"""
