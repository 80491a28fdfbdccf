"""The defaults an env job takes for the options it leaves unset, per env family.

CartPole: one group of G = 2 episodes per update and Adam at 2e-2: two CartPole episodes nearly
always differ in length, so many small updates learn in the fewest env steps. Every other env:
one group of G = 4, Adam at 5e-3, gamma 0.99, a small count-based bonus that breaks ties where
every member of a group times out alike, members whose episode ended kept in the step-wise
comparison (``absorb_ended``), and GiGPO's step groups at anchor states (``step_advantage_w``):
where an observation repeats (FrozenLake's cells) the steps from it are compared with each other;
continuous observations repeat only at the start state a group's members share, so there they
only weigh the first step's comparison twice. Acrobot,
MountainCar and LunarLander were tuned before anchor steps existed and keep them off
(``NO_ANCHORS``). Per-env overrides below say why they differ. The sweeps behind
each value are on the experiments page (docs/experiments.md, "Beyond CartPole").
"""

from __future__ import annotations

from typing import Any

__all__ = ["ENV_DEFAULTS", "ENV_FAMILY", "ENV_OVERRIDES", "FAMILY_PREFIXES", "IMAGES", "MUJOCO", "NO_ANCHORS", "PER_ENV",
           "image_defaults", "per_env"]

# CartPole's several passes over a step's batch (where a run asks for them, as Stable-Baselines3's
# README example does: n_epochs=10, a fixed rate) end once the policy has moved this far from the
# one that sampled the batch: without a limit, runs that balance the pole for 500 steps later fall
# back on some seeds. The family's one pass of one minibatch it never stops (that minibatch is scored by
# the policy that sampled it).
# The evidence: benchmarks/results/sb3_readme_example.
CARTPOLE_TARGET_KL = 0.002
ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    "cartpole": dict(num_generations=2, num_groups=1, mu=1, learning_rate=2e-2, gamma=0.98, advantage="stepwise",
                     scale_rewards="group", absorb_ended=False, adam_beta2=0.95, exploration_bonus=0.0,
                     obs_center=False, obs_norm=False, ent_coef=0.0, minibatch_tokens=0, step_advantage_w=0.0,
                     total_env_steps=50_000, action_head="categorical", log_std_init=0.0, target_kl=CARTPOLE_TARGET_KL,
                     eval_every=5_000, eval_greedy=True),
    "default": dict(num_generations=4, num_groups=1, mu=1, learning_rate=5e-3, gamma=0.99, advantage="stepwise",
                    scale_rewards="group", absorb_ended=True, adam_beta2=0.95, exploration_bonus=0.01,
                    obs_center=False, obs_norm=False, ent_coef=0.0, minibatch_tokens=0, step_advantage_w=1.0,
                    action_head="categorical", log_std_init=0.0, target_kl=0.0, total_env_steps=500_000,
                    eval_every=10_000, eval_greedy=True),
}
ENV_FAMILY = {"CartPole-v0": "cartpole", "CartPole-v1": "cartpole"}
# the envs whose settings were measured before anchor steps existed (their records stand as measured)
NO_ANCHORS = dict(step_advantage_w=0.0)
# Once the car reaches the flag, members differ by a few steps of chance: centred advantages
# and beta2 0.999 keep those steps small. The first push from a standstill depends on the start
# position: centred observations spread the starts across the inputs, and the entropy bonus
# keeps the group trying both directions. The budget is rl-zoo3's for PPO on MountainCar-v0.
_MOUNTAINCAR = dict(num_generations=8, num_groups=2, advantage="stepwise", learning_rate=1e-2, scale_rewards="none",
                    adam_beta2=0.999, obs_center=True, ent_coef=0.01, total_env_steps=1_000_000, eval_every=10_000,
                    **NO_ANCHORS)
