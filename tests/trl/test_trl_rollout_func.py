"""TRL's ``rollout_func``: the caller's function makes the completions (ids and log-probs as
sampled), ``env_mask`` keeps the environment's ids out of training, other keys reach the reward
functions; a wrong output is one error naming rollout_func."""

from __future__ import annotations

import pytest

from grpo_seq.errors import UsageError
from grpo_seq.trl import GRPOConfig, GRPOTrainer

G = 2


def bonus_reward(completions, bonus, **kwargs):
    """The rollout function's own per-completion figure, as TRL forwards extra keys."""
    return [float(b) for b in bonus]


def make_rollout(tok, calls):
    def rollout_func(prompts, trainer):
        calls.append((list(prompts), trainer))
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "bonus": []}
        for k, prompt in enumerate(prompts):
            ids = tok(prompt)["input_ids"]
            for g in range(G):
                model, tool, more = tok("7" * (g + 1))["input_ids"], tok(" =x")["input_ids"], tok("1")["input_ids"]
                out["prompt_ids"].append(ids)
                out["completion_ids"].append(model + tool + more)
                out["logprobs"].append([-0.5] * (len(model) + len(tool) + len(more)))
                out["env_mask"].append([1] * len(model) + [0] * len(tool) + [1] * len(more))
                out["bonus"].append(float(g))
        return out

    return rollout_func


def test_a_rollout_func_makes_the_completions_and_the_environments_ids_are_never_trained(tmp_path):
    from tiny_lm import make_tiny_lm

    model, tok = make_tiny_lm()
    calls: list = []
    args = GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=2 * G,
                      num_generations=G, max_completion_length=8, shuffle_dataset=False)
    rows = [{"prompt": p} for p in ("a", "b", "c", "d")]
    trainer = GRPOTrainer(model, bonus_reward, args, rows, processing_class=tok, rollout_func=make_rollout(tok, calls))
    assert trainer.train().global_step == 2
    # each call: the step's prompts, each once (G completions each come back), and the trainer
    assert [c[0] for c in calls] == [["a", "b"], ["c", "d"]] and all(c[1] is trainer for c in calls)
    batch = trainer._run.trainer.last_batch
    model_ids = [len(tok("7" * (g + 1))["input_ids"]) + len(tok("1")["input_ids"]) for g in range(G)] * 2
    assert batch.mask.sum(-1).tolist() == model_ids  # the tool's " =x" is context: mask 0
    ids = batch.tokens[0][: len(batch.text.completion_ids[0])].tolist()
    assert ids == batch.text.completion_ids[0]  # the ids trained are the ids returned
    assert batch.rewards.tolist() == [0.0, 1.0] * 2  # the extra key reached the reward function
    assert batch.sampler_logp[batch.mask].eq(-0.5).all()


@pytest.mark.parametrize("change, message", [
    (lambda out: out.pop("logprobs"), r"rollout_func must return keys \['logprobs'\]"),
    (lambda out: out["completion_ids"].pop(), "returned 3 completions for 2 prompts"),
    (lambda out: out["logprobs"][1].pop(), r"logprobs\[1\] holds"),
    (lambda out: out["bonus"].pop(), "'bonus' holds 3 values"),
])
def test_a_wrong_rollout_output_is_one_error_naming_rollout_func(tmp_path, change, message):
    from tiny_lm import make_tiny_lm

    model, tok = make_tiny_lm()
    inner = make_rollout(tok, [])

    def broken(prompts, trainer):
        out = inner(prompts, trainer)
        change(out)
        return out

    args = GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=2 * G,
                      num_generations=G, max_completion_length=8)
    trainer = GRPOTrainer(model, bonus_reward, args, [{"prompt": "a"}, {"prompt": "b"}], processing_class=tok,
                          rollout_func=broken)
    with pytest.raises(UsageError, match=message):
        trainer.train()
