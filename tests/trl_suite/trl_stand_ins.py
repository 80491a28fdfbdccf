"""Local stand-ins for what TRL's ``tests/test_grpo_trainer.py`` takes from the hub and from TRL's
``tests/testing_utils.py``: tiny models built from configs (as TRL's
``scripts/generate_tiny_models`` builds them, with a character-level tokenizer in place of the
hub's), the ``trl-internal-testing/zen`` prompt dataset, ``TrlTestCase`` and the ``require_*``
markers. ``generate.py`` rewrites TRL's file to import these.
"""

from __future__ import annotations

import importlib.util
import string
import tempfile
from pathlib import Path

import pytest

# Built once and kept between sessions (a model folder is written whole, then renamed into place).
ROOT = Path(tempfile.gettempdir()) / "grpo-seq-trl-suite" / "v1"

# The Zen of Python, as TRL's zen dataset holds it (prompt: the line without its last word).
ZEN = [
    "Beautiful is better than ugly.", "Explicit is better than implicit.", "Simple is better than complex.",
    "Complex is better than complicated.", "Flat is better than nested.", "Sparse is better than dense.",
    "Readability counts.", "Special cases aren't special enough to break the rules.",
    "Although practicality beats purity.", "Errors should never pass silently.", "Unless explicitly silenced.",
    "In the face of ambiguity, refuse the temptation to guess.",
    "There should be one-- and preferably only one --obvious way to do it.",
    "Although that way may not be obvious at first unless you're Dutch.", "Now is better than never.",
    "Although never is often better than *right* now.",
    "If the implementation is hard to explain, it's a bad idea.",
    "If the implementation is easy to explain, it may be a good idea.",
    "Namespaces are one honking great idea -- let's do more of those!",
]
# TRL's zen has 17 training rows and 2 test rows. Its tests train num_train_epochs=3 over the
# training split at one prompt per step (51 steps); the stand-in keeps 2 training rows (6 steps a
# test) so that the suite fits its time budget, and 2 test rows.
TRAIN_ROWS, TEST_ROWS = 2, 2

