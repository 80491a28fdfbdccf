"""CategoricalMLPPolicy's input scale and initialisation."""


import numpy as np
import pytest
import torch

from grpo_seq import CategoricalMLPPolicy, load_policy
from grpo_seq.io.serialization import save_policy

from grpo_seq.envs.obs_scale import default_obs_scale, rollout_obs_center, rollout_obs_range, rollout_obs_scale
from grpo_seq.jobs.env import make_policy
from grpo_seq.jobs.env_spec import EnvJob

SCALE = [2.4, 1.0, 0.2, 4.0]


def _pair():
    """A policy with an input scale and an unscaled copy of the same weights."""
    torch.manual_seed(0)
    scaled = CategoricalMLPPolicy(4, 3, (16, 16), obs_scale=SCALE)
    torch.nn.init.normal_(scaled.net[-1].weight, std=1.0)  # far from uniform, so actions differ by state
    plain = CategoricalMLPPolicy(4, 3, (16, 16))
    plain.load_state_dict(scaled.state_dict())
    obs = np.random.default_rng(0).normal(size=(256, 4)).astype(np.float32) * np.float32([1.0, 1.0, 0.1, 2.0])
    return scaled, plain, obs


def test_obs_scale_divides_each_dimension_before_the_first_layer():
    scaled, plain, obs = _pair()
    divided = torch.from_numpy(obs / np.float32(SCALE))
    torch.testing.assert_close(scaled.logits(torch.from_numpy(obs)), plain.logits(divided), rtol=1e-6, atol=1e-6)
    # and not a no-op: the unscaled policy picks other actions on the raw observations
    assert not torch.equal(scaled.act(torch.from_numpy(obs), greedy=True), plain.act(torch.from_numpy(obs), greedy=True))


def test_numpy_actor_applies_the_same_scale():
    scaled, _, obs = _pair()
    greedy = scaled.numpy_actor(greedy=True)(obs)
    assert np.array_equal(greedy, scaled.act(torch.from_numpy(obs), greedy=True).numpy())


def test_the_scale_is_saved_with_the_policy_and_not_in_its_weights(tmp_path):
    scaled, _, obs = _pair()
    assert "inv_obs_scale" not in scaled.state_dict()  # older weight files still load
    save_policy(scaled, tmp_path / "p")
    loaded = load_policy(tmp_path / "p")
    assert loaded.init_kwargs["obs_scale"] == SCALE
    assert np.array_equal(loaded.numpy_actor(greedy=True)(obs), scaled.numpy_actor(greedy=True)(obs))


@pytest.mark.parametrize("scale", [[1.0, 2.0], [1.0, 0.0, 1.0, 1.0], [1.0, float("inf"), 1.0, 1.0]])
def test_a_bad_obs_scale_is_refused_by_name(scale):
    with pytest.raises(ValueError, match="obs_scale"):
        CategoricalMLPPolicy(4, 2, obs_scale=scale)


