"""The Stable-Baselines3-style GRPO surface: learn, predict, save/load, SB3's callbacks and evaluation."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from grpo_seq import GRPO
from grpo_seq.errors import UsageError

sb3 = pytest.importorskip("stable_baselines3", reason="SB3's own tools: pip install -e '.[bench]'")
from stable_baselines3.common.callbacks import (  # noqa: E402
    CallbackList, CheckpointCallback, EvalCallback, StopTrainingOnRewardThreshold)
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402


def upright(state, action, next_state):
    """A shaped reward: the pole upright and turning towards upright, the cart near the centre. Positive:
    a negative per-step reward would pay an episode for ending early."""
    tilt = (next_state[:, 2] / 0.21 + 0.5 * next_state[:, 3]).abs().clamp(max=1)
    return 1 - 0.5 * tilt - 0.1 * (next_state[:, 0] / 2.4).abs().clamp(max=1)


def test_sb3_style_example_learns_saves_and_reloads_with_the_same_actions(tmp_path):
    env = gym.make("CartPole-v1")
    vec_env = DummyVecEnv([lambda: env])
    model = GRPO("MlpPolicy", vec_env, reward_function=upright, seed=0).learn(total_timesteps=20_000)
    mean, _ = evaluate_policy(model, model.get_env(), n_eval_episodes=5, deterministic=True, warn=False)
    assert mean >= 475
    model.save(tmp_path / "grpo_cartpole")
    assert (tmp_path / "grpo_cartpole.zip").is_file()
    loaded = GRPO.load(tmp_path / "grpo_cartpole")
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    assert np.array_equal(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])


def test_default_cartpole_learns_with_the_recipes_defaults():
    model = GRPO("MlpPolicy", "CartPole-v1", seed=0).learn(25_000)
    assert 25_000 - 2 < model.num_timesteps <= 25_000  # never past the budget
    assert model.config.learning_rate == 2e-2 and model.config.adam_beta1 == 0.5
    assert evaluate_policy(model, model.get_env(), n_eval_episodes=5, warn=False)[0] >= 475


def test_predict_shapes_as_sb3():
    model = GRPO("MlpPolicy", "CartPole-v1", seed=0)
    action, state = model.predict(np.zeros(4))
    assert action.shape == () and action.dtype == np.int64 and state is None
    actions, _ = model.predict(np.zeros((5, 4)), deterministic=True)
    assert actions.shape == (5,)
    with pytest.raises(ValueError, match=r"Unexpected observation shape \(3,\) .* \(4,\)"):  # SB3's message
        model.predict(np.zeros(3))


def test_ppo_only_arguments_warned_unknown_refused():
    with pytest.warns(UserWarning, match="gae_lambda, vf_coef$"):  # normalize_advantage at PPO's default: silent
        GRPO("MlpPolicy", "CartPole-v1", gae_lambda=0.9, vf_coef=0.25, normalize_advantage=True, n_epochs=4,
             clip_range=0.1, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GRPO("MlpPolicy", "CartPole-v1", gae_lambda=0.95, vf_coef=0.5, clip_range_vf=None, use_sde=False, seed=0,
             device="cpu")  # "auto" on a GPU machine warns that an MLP is meant for the CPU, as SB3 does
    with pytest.raises(UsageError, match="use_sde=True.*gSDE"):
        GRPO("MlpPolicy", "CartPole-v1", use_sde=True)
    with pytest.raises(AssertionError, match="clip_range_vf"):  # SB3's own check
        GRPO("MlpPolicy", "CartPole-v1", clip_range_vf=-0.2)
    with pytest.raises(UsageError, match="bogus_arg"):
        GRPO("MlpPolicy", "CartPole-v1", bogus_arg=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = GRPO("MlpPolicy", "CartPole-v1", n_epochs=3, clip_range=0.1, gamma=0.9, num_groups=2, seed=0,
                     ent_coef=0.01, device="cpu")
    assert (model.config.mu, model.config.epsilon, model.config.gamma, model.config.num_groups) == (3, 0.1, 0.9, 2)
    assert model.config.ent_coef == 0.01  # SB3's entropy bonus is ours, not a PPO-only argument


def test_a_rollout_too_small_for_the_familys_group_shrinks_g_to_the_episodes_it_holds():
    from stable_baselines3.common.env_util import make_vec_env

    # Acrobot's family takes G = 8 episodes per start state; 2 envs x 256 steps hold 512 steps,
    # which is 5 episodes of at most 100 steps: G = 5, one group (SB3's own callback test).
    envs = make_vec_env("Acrobot-v1", n_envs=2, seed=0, env_kwargs=dict(max_episode_steps=100))
    assert GRPO("MlpPolicy", envs, n_steps=256, seed=0).config.num_generations == 5
    assert GRPO("MlpPolicy", envs, n_steps=2048, seed=0).config.num_generations == 8  # 4,096 steps hold 8
    assert GRPO("MlpPolicy", envs, n_steps=256, group_size=8, seed=0).config.num_generations == 8  # asked for
    assert GRPO("MlpPolicy", envs, n_steps=16, seed=0).config.num_generations == 2  # never under a pair


def test_policy_kwargs_map_to_the_mlp():
    model = GRPO("MlpPolicy", "CartPole-v1", policy_kwargs=dict(net_arch=[32], activation_fn=torch.nn.ReLU), seed=0)
    assert model.policy.init_kwargs["hidden_sizes"] == [32] and model.policy.init_kwargs["activation"] == "relu"


def test_evaluate_policy_and_the_four_callbacks_and_a_function(tmp_path):
    model = GRPO("MlpPolicy", "CartPole-v1", seed=0)
    stop = StopTrainingOnRewardThreshold(reward_threshold=475, verbose=0)
    evaluation = EvalCallback(DummyVecEnv([lambda: gym.make("CartPole-v1")]), eval_freq=1000, n_eval_episodes=3,
                              callback_on_new_best=stop, best_model_save_path=str(tmp_path / "best"), warn=False)
    checkpoints = CheckpointCallback(save_freq=500, save_path=str(tmp_path / "ckpt"))
    calls = []
    model.learn(40_000, callback=[evaluation, checkpoints])
    assert evaluation.best_mean_reward >= 475 and model.num_timesteps < 40_000  # stopped on the threshold
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir())[0] == "rl_model_1000_steps.zip"
    assert GRPO.load(tmp_path / "best" / "best_model").predict(np.zeros(4))[0].shape == ()
    model.learn(500, callback=lambda l, g: calls.append(l["self"].num_timesteps) or len(calls) < 10)
    assert len(calls) == 10 and calls == sorted(calls)
    model.learn(300, callback=CallbackList([CheckpointCallback(100, str(tmp_path / "c2"))]))
    assert any((tmp_path / "c2").iterdir())


@pytest.mark.parametrize("fn,match", [
    (lambda s, a, s2: s2, r"returned a Tensor shaped \(\d+, 4\)"),
    (lambda s, a, s2: torch.full((len(s),), float("nan")), "non-finite"),
    (lambda s, a, s2: 1 / 0, "raised ZeroDivisionError"),
])
def test_reward_function_errors_name_the_function(fn, match):
    model = GRPO("MlpPolicy", "CartPole-v1", reward_function=fn, seed=0)
    with pytest.raises(UsageError, match=f"reward_function .*lambda.*{match}"):
        model.learn(100)


def test_alternatives_mode_has_nonzero_advantages_and_learns():
    from grpo_seq.math.advantages import compute_advantages

    model = GRPO("MlpPolicy", "CartPole-v1", group_mode="alternatives", reward_function=upright, seed=0)
    batch = model._trainer.sampler.sample(model.policy)
    assert batch.tokens.shape == (16 * 2, 1) and (batch.tokens.reshape(16, 2) == torch.tensor([0, 1])).all()
    assert compute_advantages(batch, model.config).abs().sum() > 0
    model.learn(4_000)
    assert evaluate_policy(model, model.get_env(), n_eval_episodes=5, warn=False)[0] >= 475


def test_alternatives_from_the_same_state_differ_in_their_next_state():
    model = GRPO("MlpPolicy", "CartPole-v1", group_mode="alternatives", horizon=1, seed=0,
                 reward_function=lambda s, a, s2: s2[:, 3])  # the pole's angular velocity: the action moves it
    batch = model._trainer.sampler.sample(model.policy)
    scores = batch.rewards.reshape(-1, 2)
    assert (scores[:, 0] != scores[:, 1]).all()


def test_an_env_that_cannot_be_cloned_is_named():
    from grpo_seq.sampling.snapshot import Snapshotter

    class Holder(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,))
        action_space = gym.spaces.Discrete(2)

        def __init__(self):
            self.lock = __import__("threading").Lock()

    with pytest.raises(UsageError, match="Holder cannot be cloned"):
        Snapshotter(Holder()).copies(Holder(), 2)


def test_other_envs_get_the_env_programs_defaults():
    from grpo_seq.envs.defaults import per_env

    model = GRPO("MlpPolicy", "Acrobot-v1", seed=0)
    want = per_env("Acrobot-v1")
    assert (model.config.num_generations, model.config.learning_rate, model.config.gamma) == \
        (want["num_generations"], want["learning_rate"], want["gamma"])
    scale = model.policy.init_kwargs["obs_scale"]
    assert scale is not None and scale[4] > 1  # the angular velocities, in the units random play reaches
    sampler = model._make_sampler(model._source)
    assert sampler.bonus is not None and sampler.bonus.scale == want["exploration_bonus"]
    assert GRPO("MlpPolicy", "Acrobot-v1", seed=0, exploration_bonus=0)._make_sampler(model._source).bonus is None
    cartpole = GRPO("MlpPolicy", "CartPole-v1", seed=0)
    assert cartpole._make_sampler(cartpole._source).bonus is None and cartpole.config.num_generations == 2


def test_mountaincar_gets_centred_observations_and_its_entropy_bonus():
    from grpo_seq.envs.obs_scale import rollout_obs_center
    from grpo_seq.envs.defaults import per_env

    model = GRPO("MlpPolicy", "MountainCar-v0", seed=3)
    shift, scale = rollout_obs_center("MountainCar-v0", seed=3)
    assert model.policy.init_kwargs["obs_shift"] == shift and model.policy.init_kwargs["obs_scale"] == scale
    assert model.config.ent_coef == per_env("MountainCar-v0")["ent_coef"] > 0
    assert model.config.advantage == "stepwise"
    assert GRPO("MlpPolicy", "MountainCar-v0", seed=3, ent_coef=0.0).config.ent_coef == 0.0  # a given value wins
    acrobot = GRPO("MlpPolicy", "Acrobot-v1", seed=0)
    assert acrobot.policy.init_kwargs["obs_shift"] is None and acrobot.config.ent_coef == 0.0


def test_discrete_observations_are_one_hot_and_joint_actions_decode():
    from grpo_seq.sampling.spaces import SpaceCodec

    codec = SpaceCodec(gym.spaces.Discrete(3), gym.spaces.MultiDiscrete([2, 3]))
    assert codec.obs_dim == 3 and codec.num_actions == 6  # 2 x 3 joint actions
    assert codec.encode_obs(np.array([2, 0])).tolist() == [[0, 0, 1], [1, 0, 0]]
    # token k = d0 * 3 + d1 (mixed radix, last digit fastest): 5 = 1*3 + 2, 3 = 1*3 + 0
    assert codec.decode_actions(np.array([5, 3, 0])).tolist() == [[1, 2], [1, 0], [0, 0]]
    binary = SpaceCodec(gym.spaces.Box(-1, 1, (2, 2)), gym.spaces.MultiBinary(3))
    assert binary.obs_dim == 4 and binary.num_actions == 8
    assert binary.decode_actions(np.array([6])).tolist() == [[1, 1, 0]]  # 6 = 0b110
    with pytest.raises(AssertionError, match=r"Multi-dimensional MultiBinary\(\(2, 3\)\)"):  # SB3's message
        SpaceCodec(gym.spaces.Box(-1, 1, (2,)), gym.spaces.MultiBinary([2, 3]))


def test_taxi_trains_and_predicts_in_its_own_spaces(tmp_path):
    from stable_baselines3.common.envs import IdentityEnvMultiDiscrete

    model = GRPO("MlpPolicy", "Taxi-v4", n_steps=64, seed=0, policy_kwargs=dict(net_arch=[8])).learn(64)
    assert model.num_timesteps == 64 and model.policy.init_kwargs["obs_dim"] == 500  # one-hot states
    action, _ = model.predict(3)
    assert action.shape == () and model.action_space.contains(int(action))
    multi = GRPO("MlpPolicy", IdentityEnvMultiDiscrete(3), n_steps=32, seed=0).learn(32)
    actions, _ = multi.predict(np.array([[0, 1], [2, 2]]))
    assert actions.shape == (2, 2) and all(multi.action_space.contains(a) for a in actions)
    multi.save(tmp_path / "multi")
    loaded = GRPO.load(tmp_path / "multi")  # the spaces come back from the file
    obs = np.array([[0, 0], [1, 2], [2, 1]])
    assert loaded.action_space == multi.action_space
    assert np.array_equal(loaded.predict(obs, deterministic=True)[0], multi.predict(obs, deterministic=True)[0])


def test_same_seed_same_run_and_learn_ends_at_the_budget():
    runs = []
    for _ in range(2):
        model = GRPO("MlpPolicy", "CartPole-v1", seed=3, n_steps=64, policy_kwargs=dict(net_arch=[8])).learn(128)
        obs = model.get_env().reset()
        runs.append([int(model.predict(obs)[0][0]) for _ in range(20)] + [model.num_timesteps])
    assert runs[0] == runs[1] and 128 - 2 <= runs[0][-1] <= 128


def test_subproc_vec_env_trains_and_callbacks_see_sb3s_locals():
    from stable_baselines3.common.callbacks import StopTrainingOnMaxEpisodes
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv

    envs = make_vec_env("CartPole-v1", n_envs=2, seed=0, vec_env_cls=SubprocVecEnv,
                        vec_env_kwargs=dict(start_method="fork"))
    model = GRPO("MlpPolicy", envs, n_steps=32, seed=0, policy_kwargs=dict(net_arch=[8]))
    stop = StopTrainingOnMaxEpisodes(max_episodes=1)
    model.learn(1000, callback=stop)
    assert stop.n_episodes >= 2 and model.num_timesteps < 1000  # one episode per env: stopped early
    assert set(stop.locals) >= {"new_obs", "dones", "rewards", "infos", "actions"}
    assert stop.locals["new_obs"].shape == (2, 4) and stop.locals["dones"].dtype == bool
    envs.close()


def test_save_holds_sb3s_data_entry_without_pickle_and_loads_from_a_file_object(tmp_path):
    import io
    import zipfile

    from stable_baselines3.common.save_util import load_from_zip_file

    model = GRPO("MlpPolicy", "CartPole-v1", seed=0, learning_rate=lambda p: 1e-3 * p)
    model.save(tmp_path / "m")
    data, params, _ = load_from_zip_file(tmp_path / "m.zip")  # SB3's own reader
    assert data["n_envs"] == 1 and data["gamma"] == model.gamma and params == {}
    assert len(data["learning_rate"][":table:"]) == 1001  # a schedule: its values, not its code
    with zipfile.ZipFile(tmp_path / "m.zip") as z:
        assert not any(name.endswith((".pth", ".pkl")) for name in z.namelist())
    assert GRPO.load(tmp_path / "m").learning_rate(0.25) == pytest.approx(2.5e-4)
    model.shaper = lambda x: x  # other code is named, not pickled, and its absence is warned about
    model.save(tmp_path / "s", include=["shaper"])
    assert ":not_serialized:" in load_from_zip_file(tmp_path / "s.zip")[0]["shaper"]
    with pytest.warns(UserWarning, match="Could not deserialize object shaper"):
        GRPO.load(tmp_path / "s")
    buffer = io.BytesIO()
    model.save(buffer)
    loaded = GRPO.load(buffer, custom_objects={"learning_rate": 5e-4})
    assert not buffer.closed and loaded.learning_rate == 5e-4
    assert torch.equal(loaded.get_parameters()["policy"]["net.0.weight"], model.policy.state_dict()["net.0.weight"])


def test_a_schedule_is_saved_as_its_values_and_read_back_as_their_interpolation():
    from grpo_seq.sb3.schedule import FloatSchedule, TabulatedSchedule, tabulate

    table = tabulate(lambda p: p * p)[":table:"]  # 1001 points, 0.001 apart
    square = TabulatedSchedule(table)
    assert square(0.5) == 0.25 and square(1.0) == 1.0  # on the grid: exact
    # between 0 and 0.001 the line from 0 to 1e-6: at 0.0005, 5e-7 (the square itself: 2.5e-7)
    assert square(0.0005) == pytest.approx(5e-7)
    assert FloatSchedule(square).to_json()[":table:"] == table  # saved again, the same values


def test_policy_kwargs_choose_the_optimizer():
    model = GRPO("MlpPolicy", "CartPole-v1", seed=0, policy_kwargs=dict(
        net_arch=[8], optimizer_class=torch.optim.SGD, optimizer_kwargs=dict(momentum=0.5)))
    assert isinstance(model._trainer.optimizer.optimizer, torch.optim.SGD)
    assert model._trainer.optimizer.optimizer.param_groups[0]["momentum"] == 0.5
    model.learn(64)


@pytest.mark.parametrize("kwargs, last_rate", [
    (dict(learning_rate=1e-3), 1e-3),                            # SB3's float: a fixed rate
    (dict(learning_rate=1e-3, lr_schedule="linear"), None),      # ours on request: decays towards 0
])
def test_a_float_learning_rate_is_fixed_as_in_sb3(kwargs, last_rate):
    model = GRPO("MlpPolicy", "CartPole-v1", seed=0, device="cpu", **kwargs).learn(3_000)
    rate = model._trainer.optimizer.param_groups[0]["lr"]
    if last_rate is not None:
        assert rate == pytest.approx(last_rate) and model.lr_schedule(0.1) == pytest.approx(last_rate)
    else:  # 3,000 steps of a 3,000-step learn: the last update's rate is a small share of the start
        assert rate < 0.5e-3 and model.lr_schedule(0.1) == pytest.approx(1e-4)


def test_schedules_set_each_steps_rate_and_clip_through_the_job_not_the_spec():
    seen = []
    model = GRPO("MlpPolicy", "CartPole-v1", seed=0, device="cpu", learning_rate=lambda left: 1e-3 * left,
                 clip_range=lambda left: 0.1 + 0.1 * left)
    real = model._trainer.update.run

    def spy(batch, live, step, epsilon=None):
        seen.append((model._trainer.optimizer.param_groups[0]["lr"], epsilon))
        return real(batch, live, step, epsilon)

    model._trainer.update.run = spy
    model.learn(1_000)
    assert len(seen) >= 2 and seen[0][0] > seen[-1][0] and seen[0][1] > seen[-1][1] >= 0.1  # both fall with progress
    assert seen[0][0] <= 1e-3 and seen[0][1] <= 0.2
    # the spec keeps what was asked for: the schedules are the caller's, applied step by step
    assert model.config.learning_rate == model._trainer.config.learning_rate != seen[-1][0]


def test_a_rate_and_clip_range_of_0_load_as_rl_zoo3_loads_a_model_to_act(tmp_path):
    GRPO("MlpPolicy", "CartPole-v1", seed=0, device="cpu").learn(300).save(tmp_path / "m.zip")
    # rl-zoo3's enjoy.py: a model loaded to act, with nothing left to train
    zoo = {"learning_rate": 0.0, "lr_schedule": lambda _: 0.0, "clip_range": lambda _: 0.0}
    model = GRPO.load(tmp_path / "m.zip", env=gym.make("CartPole-v1"), custom_objects=zoo, device="cpu")
    assert model.learning_rate == 0.0 and model.lr_schedule(0.5) == 0.0
    before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.learn(600, reset_num_timesteps=False)
    assert model.num_timesteps >= 900
    assert all(torch.equal(before[k], v) for k, v in model.policy.state_dict().items())  # a rate of 0 moves nothing
    still = GRPO("MlpPolicy", "CartPole-v1", seed=0, device="cpu", learning_rate=0.0)
    weights = [p.clone() for p in still.policy.parameters()]
    still.learn(300)
    assert all(torch.equal(a, b) for a, b in zip(weights, still.policy.parameters()))


def test_a_vec_normalize_env_is_trained_through_and_its_statistics_move_with_the_real_steps():
    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    env = VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]))
    model = GRPO("MlpPolicy", env, seed=0, policy_kwargs=dict(net_arch=[8])).learn(300)
    assert model.get_vec_normalize_env() is env and model.get_env() is env
    assert model.policy.init_kwargs["obs_scale"] == [1.0] * 4  # VecNormalize's units: no second scaling
    sampler = model._trainer.sampler
    raw, batch = sampler.last_raw_obs, sampler.last_batch
    # every real step counted once (RunningMeanStd starts at a count of 1e-4)
    assert round(env.obs_rms.count) == model.num_timesteps and len(raw) == int(batch.mask.sum())
    env.training = False  # now frozen: a rollout changes nothing
    count = env.obs_rms.count
    model.learn(100)
    assert env.obs_rms.count == count
    # the policy's context holds the real steps as VecNormalize shows them
    sampler = model._trainer.sampler
    batch, raw = sampler.last_batch, sampler.last_raw_obs
    np.testing.assert_allclose(batch.context[batch.mask].numpy(), env.normalize_obs(raw), rtol=1e-5, atol=1e-5)
    with pytest.raises(UsageError, match="alternatives.*VecNormalize"):
        GRPO("MlpPolicy", env, group_mode="alternatives", seed=0)


def test_a_vec_env_wrapper_that_changes_the_spaces_is_refused_by_name():
    from stable_baselines3.common.vec_env import VecEnvWrapper, VecMonitor, VecNormalize

    class Doubled(VecEnvWrapper):  # no per-env equivalent (VecFrameStack and VecTransposeImage have one)
        def __init__(self, venv):
            super().__init__(venv, observation_space=gym.spaces.Box(-np.inf, np.inf, (8,)))

        def reset(self):
            return np.tile(self.venv.reset(), 2)

        def step_wait(self):
            obs, *rest = self.venv.step_wait()
            return (np.tile(obs, 2), *rest)

    with pytest.raises(UsageError, match=r"Doubled changes the env's spaces \(observations Box\(4,\) -> Box\(8,\)\)"):
        GRPO("MlpPolicy", Doubled(DummyVecEnv([lambda: gym.make("CartPole-v1")])))
    twice = VecNormalize(VecMonitor(VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]))))
    with pytest.raises(UsageError, match="VecNormalize inside another"):
        GRPO("MlpPolicy", twice)
    # one that keeps the spaces wraps what is trained: VecNormalize under SB3's VecMonitor is found
    inner = VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]))
    assert GRPO("MlpPolicy", VecMonitor(inner), seed=0).get_vec_normalize_env() is inner


def test_an_env_that_cannot_be_copied_trains_in_place_and_only_alternatives_refuse_it():
    import threading

    class Locked(gym.Wrapper):  # unregistered, and a lock cannot be deep-copied
        def __init__(self):
            super().__init__(gym.make("CartPole-v1").unwrapped)
            self.lock = threading.Lock()

        @property
        def spec(self):
            return None

    env = Locked()
    model = GRPO("MlpPolicy", env, seed=0, max_episode_steps=50, policy_kwargs=dict(net_arch=[8])).learn(200)
    assert model.num_timesteps == 200 and model._trainer.sampler.env_list == [env]
    with pytest.raises(UsageError, match="alternatives.*CartPoleEnv.*deep-copyable"):
        GRPO("MlpPolicy", Locked(), group_mode="alternatives", max_episode_steps=50)


def test_the_logger_records_frames_per_second_and_timesteps():
    from stable_baselines3.common.logger import Logger

    class InMemory(Logger):  # keeps the values of the last dump (SB3's own test does the same)
        def __init__(self):
            super().__init__("", [])
            self.dumped: dict = {}

        def dump(self, step: int = 0) -> None:
            self.dumped = dict(self.name_to_value)
            super().dump(step)

    logger = InMemory()
    model = GRPO("MlpPolicy", "CartPole-v1", seed=0, n_steps=64)
    model.set_logger(logger)
    model.learn(200, log_interval=1)
    assert logger.dumped["time/total_timesteps"] == model.num_timesteps >= 200
    assert 0 < logger.dumped["time/fps"] < float("inf")  # a rate, not a speed limit: no wall-clock bound
