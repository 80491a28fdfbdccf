"""benchmarks/family_ablation.py: its seed ranges, its summary's medians and counts, and its
bootstrap intervals, on runs made up by hand."""

import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import family_ablation as fa  # noqa: E402


def test_seed_list_reads_ranges_and_single_seeds():
    assert fa.seed_list("1000-1002,1005") == [1000, 1001, 1002, 1005]
    assert fa.seed_list("7") == [7]


def test_median_difference_interval_of_constant_samples_is_the_difference():
    # every resample of [10, 10, 10] has median 10 and of [0, 0, 0] median 0: the interval is [10, 10]
    assert fa.median_diff_interval([10, 10, 10], [0, 0, 0], random.Random(0)) == [10, 10]


def run(variant, seed, steps, seconds, final):
    return {"env_id": "CartPole-v1", "variant": variant, "seed": seed, "solved_env_steps": steps,
            "solved_seconds": seconds, "final_return": final, "threshold": 475.0}


def test_summary_counts_unsolved_as_infinite_and_a_missing_final_as_lowest():
    runs = [run("defaults", 0, 1000, 0.1, 500.0), run("defaults", 1, 2000, 0.2, 500.0), run("defaults", 2, None, None, 300.0),
            run("cispo", 0, 3000, 0.3, 500.0), run("cispo", 1, None, None, None), run("cispo", 2, None, None, None)]
    sm = fa.summarise(runs)["CartPole-v1"]
    d, c = sm["defaults"], sm["cispo"]
    # defaults: steps [1000, 2000, inf] -> median 2000; seconds [0.1, 0.2, inf] -> 0.2; finals [500, 500, 300]
    assert (d["solved"], d["runs"], d["median_env_steps"], d["median_seconds"]) == (2, 3, 2000, 0.2)
    assert (d["median_final_return"], d["final_at_threshold"]) == (500.0, 2)
    assert "final_minus_defaults_ci95" not in d
    # cispo: steps [3000, inf, inf] -> inf; finals [500, -inf, -inf] -> -inf, 1 at 475 or more
    assert (c["solved"], c["median_env_steps"], c["median_final_return"], c["final_at_threshold"]) == (1, math.inf, -math.inf, 1)
    # in the intervals an unsolved run counts as CartPole's budget, 50,000 env steps: cispo [3000, 50000, 50000]
    # against defaults [1000, 2000, 50000]; a median difference lies between 3000 - 50000 and 50000 - 1000
    lo, hi = c["env_steps_minus_defaults_ci95"]
    assert -47_000 <= lo <= hi <= 49_000
    assert c["final_minus_defaults_ci95"][0] == -math.inf  # two of three finals missing: most resamples' median is -inf
