"""Run under `accelerate launch --multi_gpu --num_processes 2`: a few GRPO steps on CartPole,
then every rank writes its parameters, the start states it sampled and how many outputs it
trained at each step to <out>/rank<r>.safetensors."""

import sys

import torch
from accelerate import Accelerator
from safetensors.torch import save_file

from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler, LoopConfig, GRPOLoop

torch.set_num_threads(1)
out = sys.argv[1]
acc = Accelerator(cpu=True)
cfg = LoopConfig(num_groups=2, num_generations=4, learning_rate=3e-2, beta=0.0, mu=2, num_minibatches=2)
sampler = EnvGroupSampler("CartPole-v1", 2, 4, seed=1_000_003 * acc.process_index)
# Different initial weights per rank on purpose: DDP must broadcast rank 0's at wrap time.
torch.manual_seed(acc.process_index)
trainer = GRPOLoop(cfg, CategoricalMLPPolicy(4, 2), sampler, acc)


class EqualRewards:
    """At the second step rank 1's groups all get equal rewards: it has nothing to train (zero
    advantages are skipped) while rank 0 trains, and both must still meet in the all-reduce."""

    def __init__(self, inner):
        self.inner, self.calls, self.num_groups, self.num_generations = inner, 0, inner.num_groups, inner.num_generations

    def sample(self, policy):
        batch = self.inner.sample(policy)
        self.calls += 1
        if self.calls == 2 and acc.process_index == 1:
            batch.rewards[:] = 1.0
        return batch


trainer.sampler = EqualRewards(sampler)
starts, trained, entropy = [], [], []
for _ in range(3):
    entropy.append(trainer.step()["policy/entropy"])
    b = trainer.last_batch
    trained.append(int(((b.advantages != 0) & b.mask).any(-1).sum()))
    starts.append(sampler.sample(trainer.policy).context[:, 0])
params = torch.cat([p.detach().flatten() for p in trainer.policy.parameters()])
save_file({"params": params, "starts": torch.cat(starts), "world": torch.tensor(acc.num_processes),
           "trained": torch.tensor(trained), "entropy": torch.tensor(entropy)}, f"{out}/rank{acc.process_index}.safetensors")