ENV_OVERRIDES: dict[str, dict[str, Any]] = {
    # Eight members per start state: a higher final greedy return after solving than four, at the
    # same env steps to solve. Minibatches of 1,024 env steps: an early batch of eight 500-step
    # episodes gives four optimizer steps, a late one of short episodes one, so it solves in fewer
    # env steps with the same final return. The evidence: docs/experiments.md (family_ablation,
    # env_sweep in benchmarks/results/).
    "Acrobot-v1": dict(num_generations=8, minibatch_tokens=1024, total_env_steps=200_000, eval_every=5_000,
                       **NO_ANCHORS),
    "MountainCar-v0": _MOUNTAINCAR,
    # The same hill with a continuous push that costs its square: MountainCar's settings find the
    # flag, and three values (full push either way, or none) find it in fewer env steps than five
    # or eleven, on every tuning seed (the family's defaults never reach it).
    "MountainCarContinuous-v0": dict(**_MOUNTAINCAR, action_bins=3),
    # A pair per update, as CartPole: the shaped reward tells two episodes apart. Slow seeds were
    # still improving when a 1M budget's learning rate reached 0.
    "LunarLander-v3": dict(num_generations=2, total_env_steps=2_000_000, eval_every=20_000, **NO_ANCHORS),
    # The same landing with throttles: LunarLander's settings reach 200 where the family's did not
    # within 1M env steps (two tuning seeds each; docs/experiments.md). Its observation units follow
    # what it trains on (obs_norm, as rl-zoo3 normalises PPO's there): both tuning seeds solved in a
    # fraction of the env steps, and ended higher (docs/experiments.md, "LunarLanderContinuous-v3:
    # running observation units ...").
    "LunarLanderContinuous-v3": dict(num_generations=2, total_env_steps=2_000_000, eval_every=20_000, obs_norm=True,
                                     **NO_ANCHORS),
}
# Image observations (the SB3 door's CnnPolicy; MinAtar's and Atari's envs everywhere), over the env's
# family: a convolutional torso on pixels diverges at the rates an MLP on a few numbers takes (its
# ReLUs die), and four members per group give it a signal in more of its groups. Eight groups a step
# and four passes of minibatches over them (PPO's way of using a batch, as MuJoCo's), with a horizon
# of about ten steps (gamma 0.9): without a critic, a step's return-to-go over a longer one is
# mostly the noise of later steps. A pixel gridworld the project never saw and MinAtar's Breakout
# ended their budgets far higher so (docs/experiments.md, "Image observations: one pass ...").
# Minibatches of 128 env steps, twice the optimizer steps of 256 from each batch at nearly the same
# cost (the convolutions' work per step dominates): three held-out pixel tasks and Breakout ended
# higher on every seed; 64 ended Breakout lower (docs/experiments.md, "Image observations:
# minibatches ...").
# No count bonus: every image record was measured without one, and one over whole images only counts
# repeats of the same frame (grpo_seq.sampling.novelty); a run may ask for it.
IMAGES: dict[str, Any] = dict(learning_rate=1e-3, num_generations=4, num_groups=8, mu=4, minibatch_tokens=128,
                              gamma=0.9, exploration_bonus=0.0)

# MinAtar (small-frame Atari, images of 10 x 10): its envs have no time limit of their own; a
# thousand steps hold a good Breakout or Freeway game, and a group's episodes end together there.
for _game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders"):
    for _version in ("v0", "v1"):
        ENV_OVERRIDES[f"MinAtar/{_game}-{_version}"] = dict(**IMAGES, max_episode_steps=1_000,
                                                            total_env_steps=1_000_000, eval_every=20_000)

# MuJoCo's locomotion and arm tasks: episodes of up to 1,000 steps, so one group of four is 4,000
# env steps, and one optimizer step per group gave a 1M budget 250 of them. PPO's passes instead
# (rl-zoo3 takes 10 to 20 epochs of small minibatches there): 10 passes of 500-step minibatches, at a
# rate those many steps take; rl-zoo3's budget for PPO on them.
MUJOCO = dict(mu=10, minibatch_tokens=500, learning_rate=1e-3, total_env_steps=1_000_000, eval_every=20_000)
for _task in ("Ant", "HalfCheetah", "Hopper", "Humanoid", "HumanoidStandup", "InvertedDoublePendulum",
              "InvertedPendulum", "Pusher", "Reacher", "Swimmer", "Walker2d"):
    for _version in ("v4", "v5"):
        ENV_OVERRIDES[f"{_task}-{_version}"] = MUJOCO
