"""The loop: :class:`trainer.GRPOLoop` (one step read top to bottom), its config, and the parts it calls, one responsibility each.

- :mod:`.update`: the update passes over a batch (minibatches, the loss, clipping, optimizer steps);
- :mod:`.logprobs`: the reference and old-policy log-probs, and the advantages;
- :mod:`.guards`: divergence, collapse and non-finite checks, which stop a run before it saves bad weights;
- :mod:`.step_metrics`: a step's metrics over all processes;
- :mod:`.run_folder`: the run folder (lock, config.json, metrics.jsonl, trackers);
- :mod:`.checkpointing`: saving the policy, checkpoints and resuming;
- :mod:`.config`: :class:`config.LoopConfig`, every knob of the loop;
- :mod:`.dynamic_sampling`, :mod:`.entropy_control`, :mod:`.reference`, :mod:`.diagnostics`,
  :mod:`.stopping`, :mod:`.cpu_share`: the loop's smaller policies (redrawing groups without
  signal, the entropy coefficient, moving the reference, the no-signal watch, stopping on a
  signal, the thread count).
"""
