"""--vector-mode native (heron.envs.native): a vector env that steps its sub-envs itself gives the
loops the same transitions as heron's own vector path, in each of Gymnasium's autoreset modes; the
rows that are no transition are never stored or sampled; bad input is one line and exit code 2."""

import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from heron.envs.make import VecEnv
from heron.envs.native import NativeVecEnv
from heron.envs.torch_pendulum import TorchPendulum
from heron.envs.user_vector import autoreset_mode
from heron.errors import HeronError
from heron.rl.buffers import ReplayBuffer

N, LIMIT = 3, 5  # short episodes: every env ends several of them


def _action(env: int, k: int) -> np.ndarray:
    """The k-th action sub-env ``env`` takes, whichever path steps it."""
    return np.array([2.0 * np.sin(7 * env + 1.3 * k)], np.float32)


def _transitions(envs, steps: int) -> list[list[tuple]]:
    """Per sub-env, its transitions as a loop stores them: (obs, action, reward, next_obs,
    terminated, truncated), rows that are no transition left out."""
    obs, taken, out = envs.reset(), np.zeros(N, int), [[] for _ in range(N)]
    for _ in range(steps):
        actions = np.stack([_action(i, taken[i]) for i in range(N)])
        step = envs.step(actions)
        valid = np.ones(N, bool) if step.valid is None else step.valid
        for i in np.flatnonzero(valid):
            out[i].append(
                (
                    obs[i].tolist(),
                    actions[i].tolist(),
                    float(step.rewards[i]),
                    step.next_obs[i].tolist(),
                    bool(step.terminated[i]),
                    bool(step.truncated[i]),
                )
            )
        taken += valid
        obs = step.obs
    return out


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_a_native_vector_env_gives_heron_s_transitions_in_each_autoreset_mode(mode):
    own = VecEnv("Pendulum-v1", N, seed=4, max_episode_steps=LIMIT)
    native = NativeVecEnv(
        "Pendulum-v1",
        N,
        4,
        envs=SyncVectorEnv([lambda: gym.make("Pendulum-v1", max_episode_steps=LIMIT)] * N, autoreset_mode=mode),
    )
    try:
        assert native.mode == mode
        expected, got = _transitions(own, 4 * LIMIT), _transitions(native, 4 * LIMIT + 3)
        for i in range(N):
            n = len(expected[i])
            assert got[i][:n] == expected[i]  # the native path needs a step more per episode in next-step mode
            assert sum(t[5] for t in expected[i]) == 4  # truncations at the limit, bootstrapped from...
            final = [t[3] for t in expected[i] if t[5]]
            starts = [expected[i][k + 1][0] for k, t in enumerate(expected[i][:-1]) if t[5]]
            assert all(f != s for f, s in zip(final, starts))  # ...the episode's final obs, not the next start
    finally:
        own.close()
        native.close()


def test_next_step_mode_marks_the_reset_rows_and_counts_whole_episodes():
    envs = NativeVecEnv("CartPole-v1", 4, 0)  # Gymnasium's own vector CartPole: next-step autoreset, numpy
    assert envs.mode == AutoresetMode.NEXT_STEP
    envs.reset()
    rng = np.random.default_rng(0)
    ended, lengths = np.zeros(4, bool), []
    for _ in range(300):
        step = envs.step(rng.integers(0, 2, 4))
        if ended.any():  # the step after an episode's end is no transition for that env, and only for it
            assert step.valid is not None and (step.valid == ~ended).all()
            assert (step.rewards[ended] == 0).all() and not (step.terminated | step.truncated)[ended].any()
        else:
            assert step.valid is None
        ended = step.terminated | step.truncated
        lengths += [length for _, _, length in step.episodes]
    assert len(lengths) > 10 and all(9 <= n <= 500 for n in lengths)  # whole episodes, reset rows not counted
    envs.close()


def test_a_tensor_vector_env_on_the_cpu_reaches_the_loop_as_numpy():
    envs = NativeVecEnv("heron/TorchPendulum-v1", 8, 0)
    obs = envs.reset()
    step = envs.step(np.zeros((8, 1), np.float32))
    assert isinstance(obs, np.ndarray) and obs.dtype == np.float32 and obs.shape == (8, 3)
    assert isinstance(step.rewards, np.ndarray) and step.rewards.dtype == np.float32
    assert isinstance(envs.envs, TorchPendulum)


