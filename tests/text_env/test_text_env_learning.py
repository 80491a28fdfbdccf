"""A tiny language model learns a guessing game over several turns: its success rate rises."""

from __future__ import annotations

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from grpo_seq import LoopConfig, GRPOLoop
from grpo_seq.envs.text import TextEnvGroupSampler
from grpo_seq.policies import CausalLMPolicy


def digit_tokenizer() -> PreTrainedTokenizerFast:
    """A character tokenizer of 19 tokens, no chat template: a random model then starts a reply with
    a digit from 1 to 4 about a fifth of the time, so early groups already hold wins and losses."""
    vocab = {t: i for i, t in enumerate(["<pad>", "<unk>", "<|im_end|>", *"0123456789+-=x?\n"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<|im_end|>")
    fast.padding_side = "left"
    return fast


def test_the_guessing_games_success_rate_rises():
    tok = digit_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    # GuessDigit: a secret from 1 to 4, three guesses, "+" / "-" after a wrong one, reward 1 for the right one
    sampler = TextEnvGroupSampler(tok, "guess_env:GuessDigit-v0", num_groups=4, num_generations=8, max_turns=3,
                                  max_reply_tokens=2, max_total_tokens=64, seed=0)
    cfg = LoopConfig(num_groups=4, num_generations=8, learning_rate=1e-2, beta=0.0, seed=0)
    trainer = GRPOLoop(cfg, CausalLMPolicy(model, tok), sampler)
    success = [trainer.step()["text_env/success_rate"] for _ in range(40)]
    first, last = sum(success[:5]) / 5, sum(success[-10:]) / 10
    # measured: about 0.25 over the first 5 steps (random replies), 0.5 to 0.65 over the last 10
    assert last >= first + 0.15, (first, last)
