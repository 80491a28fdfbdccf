"""Reward functions: plain callables ``fn(prompts, completions, **columns) -> list[float | None]``.

Environment rollouts carry their own reward (the env's per-step rewards and episode return,
filled in by :class:`grpo_seq.EnvGroupSampler`), so this package holds the reward functions
that score text.
"""
