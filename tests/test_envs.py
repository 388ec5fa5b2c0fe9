import subprocess
import sys

import numpy as np
import pytest
import toy_envs  # noqa: F401  (registers heron-test/ ids)

from heron.envs.ids import check_env_id
from heron.envs.make import VecEnv, make_env
from heron.errors import HeronError


def test_step_layout_final_obs_on_termination():
    envs = VecEnv("heron-test/Counter-v0", num_envs=2, seed=0)
    obs = envs.reset()
    assert obs.tolist() == [[0.0], [0.0]] and obs.dtype == np.float32
    for t in (1, 2):
        step = envs.step(np.zeros((2, 1), np.float32))
        assert step.next_obs.tolist() == [[t], [t]] and not step.terminated.any()
    step = envs.step(np.zeros((2, 1), np.float32))
    assert step.next_obs.tolist() == [[3.0], [3.0]]  # the true final observation
    assert step.obs.tolist() == [[0.0], [0.0]]  # already the next episode's first observation
    assert step.terminated.all() and not step.truncated.any()
    assert [(e, r, n) for e, r, n in step.episodes] == [(0, 6.0, 3), (1, 6.0, 3)]


def test_truncation_is_reported_separately_from_termination():
    envs = VecEnv("Pendulum-v1", num_envs=1, seed=0, max_episode_steps=5)
    envs.reset()
    for _ in range(4):
        assert not envs.step(np.zeros((1, 1), np.float32)).truncated.any()
    step = envs.step(np.zeros((1, 1), np.float32))
    assert step.truncated.all() and not step.terminated.any()
    assert not np.allclose(step.obs, step.next_obs)  # final obs kept apart from the reset obs


def test_float64_observations_become_float32():
    pytest.importorskip("mujoco")
    envs = VecEnv("Hopper-v5", num_envs=1, seed=0)
    assert envs.reset().dtype == np.float32


MUJOCO_UNSTABLE = """
import sys
import gymnasium as gym
from heron.envs.ids import callable_env_id
from heron.envs.make import make_env
env_id = "Hopper-v5"
if sys.argv[1] == "factory":  # a user's factory, whose constructor would load MuJoCo: routed before it
    from heron.envs.ids import gym_env_id
    from heron.envs.make import route_mujoco_warnings
    env_id = callable_env_id(lambda: gym.make("Hopper-v5"))
    assert "mujoco" not in sys.modules
    route_mujoco_warnings(gym_env_id(env_id))
    assert sys.modules["mujoco"].get_mju_user_warning() is not None
import mujoco, numpy as np
if sys.argv[1] == "own":
    mujoco.set_mju_user_warning(lambda text: print("own:", text, file=sys.stderr))
for _ in range(3):
    env = make_env(env_id)
    env.reset(seed=0)
    u = env.unwrapped
    u.data.qvel[:] = np.nan  # MuJoCo warns once per MjData: the simulation is unstable
    mujoco.mj_step(u.model, u.data)
if sys.argv[1] == "heron":  # a process started after the warning (an env or evaluation worker) is told
    import subprocess
    subprocess.run([sys.executable, "-c", MUJOCO_UNSTABLE, "child"], check=True)
"""


