"""Atari: the standard preprocessing (Mnih et al. 2015; Machado et al. 2018) and the two C++ vector
backends, ALE's own ``AtariVectorEnv`` and EnvPool.

Two id styles get the standard stack (``make_env`` applies it; nothing to configure):

* ``ALE/<Game>-v5``: made with ``frameskip=1`` so that our frame skip is the only one (v5 skips 4
  frames by itself); sticky actions stay at v5's 0.25.
* ``<Game>NoFrameskip-v4``: no frame skip, no sticky actions (the DQN/PPO papers' setting).

Stack, bottom to top: no-op reset (up to 30), frame skip 4 with max-pooling over the last two
frames, 84x84 grayscale (Gymnasium's ``AtariPreprocessing``); then, for training only, ``GameStats``
(whole-game return and length, reported when the game really ends), ``EpisodicLife`` (a lost life
ends the learning episode, not the game), fire reset, reward clipping to {-1, 0, 1}; and a stack of
the last 4 frames. Evaluation envs skip the training-only wrappers: they play whole games and count
raw scores.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np

from heron.envs.envpool import load as load_envpool
from heron.envs.step import Step, env_call
from heron.errors import HeronError

_V4 = re.compile(r"^[A-Za-z]+NoFrameskip-v4$")
_V5 = re.compile(r"^ALE/[A-Za-z]+-v5$")


def is_atari(env_id: str) -> bool:
    """Ids that get the standard Atari preprocessing."""
    return bool(_V4.match(env_id) or _V5.match(env_id))


def make_base(env_id: str, render_mode: str | None, **kwargs: Any) -> gym.Env:
    if _V5.match(env_id):
        kwargs.setdefault("frameskip", 1)  # AtariPreprocessing does the frame skip
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    return gym.make(env_id, **kwargs)


class GameStats(gym.Wrapper):
    """Counts the raw score and agent steps of a whole game (across lives) and reports them in
    ``info["game_return"]``/``info["game_length"]`` at the step where the game ends. ``VecEnv`` logs
    these as ``charts/episodic_return``, so training curves show game scores, not per-life ones."""

    def reset(self, **kwargs):
        self.game_return, self.game_length = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_return += float(reward)
        self.game_length += 1
        if terminated or truncated:
            info = {**info, "game_return": self.game_return, "game_length": self.game_length}
        return obs, reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """A lost life terminates the learning episode (DeepMind 2015); the game goes on, so the reset
    that follows is a no-op step unless the game is really over."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives, self.game_over = 0, True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.lives = self.env.unwrapped.ale.lives()
        self.game_over = False
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE after a reset in games that wait for it (Pong, Breakout, ...)."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


class ClipReward(gym.RewardWrapper):
    """Rewards to their sign (Mnih et al. 2015): one learning rate across games."""

    def reward(self, reward):
        return float(np.sign(reward))


def wrap(env: gym.Env, training: bool, frame_stack: int = 4) -> gym.Env:
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=False, grayscale_obs=True, scale_obs=False
    )
    if training:
        env = EpisodicLife(GameStats(env))
    if "FIRE" in env.unwrapped.get_action_meanings()[1:2]:  # type: ignore[attr-defined]  # an ALE env
        env = FireReset(env)
    if training:
        env = ClipReward(env)
    return gym.wrappers.FrameStackObservation(env, frame_stack)


def choose_backend(env_id: str, choice: str, resumed: dict | None = None) -> str:
    """The vector env backend for ``env_id`` (gymnasium, envpool or ale) from ``--env-backend``
    ``choice``: ``auto`` takes EnvPool for Atari when it is installed, else Gymnasium, and on
    resume keeps the backend of ``resumed``, the checkpoint's env state (a game in flight cannot
    move between backends). A named backend that is missing or not for the id: a HeronError."""
    backend = choice
    if backend == "auto" and resumed is not None:
        backend = resumed.get("backend", "gymnasium")
    if backend == "gymnasium":
        return backend
    if backend == "auto":
        return "envpool" if is_atari(env_id) and envpool_available() else "gymnasium"
    if not is_atari(env_id):
        raise HeronError(
            f"--env-backend {backend} is for Atari ids (ALE/<Game>-v5, <Game>NoFrameskip-v4); got {env_id}"
        )
    what, available = {
        "envpool": ("envpool", envpool_available),
        "ale": ("ale-py 0.11 or later", ale_vector_available),
    }[backend]
    if not available():
        raise HeronError(f"--env-backend {backend} needs {what}: pip install -U {what.split()[0]}")
    return backend