def test_orthogonal_init_gives_orthogonal_hidden_layers_with_gain_sqrt2():
    torch.manual_seed(0)
    policy = CategoricalMLPPolicy(4, 2, (64, 32), orthogonal_init=True)
    first, second, head = (m for m in policy.net if isinstance(m, torch.nn.Linear))
    # (64, 4): orthonormal columns; (32, 64): orthonormal rows; both times sqrt(2)
    torch.testing.assert_close(first.weight.T @ first.weight, 2 * torch.eye(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(second.weight @ second.weight.T, 2 * torch.eye(32), atol=1e-5, rtol=0)
    assert not first.bias.any() and not second.bias.any()
    assert head.weight.abs().max() < 0.05  # the head keeps its near-uniform init
    default = CategoricalMLPPolicy(4, 2, (64, 32))
    assert default.net[0].bias.any()  # torch's default: uniform biases


def test_the_env_program_scales_cartpole_by_its_thresholds_and_other_envs_by_random_play():
    assert default_obs_scale("CartPole-v1") == pytest.approx([2.4, 1.0, 12 * 2 * np.pi / 360, 1.0])
    assert default_obs_scale("Acrobot-v1") is None
    assert make_policy(EnvJob()).init_kwargs["obs_scale"] == pytest.approx(default_obs_scale("CartPole-v1"))
    assert make_policy(EnvJob(obs_scale=[1, 1, 1, 1])).init_kwargs["obs_scale"] == [1, 1, 1, 1]
    with pytest.raises(ValueError, match="--obs_scale has 2 numbers"):
        make_policy(EnvJob(obs_scale=[1.0, 2.0]))
    # Acrobot: cos and sin stay within 1; the angular velocities reach several rad/s under random play
    scale = make_policy(EnvJob(env_id="Acrobot-v1", seed=3)).init_kwargs["obs_scale"]
    assert scale == rollout_obs_scale("Acrobot-v1", seed=3)
    assert all(x <= 1.0 for x in scale[:4]) and scale[4] > 1.0 and scale[5] > 1.0


def test_weights_trained_for_another_input_scale_are_refused_by_name(tmp_path):
    from grpo_seq.io.serialization import load_policy_weights

    raw = CategoricalMLPPolicy(4, 2)  # as saved before obs_scale existed: no scale
    save_policy(raw, tmp_path / "raw")
    with pytest.raises(ValueError, match=r"obs_scale was \[1.0, 1.0, 1.0, 1.0\], is \[2.4"):
        load_policy_weights(CategoricalMLPPolicy(4, 2, obs_scale=SCALE), tmp_path / "raw")
    # a scale of 1s is no scale, and the init does not change what given weights compute
    same = CategoricalMLPPolicy(4, 2, obs_scale=[1, 1, 1, 1], orthogonal_init=True)
    load_policy_weights(same, tmp_path / "raw")
    torch.testing.assert_close(same.net[0].weight, raw.net[0].weight, rtol=0, atol=0)


SHIFT = [0.5, -1.0, 0.0, 3.0]


def test_obs_shift_is_subtracted_before_the_scale_in_both_paths(tmp_path):
    scaled, _, obs = _pair()
    shifted = CategoricalMLPPolicy(4, 3, (16, 16), obs_scale=SCALE, obs_shift=SHIFT)
    shifted.load_state_dict(scaled.state_dict())
    moved = torch.from_numpy(obs - np.float32(SHIFT))
    torch.testing.assert_close(shifted.logits(torch.from_numpy(obs)), scaled.logits(moved), rtol=1e-6, atol=1e-6)
    want = shifted.act(torch.from_numpy(obs), greedy=True).numpy()
    assert np.array_equal(shifted.numpy_actor(greedy=True)(obs), want)
    assert not np.array_equal(want, scaled.act(torch.from_numpy(obs), greedy=True).numpy())  # not a no-op
    save_policy(shifted, tmp_path / "p")
    loaded = load_policy(tmp_path / "p")
    assert loaded.init_kwargs["obs_shift"] == SHIFT and "obs_shift" not in shifted.state_dict()
    assert np.array_equal(loaded.numpy_actor(greedy=True)(obs), want)


def test_weights_trained_for_another_shift_are_refused_by_name(tmp_path):
    from grpo_seq.io.serialization import load_policy_weights

    save_policy(CategoricalMLPPolicy(4, 2, obs_scale=SCALE), tmp_path / "unshifted")
    with pytest.raises(ValueError, match=r"obs_shift was \[0.0, 0.0, 0.0, 0.0\], is \[0.5, -1.0"):
        load_policy_weights(CategoricalMLPPolicy(4, 2, obs_scale=SCALE, obs_shift=SHIFT), tmp_path / "unshifted")
    with pytest.raises(ValueError, match="obs_shift"):
        CategoricalMLPPolicy(4, 2, obs_shift=[0.0, float("nan"), 0.0, 0.0])


def test_obs_center_maps_the_box_random_play_reaches_onto_minus_one_one():
    low, high = rollout_obs_range("MountainCar-v0", seed=3)
    shift, scale = rollout_obs_center("MountainCar-v0", seed=3)
    np.testing.assert_allclose(np.subtract(low, shift) / scale, -1.0, rtol=1e-6)
    np.testing.assert_allclose(np.subtract(high, shift) / scale, 1.0, rtol=1e-6)
    # the largest-magnitude rule of the same play divides by max(|low|, |high|)
    assert rollout_obs_scale("MountainCar-v0", seed=3) == pytest.approx(np.maximum(-low, high).tolist())
    # MountainCar: positions stay left of 0 under random play, so the centre is negative, not 0
    assert -0.6 < shift[0] < -0.4 and scale[0] < 0.3
    policy = make_policy(EnvJob(env_id="MountainCar-v0", seed=3, obs_center=True))
    assert policy.init_kwargs["obs_shift"] == shift and policy.init_kwargs["obs_scale"] == scale
    assert make_policy(EnvJob(env_id="Acrobot-v1", obs_center=False)).init_kwargs["obs_shift"] is None
    given = make_policy(EnvJob(env_id="MountainCar-v0", seed=3, obs_center=True, obs_scale=[1.0, 0.01]))
    assert given.init_kwargs["obs_scale"] == [1.0, 0.01] and given.init_kwargs["obs_shift"] == shift
