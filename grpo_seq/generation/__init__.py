"""A lean sampling loop for decoder-only ``transformers`` language models.

``model.generate`` spends much of a small model's decoding step outside the matrix products:
the default cache grows every layer's keys and values with ``torch.cat`` at every token, and a
stack of logits processors, stopping criteria and cache bookkeeping runs in Python around each
forward. :func:`sample_tokens` keeps only what sampling needs:

* keys and values are written in place into buffers sized for prompt + completion
  (:func:`preallocated_cache`, in :mod:`.cache`); attention reads the filled prefix, never the
  empty tail;
* each distinct prompt is prefilled once and its cache copied to its G rows;
* one forward per token on the last token only (``logits_to_keep=1``), explicit positions,
  and an attention mask built once and sliced per step; Llama-style models decode through
  :class:`LlamaDecodeStep` (:mod:`.decode_step`), without their module machinery;
* temperature / top-k / top-p sampling (same rules and order as ``transformers``), seedable;
* finished rows (past their EOS) are dropped from the decoding batch once enough have ended.

The output has ``model.generate``'s shape and meaning: the prompt ids followed by the new
tokens, each row padded with ``pad_token_id`` after its first EOS, as many columns as steps run.
:func:`unsupported_reason` (:mod:`.support`) says when a model or an option needs
``model.generate`` instead.

Evaluation's greedy completions go through ``model.generate`` (:func:`.greedy.greedy_completions`);
:func:`.prompts.check_prompt_lengths` refuses, before anything is generated, a prompt that
leaves no room for its completion in the model's context.
"""

from .cache import preallocated_cache
from .decode_step import LLAMA_LIKE_MODEL_TYPES, LlamaDecodeStep, _onednn_linear, few_rows_product
from .loop import _draw, process_logits, sample_tokens
from .support import SUPPORTED_KWARGS, unsupported_reason, unwrap_peft

__all__ = [
    "preallocated_cache", "LlamaDecodeStep", "sample_tokens", "process_logits", "unsupported_reason", "SUPPORTED_KWARGS",
    "unwrap_peft", "few_rows_product", "LLAMA_LIKE_MODEL_TYPES",
]