def wrong_backend(env_state: dict) -> HeronError:
    """The error for a checkpoint whose envs ran on another backend (its env state names it; the
    Gymnasium backend's names none)."""
    backend = env_state.get("backend", "gymnasium")
    return HeronError(
        f"this checkpoint was written with the {backend} env backend; resume with --env-backend {backend} (or auto)"
    )


# -- EnvPool ------------------------------------------------------------------------------------------
def envpool_available() -> bool:
    try:
        load_envpool()
    except Exception:
        return False
    return True


class EnvPoolVecEnv:
    """Atari through EnvPool's C++ thread pool with the same preprocessing and heron's ``Step``
    layout (see ``heron.envs.make``). EnvPool resets a finished env on its NEXT step, ignoring
    that step's action; we make that step at once for the finished envs only, so ``obs`` is the
    new episode's first frame and ``next_obs`` the final one, as with Gymnasium.

    Resume: EnvPool cannot save emulator or RNG state, so a resumed run restarts every game (from
    a seed derived from the step), which is not bitwise identical to an uninterrupted run."""

    tensors = False  # its Steps hold numpy arrays

    def __init__(self, env_id: str, num_envs: int, seed: int, threads: int | None = None):
        """``threads``: the pool's thread count (None: EnvPool's own default)."""
        envpool = load_envpool()

        game = env_id.split("/")[-1].replace("NoFrameskip-v4", "-v5")
        self.env_id, self.num_envs, self.seed, self._game = env_id, num_envs, seed, game
        self.steps = 0  # vector steps taken, to derive a fresh seed on resume
        self._kwargs = dict(
            env_type="gymnasium",
            num_envs=num_envs,
            episodic_life=True,
            reward_clip=True,
            repeat_action_probability=0.25 if env_id.startswith("ALE/") else 0.0,
            noop_max=30,
            frame_skip=4,
            img_height=84,
            img_width=84,
            stack_num=4,
            gray_scale=True,
            use_fire_reset=True,
        )
        if threads is not None:
            self._kwargs["num_threads"] = threads
        try:
            self.envs = envpool.make(game, seed=seed, **self._kwargs)  # env i gets seed + i
        except Exception as exc:
            raise HeronError(f"envpool cannot make {game} (from {env_id}): {exc}") from None
        self.single_observation_space = self.envs.observation_space
        self.single_action_space = self.envs.action_space
        self.obs_dtype = np.dtype(np.uint8)
        self.game_returns = np.zeros(num_envs, np.float64)
        self.game_lengths = np.zeros(num_envs, np.int64)
        self.episode_lengths = np.zeros(num_envs, np.int64)  # per life: 0 means an episode just began
        self.obs: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        obs, _ = self.envs.reset()
        self.obs = np.asarray(obs)
        self.game_returns[:], self.game_lengths[:], self.episode_lengths[:] = 0, 0, 0
        return self.obs

    def step(self, actions: np.ndarray):
        next_obs, rewards, terminated, truncated, info = env_call(
            self.env_id, "step", self.envs.step, np.asarray(actions)
        )
        self.steps += 1
        order = np.asarray(info["env_id"])
        if not np.array_equal(order, np.arange(self.num_envs)):  # sync mode returns env order; be sure
            inv = np.argsort(order)
            next_obs, rewards, terminated, truncated = next_obs[inv], rewards[inv], terminated[inv], truncated[inv]
            info = {k: np.asarray(v)[inv] for k, v in info.items()}
        next_obs = np.array(next_obs)  # our own copy: callers keep each step's arrays for a whole rollout
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        self.game_returns += np.asarray(info["reward"], np.float64)  # raw score, before clipping
        self.game_lengths += 1
        self.episode_lengths += 1
        game_over = np.asarray(info["terminated"], bool) | truncated
        episodes = [(int(i), float(self.game_returns[i]), int(self.game_lengths[i])) for i in np.flatnonzero(game_over)]
        self.game_returns[game_over], self.game_lengths[game_over] = 0, 0
        done = terminated | truncated
        obs = next_obs
        if done.any():
            idx = np.flatnonzero(done).astype(np.int32)
            reset_obs, _, _, _, rinfo = env_call(
                self.env_id, "reset", self.envs.step, np.zeros(len(idx), dtype=np.int64), env_id=idx
            )
            obs = next_obs.copy()
            obs[np.asarray(rinfo["env_id"])] = reset_obs
            self.episode_lengths[idx] = 0
        self.obs = obs
        return Step(obs, next_obs, np.asarray(rewards, np.float32), terminated, truncated, episodes)

    def state_dict(self) -> dict:
        return {"backend": "envpool", "fresh": (self.episode_lengths == 0).tolist(), "steps": self.steps}

    def load_state_dict(self, state: dict) -> np.ndarray:
        envpool = load_envpool()

        if state.get("backend") != "envpool":
            raise wrong_backend(state)
        self.envs.close()
        self.steps = int(state["steps"])
        self.envs = envpool.make(self._game, seed=(self.seed + 7919 * self.steps) % 2**31, **self._kwargs)
        return self.reset()

    def close(self) -> None:
        self.envs.close()