SPECIALS = ["<pad>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|finetune_right_pad_id|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# hub id -> (architecture, config sizes): TRL's generator scripts' sizes for these models.
MODELS = {
    "trl-internal-testing/tiny-Qwen2ForCausalLM-2.5": ("Qwen2ForCausalLM", dict(hidden_size=8, intermediate_size=32)),
    "trl-internal-testing/tiny-Qwen2ForSequenceClassification-2.5": (
        "Qwen2ForSequenceClassification", dict(hidden_size=16, intermediate_size=32, num_labels=1)),
    "trl-internal-testing/tiny-LlamaForSequenceClassification-3.2": (
        "LlamaForSequenceClassification", dict(hidden_size=16, intermediate_size=32, num_labels=1)),
    "trl-internal-testing/tiny-Qwen3ForCausalLM": ("Qwen3ForCausalLM", dict(hidden_size=8, intermediate_size=32)),
    "trl-internal-testing/tiny-Qwen3ForSequenceClassification": (
        "Qwen3ForSequenceClassification", dict(hidden_size=16, intermediate_size=32, num_labels=1)),
    "trl-internal-testing/tiny-RemoteForCausalLM": ("RemoteForCausalLM", dict(hidden_size=8, intermediate_size=32)),
    "trl-internal-testing/tiny-Cohere2ForCausalLM": ("Cohere2ForCausalLM", dict(hidden_size=8, intermediate_size=32)),
    "trl-internal-testing/tiny-Qwen3MoeForCausalLM": (
        "Qwen3MoeForCausalLM", dict(hidden_size=8, intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                                    norm_topk_prob=True)),
    "trl-internal-testing/tiny-GptOssForCausalLM": (
        "GptOssForCausalLM", dict(hidden_size=8, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2)),
}

# TRL's remote-code model (scripts/generate_tiny_models/for_causal_lm/_remote_code): a Llama under
# model_type "remote", loadable only with trust_remote_code.
REMOTE_CODE = {
    "configuration_remote.py": "from transformers import LlamaConfig\n\n\nclass RemoteConfig(LlamaConfig):\n"
                               "    model_type = \"remote\"\n",
    "modeling_remote.py": "from transformers import LlamaForCausalLM\n\nfrom .configuration_remote import RemoteConfig\n\n\n"
                          "class RemoteForCausalLM(LlamaForCausalLM):\n    config_class = RemoteConfig\n",
}


def hub(model_id: str) -> str:
    """The local folder standing in for a hub id (built by :func:`build_models`)."""
    return str(ROOT / model_id)


def make_tokenizer():
    """A character-level tokenizer with a chat template; EOS ``<|im_end|>``, PAD ``<pad>``."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(string.printable) - set("\x0b\x0c\r"))
    vocab = {t: i for i, t in enumerate(SPECIALS + chars)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<|im_end|>",
                                   additional_special_tokens=["<|im_start|>", "<|finetune_right_pad_id|>"])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(model_id: str) -> Path:
    """Build the stand-in for ``model_id`` under :data:`ROOT` unless it is there already."""
    import torch
    import transformers

    target = ROOT / model_id
    if (target / "config.json").is_file():
        return target
    arch, sizes = MODELS[model_id]
    tokenizer = make_tokenizer()
    config_cls = getattr(transformers, arch.replace("ForCausalLM", "Config").replace("ForSequenceClassification", "Config")
                         .replace("RemoteConfig", "LlamaConfig"))
    config = config_cls(vocab_size=len(tokenizer), num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                        bos_token_id=tokenizer.eos_token_id, **sizes)
    torch.manual_seed(0)
    model = getattr(transformers, arch.replace("Remote", "Llama"))(config)
    tmp = Path(tempfile.mkdtemp(dir=ROOT.parent))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if arch == "RemoteForCausalLM":
        _as_remote_code(tmp)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(target)
    except OSError:  # another process (pytest-xdist's workers) built it first: keep theirs
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / "config.json").is_file():
            raise
    return target


def _as_remote_code(folder: Path) -> None:
    """Turn a saved Llama into TRL's remote-code model: its config names model_type "remote" and
    maps AutoConfig/AutoModelForCausalLM to the code files beside it."""
    import json

    for name, code in REMOTE_CODE.items():
        (folder / name).write_text(code)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="remote", architectures=["RemoteForCausalLM"], auto_map={
        "AutoConfig": "configuration_remote.RemoteConfig", "AutoModelForCausalLM": "modeling_remote.RemoteForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def build_models() -> None:
    ROOT.mkdir(parents=True, exist_ok=True)
    for model_id in MODELS:
        build_model(model_id)


def _rows(config_name: str, lines: list[str]) -> list[dict]:
    prompts = [line.rsplit(" ", 1)[0] for line in lines]
    if config_name == "standard_prompt_only":
        return [{"prompt": p} for p in prompts]
    if config_name == "conversational_prompt_only":
        return [{"prompt": [{"role": "user", "content": f"What comes next: {p}"}]} for p in prompts]
    pytest.skip(f"the zen stand-in has no {config_name!r} configuration")


def load_dataset(path: str, name: str | None = None, split: str | None = None, streaming: bool = False, **kwargs):
    """``datasets.load_dataset`` for ``trl-internal-testing/zen``, built locally."""
    from datasets import Dataset, DatasetDict, IterableDatasetDict

    if path != "trl-internal-testing/zen":
        pytest.skip(f"no local stand-in for the dataset {path!r}")
    splits = {"train": Dataset.from_list(_rows(name, ZEN[:TRAIN_ROWS])),
              "test": Dataset.from_list(_rows(name, ZEN[-TEST_ROWS:]))}
    if streaming:
        splits = {k: v.to_iterable_dataset() for k, v in splits.items()}
    if split is not None:
        return splits[split]
    return IterableDatasetDict(splits) if streaming else DatasetDict(splits)


class TrlTestCase:
    @pytest.fixture(autouse=True)
    def set_tmp_dir(self, tmp_path):
        self.tmp_dir = str(tmp_path)


def _require(module: str, reason: str):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=reason)


def _never(reason: str):
    return pytest.mark.skip(reason=reason)


require_peft = _require("peft", "needs peft")
require_jmespath = _require("jmespath", "needs jmespath")
require_vision = _require("PIL", "needs Pillow")
require_liger_kernel = _never("Liger kernels: GPU only")
require_vllm = _never("vLLM: GPU only")
require_bitsandbytes = _never("bitsandbytes: GPU only")
require_kernels = _never("hub kernels: GPU only")
require_torch_accelerator = _never("needs a GPU")
require_ampere_or_newer = _never("needs an Ampere GPU")


def is_ampere_or_newer() -> bool:
    return False


def is_liger_kernel_available(*args, **kwargs) -> bool:
    return False


def get_kbit_device_map() -> dict:
    return {"": "cpu"}
