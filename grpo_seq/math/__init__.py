"""The formulas as pure functions, and the batch they run on.

- :mod:`.batch`: :class:`RolloutBatch`, the one batch type of the loop;
- :mod:`.advantages`: group-relative advantages (outcome, process, step-wise);
- :mod:`.objective`: log-prob ratios, KL estimators, the clipped surrogate and its aggregations;
- :mod:`.stats`: intervals and paired differences of held-out scores.

Each function has its formula in its docstring and a test against hand-computed numbers.
"""
