"""Config files: YAML -> config -> config.json; the shipped defaults and README tables stay generated."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "recipes"))

from gsm8k_tiny import GSM8KConfig  # noqa: E402
from text_env import TextEnvConfig  # noqa: E402

from grpo_seq.cli import parse_config  # noqa: E402
from grpo_seq.jobs.env_spec import EnvJob  # noqa: E402
import forkrun  # tests/forkrun.py: Python programs forked from a warm process


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}


@pytest.mark.parametrize("name, cls", [("gym_env", EnvJob), ("gsm8k_tiny", GSM8KConfig), ("text_env", TextEnvConfig)])
def test_shipped_yaml_holds_exactly_the_defaults(name, cls):
    shipped = yaml.safe_load((ROOT / f"recipes/configs/{name}.yaml").read_text())
    assert parse_config(cls, ["--config", str(ROOT / f"recipes/configs/{name}.yaml")]) == cls()
    assert set(shipped) == set(cls().to_dict())


def test_generated_files_are_up_to_date():
    res = forkrun.run([sys.executable, str(ROOT / "recipes/configs/generate.py"), "--check"], env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr + res.stdout


def test_yaml_to_config_json_round_trip_with_flags_winning(tmp_path):
    cfg = yaml.safe_load((ROOT / "recipes/configs/gym_env.yaml").read_text())
    cfg.update({"learning_rate": 5e-3, "hidden_sizes": [16, 16], "num_generations": 3, "gamma": 0.9,
                "output_dir": str(tmp_path / "run"), "total_env_steps": 800, "eval_every": 800, "seed": 4})
    f = tmp_path / "mine.yaml"
    f.write_text(yaml.safe_dump(cfg))
    res = forkrun.run([sys.executable, str(ROOT / "recipes/cartpole.py"), "--config", str(f), "--seed", "7"],
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    written = json.loads((tmp_path / "run/config.json").read_text())
    assert written.pop("launch")["num_processes"] == 1  # how it was launched: recorded, not an option
    # every value as the file gave it, the flag overriding one; the nulls resolved to CartPole's defaults
    assert written == {**cfg, "seed": 7, "num_groups": 1, "mu": 1, "exploration_bonus": 0.0, "solved_return": 475.0,
                       "advantage": "stepwise", "scale_rewards": "group", "absorb_ended": False, "adam_beta2": 0.95,
                       "obs_center": False, "ent_coef": 0.0, "minibatch_tokens": 0, "step_advantage_w": 0.0,
                       "eval_greedy": True, "action_head": "categorical", "target_kl": 0.002, "log_std_init": 0.0,
                       "obs_norm": False}
    assert json.loads((tmp_path / "run/summary.json").read_text())["seed"] == 7


@pytest.mark.parametrize("text, message", [
    ("learning_rate: 1e-3\nlr: 3\n", "unknown option(s) ['lr']"),
    ("learning_rate: fast\n", "option 'learning_rate' takes float | None, got 'fast'"),
    ("kind: lm\n", "holds a 'lm' job; this program runs 'env' jobs"),
    ("epsilon: 0\n", "LoopConfig.epsilon: must be in (0, 1), got 0.0"),
    ("- a\n- b\n", "expected a mapping of option: value, got a list"),
    ("a: [\n", "not valid YAML"),
])
def test_a_bad_config_file_is_one_error_naming_it(tmp_path, capsys, text, message):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        parse_config(EnvJob, ["--config", str(f)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err, err
    if "LoopConfig" not in message and "argument" not in message:
        assert str(f) in err


def test_null_in_yaml_sets_an_optional_field_to_none(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("epsilon_high: null\nreward_weights: [1, 0.5]\n")
    cfg = parse_config(GSM8KConfig, ["--config", str(f)])
    assert cfg.epsilon_high is None and cfg.reward_weights == [1.0, 0.5]


def test_a_negated_flag_says_what_it_does(capsys):
    with pytest.raises(SystemExit):
        parse_config(EnvJob, ["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--no_keep_best, --no-keep-best The same as --keep_best false." in out
    assert "(default: False)" not in out.split("--no_keep_best")[1].split("--")[0]
    assert parse_config(EnvJob, ["--no_keep_best"]).keep_best is False and parse_config(EnvJob, []).keep_best is True


@pytest.mark.parametrize("argv, message", [
    (["--total_env_step", "100"], "unknown option(s) ['--total_env_step', '100'] (did you mean --total_env_steps?)"),
    (["--lerning_rate=0.1"], "unknown option(s) ['--lerning_rate=0.1'] (did you mean --learning_rate?)"),
    (["--zzz", "1"], "unknown option(s) ['--zzz', '1']; see"),
])
def test_a_mistyped_or_cut_short_flag_is_refused_with_the_closest_option(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_config(EnvJob, argv)
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and err.startswith("error: ") and message in err and "\n" not in err
