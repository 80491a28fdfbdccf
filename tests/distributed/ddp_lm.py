"""Run under `accelerate launch --multi_gpu --num_processes 2`: GRPO steps on the tiny language model
with micro-batches; every rank writes its parameters and the prompts it drew to <out>/lm_rank<r>.json."""

import json
import sys

import torch
from accelerate import Accelerator

from grpo_seq import CausalLMPolicy, LoopConfig, GRPOLoop, LMGroupSampler, RolloutBatch
from tiny_lm import make_tiny_lm

torch.set_num_threads(1)
out = sys.argv[1]
acc = Accelerator(cpu=True)
torch.manual_seed(acc.process_index)  # different sampling per rank; weights come from rank 0
model, tok = make_tiny_lm(seed=acc.process_index)
rows = [{"prompt": [{"role": "user", "content": f"q{i}"}], "answer": str(i)} for i in range(8)]
sampler = LMGroupSampler(tok, rows, num_groups=2, num_generations=2, max_completion_length=6,
                         process_index=acc.process_index, num_processes=acc.num_processes)


def by_rank(batch: RolloutBatch) -> RolloutBatch:
    batch.rewards = (torch.arange(batch.batch_size) % batch.num_generations).float()
    return batch


cfg = LoopConfig(num_groups=2, num_generations=2, learning_rate=1e-2, beta=0.04, micro_batch_size=1)
trainer = GRPOLoop(cfg, CausalLMPolicy(model, tok), sampler, acc, score_fn=by_rank)
answers = []
for _ in range(2):
    m = trainer.step()
    answers += trainer.last_batch.text.columns["answer"][:: cfg.num_generations]
params = torch.cat([p.detach().flatten() for p in trainer.policy.parameters()])
json.dump({"params": params.tolist(), "answers": answers, "world": acc.num_processes, "kl": m["policy/kl"]},
          open(f"{out}/lm_rank{acc.process_index}.json", "w"))
