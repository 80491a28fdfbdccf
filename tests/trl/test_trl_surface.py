"""grpo_seq.trl: a TRL-style script trains the tiny model; TRL's options map onto ours or are refused by name."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset
from transformers import TrainerCallback

from grpo_seq.errors import UsageError
from grpo_seq.trl import GRPOConfig, GRPOTrainer
from tiny_lm import save_tiny_lm


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return str(save_tiny_lm(tmp_path_factory.mktemp("tiny") / "model"))


def sevens(completions, **kwargs):
    """The share of '7' among a completion's characters (1 in ~100 at random)."""
    return [c.count("7") / max(1, len(c)) for c in completions]


def has_digit(completions, digit, **kwargs):
    """Uses a dataset column, as TRL passes it: one value per completion."""
    return [float(d in c) for c, d in zip(completions, digit)]


class Recorder(TrainerCallback):
    def __init__(self):
        self.events, self.logs = [], []

    def on_train_begin(self, args, state, control, **kw):
        self.events.append("begin")

    def on_step_end(self, args, state, control, **kw):
        self.events.append(state.global_step)

    def on_log(self, args, state, control, logs=None, **kw):
        self.logs.append(logs)

    def on_train_end(self, args, state, control, **kw):
        self.events.append("end")


def test_a_trl_style_script_trains_and_its_reward_rises(tmp_path, tiny_model):
    dataset = Dataset.from_list([{"prompt": f"say {i}" + "!" * i, "digit": "7"} for i in range(6)])
    recorder = Recorder()
    args = GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=25, per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=8, learning_rate=3e-2, logging_steps=5, seed=0)
    trainer = GRPOTrainer(model=tiny_model, reward_funcs=[sevens, has_digit], args=args, train_dataset=dataset,
                          callbacks=[recorder])
    out = trainer.train()
    assert out.global_step == 25 == trainer.state.global_step
    assert recorder.events[0] == "begin" and recorder.events[1:-1] == list(range(1, 26)) and recorder.events[-1] == "end"
    rewards = [log["reward"] for log in recorder.logs]
    assert len(rewards) == 5 and {"rewards/sevens/mean", "rewards/has_digit/mean", "kl", "loss"} <= set(recorder.logs[0])
    assert rewards[-1] > rewards[0] + 0.3, rewards
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["num_groups"] == 2 and config["loss_type"] == "dapo" and config["beta"] == 0.0  # TRL's defaults
    assert trainer.save_model() == tmp_path / "run" / "model"
    assert (tmp_path / "run" / "model" / "config.json").is_file()
    metrics = trainer.evaluate(dataset.select(range(2)))
    assert {"eval_loss", "eval_reward", "eval_reward_std", "eval_rewards/sevens/mean", "eval_rewards/has_digit/std",
            "eval_completions/mean_length", "eval_runtime", "epoch"} <= set(metrics)
    assert trainer.state.log_history[-1]["eval_loss"] == metrics["eval_loss"]
    assert metrics["eval_reward_ci_low"] <= metrics["eval_reward"] <= metrics["eval_reward_ci_high"]
    assert "eval_reward_vs_first" not in metrics  # the first evaluation of these prompts: nothing to pair with
    again = trainer.evaluate(dataset.select(range(2)))  # paired with the first, prompt by prompt
    assert again["eval_reward_vs_first"] == pytest.approx(again["eval_reward"] - metrics["eval_reward"], abs=1e-6)
    assert again["eval_reward_vs_first_ci_low"] <= again["eval_reward_vs_first"] <= again["eval_reward_vs_first_ci_high"]


def test_a_conversational_dataset_and_a_callback_that_stops(tmp_path, tiny_model):
    class StopAtTwo(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            control.should_training_stop = state.global_step >= 2

    seen = []

    def chat_reward(prompts, completions, **kwargs):
        seen.append((prompts[0], completions[0]))
        return [float(len(c[0]["content"])) for c in completions]

    rows = [{"prompt": [{"role": "user", "content": f"hi {i}"}]} for i in range(4)]
    args = GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=10, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=6)
    trainer = GRPOTrainer(tiny_model, chat_reward, args, rows, callbacks=[StopAtTwo()])
    assert trainer.train().global_step == 2
    prompt, completion = seen[0]
    assert prompt[0]["role"] == "user" and completion[0]["role"] == "assistant"


