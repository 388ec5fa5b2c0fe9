"""heron's tensor Pendulum (heron.envs.torch_pendulum): Gymnasium's Pendulum-v1 dynamics, reward and
episode length, batched in torch, in each of Gymnasium's autoreset modes, and resumable exactly."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

import heron.envs.ids  # noqa: F401  (registers heron/TorchPendulum-v1)
from heron.envs.torch_pendulum import TorchPendulum


def test_it_steps_as_gymnasiums_pendulum():
    rng = np.random.default_rng(0)
    n = 8
    env = TorchPendulum(n, dtype=torch.float64)
    env.reset(seed=0)
    singles = [gym.make("Pendulum-v1").unwrapped for _ in range(n)]
    start = np.stack([rng.uniform(-np.pi, np.pi, n), rng.uniform(-1, 1, n)])
    env.theta, env.theta_dot = torch.tensor(start[0]), torch.tensor(start[1])
    for i, single in enumerate(singles):
        single.reset(seed=i)
        single.state = start[:, i].copy()
    for _ in range(150):  # past the velocity clip and the angle's wrap-around
        actions = rng.uniform(-2.5, 2.5, (n, 1)).astype(np.float32)  # beyond the torque limit: clipped
        obs, reward, terminated, truncated, _ = env.step(torch.from_numpy(actions))
        for i, single in enumerate(singles):
            o, r, term, trunc, _ = single.step(actions[i])
            np.testing.assert_allclose(obs[i].numpy(), o, rtol=1e-5, atol=1e-5)
            assert reward[i].item() == pytest.approx(r, rel=1e-5, abs=1e-5)
            assert not terminated[i] and not truncated[i]
    assert obs.dtype == torch.float32 and reward.dtype == torch.float32
    assert env.observation_space.shape == (n, 3) and env.action_space.shape == (n, 1)


def test_make_vec_builds_it_from_its_id():
    env = gym.make_vec("heron/TorchPendulum-v1", num_envs=16, vectorization_mode="vector_entry_point")
    obs, _ = env.reset(seed=3)
    assert isinstance(env, TorchPendulum) and obs.shape == (16, 3) and isinstance(obs, torch.Tensor)
    assert env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert torch.equal(obs, TorchPendulum(16).reset(seed=3)[0])  # the seed alone fixes the starts


def _three_steps(mode):
    env = TorchPendulum(2, max_episode_steps=3, autoreset_mode=mode)
    env.reset(seed=0)
    out = [env.step(torch.zeros(2, 1)) for _ in range(3)]
    return env, out


def test_next_step_mode_resets_at_the_step_after_the_last():
    env, out = _three_steps(AutoresetMode.NEXT_STEP)
    last_obs, _, _, truncated, _ = out[-1]
    assert truncated.all()
    obs, reward, terminated, truncated, _ = env.step(torch.full((2, 1), 2.0))  # the action is ignored
    assert (reward == 0).all() and not terminated.any() and not truncated.any()
    assert not torch.equal(obs, last_obs) and (obs[:, 2].abs() <= 1).all()  # a fresh start
    assert (env.steps == 0).all()
    _, _, _, truncated, _ = env.step(torch.zeros(2, 1))
    assert not truncated.any() and (env.steps == 1).all()


def test_same_step_mode_returns_the_reset_observation_and_the_final_one_in_infos():
    expected = TorchPendulum(2, max_episode_steps=100, autoreset_mode=AutoresetMode.SAME_STEP)
    expected.reset(seed=0)
    for _ in range(3):
        final, *_ = expected.step(torch.zeros(2, 1))
    env, out = _three_steps(AutoresetMode.SAME_STEP)
    obs, reward, terminated, truncated, infos = out[-1]
    assert truncated.all() and infos["_final_obs"].all()
    assert torch.equal(infos["final_obs"], final) and not torch.equal(obs, final)
    assert (env.steps == 0).all() and (obs[:, 2].abs() <= 1).all()


def test_disabled_mode_waits_for_a_masked_reset():
    env, out = _three_steps(AutoresetMode.DISABLED)
    assert out[-1][3].all()
    kept = env.theta.clone()
    obs, _ = env.reset(options={"reset_mask": np.array([True, False])})
    assert env.steps.tolist() == [0, 3] and env.theta[1] == kept[1] and env.theta[0] != kept[0]


def test_a_saved_state_continues_exactly():
    env = TorchPendulum(4, max_episode_steps=5)
    env.reset(seed=1)
    for _ in range(7):
        env.step(torch.ones(4, 1))
    state = env.state_dict()
    ahead = [env.step(torch.ones(4, 1))[0] for _ in range(6)]  # through a reset: the generator's draws
    other = TorchPendulum(4, max_episode_steps=5)
    other.reset(seed=99)
    other.load_state_dict(state)
    for obs in ahead:
        assert torch.equal(other.step(torch.ones(4, 1))[0], obs)
