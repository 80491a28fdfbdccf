"""Run under `accelerate launch --multi_gpu --num_processes 2`: a few GRPO steps on CartPole,
then every rank writes its parameters and the start states it sampled to <out>/rank<r>.safetensors."""

import sys

import torch
from accelerate import Accelerator
from safetensors.torch import save_file

from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler, GRPOConfig, GRPOTrainer

torch.set_num_threads(1)
out = sys.argv[1]
acc = Accelerator(cpu=True)
cfg = GRPOConfig(num_groups=2, num_generations=4, learning_rate=3e-2, beta=0.0, mu=2, num_minibatches=2)
sampler = EnvGroupSampler("CartPole-v1", 2, 4, seed=1_000_003 * acc.process_index)
# Different initial weights per rank on purpose: DDP must broadcast rank 0's at wrap time.
torch.manual_seed(acc.process_index)
trainer = GRPOTrainer(cfg, CategoricalMLPPolicy(4, 2), sampler, acc)
starts = []
for _ in range(3):
    trainer.step()
    starts.append(trainer.sampler.sample(trainer.policy).context[:, 0])
params = torch.cat([p.detach().flatten() for p in trainer.policy.parameters()])
save_file({"params": params, "starts": torch.cat(starts), "world": torch.tensor(acc.num_processes)},
          f"{out}/rank{acc.process_index}.safetensors")