def test_rows_that_are_no_transition_are_never_sampled_and_survive_a_checkpoint():
    rb = ReplayBuffer(40, 4, (1,), np.float32, (1,), seed=0)
    for t in range(10):
        valid = np.ones(4, bool)
        valid[t % 4] = t % 3 != 0  # a few rows that are no transition
        rb.add(
            valid,
            obs=np.full((4, 1), t, np.float32),
            next_obs=np.zeros((4, 1), np.float32),
            actions=np.zeros((4, 1), np.float32),
            rewards=np.zeros(4, np.float32),
            terminated=np.zeros(4, bool),
            truncated=np.zeros(4, bool),
        )
    invalid = {(t, t % 4) for t in range(10) if t % 3 == 0}
    rows = rb.indices(4000)
    drawn = {(int(r) // 4, int(r) % 4) for r in rows}
    assert not drawn & invalid and len(drawn) == 40 - len(invalid)
    other = ReplayBuffer(40, 4, (1,), np.float32, (1,), seed=5)
    other.load_state_dict(rb.state_dict())
    assert torch.equal(other.indices(64), rb.indices(64))  # the same rows: the same flags and generator


def test_bad_native_vector_envs_are_refused_in_one_line():
    with pytest.raises(HeronError, match="has no vector entry point"):
        NativeVecEnv("Hopper-v5" if "Hopper-v5" in gym.registry else "MountainCarContinuous-v0", 2, 0)

    class Unreadable:  # a vector env whose metadata names no mode Gymnasium defines
        metadata = {"autoreset_mode": "whenever"}

    with pytest.raises(HeronError, match="declares no autoreset mode heron can read"):
        autoreset_mode(Unreadable())
    with pytest.raises(HeronError, match="has 2 envs, the run asks for 3"):
        NativeVecEnv("heron/TorchPendulum-v1", 3, 0, envs=TorchPendulum(2))
    dict_envs = SyncVectorEnv(
        [
            lambda: gym.wrappers.TransformObservation(
                gym.make("Pendulum-v1"),
                lambda o: {"x": o},
                gym.spaces.Dict({"x": gym.make("Pendulum-v1").observation_space}),
            )
        ]
    )
    with pytest.raises(HeronError, match="takes Box observations"):
        NativeVecEnv("Pendulum-v1", 1, 0, envs=dict_envs)
    dict_envs.close()
    done = subprocess.run(
        [sys.executable, "-m", "heron", "train", "dreamer_v2", "--vector-mode", "native", "--action-repeat", "2"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "heron: error: --vector-mode native trains dreamer_v2 on the env's vector observations as it steps them: "
        "--action-repeat 1 and no --observation pixels (heron's vector envs do those)"
    ]


def test_a_run_on_a_native_vector_env_resumes_with_its_episodes_started_anew(tmp_path):
    # Gymnasium's vector CartPole cannot save its state (heron's tensor Pendulum can: test_determinism)
    args = [
        "train",
        "ppo",
        "--env-id",
        "CartPole-v1",
        "--vector-mode",
        "native",
        "--num-envs",
        "4",
        "--preset",
        "debug",
        "--run-dir",
        str(tmp_path / "run"),
    ]
    crashed = subprocess.run(
        [sys.executable, "-m", "heron", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "HERON_CRASH_AFTER_CHECKPOINT": "1024"},
    )
    assert crashed.returncode == 17, crashed.stderr
    resumed = subprocess.run(
        [sys.executable, "-m", "heron", "train", "--resume", str(tmp_path / "run")], capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("cannot save its state: every env starts a new episode on resume") == 1
    state = torch.load(tmp_path / "run" / "checkpoints" / "step_000002048.pt", weights_only=False)
    assert state["step"] == 2048 and state["envs"]["restarts"] == 1


def test_check_env_says_what_native_mode_reads_of_a_vector_env():
    from heron.checkenv import check

    report = check("heron/TorchPendulum-v1", steps=900)
    vector = [f for f in report.findings if f.what == "vector env (--vector-mode native)"]
    assert len(vector) == 1 and vector[0].ok
    assert vector[0].detail.startswith(
        "NextStep autoreset, torch.Tensor observations on cpu, read as tensors (the "
        "tensor contract holds); 4 episode(s) ended"
    )
    assert not [f for f in check("Pendulum-v1", steps=50).findings if f.what.startswith("vector env")]


class Counter(gym.vector.VectorEnv):
    """Sub-env i counts its steps; its episodes last 3 + i steps (odd envs terminate, even ones are
    truncated) and it resets the step after (next-step autoreset). Observation: (steps so far, i)."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 3, **kwargs):
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(0.0, 10.0, (2,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.t, self.pending = np.zeros(num_envs), np.zeros(num_envs, bool)

    def _obs(self):
        return np.stack([self.t, np.arange(self.num_envs)], 1).astype(np.float32)

    def reset(self, seed=None, options=None):
        self.t[:], self.pending[:] = 0, False
        return self._obs(), {}

    def step(self, actions):
        reset = self.pending
        self.t = np.where(reset, 0, self.t + 1)
        ended = ~reset & (self.t == 3 + np.arange(self.num_envs))
        odd = np.arange(self.num_envs) % 2 == 1
        self.pending = ended
        return self._obs(), (~reset).astype(np.float32), ended & odd, ended & ~odd, {}


class OneCounter(gym.Env):
    """One env of Counter (evaluation)."""

    observation_space = gym.spaces.Box(0.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.t = 0
        return np.array([0, 0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t, 0], np.float32), 1.0, False, self.t == 3, {}


@pytest.fixture
def counter_id():
    gym.register("heron-test/NextStepCounter-v0", entry_point=OneCounter, vector_entry_point=Counter)
    yield "heron-test/NextStepCounter-v0"
    gym.registry.pop("heron-test/NextStepCounter-v0")


@pytest.mark.parametrize("fused", [True, False])
def test_ppo_learns_from_transitions_only_on_a_next_step_vector_env(counter_id, monkeypatch, fused, tmp_path):
    import importlib

    import heron

    ppo_train = importlib.import_module("heron.algos.ppo.train")
    drawn, build_step = [], ppo_train.build_step

    def watched(*args, **kwargs):
        update = build_step(*args, **kwargs)

        def step(mb):
            drawn.append(mb["obs"].reshape(-1, 2).clone())
            return update(mb)

        return step

    monkeypatch.setattr(ppo_train, "build_step", watched)
    heron.train(
        "ppo",
        env_id=counter_id,
        vector_mode="native",
        num_envs=3,
        num_steps=20,
        num_minibatches=4,
        update_epochs=2,
        total_steps=120,
        eval_every=0,
        eval_episodes=1,
        fused_update=fused,
        run_dir=str(tmp_path / "run"),
    )
    obs = torch.cat(drawn)
    steps, env = obs[:, 0], obs[:, 1]
    # 2 rollouts x 2 epochs; each rollout has 60 rows, of which 60 // (4 + i) per env i are reset rows
    reset_rows = sum(20 // (4 + i) for i in range(3))
    assert len(drawn) == 2 * 2 * 4 and len(obs) == 2 * 2 * 4 * ((60 - reset_rows) // 4)
    assert (steps < 3 + env).all()  # never the row that acts on an episode's final observation
    assert len({tuple(o.tolist()) for o in obs}) == 3 + 4 + 5  # every transition's observation is drawn


def test_envpool_ids_step_envpool_reseeded_by_the_run_and_read_in_next_step_mode():
    from heron.envs.atari import envpool_available
    from heron.envs.ids import check_env_id

    if not envpool_available():
        pytest.skip("envpool is not installed (pip install -e '.[envpool]')")
    from heron.envs.envpool import EnvPoolVector

    pool = EnvPoolVector("Pendulum-v1", 3, seed=1)
    first, again, other = (pool.reset(seed=s)[0].copy() for s in (3, 3, 4))
    np.testing.assert_array_equal(first, again)  # a reset's seed decides the episodes (EnvPool ignores it)
    assert not np.allclose(first, other)
    pool.close()
    check_env_id("envpool/Pendulum-v1")
    try:
        envs = NativeVecEnv("envpool/Pendulum-v1", 3, 0)
        assert envs.mode == AutoresetMode.NEXT_STEP
        envs.reset()
        for t in range(201):
            step = envs.step(np.zeros((3, 1), np.float32))
            if t == 199:  # Gymnasium's Pendulum episode length, truncated
                assert step.truncated.all() and len(step.episodes) == 3 and step.episodes[0][2] == 200
            if t == 200:  # EnvPool's reset step: no transition
                assert step.valid is not None and not step.valid.any()
        envs.close()
        with pytest.raises(HeronError, match="EnvPool has no task 'Nope-v1'"):
            check_env_id("envpool/Nope-v1")
        done = subprocess.run(
            [sys.executable, "-m", "heron", "train", "sac", "--env-id", "envpool/Pendulum-v1"],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 2 and done.stderr.strip().splitlines() == [
            "heron: error: envpool/Pendulum-v1 is EnvPool's vector env: train on it with --vector-mode native"
        ]
    finally:
        gym.registry.pop("envpool/Pendulum-v1", None)


def test_dreamer_v2_stores_whole_episodes_of_a_next_step_vector_env(counter_id, monkeypatch, tmp_path):
    import heron
    from heron.rl.buffers import EpisodeBuffer

    stored, store = [], EpisodeBuffer.store_episode

    def watched(self, episode):
        stored.append({k: v.copy() for k, v in episode.items()})
        return store(self, episode)

    monkeypatch.setattr(EpisodeBuffer, "store_episode", watched)
    heron.train(
        "dreamer_v2",
        env_id=counter_id,
        vector_mode="native",
        num_envs=3,
        presets=["debug"],
        total_steps=90,
        learning_starts=30,
        buffer_type="sequential",
        sequence_length=4,
        run_dir=str(tmp_path / "run"),
    )
    by_env = {}
    for episode in stored:
        steps, env = episode["state"][:, 0], int(episode["state"][0, 1])
        by_env.setdefault(env, []).append(episode)
        # the reset observation, then every step of the episode once: no reset row among them
        np.testing.assert_array_equal(steps, np.arange(4 + env))
        assert episode["is_first"].tolist() == [True] + [False] * (3 + env)
        assert episode["is_terminal"][-1] == (env % 2 == 1) and not episode["is_terminal"][:-1].any()
    assert sorted(by_env) == [0, 1, 2] and all(len(v) >= 3 for v in by_env.values())
