"""Job specs: one serialisable description of a run, round-tripped through JSON and YAML,
checked key by key and type by type, each refusal one error naming its source."""

from __future__ import annotations

import json

import pytest
import yaml

from grpo_seq.errors import ConfigError
from grpo_seq.jobs import EnvJob, LMJob, load_spec, save_spec, spec_from_dict, spec_to_dict


@pytest.mark.parametrize("spec", [
    EnvJob(env_id="Acrobot-v1", seed=3, hidden_sizes=[16, 8], obs_scale=[1.0, 2.0, 1.0, 1.0, 3.0, 3.0]),
    LMJob(model="some/model", dataset="p.jsonl", reward_fns=["m:f", "m:g"], reward_weights=[1.0, 0.5],
          system_prompt="Answer.\n", epsilon_high=0.28),
])
@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_spec_round_trips_through_json_and_yaml(tmp_path, spec, suffix):
    path = save_spec(spec, tmp_path / f"spec{suffix}")
    text = path.read_text()
    data = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    assert data["kind"] == spec.KIND and next(iter(data)) == "kind"  # its kind first, then its fields
    again = load_spec(path)
    assert type(again) is type(spec) and again == spec
    assert spec_to_dict(again) == spec_to_dict(spec)


def test_an_env_spec_fills_its_env_familys_defaults_once_built():
    cartpole, acrobot = EnvJob(env_id="CartPole-v1"), EnvJob(env_id="Acrobot-v1")
    assert (cartpole.num_generations, cartpole.learning_rate, cartpole.total_env_steps) == (2, 2e-2, 50_000)
    assert (acrobot.num_generations, acrobot.learning_rate, acrobot.total_env_steps) == (8, 5e-3, 200_000)
    # a value given wins over the family's, and the filled spec reads back as the same spec
    assert EnvJob(env_id="Acrobot-v1", num_generations=6).num_generations == 6
    assert spec_from_dict(spec_to_dict(acrobot)) == acrobot


def test_mujoco_takes_ppo_like_passes_of_minibatches_and_other_envs_one_pass():
    # a MuJoCo group is 4,000 env steps: ten passes of 500-step minibatches, at a rate for many steps
    hopper, cheetah4 = EnvJob(env_id="Hopper-v5"), EnvJob(env_id="HalfCheetah-v4")
    for job in (hopper, cheetah4):
        assert (job.mu, job.minibatch_tokens, job.learning_rate, job.total_env_steps) == (10, 500, 1e-3, 1_000_000)
    pendulum = EnvJob(env_id="Pendulum-v1")  # the same passes, over four groups a step
    assert (pendulum.mu, pendulum.minibatch_tokens, pendulum.learning_rate, pendulum.num_groups) == (10, 500, 1e-3, 4)
    assert EnvJob(env_id="CartPole-v1").mu == 1 and EnvJob(env_id="Acrobot-v1").mu == 1
    assert EnvJob(env_id="Hopper-v5", mu=2).mu == 2  # given, it wins
    assert spec_from_dict(spec_to_dict(hopper)) == hopper
    # HalfCheetah: each joint's torque over 41 values under a Gaussian that starts narrow; Pendulum's
    # starts wide; Hopper keeps the categorical
    assert (cheetah4.action_head, cheetah4.log_std_init, cheetah4.action_bins) == ("gaussian", -2.0, 41)
    assert (pendulum.action_head, pendulum.log_std_init) == ("gaussian", 0.0)
    assert (hopper.action_head, hopper.action_bins) == ("categorical", None)
    assert EnvJob(env_id="HalfCheetah-v5", log_std_init=-1.0).log_std_init == -1.0
    # HalfCheetah's units follow what it trains on; Hopper's stay random play's
    assert (cheetah4.obs_norm, hopper.obs_norm, pendulum.obs_norm) == (True, False, True)
    assert EnvJob(env_id="LunarLanderContinuous-v3").obs_norm and not EnvJob(env_id="LunarLander-v3").obs_norm


def test_an_envs_minibatches_of_env_steps_yield_to_a_loss_over_whole_episodes():
    assert EnvJob(env_id="Acrobot-v1").minibatch_tokens == 1024 and EnvJob(env_id="CartPole-v1").minibatch_tokens == 0
    # Dr. GRPO's sum over a constant and GSPO's one ratio per episode take no minibatch of steps: left
    # unset, the env's default gives way (given, it is refused by name, as LoopConfig's)
    assert EnvJob(env_id="Acrobot-v1", loss_type="dr_grpo").minibatch_tokens == 0
    assert EnvJob(env_id="Acrobot-v1", importance_sampling_level="sequence").minibatch_tokens == 0
    assert EnvJob(env_id="Acrobot-v1", num_minibatches=2).minibatch_tokens == 0
    with pytest.raises(ValueError, match="LoopConfig.minibatch_tokens: needs a token-mean loss"):
        EnvJob(env_id="Acrobot-v1", loss_type="dr_grpo", minibatch_tokens=256)


def test_an_int_where_a_float_is_wanted_is_taken_as_a_float():
    spec = spec_from_dict({"kind": "env", "learning_rate": 1, "gamma": 1})
    assert spec.learning_rate == 1.0 and isinstance(spec.learning_rate, float)


