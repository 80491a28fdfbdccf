"""benchmarks/mountaincar_regret.py: its physics is MountainCar-v0's, its optimum is optimal on its
grid, and its regret counts the steps a policy gives away."""

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import mountaincar_regret as mr  # noqa: E402


@pytest.fixture(scope="module")
def coarse():
    grid = mr.Grid(181, 141)
    return grid, mr.optimal_steps_to_go(grid)


def test_step_is_gymnasiums_physics():
    env = gym.make("MountainCar-v0").unwrapped
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    for _ in range(300):  # long enough to hit the left wall and the flag on some resets
        if rng.random() < 0.02:
            env.reset(seed=int(rng.integers(1000)))
        x, v = (np.array([s]) for s in env.state)
        a = int(rng.integers(3))
        env.step(a)
        x2, v2 = mr.step(x, v, np.array([a]))
        # the same float64 arithmetic, but numpy's cos may differ from math.cos in the last bit
        assert np.allclose([x2[0], v2[0]], env.state, rtol=1e-12, atol=1e-15)


def test_value_iteration_satisfies_bellman_on_its_grid(coarse):
    grid, J = coarse
    # the car at the flag's edge with speed to spare needs one step; at rest at the bottom, dozens
    assert J[grid.cell(np.array([0.49]), np.array([0.05]))][0] == 1
    assert J[grid.cell(np.array([-0.52]), np.array([0.0]))][0] > 50
    X, V = np.meshgrid(grid.xs, grid.vs, indexing="ij")
    q = mr.action_values(J, grid, X.ravel(), V.ravel())
    assert np.array_equal(q.min(axis=1), J)  # J(s) = min_a Q(s, a) at every cell


def test_regret_is_zero_for_the_optimum_and_counts_a_worse_policy(coarse):
    grid, J = coarse
    starts = np.array([-0.58, -0.52, -0.45, -0.41])
    best = mr.regret_profile(mr.grid_actor(J, grid), J, grid, starts)
    assert best["regret"] == 0 and all(r == 0 for r in best["regret_by_kind"].values())
    # pushing with the velocity (right from a standstill) reaches the flag, but not by the fastest way
    with_v = mr.regret_profile(lambda obs: np.where(obs[:, 1] < 0, 0, 2), J, grid, starts)
    assert with_v["return"] > -200 and with_v["regret"] > 0
    assert with_v["regret"] == pytest.approx(sum(with_v["regret_by_steps"].values()))
    assert with_v["regret"] == pytest.approx(sum(with_v["regret_by_kind"].values()))
    # it never pushes against the velocity, so none of its regret is of that kind
    assert with_v["regret_by_kind"]["against the velocity where the optimum pushes with it"] == 0