def test_a_model_object_and_its_tokenizer(tmp_path):
    from tiny_lm import make_tiny_lm

    model, tok = make_tiny_lm()
    args = GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=4)
    trainer = GRPOTrainer(model, sevens, args, [{"prompt": "a"}, {"prompt": "b"}], processing_class=tok)
    assert trainer.train().global_step == 1


def test_chat_template_kwargs_reach_the_prompts_and_leave_the_callers_tokenizer_alone(tmp_path):
    from tiny_lm import make_tiny_lm

    model, tok = make_tiny_lm()
    seen = []
    real = type(tok).apply_chat_template

    def recording(self, *args, **kwargs):
        seen.append(kwargs.get("flavour"))
        kwargs.pop("flavour", None)
        return real(self, *args, **kwargs)

    type(tok).apply_chat_template = recording
    try:
        args = GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=4,
                          num_generations=4, max_completion_length=4, chat_template_kwargs={"flavour": "plain"})
        rows = [{"prompt": [{"role": "user", "content": "a"}]}, {"prompt": [{"role": "user", "content": "b"}]}]
        trainer = GRPOTrainer(model, sevens, args, rows, processing_class=tok)
        assert trainer.train().global_step == 1
        assert seen and set(seen) == {"plain"}  # every prompt templated with the caller's kwargs
        assert "apply_chat_template" not in vars(tok)  # the caller's tokenizer keeps its own method
    finally:
        type(tok).apply_chat_template = real


@pytest.mark.parametrize("kwargs, message", [
    ({"use_vllm": True}, "use_vllm=True is a TRL option grpo-seq cannot apply here (vLLM needs a CUDA GPU"),
    ({"push_to_hub": True}, "push_to_hub=True is a TRL option grpo-seq cannot apply here (grpo-seq does not push"),
    ({"lerning_rate": 1e-3}, "unknown option 'lerning_rate'; did you mean 'learning_rate'?"),
    ({"loss_type": "ppo"}, "GRPOConfig.loss_type: grpo-seq has"),
    ({"per_device_train_batch_size": 6, "num_generations": 4}, "must be a multiple of num_generations (4)"),
])
def test_trl_options_grpo_seq_lacks_are_refused_by_name(kwargs, message):
    with pytest.raises(UsageError) as e:
        GRPOConfig(**kwargs)
    assert message in str(e.value)


def test_trl_names_map_onto_ours():
    args = GRPOConfig(per_device_train_batch_size=4, gradient_accumulation_steps=4, num_generations=8, max_steps=-1,
                      num_train_epochs=2, scale_rewards="none", num_iterations=2, adam_epsilon=1e-6,
                      lr_scheduler_type="constant", save_only_model=True, report_to="none", sync_ref_model=True,
                      ref_model_sync_steps=64)
    opts = args.lm_options(num_prompts=10)
    assert opts["num_groups"] == 2 and opts["micro_batch_size"] == 4 and opts["max_steps"] == 10  # 2 epochs x 10 / 2
    assert opts["num_minibatches"] == 1  # steps_per_generation = gradient_accumulation_steps: one optimizer step
    assert opts["scale_rewards"] == "none" and opts["mu"] == 2 and opts["adam_eps"] == 1e-6
    assert opts["lr_schedule"] == "constant" and opts["save_optimizer"] is False and opts["report_to"] == []
    assert opts["ref_sync_steps"] == 64 and opts["ref_sync_alpha"] == 0.6


def test_the_trainer_refuses_what_it_cannot_do(tiny_model):
    with pytest.raises(UsageError, match="optimizers: TRL argument"):
        GRPOTrainer(tiny_model, sevens, GRPOConfig(), [{"prompt": "a"}], optimizers=(object(), None))
    with pytest.raises(UsageError, match="row 2: no 'prompt' column"):
        GRPOTrainer(tiny_model, sevens, GRPOConfig(), [{"prompt": "a"}, {"text": "b"}])
    with pytest.raises(UsageError, match="reward function 'has_digit' needs the argument"):
        GRPOTrainer(tiny_model, has_digit, GRPOConfig(), [{"prompt": "a"}])
