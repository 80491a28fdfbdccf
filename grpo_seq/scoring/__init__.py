"""How outputs are scored: reward functions and reward models during training, and the
evaluations after it (an env policy's returns, a language model's held-out answers)."""
