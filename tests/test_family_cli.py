"""The GRPO family's options reach every program the way the other LoopConfig options do: as flags
of ``grpo-seq train-lm`` and ``train-env`` (listed in --help), as keys of a spec file, and a bad
value ends the program with one ``error:`` line naming the option and exit status 2."""

from __future__ import annotations

import pytest

from grpo_seq.cli import parse_config
from grpo_seq.jobs.env_spec import EnvJob
from grpo_seq.jobs.lm_spec import LMJob
from grpo_seq.jobs.spec import load_spec, save_spec

FAMILY = ["importance_sampling_level", "delta", "sapo_temperature_pos", "vespo_k_pos", "scale_rewards",
          "multi_objective_aggregation", "mask_truncated_completions", "top_entropy_quantile", "ent_coef", "ent_mean",
          "use_adaptive_entropy", "entropy_target", "off_policy_mask_threshold", "use_bias_correction_kl",
          "kl_estimator", "kl_in_reward", "ref_sync_steps", "ref_sync_alpha",
          "dynamic_sampling", "max_resample_rounds"]


def test_flags_reach_the_language_model_job():
    job = parse_config(LMJob, ["--loss_type", "cispo", "--epsilon_high", "5", "--importance_sampling_level", "sequence",
                               "--dynamic_sampling", "--max_resample_rounds", "2", "--mask_truncated_completions",
                               "--top_entropy_quantile", "0.2", "--off_policy_mask_threshold", "0.5",
                               "--use_bias_correction_kl", "--kl_estimator", "k2", "--kl_in_reward", "--beta", "0.02",
                               "--scale_rewards", "batch", "--multi_objective_aggregation", "sum_then_normalize"])
    got = (job.loss_type, job.epsilon_high, job.importance_sampling_level, job.dynamic_sampling, job.max_resample_rounds,
           job.mask_truncated_completions, job.top_entropy_quantile, job.off_policy_mask_threshold,
           job.use_bias_correction_kl, job.kl_estimator, job.kl_in_reward, job.scale_rewards)
    assert got == ("cispo", 5.0, "sequence", True, 2, True, 0.2, 0.5, True, "k2", True, "batch")


def test_flags_and_spec_files_reach_the_env_job(tmp_path):
    job = parse_config(EnvJob, ["--env_id", "CartPole-v1", "--loss_type", "grpo", "--delta", "1.5", "--ent_coef",
                                "0.01", "--ent_mean", "token", "--use_adaptive_entropy", "--beta", "0.01",
                                "--ref_sync_steps", "10", "--ref_sync_alpha", "0.9"])
    assert (job.delta, job.ent_coef, job.ent_mean, job.use_adaptive_entropy, job.ref_sync_steps,
            job.ref_sync_alpha) == (1.5, 0.01, "token", True, 10, 0.9)
    assert load_spec(save_spec(job, tmp_path / "job.yaml")) == job


def test_every_family_option_is_in_the_help(capsys):
    with pytest.raises(SystemExit) as e:
        parse_config(LMJob, ["--help"])
    assert e.value.code == 0
    shown = capsys.readouterr().out
    assert [name for name in FAMILY if f"--{name}" not in shown] == []


@pytest.mark.parametrize("argv, name", [
    (["--loss_type", "ppo"], "loss_type"),
    (["--importance_sampling_level", "batch"], "importance_sampling_level"),
    (["--kl_estimator", "k4"], "kl_estimator"),
    (["--loss_type", "cispo"], "epsilon_high"),
    (["--delta", "1.1"], "delta"),
    (["--top_entropy_quantile", "1.5"], "top_entropy_quantile"),
    (["--kl_in_reward", "--beta", "0"], "kl_in_reward"),
    (["--ref_sync_steps", "5", "--beta", "0"], "ref_sync_steps"),
    (["--ref_sync_alpha", "0"], "ref_sync_alpha"),
    (["--use_adaptive_entropy"], "use_adaptive_entropy"),
    (["--ent_mean", "sum"], "ent_mean"),
    (["--max_resample_rounds", "-1"], "max_resample_rounds"),
    (["--multi_objective_aggregation", "mean"], "multi_objective_aggregation"),
    (["--scale_rewards", "batch", "--advantage", "process"], "scale_rewards"),
    (["--scale_rewards", "std"], "scale_rewards"),
])
def test_a_bad_value_is_one_error_line_naming_the_option(capsys, argv, name):
    with pytest.raises(SystemExit) as e:
        parse_config(LMJob, argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: ") and name in err[0]


def test_gspo_with_per_step_advantages_warns_and_outcome_does_not():
    import warnings

    from grpo_seq.loop.config import LoopConfig

    for advantage in ("stepwise", "process"):
        with pytest.warns(UserWarning, match=r"importance_sampling_level: sequence .* advantage=" + advantage):
            LoopConfig(importance_sampling_level="sequence", advantage=advantage)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        LoopConfig(importance_sampling_level="sequence", advantage="outcome")
        LoopConfig(importance_sampling_level="token", advantage="stepwise")