# HalfCheetah: each joint's torque as 41 values weighed by a Gaussian that starts narrow (log std -2
# of the range's half-width, rl-zoo3's log_std_init for PPO there). A free categorical starts uniform
# over the whole range, and a cheetah flailing at random torques ended its budget far lower on the
# tuning seeds (docs/experiments.md, "HalfCheetah-v5: ..."). Hopper's ended lower with it
# (docs/experiments.md, "Hopper-v5: ..."), so the other tasks keep the categorical.
# Its observation units follow what it trains on (obs_norm, as rl-zoo3 normalises PPO's there): a
# running cheetah's velocities lie far outside random play's, and on the tuning seeds its budget
# ended higher than with random play's units (docs/experiments.md, "HalfCheetah-v5 and
# Hopper-v5: running observation units ..."); Hopper's did not, so it keeps random play's.
NARROW_GAUSSIAN = dict(action_head="gaussian", log_std_init=-2.0, action_bins=41)
for _version in ("v4", "v5"):
    ENV_OVERRIDES[f"HalfCheetah-{_version}"] = {**MUJOCO, **NARROW_GAUSSIAN, "obs_norm": True}
# Pendulum: one optimizer step per group of four 200-step episodes left tuning seeds hanging at the
# bottom for hundreds of thousands of env steps. MuJoCo's passes over four groups a step (3,200 env
# steps, near PPO's 4,096-step rollout for it) swung nearly all of them up, and the policies they
# left balanced better than with one group (docs/experiments.md, "Pendulum-v1: do PPO-like passes ...").
# The torque as 21 values weighed by a Gaussian (grpo_seq.policies.mlp): every tuning seed swung up, sooner,
# and more of their later evaluations stayed balanced than with a free categorical over 11
# (docs/experiments.md, "Pendulum-v1: a Gaussian head ...").
# Its observation units follow what it trains on (obs_norm): every tuning seed swung up in fewer env
# steps than with random play's units (docs/experiments.md, "Pendulum-v1: running observation units ...").
ENV_OVERRIDES["Pendulum-v1"] = dict(mu=MUJOCO["mu"], minibatch_tokens=MUJOCO["minibatch_tokens"],
                                    learning_rate=MUJOCO["learning_rate"], num_groups=4, action_head="gaussian",
                                    action_bins=21, obs_norm=True)

# MiniGrid (and BabyAI): rl-zoo3's wrapper, the image's cells and the mission's characters as one flat
# vector (a policy of numbers reads no mission text); the family's settings otherwise. Its envs end
# their own episodes (a step limit of their own, which no registered time limit states): a cap
# above any of theirs sizes the episode buffers. Evaluated with sampled actions, as rl-zoo3 evaluates
# MiniGrid: an argmax policy can turn on the spot forever where a sampled one moves on. Advantages
# centred, not divided by the group's std: once every member reaches the goal they differ by a step
# or two, and dividing that by a tiny std drove policies that had found the goal into turning on
# the spot, where every member then scores 0 and nothing trains again (docs/experiments.md).
_MINIGRID = dict(env_wrappers=["minigrid.wrappers:FlatObsWrapper"], max_episode_steps=2_000, eval_greedy=False,
                 scale_rewards="none")
