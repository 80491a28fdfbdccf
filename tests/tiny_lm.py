"""A tiny Llama and a character-level tokenizer with a chat template, built locally (no network)."""

from __future__ import annotations

import string
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<unk>", "<s>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def make_tokenizer() -> PreTrainedTokenizerFast:
    chars = sorted(set(string.printable) - set("\x0b\x0c\r"))
    vocab = {t: i for i, t in enumerate(SPECIALS + chars)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def make_tiny_lm(seed: int = 0, hidden: int = 32) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    tokenizer = make_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).eval(), tokenizer


def save_tiny_lm(path: str | Path, seed: int = 0) -> Path:
    model, tokenizer = make_tiny_lm(seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)


def length_reward(prompts=None, completions=(), **kwargs) -> list[float]:
    """A reward that varies within every group of a random tiny model's completions: length / 10."""
    from reward_fns._text import completion_text

    return [len(completion_text(c)) / 10 for c in completions]


def chat_rows(n: int = 6) -> list[dict]:
    """``n`` chat prompts of different lengths, each with an answer column."""
    return [{"prompt": [{"role": "user", "content": f"say {i}" + "!" * i}], "answer": str(i)} for i in range(n)]


def make_sampler(tokenizer, rows=None, **kw):
    """An LMGroupSampler over :func:`chat_rows`: 2 groups of 4, completions of up to 10 tokens."""
    from grpo_seq import LMGroupSampler

    kw = {"num_groups": 2, "num_generations": 4, "max_completion_length": 10, **kw}
    return LMGroupSampler(tokenizer, rows or chat_rows(), **kw)
