"""Env ids whose package registers them on request: registered on first use, by their namespace."""

from __future__ import annotations

import sys
import types

import gymnasium as gym
import pytest

from grpo_seq.errors import UsageError
from grpo_seq.sampling import env_packages
from grpo_seq.sampling.env import env_spec, make_env


def test_an_id_of_a_known_namespace_is_registered_by_its_package(monkeypatch):
    calls = []
    package = types.ModuleType("fake_env_package")

    def register_envs():
        calls.append(1)
        gym.register("Fake/Reach-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv", max_episode_steps=7)

    package.register_envs = register_envs
    monkeypatch.setitem(sys.modules, "fake_env_package", package)
    monkeypatch.setitem(env_packages.NAMESPACES, "Fake", ("fake_env_package", "register_envs"))
    try:
        assert env_spec("Fake/Reach-v0").max_episode_steps == 7 and calls == [1]
        make_env("Fake/Reach-v0").close()
        assert calls == [1]  # registered once: the id is known from then on
    finally:
        gym.registry.pop("Fake/Reach-v0", None)


def test_a_namespace_whose_package_is_missing_stays_one_error_naming_the_id(monkeypatch):
    monkeypatch.setitem(env_packages.NAMESPACES, "Absent", ("no_such_env_package_here", "register_envs"))
    with pytest.raises(UsageError, match="--env_id Absent/Game-v0: gymnasium cannot make it"):
        make_env("Absent/Game-v0")


def test_is_registered_registers_a_packages_ids_first_and_says_no_to_an_unknown_id():
    from grpo_seq.sampling.env import is_registered

    assert is_registered("CartPole-v1") and not is_registered("NoSuchEnv-v0")
    pytest.importorskip("minatar")
    assert is_registered("MinAtar/Breakout-v1")  # known to gymnasium only once minatar has registered it


def test_a_module_prefixed_id_imports_the_module_that_registers_it(tmp_path, monkeypatch):
    # gym.make reads "module:Id-v0" so; gym.spec does not, and a job reads the spec first
    (tmp_path / "my_envs_module.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('MyReach-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv', max_episode_steps=9)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_envs_module", raising=False)
    try:
        assert env_spec("my_envs_module:MyReach-v0").max_episode_steps == 9
        make_env("my_envs_module:MyReach-v0").close()
    finally:
        gym.registry.pop("MyReach-v0", None)
        sys.modules.pop("my_envs_module", None)
    with pytest.raises(UsageError, match="--env_id no_such_module_here:X-v0: cannot import no_such_module_here"):
        env_spec("no_such_module_here:X-v0")