@pytest.mark.parametrize("data, message", [
    ({"kind": "env", "lr": 3}, "spec.json: unknown option(s) ['lr']"),
    ({"kind": "env", "learning_rate": "fast"}, "spec.json: option 'learning_rate' takes float | None, got 'fast'"),
    ({"kind": "env", "num_generations": 2.5}, "option 'num_generations' takes int | None, got 2.5"),
    ({"kind": "env", "keep_best": "yes"}, "option 'keep_best' takes bool, got 'yes'"),
    ({"kind": "env", "hidden_sizes": [64, "wide"]}, "option 'hidden_sizes' takes list[int], got [64, 'wide']"),
    ({"kind": "lm", "reward_weights": 1}, "option 'reward_weights' takes list[float] | None, got 1"),
    ({"kind": "game"}, "spec.json: kind 'game' is not a kind of job; one of ['agent', 'env', 'lm', 'text_env']"),
    ({"learning_rate": 0.1}, "spec.json: kind None is not a kind of job"),
    ({"kind": "env", "eval_episodes": 0}, "--eval_episodes: must be >= 1, got 0"),  # the spec's own checks
    ({"kind": "lm", "step_advantage_w": 1.0}, "--step_advantage_w: anchor states are the observations of an episode"),
    ({"kind": "env", "step_advantage_w": -1.0}, "LoopConfig.step_advantage_w: must be >= 0"),
])
def test_a_bad_spec_is_one_error_naming_what_is_wrong(data, message):
    with pytest.raises(ConfigError) as e:
        spec_from_dict(data, source="spec.json")
    assert message in str(e.value)


def test_a_spec_of_another_kind_is_refused_by_a_class_that_runs_one_kind():
    with pytest.raises(ConfigError, match="holds a 'lm' job, and this program runs 'env' jobs"):
        spec_from_dict({"kind": "lm"}, EnvJob, source="x.yaml")


@pytest.mark.parametrize("text, message", [
    ("a: 1\na: 2\n", "option 'a' is given twice (lines 1 and 2)"),
    ("- a\n", "expected a mapping of option: value, got a list"),
    ("a: [\n", "not valid YAML"),
])
def test_a_bad_spec_file_names_the_file(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_spec(path)
    assert str(path) in str(e.value) and message in str(e.value)


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))


@pytest.mark.parametrize("data, message", [
    (LAUGHS.encode(), "its aliases expand to more than 100,000 values"),  # 10^9 values from 700 bytes
    (b"seed: " + b"[" * 50_000 + b"]" * 50_000, "values nested too deeply to read"),
    (b"seed: " + b"9" * 5000, "a value cannot be read (Exceeds the limit"),
    (b"1: 2\nseed: 3\n", "option names are strings; got 1"),
    (b"seed: 3\nname: caf\xe9\n", "not UTF-8 text (byte 17)"),
    (b"#" * (1 << 20) + b"#", "over 1 MiB"),
])
def test_a_hostile_spec_file_is_refused_before_it_takes_memory_or_time(tmp_path, data, message):
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as e:
        load_spec(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)
    assert len(str(e.value)) < 300  # one short line, not the value expanded


def test_a_wrong_value_in_an_error_is_cut_to_an_excerpt():
    with pytest.raises(ConfigError) as e:
        spec_from_dict({"kind": "env", "seed": ["x" * 1000]}, source="s.yaml")
    assert "got ['xxx" in str(e.value) and str(e.value).endswith("...") and len(str(e.value)) < 200


def test_aliases_within_the_bound_still_load(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("kind: env\nseed: &s 3\ntotal_env_steps: 1000\neval_every: *s\n")
    assert load_spec(path).eval_every == 3


def test_a_number_yaml_reads_as_text_is_still_a_number(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("kind: env\nlearning_rate: 1e-3\n")  # YAML 1.1, as PyYAML reads it: the string '1e-3'
    assert load_spec(path).learning_rate == 1e-3


def test_reading_an_env_spec_loads_no_trainer_and_no_lm_code():
    import subprocess
    import sys

    watched = ("accelerate", "transformers", "gymnasium", "grpo_seq.loop.trainer", "grpo_seq.jobs.lm_spec")
    code = ("import sys; from grpo_seq.jobs import spec_from_dict; spec_from_dict({'kind': 'env'}); "
            f"print([m for m in {watched!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_anchor_steps_are_an_option_of_the_jobs_whose_outputs_have_steps():
    # env rollouts and a text environment's turns have observations to anchor on; one completion has none
    assert spec_from_dict({"kind": "env", "step_advantage_w": 1.0}).step_advantage_w == 1.0
    assert spec_from_dict({"kind": "text_env", "env_id": "guess_env:TestEcho-v0", "step_advantage_w": 0.5}).step_advantage_w == 0.5
    with pytest.raises(ConfigError, match="step_advantage_w"):
        spec_from_dict({"kind": "lm", "step_advantage_w": 0.5})


def test_anchor_steps_are_off_for_the_envs_tuned_before_them():
    # their records (benchmarks/results) were measured without anchor steps; the shared start state
    # alone would change their runs
    from grpo_seq.envs.defaults import per_env

    assert all(per_env(e)["step_advantage_w"] == 0.0 for e in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0",
                                                                "LunarLander-v3"))
    assert per_env("FrozenLake-v1")["step_advantage_w"] == per_env(None)["step_advantage_w"] == 1.0
