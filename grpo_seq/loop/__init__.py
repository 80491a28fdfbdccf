"""The parts :class:`grpo_seq.trainer.GRPOTrainer` is made of, one responsibility each.

- :mod:`.update`: the update passes over a batch (minibatches, the loss, clipping, optimizer steps);
- :mod:`.scoring`: the reference and old-policy log-probs, and the advantages;
- :mod:`.guards`: divergence, collapse and non-finite checks, which stop a run before it saves bad weights;
- :mod:`.step_metrics`: a step's metrics over all processes;
- :mod:`.run_folder`: the run folder (lock, config.json, metrics.jsonl, trackers);
- :mod:`.checkpointing`: saving the policy, checkpoints and resuming.
"""
