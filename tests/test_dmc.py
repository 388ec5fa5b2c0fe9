"""DeepMind Control Suite ids (heron.envs.dmc): registry, spaces, seeding, episode ends, pixels."""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("dm_control")

import dm_env  # a dm_control dependency

from heron.envs import dmc
from heron.errors import HeronError


@pytest.mark.parametrize(
    "env_id, obs_size, act_size",
    [
        ("dmc_cartpole_swingup", 5, 1),
        ("dmc_ball_in_cup_catch", 8, 2),  # the domain name has underscores
    ],
)
def test_registry_round_trip(env_id, obs_size, act_size):
    assert dmc.is_dmc(env_id) and not dmc.is_dmc("Hopper-v5")
    dmc.register(env_id)
    dmc.register(env_id)  # idempotent
    spec = gym.spec(env_id)
    assert spec.max_episode_steps == 1000
    domain = env_id[len("dmc_") :].rsplit("_", 1)[0]
    assert spec.kwargs["domain"] == domain
    env = gym.make(env_id)
    try:
        assert env.observation_space.shape == (obs_size,)
        assert env.observation_space.dtype == np.float32
        assert env.action_space.shape == (act_size,) and env.action_space.dtype == np.float32
        assert np.all(env.action_space.low == -1) and np.all(env.action_space.high == 1)
        assert env.unwrapped.metadata["render_fps"] > 0
        obs, _ = env.reset(seed=0)
        assert obs.dtype == np.float32 and env.observation_space.contains(obs)
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        assert obs.dtype == np.float32 and obs.shape == (obs_size,)
        assert isinstance(reward, float) and terminated is False and truncated is False
    finally:
        env.close()


def test_seeded_reset_is_deterministic():
    dmc.register("dmc_cartpole_swingup")
    a, b = gym.make("dmc_cartpole_swingup"), gym.make("dmc_cartpole_swingup")
    try:
        first, _ = a.reset(seed=7)
        assert np.array_equal(a.reset(seed=7)[0], first)  # same env, same seed
        assert np.array_equal(b.reset(seed=7)[0], first)  # another env, same seed
        assert not np.array_equal(a.reset(seed=8)[0], first)
        assert not np.array_equal(a.reset()[0], a.reset()[0])  # unseeded resets move on
        a.reset(seed=3), b.reset(seed=3)
        action = np.full(1, 0.5, np.float32)
        for _ in range(5):
            assert np.array_equal(a.step(action)[0], b.step(action)[0])
    finally:
        a.close(), b.close()


def test_random_episode_is_truncated_at_1000_steps():
    dmc.register("dmc_cartpole_swingup")
    env = gym.make("dmc_cartpole_swingup")
    env.action_space.seed(0)
    try:
        env.reset(seed=0)
        for t in range(1, 1001):  # noqa: B007 (read after the loop)
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            assert not terminated
            if truncated:
                break
        assert truncated and t == 1000
    finally:
        env.close()


def test_only_discount_zero_terminates():
    env = dmc.DMCEnv("cartpole", "swingup")
    try:
        env.reset(seed=0)
        obs = {k: np.zeros(v.shape) for k, v in env._env.observation_spec().items()}
        for discount, expected in [(0.0, True), (1.0, False)]:
            env._env.step = lambda action, d=discount: dm_env.TimeStep(dm_env.StepType.LAST, 1.0, d, obs)
            _, reward, terminated, truncated, _ = env.step(np.zeros(1, np.float32))
            assert (terminated, truncated, reward) == (expected, False, 1.0)
    finally:
        env.close()


@pytest.mark.parametrize(
    "env_id, suggestion",
    [
        ("dmc_cartpole_swingupp", "dmc_cartpole_swingup"),
        ("dmc_ballincup_catch", "dmc_ball_in_cup_catch"),
        ("dmc_walker_wlk", "dmc_walker_walk"),
    ],
)
def test_unknown_id_suggests(env_id, suggestion):
    with pytest.raises(HeronError, match=f"did you mean {suggestion}") as err:
        dmc.register(env_id)
    assert "\n" not in str(err.value)
    assert env_id not in gym.registry


def test_missing_dm_control_says_how_to_install(monkeypatch):
    monkeypatch.setattr(dmc.importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(HeronError, match=r"need dm_control: pip install -e '\.\[dmc\]' in heron's checkout"):
        dmc.register("dmc_walker_walk_never_registered")


def test_pixels():
    dmc.register("dmc_cartpole_swingup")
    try:
        env = gym.make("dmc_cartpole_swingup", from_pixels=True, render_mode="rgb_array")
    except HeronError as exc:
        pytest.skip(f"rendering unavailable here: {exc}")
    try:
        assert env.observation_space.shape == (3, 64, 64)
        assert env.observation_space.dtype == np.uint8
        obs, _ = env.reset(seed=0)
        assert obs.shape == (3, 64, 64) and obs.dtype == np.uint8 and obs.any()
        assert np.array_equal(env.reset(seed=0)[0], obs)
        obs, *_ = env.step(env.action_space.sample())
        assert obs.shape == (3, 64, 64) and obs.dtype == np.uint8 and obs.any()
        frame = env.render()
        assert frame.shape == (480, 480, 3) and frame.dtype == np.uint8 and frame.any()
    finally:
        env.close()


def test_frame_skip_sums_rewards_and_dreamer_caps_episodes_in_agent_steps():
    from heron.envs.dreamer import make

    one, two = dmc.DMCEnv("cartpole", "swingup"), dmc.DMCEnv("cartpole", "swingup", frame_skip=2)
    try:
        one.reset(seed=3)
        two.reset(seed=3)
        actions = np.linspace(-1, 1, 10, dtype=np.float32).reshape(10, 1, 1)
        for a in actions:
            obs2, r2, *_ = two.step(a[:, 0])
            r1 = one.step(a[:, 0])[1]
            obs1, r, *_ = one.step(a[:, 0])  # the same action again
            np.testing.assert_allclose(r2, r1 + r, rtol=1e-6)
            np.testing.assert_array_equal(obs2, obs1)
    finally:
        one.close()
        two.close()
    # dm_control's own limit (1000 frames) in agent steps, or --max-episode-steps (agent steps) if
    # that comes first; a larger cap never lifts the env's own limit
    for repeat, cap, steps in ((2, 0, 500), (3, 0, 334), (2, 300, 300), (2, 800, 500)):
        env = make("dmc_cartpole_swingup", action_repeat=repeat, observation="state", max_episode_steps=cap)
        env.reset(seed=0)
        n, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            n, done = n + 1, terminated or truncated
        env.close()
        assert n == steps and truncated


def test_triton_loads_after_pixels_were_rendered():
    """CUDA builds of torch bring triton, which torch imports in every run (torch.optim imports
    torch._dynamo); triton 3.8.0 (torch 2.14.1) segfaulted on import once Mesa's EGL had rendered.
    heron imports it before dm_control loads its OpenGL."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("triton") is None:
        pytest.skip("no triton here (a CPU build of torch)")
    code = (
        "import gymnasium as gym; from heron.envs import dmc; dmc.register('dmc_cartpole_swingup'); "
        "env = gym.make('dmc_cartpole_swingup', from_pixels=True); obs, _ = env.reset(seed=0); "
        "assert obs.shape[-1] == 3 or obs.shape[0] == 3, obs.shape; import triton; print('loaded')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "loaded" in proc.stdout, (proc.returncode, proc.stderr[-2000:])
