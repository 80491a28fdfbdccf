"""grpo-seq: GRPO on any token sequence, text or actions."""

from .advantages import outcome_advantages, process_advantages, stepwise_return_advantages
from .batch import RolloutBatch
from .config import GRPOConfig
from .objective import aggregate, clipped_surrogate, grpo_loss, k3_kl, probability_ratio, token_logprobs
from .policies import CategoricalMLPPolicy, CausalLMPolicy
from .rewards import RewardScorer, load_reward_fn
from .sampling import EnvGroupSampler, GroupSampler, LMGroupSampler
from .serialization import load_policy, save_policy
from .trainer import GRPOTrainer, compute_advantages

__version__ = "0.1.0"
__all__ = [
    "GRPOConfig", "GRPOTrainer", "RolloutBatch", "GroupSampler", "EnvGroupSampler", "CategoricalMLPPolicy",
    "CausalLMPolicy", "LMGroupSampler", "RewardScorer", "load_reward_fn",
    "outcome_advantages", "process_advantages", "stepwise_return_advantages", "compute_advantages",
    "token_logprobs", "probability_ratio", "k3_kl", "clipped_surrogate", "aggregate", "grpo_loss",
    "save_policy", "load_policy",
]
