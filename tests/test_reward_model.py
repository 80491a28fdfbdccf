"""grpo_seq.scoring.reward_model: a sequence-classification model scores completions as TRL's trainer does."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForSequenceClassification

from grpo_seq.scoring.reward_model import RewardModel, is_reward_model_spec, load_reward_model
from grpo_seq.scoring.rewards import RewardScorer, load_reward_fn
from tiny_lm import make_tokenizer


def tiny_reward_model(seed: int = 0):
    tok = make_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, num_labels=1, pad_token_id=tok.pad_token_id)
    return LlamaForSequenceClassification(config), tok


def one_by_one(model, tok, texts):
    """Each text alone (no padding): the logit of the single label at its last token."""
    with torch.no_grad():
        return [model(**tok(t, return_tensors="pt", add_special_tokens=False)).logits[0, 0].item() for t in texts]


def test_batched_scores_equal_each_text_scored_alone_and_the_model_is_never_trained():
    model, tok = tiny_reward_model()
    rm = RewardModel(model, tok, name="org/my-rm")
    prompts, completions = ["2+2=", "a longer prompt: "], ["4", "a much longer completion"]
    scores = rm(prompts=prompts, completions=completions)
    # right padding of the short text changes nothing: the model reads the logit at the last real token
    assert scores == pytest.approx(one_by_one(model, tok, ["2+2=4", "a longer prompt: a much longer completion"]), abs=1e-5)
    assert rm.__name__ == "my-rm" and not any(p.requires_grad for p in model.parameters()) and not model.training


def test_conversational_pairs_are_scored_through_the_chat_template():
    model, tok = tiny_reward_model()
    rm = RewardModel(model, tok)
    prompt = [{"role": "user", "content": "hi"}]
    completion = [{"role": "assistant", "content": "hello"}]
    text = tok.apply_chat_template(prompt + completion, tokenize=False)
    assert rm(prompts=[prompt], completions=[completion]) == pytest.approx(one_by_one(model, tok, [text]), abs=1e-5)


def test_a_folder_loads_as_a_reward_model_through_load_reward_fn(tmp_path):
    model, tok = tiny_reward_model(seed=1)
    model.save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    assert is_reward_model_spec(str(tmp_path / "rm")) and is_reward_model_spec("org/name")
    assert not is_reward_model_spec("mypkg.rewards:fn") and not is_reward_model_spec(len)
    fn = load_reward_fn(str(tmp_path / "rm"))  # what --reward_funcs path/to/reward_model gives the CLI
    assert isinstance(fn, RewardModel) and fn.__name__ == "rm"
    scorer = RewardScorer([fn])
    totals, _ = scorer.score(["p"], ["q"], {})
    assert totals == pytest.approx(one_by_one(model, tok, ["pq"]), abs=1e-5)


def test_a_missing_reward_model_is_one_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match="reward model .*nowhere/at-all.*: no such folder"):
        load_reward_model(str(tmp_path / "nowhere/at-all"))


def test_a_job_spec_trains_with_a_reward_model_folder_as_its_reward_function(tmp_path):
    from grpo_seq.jobs.lm import run_lm_job
    from grpo_seq.jobs.lm_spec import LMJob
    from tiny_lm import save_tiny_lm

    model, tok = tiny_reward_model(seed=2)
    model.save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    save_tiny_lm(tmp_path / "policy")
    (tmp_path / "data.jsonl").write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    # what `grpo-seq train-lm --reward_funcs <folder>` builds: the folder is a reward model, not an import path
    spec = LMJob(model=str(tmp_path / "policy"), dataset=str(tmp_path / "data.jsonl"), reward_fns=[str(tmp_path / "rm")],
                 num_groups=1, num_generations=2, max_steps=1, max_completion_length=3, output_dir=str(tmp_path / "run"),
                 retain_freed_memory=False)
    assert run_lm_job(spec)["steps"] == 1
    import json

    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert "reward/rm" in metrics[-1]  # the reward model logs under its folder's name


@pytest.mark.parametrize("name", ["./missing/rm", "/no/such/rm", "models/rm/v2"])
def test_a_missing_folder_as_a_reward_model_is_named_as_a_missing_folder(name):
    from grpo_seq.errors import MissingPathError
    from grpo_seq.scoring.reward_model import load_reward_model

    with pytest.raises(MissingPathError, match=f"reward model '{name}': no such folder"):
        load_reward_model(name)