# Atari (ale-py's ALE/...-v5): Stable-Baselines3's Atari preprocessing and the last 4 frames as one
# image (grpo_seq.envs.atari), the convolutional torso's rate and group (IMAGES), rl-zoo3's
# budget for PPO on Atari. ALE registers no time limit (only its 108,000 frames): episodes are capped at
# 5 minutes of play, 18,000 frames or 4,500 steps, as DQN's evaluation capped them (Mnih et al. 2015).
# A whole game is one episode, so a greedy policy that has lost a life and never presses FIRE
# again stands still until the cap: at ALE's own limit one such evaluation plays 27,000 steps.
_ATARI = dict(**IMAGES, env_wrappers=["grpo_seq.envs.atari:atari_wrapper"], max_episode_steps=4_500,
              total_env_steps=10_000_000, eval_every=250_000)
FAMILY_PREFIXES: dict[str, dict[str, Any]] = {"MiniGrid-": _MINIGRID, "BabyAI-": _MINIGRID, "ALE/": _ATARI}
# Box2D's walker and racing car: rl-zoo3's budgets for PPO there, so that both train alike; the car
# reads rl-zoo3's frames (grpo_seq.envs.car_racing: every second frame, grey, 64 x 64, two stacked)
# through the convolutional torso, at its rate and group (IMAGES).
ENV_OVERRIDES["BipedalWalker-v3"] = dict(total_env_steps=5_000_000, eval_every=50_000)
ENV_OVERRIDES["CarRacing-v3"] = dict(**IMAGES, env_wrappers=["grpo_seq.envs.car_racing:car_racing_wrapper"],
                                     total_env_steps=4_000_000, eval_every=50_000)
# rl-zoo3's budget for PPO there, so that both train alike beside each other
# (benchmarks/results/workloads_vs_sb3); the learning rate reaches 0 at its end.
ENV_OVERRIDES["MiniGrid-Empty-Random-5x5-v0"] = dict(total_env_steps=100_000, eval_every=5_000)

# An env without a registered id (one built directly, as a custom env or Stable-Baselines3's test
# envs are): CartPole's family, with advantages centred only and GiGPO's step groups at anchor
# states. Where observations repeat (a discrete state, one-hot) the steps from one state are
# compared with each other, the per-state baseline a pair of episodes in unrelated states lacks;
# centred, a difference made only by a reward far in the discounted future stays small instead of
# being divided up to a unit-sized advantage. CartPole built without an id solves as often either
# way (benchmarks/results/sb3_identity).
# CartPole's KL limit is not taken: it was measured on CartPole's own passes only, and an unknown env
# (Stable-Baselines3's identity tests: 1,200 env steps, four passes) may need every pass's step.
UNREGISTERED: dict[str, Any] = {**ENV_DEFAULTS["cartpole"], "scale_rewards": "none", "step_advantage_w": 1.0,
                                "target_kl": 0.0}

# The alternatives mode (every action tried from one state, the Stable-Baselines3 door's
# alternatives=True): states per update (one state is a small group), and the most actions tried
# at one state without an explicit group_size (the SB3 door's name for G).
ALTERNATIVES_GROUPS = 16
ALTERNATIVES_MAX_DEFAULT_G = 4096


PER_ENV = "default: per env family (grpo_seq.envs.defaults)"


def _own(env_id: str | None) -> dict[str, Any]:
    """The settings ``env_id`` has over its family's: its prefix's, then its own overrides."""
    by_prefix = next((v for prefix, v in FAMILY_PREFIXES.items() if (env_id or "").startswith(prefix)), {})
    return {**by_prefix, **ENV_OVERRIDES.get(env_id or "", {})}


def per_env(env_id: str | None) -> dict[str, Any]:
    """The defaults of ``env_id``'s family with the env's own overrides (an env without an id:
    the family of every other env)."""
    return {**ENV_DEFAULTS[ENV_FAMILY.get(env_id or "", "default")], **_own(env_id)}


def image_defaults(env_id: str | None) -> dict[str, Any]:
    """What an env whose observations turn out to be images takes over its family's defaults
    (:data:`IMAGES`), where its own settings say nothing else: an env's observation space is
    known only once the env is made, after its spec has taken the family's values."""
    own = _own(env_id)
    return {k: v for k, v in IMAGES.items() if k not in own}