def test_mujoco_warnings_come_once_and_leave_no_log_file(tmp_path):
    """MuJoCo prints each warning and appends it to MUJOCO_LOG.TXT in the current directory; heron
    shows each kind once (the time and DOF in it do not make a new kind), also across the processes
    a run starts after it, writes no file, and leaves a handler of the user's own alone."""
    pytest.importorskip("mujoco")

    def run(which):
        script = f"MUJOCO_UNSTABLE = {MUJOCO_UNSTABLE!r}\n{MUJOCO_UNSTABLE}"
        out = subprocess.run(
            [sys.executable, "-c", script, which], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        return [line for line in out.stderr.splitlines() if "unstable" in line]

    for which in ("heron", "factory"):
        lines = run(which)
        assert len(lines) == 1 and lines[0].startswith("heron: warning: MuJoCo: Nan, Inf or huge value in QVEL"), lines
        assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
    assert [line.split(":")[0] for line in run("own")] == ["own"] * 3  # the user's handler sees each


def test_dict_observations_are_flattened():
    envs = VecEnv("heron-test/DictObs-v0", num_envs=2, seed=0)
    assert envs.reset().shape == (2, 3)
    assert envs.single_observation_space.shape == (3,)


def test_unknown_env_suggests_close_matches():
    with pytest.raises(HeronError, match="did you mean Pendulum-v1"):
        check_env_id("Pendulm-v1")
    with pytest.raises(HeronError, match="unknown environment id"):
        check_env_id("NoSuchThing-v9")


def test_resume_state_replays_a_fresh_reset_exactly():
    """A checkpoint taken right after an episode ended restores an env that continues exactly."""
    a = VecEnv("Pendulum-v1", num_envs=2, seed=3, max_episode_steps=4)
    a.reset()
    rng = np.random.default_rng(0)
    for _ in range(4):
        a.step(rng.uniform(-2, 2, (2, 1)).astype(np.float32))
    state, obs_at_checkpoint = a.state_dict(), a.obs.copy()
    assert state["fresh"] == [True, True]
    b = VecEnv("Pendulum-v1", num_envs=2, seed=3, max_episode_steps=4)
    b.reset()
    assert np.array_equal(b.load_state_dict(state), obs_at_checkpoint)
    for _ in range(9):
        act = rng.uniform(-2, 2, (2, 1)).astype(np.float32)
        sa, sb = a.step(act), b.step(act)
        assert np.array_equal(sa.next_obs, sb.next_obs) and np.array_equal(sa.obs, sb.obs)


def test_async_envs_match_sync():
    a = VecEnv("Pendulum-v1", num_envs=2, seed=1, mode="sync")
    b = VecEnv("Pendulum-v1", num_envs=2, seed=1, mode="async")
    try:
        assert np.array_equal(a.reset(), b.reset())
        act = np.ones((2, 1), np.float32)
        assert np.array_equal(a.step(act).next_obs, b.step(act).next_obs)
    finally:
        b.close()


def test_make_env_flattens_dict_and_keeps_time_limit():
    env = make_env("heron-test/DictObs-v0")
    assert env.observation_space.shape == (3,)
    assert env.spec.max_episode_steps == 20


@pytest.mark.parametrize("env_id,obs_dim,act_dim", [("HopperBulletEnv-v0", 15, 3), ("AntBulletEnv-v0", 28, 8)])
def test_pybullet_ids_through_the_adapter(env_id, obs_dim, act_dim):
    pytest.importorskip("pybullet")
    path, gym_before = list(sys.path), "gym" in sys.modules
    a, b = VecEnv(env_id, num_envs=1, seed=4), VecEnv(env_id, num_envs=1, seed=4)
    obs = a.reset()
    assert obs.shape == (1, obs_dim) and a.single_action_space.shape == (act_dim,)
    assert np.array_equal(obs, b.reset())  # seeded resets are reproducible
    act = np.full((1, act_dim), 0.3, np.float32)
    sa, sb = a.step(act), b.step(act)
    assert np.array_equal(sa.next_obs, sb.next_obs) and np.isfinite(sa.rewards).all()
    a.close(), b.close()
    # pybullet_envs' old-Gym stand-in and the folders it puts on sys.path went with its import
    assert sys.path == path and ("gym" in sys.modules) == gym_before


class _ZeroPolicy:
    def __init__(self, dim):
        self.dim = dim

    def reset(self):
        pass

    def predict(self, obs, deterministic=True):
        return np.zeros(self.dim, np.float32)


def test_mujoco_video_renders_headless(tmp_path):
    pytest.importorskip("mujoco")
    from heron.runtime.episodes import evaluate

    video = tmp_path / "hopper.mp4"
    returns = evaluate(_ZeroPolicy(3), "Hopper-v5", 1, seed=0, video_path=str(video), max_episode_steps=50)
    assert len(returns) == 1 and video.stat().st_size > 1000


def test_velocity_masked_pomdp_ids():
    envs = VecEnv("heron/Pendulum-NoVel-v1", num_envs=1, seed=0)
    full = VecEnv("Pendulum-v1", num_envs=1, seed=0)
    assert envs.single_observation_space.shape == (2,)
    np.testing.assert_array_equal(envs.reset()[0], full.reset()[0][:2])
    act = np.ones((1, 1), np.float32)
    np.testing.assert_array_equal(envs.step(act).next_obs[0], full.step(act).next_obs[0][:2])
    cart = make_env("heron/CartPole-NoVel-v1")
    assert cart.observation_space.shape == (2,) and cart.spec.max_episode_steps == 500


def test_atari_standard_wrappers():
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    from heron.envs import atari
    from heron.envs.make import VecEnv, make_env

    train_env = make_env("BreakoutNoFrameskip-v4", training=True)
    names = []
    e = train_env
    while hasattr(e, "env"):
        names.append(type(e).__name__)
        e = e.env
    assert names[:4] == ["FrameStackObservation", "ClipReward", "FireReset", "EpisodicLife"]
    assert "GameStats" in names and "AtariPreprocessing" in names
    eval_names = []
    e = make_env("ALE/Breakout-v5")
    assert e.unwrapped._frameskip == 1  # v5's own frame skip is off: ours (4, max-pooled) is the only one
    while hasattr(e, "env"):
        eval_names.append(type(e).__name__)
        e = e.env
    assert "EpisodicLife" not in eval_names and "ClipReward" not in eval_names and "FireReset" in eval_names
    obs, _ = train_env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    # a life lost ends the learning episode; the reset that follows continues the same game
    rng = np.random.default_rng(0)
    lives_seen, rewards = [], set()
    for _ in range(3000):
        obs, r, term, trunc, info = train_env.step(int(rng.integers(4)))
        rewards.add(r)
        if term or trunc:
            lives = train_env.unwrapped.ale.lives()
            lives_seen.append(lives)
            if lives == 0:
                assert "game_return" in info
                break
            train_env.reset()
            assert train_env.unwrapped.ale.lives() == lives  # not a new game
    assert lives_seen[:4] == [4, 3, 2, 1] and rewards <= {-1.0, 0.0, 1.0}
    assert atari.is_atari("PongNoFrameskip-v4") and atari.is_atari("ALE/Pong-v5") and not atari.is_atari("Pong-v4")
    # the vector env logs whole games (raw scores), not lives
    v = VecEnv("BreakoutNoFrameskip-v4", 1, 0)
    v.reset()
    episodes = []
    for _ in range(3000):
        episodes += v.step(rng.integers(4, size=1)).episodes
    v.close()
    assert episodes and all(length > 100 for _, _, length in episodes)  # 5 lives of random play each


@pytest.mark.parametrize("env_id,num_envs", [("CartPole-v1", 4), ("Pendulum-v1", 2), ("Hopper-v5", 1)])
def test_serial_envs_give_gymnasium_sync_vector_env_transitions(env_id, num_envs):
    """heron's SerialEnvs (the sync backend) against Gymnasium's SyncVectorEnv (autoreset disabled)
    driven by the same VecEnv code: the same observations, rewards, terminations, truncations and
    episodes over several episodes each, and the same RNG states (what resume saves)."""
    import gymnasium as gym

    from heron.envs import make as heron_envs

    ours = VecEnv(env_id, num_envs=num_envs, seed=3, max_episode_steps=60)
    theirs = VecEnv(env_id, num_envs=num_envs, seed=3, max_episode_steps=60)
    assert isinstance(ours.envs, heron_envs.SerialEnvs)
    theirs.envs.close()
    theirs.envs = gym.vector.SyncVectorEnv(
        [lambda: make_env(env_id, max_episode_steps=60, training=True) for _ in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.DISABLED,
    )
    np.testing.assert_array_equal(ours.reset(), theirs.reset())
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(150):
        actions = np.stack([ours.single_action_space.sample() for _ in range(num_envs)])
        if rng.random() < 0.05 and isinstance(ours.single_action_space, gym.spaces.Box):
            actions = actions * 0  # (some repeated actions too)
        a, b = ours.step(actions), theirs.step(actions)
        for field in ("obs", "next_obs", "rewards", "terminated", "truncated"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
            assert getattr(a, field).dtype == getattr(b, field).dtype
        assert a.episodes == b.episodes
        ended += len(a.episodes)
    assert ended >= num_envs  # resets were exercised
    assert str(ours.state_dict()) == str(theirs.state_dict())


class _FakePool:
    """EnvPool's Atari interface as EnvPoolVecEnv uses it: env i's frame is filled with 10*i + its
    step count; env 1 loses a life on its 2nd step (terminated, the game goes on) and its game ends on
    its 3rd after the reset; resets are steps given ``env_id``, which return the new first frame."""

    def __init__(self, num_envs):
        self.n, self.t = num_envs, np.zeros(num_envs, np.int64)
        self.reset_calls = []
        self.observation_space = self.action_space = None

    def _frames(self, ids):
        return np.stack([np.full((4, 2, 2), 10 * i + self.t[i], np.uint8) for i in ids])

    def reset(self):
        self.t[:] = 0
        return self._frames(range(self.n)), {}

    def step(self, actions, env_id=None):
        if env_id is not None:  # the finished envs' reset
            self.reset_calls.append(list(env_id))
            self.t[env_id] = 0
            zeros = np.zeros(len(env_id))
            return self._frames(env_id), zeros, zeros.astype(bool), zeros.astype(bool), {"env_id": np.asarray(env_id)}
        self.t += 1
        ids = np.arange(self.n)
        life_lost = (ids == 1) & (self.t == 2) & (len(self.reset_calls) == 0)
        game_over = (ids == 1) & (self.t == 3) & (len(self.reset_calls) > 0)
        info = {"env_id": ids, "reward": np.full(self.n, 2.5), "terminated": game_over}
        return self._frames(ids), np.ones(self.n), life_lost | game_over, np.zeros(self.n, bool), info

    def close(self):
        pass


def test_envpool_backend_resets_finished_envs_and_reports_whole_games(monkeypatch):
    """EnvPoolVecEnv against a fake pool (EnvPool itself is not installed in CI): a finished env
    (a lost life) is reset at once through ``step(..., env_id=...)``, ``obs`` is then its new first
    frame and ``next_obs`` its final one; games are reported whole with their raw rewards."""
    import sys
    import types

    from heron.envs.atari import EnvPoolVecEnv

    pools = []
    fake = types.SimpleNamespace(make=lambda game, seed, **kw: pools.append(_FakePool(kw["num_envs"])) or pools[-1])
    monkeypatch.setitem(sys.modules, "envpool", fake)
    envs = EnvPoolVecEnv("ALE/Breakout-v5", num_envs=2, seed=0)
    assert envs.reset()[:, 0, 0, 0].tolist() == [0, 10]
    step = envs.step(np.zeros(2, np.int64))
    assert not step.terminated.any() and step.episodes == []
    step = envs.step(np.zeros(2, np.int64))  # env 1 loses a life
    assert step.terminated.tolist() == [False, True] and pools[0].reset_calls == [[1]]
    assert step.next_obs[:, 0, 0, 0].tolist() == [2, 12] and step.obs[:, 0, 0, 0].tolist() == [2, 10]
    assert step.episodes == []  # the game goes on
    for _ in range(3):
        step = envs.step(np.zeros(2, np.int64))
    assert step.terminated.tolist() == [False, True] and step.episodes == [(1, 12.5, 5)]  # 5 steps x 2.5


def _ale_vector():
    pytest.importorskip("cv2")
    return pytest.importorskip("ale_py.vector_env", reason="ALE's vector env needs ale-py 0.11 or later")


def test_ale_vector_frames_equal_the_gymnasium_stack():
    """ALE's vector env (``AleVecEnv``) against Gymnasium's AtariPreprocessing and frame stack, from
    the same emulator state (no no-ops, no fire reset) and the same actions: the same frames, stack
    padding included, up to the first lost life. That life ends the learning episode while the
    game goes on, and the new episode's stack starts as copies of its first frame."""
    _ale_vector()
    import gymnasium as gym

    from heron.envs.atari import AleVecEnv

    ours = AleVecEnv("BreakoutNoFrameskip-v4", 1, seed=5, noop_max=0, fire_reset=False)
    theirs = gym.wrappers.FrameStackObservation(
        gym.wrappers.AtariPreprocessing(
            gym.make("BreakoutNoFrameskip-v4"),
            noop_max=0,
            frame_skip=4,
            screen_size=84,
            terminal_on_life_loss=False,
            grayscale_obs=True,
            scale_obs=False,
        ),
        4,
    )
    obs, (expected, _) = ours.reset(), theirs.reset(seed=5)
    np.testing.assert_array_equal(obs[0], expected)
    rng = np.random.default_rng(1)
    for t in range(1000):
        action = int(rng.integers(0, 4))
        step = ours.step(np.array([action]))
        expected, reward, *_ = theirs.step(action)
        np.testing.assert_array_equal(step.next_obs[0], expected, err_msg=f"step {t}")
        assert step.rewards[0] == np.sign(reward)
        if step.terminated[0]:
            break
    assert t > 20 and step.episodes == [] and ours.lives[0] == 4  # a lost life, not the game
    assert all((step.obs[0, k] == step.obs[0, 3]).all() for k in range(3))
    np.testing.assert_array_equal(step.obs[0, 3], step.next_obs[0, 3])
    ours.close()


def test_ale_vector_reports_whole_games_with_raw_scores():
    """``AleVecEnv`` against ALE's vector env run bare with the same seed and actions: rewards
    clipped to their sign, a lost life terminates the learning episode, a game over ends a game
    whose raw score and length are reported, and ``next_obs`` is the game's final frame there."""
    vector = _ale_vector()
    from gymnasium.vector import AutoresetMode

    from heron.envs.atari import AleVecEnv

    ours = AleVecEnv("ALE/Breakout-v5", 2, seed=3)
    bare = vector.AtariVectorEnv(
        "breakout",
        2,
        num_threads=1,
        repeat_action_probability=0.25,
        reward_clipping=False,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    ours.reset()
    _, info = bare.reset(seed=3)
    lives, score, length, games, lost = info["lives"], np.zeros(2), np.zeros(2, int), [], 0
    rng = np.random.default_rng(0)
    kept = []  # a rollout keeps every step's arrays: none may change afterwards
    for t in range(700):
        actions = rng.integers(0, 4, 2)
        step = ours.step(actions)
        if t % 50 == 0:
            kept.append((step, step.obs.copy(), step.next_obs.copy()))
        obs, reward, terminated, truncated, info = bare.step(actions)
        score, length = score + reward, length + 1
        over = terminated | truncated
        life_lost = ~over & (info["lives"] < lives)
        lives = info["lives"]
        np.testing.assert_array_equal(step.rewards, np.sign(reward))
        np.testing.assert_array_equal(step.terminated, terminated | life_lost)
        # the newest frames (the older ones of a fresh stack are padded differently: the test above)
        final = np.where(over[:, None, None], info["final_obs"][:, 3], obs[:, 3]) if over.any() else obs[:, 3]
        np.testing.assert_array_equal(step.next_obs[:, 3], final)
        np.testing.assert_array_equal(step.obs[:, 3], obs[:, 3])
        assert step.episodes == [(int(i), float(score[i]), int(length[i])) for i in np.flatnonzero(over)]
        games += step.episodes
        lost += int(life_lost.sum())
        score[over], length[over] = 0, 0
    assert len(games) >= 2 and lost >= 4 and any(g[1] > 0 for g in games)
    for step, obs, next_obs in kept:
        np.testing.assert_array_equal(step.obs, obs)
        np.testing.assert_array_equal(step.next_obs, next_obs)
    ours.close()
    bare.close()


def test_env_backend_choice():
    """``--env-backend``: auto takes EnvPool for Atari ids when it is installed, else the Gymnasium
    stack; on resume it keeps the backend the checkpoint's envs ran on; a named backend that is
    missing or not for the id is a one-line error."""
    from heron.envs import atari
    from heron.envs.atari import choose_backend

    assert choose_backend("ALE/Pong-v5", "auto") == ("envpool" if atari.envpool_available() else "gymnasium")
    assert choose_backend("CartPole-v1", "auto") == "gymnasium"
    assert choose_backend("ALE/Pong-v5", "auto", {"rng": [], "fresh": []}) == "gymnasium"  # the Gymnasium backend's
    if atari.ale_vector_available():
        assert choose_backend("ALE/Pong-v5", "auto", {"backend": "ale", "fresh": [], "steps": 0}) == "ale"
    with pytest.raises(HeronError, match="is for Atari ids"):
        choose_backend("CartPole-v1", "ale")
    if not atari.envpool_available():
        with pytest.raises(HeronError, match="needs envpool"):
            choose_backend("ALE/Pong-v5", "auto", {"backend": "envpool", "fresh": [], "steps": 0})
    with pytest.raises(HeronError, match="written with the envpool env backend"):
        VecEnv("CartPole-v1", 1, 0).load_state_dict({"backend": "envpool", "fresh": [False], "steps": 3})


def test_ale_vector_rom_names_seeds_and_resume():
    """ROM names from ALE's own registration (UpNDown is ``up_n_down``), seeds past ALE's int range
    wrapped (env i gets seed + i), and a resume that restarts the games from a seed derived from
    the step without changing the run's own."""
    _ale_vector()
    from heron.envs.atari import AleVecEnv, ale_spec

    assert ale_spec("UpNDownNoFrameskip-v4")["game"] == ale_spec("ALE/UpNDown-v5")["game"] == "up_n_down"
    envs = AleVecEnv("PongNoFrameskip-v4", 2, seed=2**31 - 1)
    first = envs.reset()
    envs.step(np.zeros(2, np.int64))
    state = envs.state_dict()
    assert state == {"backend": "ale", "fresh": [False, False], "steps": 1}
    again = envs.load_state_dict(state)
    assert envs.seed == 2**31 - 1 and again.shape == first.shape
    with pytest.raises(HeronError, match="written with the gymnasium env backend"):
        envs.load_state_dict({"rng": [], "fresh": []})
    envs.close()
    envs.close()


class _Lean:
    """A batched numpy policy with a recurrent state: each row counts the steps since its reset,
    and after 40 steps the rule changes. Returns equal one-at-a-time play only if every row sees
    its own episode from its own reset."""

    batched = True

    def __init__(self):
        self.resets, self.batches = [], []

    def reset(self, batch=1):
        self.resets.append(batch)
        self.count = np.zeros(batch, int)

    def predict(self, obs, deterministic=True):
        obs = np.asarray(obs)
        rows = obs if obs.ndim == 2 else obs[None]
        self.batches.append(len(rows))
        self.count += 1
        act = np.where(self.count <= 40, rows[:, 2] > 0, rows[:, 3] > 0).astype(np.int64)
        return act if obs.ndim == 2 else act[0]


def test_episodes_played_together_return_what_they_return_one_after_another():
    from heron.runtime.episodes import evaluate

    alone, together = _Lean(), _Lean()
    one = evaluate(alone, "CartPole-v1", 7, seed=3, at_once=1)
    three = evaluate(together, "CartPole-v1", [0, 1, 2, 3, 4, 5, 6], seed=3, at_once=3)
    assert len(set(one.tolist())) > 3  # episodes of different lengths: rows end at different steps
    assert three.tolist() == one.tolist()
    assert alone.resets == [1] * 7 and set(alone.batches) == {1}
    assert together.resets == [3, 3, 1] and set(together.batches) == {3, 1}
    lengths = one.astype(int).tolist()  # CartPole: reward 1 per step
    assert len(together.batches) == max(lengths[:3]) + max(lengths[3:6]) + lengths[6]  # one predict per group step
    _Lean.batched = False  # a policy that does not act on batches is played one episode at a time
    try:
        unbatched = _Lean()
        assert evaluate(unbatched, "CartPole-v1", 2, seed=3, at_once=3).tolist() == one[:2].tolist()
        assert unbatched.resets == [1, 1]
    finally:
        _Lean.batched = True


def test_a_host_copy_of_a_policy_acts_as_the_actor_after_each_refresh():
    import torch

    from heron.accel.acting import Policy

    class Actor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 2)
            self.register_buffer("scale", torch.ones(2))

        def act(self, x, state, deterministic):
            return self.linear(x) * self.scale, state

    policy = Policy(Actor(), (3,))
    assert policy.on_host() is policy  # on the CPU already: nothing to copy
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    host = policy.host_copy()
    assert host.actor is not policy.actor and host.device.type == "cpu"
    np.testing.assert_array_equal(host.predict(obs), policy.predict(obs))
    with torch.no_grad():
        policy.actor.linear.weight.add_(1.0)
        policy.actor.scale.fill_(3.0)
    assert not np.allclose(host.predict(obs), policy.predict(obs))  # a copy, not a view
    assert policy.host_copy() is host  # made once, refreshed at each call
    np.testing.assert_array_equal(host.predict(obs), policy.predict(obs))


def test_an_evaluation_closes_every_env_it_made_however_it_ends():
    import gymnasium as gym

    from heron.runtime.episodes import evaluate

    made, closed = [], []

    class Counted(gym.Wrapper):
        def close(self):
            closed.append(self)
            super().close()

    def env_fn(render_mode):
        made.append(Counted(gym.make("CartPole-v1", render_mode=render_mode)))
        return made[-1]

    first = evaluate(_Lean(), "CartPole-v1", 4, seed=3, env_fn=env_fn, at_once=2)
    again = evaluate(_Lean(), "CartPole-v1", 4, seed=3, env_fn=env_fn, at_once=2)
    assert again.tolist() == first.tolist() and len(made) == 4  # fresh envs at every evaluation
    assert set(map(id, closed)) == set(map(id, made))

    class Broken(_Lean):
        def predict(self, obs, deterministic=True):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        evaluate(Broken(), "CartPole-v1", 4, seed=3, env_fn=env_fn, at_once=2)
    assert len(made) == 6 and set(map(id, closed)) == set(map(id, made))
