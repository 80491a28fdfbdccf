"""The adapted Stable-Baselines3 tests need Stable-Baselines3 itself (its envs, callbacks, vec envs).

Run against ``GRPO`` (the default), the cases PPO passes and ``GRPO`` does not are expected to
fail, each with its reason (docs/guides/sb3.md): strict, so one that starts passing is reported.
"""

import importlib.util
import os

import pytest

collect_ignore_glob = [] if importlib.util.find_spec("stable_baselines3") else ["test_sb3_*.py"]

_JOINT = ("one categorical per dimension, as PPO, but the defaults divide each step's pair of returns-to-go by their "
          "std, and where neither member was rewarded a far-off discounted reward becomes a full-sized advantage: "
          "the joint (16-way) identity is not learned in the test's 1200 steps (docs/guides/sb3.md)")
GRPO_FAILS = {
    "test_sb3_identity.py::test_discrete[env1-GRPO]": _JOINT,
    "test_sb3_identity.py::test_discrete[env2-GRPO]": _JOINT,
}


def pytest_collection_modifyitems(items: list) -> None:
    if os.environ.get("SB3_SUITE_ALGO", "grpo") != "grpo":
        return
    for item in items:
        reason = GRPO_FAILS.get(item.nodeid.rpartition("/")[2])
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