# -- ALE's vector env -----------------------------------------------------------------------------
def ale_vector_available() -> bool:
    """ALE's own C++ vector env (``ale_py.vector_env.AtariVectorEnv``, ale-py 0.11 and later)."""
    try:
        from ale_py.vector_env import AtariVectorEnv  # noqa: F401
    except Exception:
        return False
    return True


def ale_spec(env_id: str) -> dict:
    """ALE's registration of an Atari id: its ROM name (``game``), sticky-action probability and
    frame limit (``ALE/UpNDown-v5`` and ``UpNDownNoFrameskip-v4`` -> game ``up_n_down``)."""
    import ale_py

    gym.register_envs(ale_py)
    return dict(gym.spec(env_id).kwargs)


class AleVecEnv:
    """Atari through ALE's own C++ vector env (its thread pool does the emulation and the
    preprocessing), with ``wrap``'s semantics and heron's ``Step`` layout (``heron.envs.make``).

    ALE runs the same frame skip, max-pooling, 84x84 resize and grayscale as Gymnasium's
    ``AtariPreprocessing``: from the same emulator state the frames are pixel-identical
    (``tests/test_envs.py``). The rest is done here, as ``wrap`` does it:
    - a lost life ends the learning episode (``terminated``) while the game goes on, and whole
      games are reported with their raw scores; rewards are clipped to their sign here, after the
      raw score is counted;
    - a learning episode's frame stack starts as copies of its first frame, after a reset (ALE pads
      with zeros) and after a lost life (ALE's stack goes on), as Gymnasium's frame stack is reset.
    What differs from the Gymnasium stack:
    - at a reset ALE presses FIRE for one frame before its no-ops, whose number it draws from its
      own RNG (``wrap``: up to 30 no-ops, then FIRE and UP as two agent steps);
    - after a lost life nothing presses FIRE: in Breakout the agent must serve the ball itself, as
      it must in evaluation (which plays whole games without ``EpisodicLife``), where ``wrap``'s
      training stack serves for it after every life.
    Episodes are cut at 108,000 frames (27,000 agent steps), as the ids' registrations cut them.

    Threads: ALE steps the envs on ``threads`` threads (the run's torch threads: the learner waits
    while the envs step). Resume: the emulators' states cannot be saved, so a resumed run restarts
    every game from seeds derived from the step, as with EnvPool."""

    tensors = False  # its Steps hold numpy arrays

    def __init__(
        self, env_id: str, num_envs: int, seed: int, threads: int = 1, noop_max: int = 30, fire_reset: bool = True
    ):
        from ale_py import roms
        from ale_py.vector_env import AtariVectorEnv
        from gymnasium.vector import AutoresetMode

        spec = ale_spec(env_id)
        if roms.get_rom_path(spec["game"]) is None:
            raise HeronError(f"ALE has no ROM {spec['game']!r} (from {env_id})")
        self.env_id, self.num_envs, self.seed = env_id, num_envs, seed
        self.steps = 0  # vector steps taken, to derive a fresh seed on resume
        self._reset_seed = seed
        self._make = lambda: AtariVectorEnv(
            spec["game"],
            num_envs,
            num_threads=max(1, min(threads, num_envs)),
            noop_max=noop_max,
            use_fire_reset=fire_reset,
            repeat_action_probability=spec.get("repeat_action_probability", 0.0),
            frameskip=4,
            img_height=84,
            img_width=84,
            grayscale=True,
            stack_num=4,
            maxpool=True,
            episodic_life=False,
            life_loss_info=False,
            reward_clipping=False,
            max_num_frames_per_episode=spec.get("max_num_frames_per_episode", 108_000),
            autoreset_mode=AutoresetMode.SAME_STEP,
        )
        self.envs = self._make()
        self.single_observation_space = self.envs.single_observation_space
        self.single_action_space = self.envs.single_action_space
        self.obs_dtype = np.dtype(np.uint8)
        self.game_returns = np.zeros(num_envs, np.float64)
        self.game_lengths = np.zeros(num_envs, np.int64)
        self.lives = np.zeros(num_envs, np.int64)
        self.since_reset = np.zeros(num_envs, np.int64)  # agent steps since the game's reset
        self.episode_lengths = np.zeros(num_envs, np.int64)  # per life: 0 means an episode just began
        self.obs: np.ndarray | None = None

    def _pad(self, obs: np.ndarray) -> np.ndarray:
        """Fill the zero frames ALE stacks before a game's first frame with copies of that frame."""
        k = obs.shape[1] - 1  # index of the newest frame
        for i in np.flatnonzero(self.since_reset < k):
            first = k - self.since_reset[i]  # where the game's first frame sits now
            obs[i, :first] = obs[i, first]
        return obs

    def reset(self) -> np.ndarray:
        seeds = (self._reset_seed + np.arange(self.num_envs, dtype=np.int64)) % 2**31  # env i: seed + i (ALE's ints)
        obs, info = env_call(self.env_id, "reset", self.envs.reset, seed=seeds)
        self.game_returns[:], self.game_lengths[:], self.episode_lengths[:], self.since_reset[:] = 0, 0, 0, 0
        self.lives[:] = info["lives"]
        self.obs = self._pad(np.array(obs))
        return self.obs

    def step(self, actions: np.ndarray):
        raw, rewards, terminated, truncated, info = env_call(
            self.env_id, "step", self.envs.step, np.asarray(actions, np.int64)
        )
        self.steps += 1
        raw = np.array(raw)  # our own copy (callers keep each step's arrays for a whole rollout; ALE 0.12 makes
        # new arrays at every call, but nothing promises that)
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        game_over = terminated | truncated  # ALE has reset these: raw holds the next game's first frame
        lives = np.asarray(info["lives"], np.int64)
        life_lost = ~game_over & (lives > 0) & (lives < self.lives)  # as EpisodicLife
        self.lives = lives
        self.since_reset += 1
        self.game_returns += np.asarray(rewards, np.float64)  # raw score, before clipping
        self.game_lengths += 1
        self.episode_lengths += 1
        next_obs = raw
        if game_over.any():
            next_obs = raw.copy()
            next_obs[game_over] = info["final_obs"][game_over]
        next_obs = self._pad(next_obs)
        ended = game_over | life_lost
        obs = next_obs
        if ended.any():
            # a new learning episode: its stack starts from its first frame, as Gymnasium's reset
            # of the frame stack does after EpisodicLife's reset
            self.since_reset[ended] = 0
            obs = next_obs.copy()
            obs[game_over] = raw[game_over]
            obs = self._pad(obs)
        episodes = [(int(i), float(self.game_returns[i]), int(self.game_lengths[i])) for i in np.flatnonzero(game_over)]
        self.game_returns[game_over], self.game_lengths[game_over] = 0, 0
        self.episode_lengths[ended] = 0
        self.obs = obs
        return Step(obs, next_obs, np.sign(rewards).astype(np.float32), terminated | life_lost, truncated, episodes)

    def state_dict(self) -> dict:
        return {"backend": "ale", "fresh": (self.episode_lengths == 0).tolist(), "steps": self.steps}

    def load_state_dict(self, state: dict) -> np.ndarray:
        if state.get("backend") != "ale":
            raise wrong_backend(state)
        self.close()
        self.steps = int(state["steps"])
        self._reset_seed = (self.seed + 7919 * self.steps) % 2**31
        self.envs = self._make()
        return self.reset()

    def close(self) -> None:
        """ALE's worker threads end when its vector env is freed (its ``close`` leaves them)."""
        if self.envs is not None:
            self.envs.close()
            self.envs = None  # type: ignore[assignment]  # closed: nothing else is called
