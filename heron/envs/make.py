"""Environments as the algorithms see them: ``make_env`` (one env with heron's observation
conventions), ``VecEnv`` (N of them stepped together, with exact resume) and the space checks.
Which env an id names is ``heron.envs.ids``; evaluation episodes are ``heron.runtime.episodes``.

Algorithms see ``Step(obs, next_obs, rewards, terminated, truncated, episodes)``:

* ``next_obs`` is the true observation that followed the action, also when the episode ended
  there (the final observation, which a value target must bootstrap from on truncation);
* ``obs`` is what to act on next: equal to ``next_obs`` except where an episode ended, where it is
  the first observation of the next episode.

We run Gymnasium's vector envs with autoreset DISABLED and reset finished sub-envs ourselves
right after the step. That gives the layout above without Gymnasium 1.x's next-step autoreset
(where the step after a done is a dummy transition that must be masked out), and it lets a
checkpoint remember each sub-env's random state from just before its last reset, so that resume
replays that reset exactly (see ``VecEnv.state_dict``).

Observations: floating point arrays become float32, uint8 images stay uint8, Dict spaces are
flattened for MLPs (``flatten_dict=True``) or kept as dicts of such arrays (``flatten_dict=False``;
Step then carries dicts ``key -> [N, ...]``). Episode returns and lengths are counted here, on the
raw rewards, before any normalization an algorithm might apply.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from heron.envs import atari
from heron.envs.ids import check_env_id, gym_env_id
from heron.envs.pybullet import PYBULLET_IDS, PyBulletAdapter
from heron.envs.step import Step, env_call
from heron.errors import EnvCrashed, HeronError, first_line
from heron.ops.rng import generator_state

# Headless MuJoCo rendering (videos): EGL unless the user chose a backend (osmesa on machines
# without EGL: Debian's libosmesa6 with MUJOCO_GL=osmesa). GLFW needs a display.
if not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")

# -- MuJoCo's own warnings ------------------------------------------------------------------------
# kinds of MuJoCo warning shown, here or by the process that started this one (an env or evaluation
# worker, which inherits the variable): one list of them, one per line
_SEEN_VAR = "HERON_MUJOCO_WARNED"
_MUJOCO_SEEN: set[str] = set(filter(None, os.environ.get(_SEEN_VAR, "").split("\n")))


def _mujoco_warning(text: str) -> None:
    """MuJoCo's warning handler while heron makes envs: each kind of warning once (numbers stripped:
    a step time or DOF index does not make a new kind), on stderr; not again in the processes this
    one starts after it. Nothing may leave it: MuJoCo calls it from C, where an exception (a
    KeyboardInterrupt delivered here included) would abort the process."""
    try:
        kind = re.sub(r"\d+(\.\d+)?", "#", text.strip()).replace("\n", " ")
        if kind not in _MUJOCO_SEEN:
            _MUJOCO_SEEN.add(kind)
            os.environ[_SEEN_VAR] = "\n".join(sorted(_MUJOCO_SEEN))
            print(f"heron: warning: MuJoCo: {text.strip()} (shown once)", file=sys.stderr, flush=True)
    except BaseException:
        pass


def route_mujoco_warnings(gym_id: str | None = None) -> None:
    """MuJoCo's warnings through ``_mujoco_warning``, before an env is made and again after (a
    constructor may have loaded MuJoCo). By default MuJoCo prints each to stderr and appends it to
    MUJOCO_LOG.TXT in the current directory; a model's compile-time warning then came once per env
    made (Gymnasium's HalfCheetah-v5 with MuJoCo 3.17: a deprecated attribute, about a hundred lines
    in a PPO run with its evaluation envs) and left a file in the user's directory. Done where MuJoCo
    is loaded or may be: mujoco already imported, a Gymnasium MuJoCo entry point, or a user's own
    env (a factory or module id) where mujoco is installed. Never over a handler already set: the
    user's, or dm_control's (which logs each warning through absl for the DMC tasks)."""
    if "mujoco" not in sys.modules:
        spec = gym.registry.get(gym_id) if gym_id else None
        if spec is None:
            return
        point = spec.entry_point if isinstance(spec.entry_point, str) else ""
        theirs = not point or not point.startswith(("gymnasium.", "heron."))  # a factory, another package
        if "mujoco" not in point and not (theirs and importlib.util.find_spec("mujoco") is not None):
            return
    try:
        import mujoco
    except Exception:  # not installed, or it cannot load: gym.make reports that
        return
    if getattr(mujoco, "get_mju_user_warning", lambda: _mujoco_warning)() is None:
        mujoco.set_mju_user_warning(_mujoco_warning)


def make_env(
    env_id: str,
    render_mode: str | None = None,
    flatten_dict: bool = True,
    max_episode_steps: int | None = None,
    training: bool = False,
    **kwargs: Any,
) -> gym.Env:
    """One Gymnasium env with heron's observation conventions (no seeding: VecEnv seeds).

    Atari ids (``ALE/<Game>-v5``, ``<Game>NoFrameskip-v4``) get the standard preprocessing of
    ``heron.envs.atari``; ``training=True`` adds its training-only wrappers (episodic life, reward
    clipping, whole-game statistics)."""
    check_env_id(env_id)
    if env_id in PYBULLET_IDS:
        env: gym.Env = PyBulletAdapter(PYBULLET_IDS[env_id], render_mode=render_mode)
        env = gym.wrappers.TimeLimit(env, max_episode_steps or 1000)
    elif atari.is_atari(env_id):
        if max_episode_steps is not None:
            kwargs["max_episode_steps"] = max_episode_steps
        env = atari.wrap(atari.make_base(env_id, render_mode, **kwargs), training)
    else:
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        gym_id = gym_env_id(env_id)
        user = gym_id != env_id  # a user's module or callable: their constructor may raise anything
        route_mujoco_warnings(gym_id)
        try:
            env = gym.make(gym_id, max_episode_steps=max_episode_steps, **kwargs)
            route_mujoco_warnings()  # its constructor may have loaded MuJoCo: the next env's warnings
        except HeronError:
            raise
        except (ImportError, gym.error.Error) as exc:  # e.g. Box2D or mujoco missing, bad version
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise HeronError(f"cannot make {env_id}: {reason}") from None
        except Exception as exc:
            if not user:
                raise
            raise HeronError(f"cannot make {env_id}: {first_line(exc)} (heron check-env {env_id} shows more)") from None
    if flatten_dict and isinstance(env.observation_space, gym.spaces.Dict):
        env = gym.wrappers.FlattenObservation(env)
    return env


def obs_dtype(space: gym.Space) -> np.dtype:
    """float32 for floating point observations, uint8 images stay uint8."""
    return np.dtype(np.uint8) if space.dtype == np.uint8 else np.dtype(np.float32)


def obs_converter(space: gym.Space) -> Callable[[Any], Any]:
    """obs -> arrays of heron's dtypes (``obs_dtype``), key by key for Dict spaces."""
    if isinstance(space, gym.spaces.Dict):
        dtypes = {k: obs_dtype(v) for k, v in space.spaces.items()}
        return lambda obs: {k: np.asarray(obs[k], dtype=dt) for k, dt in dtypes.items()}
    dtype = obs_dtype(space)
    return lambda obs: np.asarray(obs, dtype=dtype)


def observation_space(space: gym.Space) -> gym.Space:
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({k: observation_space(v) for k, v in space.spaces.items()})
    if isinstance(space, gym.spaces.Box):
        return gym.spaces.Box(
            space.low.astype(obs_dtype(space)), space.high.astype(obs_dtype(space)), dtype=obs_dtype(space)
        )
    return space


class SerialEnvs:
    """Gymnasium's ``SyncVectorEnv`` with autoreset disabled, reduced to what ``VecEnv`` asks of it.

    Each sub-env is stepped and reset with exactly the calls ``SyncVectorEnv`` makes (the same
    actions from ``iterate``, seeds and options), so the transitions are the same
    (``tests/test_envs.py`` checks it step by step). Left out: merging every sub-env's info dict
    into batched arrays at every step and reset (heron reads infos only for Atari's whole-game
    statistics, which keep ``SyncVectorEnv``), and the deep copy of the batched observations (each
    call stacks new arrays). On Hopper-v5 with one env the info merging and copying cost about as
    much as MuJoCo's simulation step."""

    def __init__(self, fns: list[Callable[[], gym.Env]]):
        self.envs = [fn() for fn in fns]
        self.num_envs = len(self.envs)
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self._box = isinstance(self.single_observation_space, gym.spaces.Box)
        self._last: list[Any] = [None] * self.num_envs  # each sub-env's latest observation

    def _batch(self, items: list) -> Any:
        if self._box:
            return np.stack(items)
        out: Any = gym.vector.utils.create_empty_array(self.single_observation_space, self.num_envs)
        return gym.vector.utils.concatenate(self.single_observation_space, items, out)

    def reset(self, seed: int | list[int | None] | None = None, options: dict | None = None) -> tuple[Any, dict]:
        seeds = (
            [seed + i for i in range(self.num_envs)]
            if isinstance(seed, int)
            else seed
            if seed is not None
            else [None] * self.num_envs
        )
        mask = (options or {}).get("reset_mask", np.ones(self.num_envs, bool))
        obs = list(self._last)
        for i, (env, single_seed) in enumerate(zip(self.envs, seeds, strict=True)):
            if mask[i]:
                obs[i], _ = env.reset(seed=single_seed, options=options)
        self._last = obs
        return self._batch(obs), {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        n = self.num_envs
        obs, rewards = [None] * n, np.zeros(n, np.float64)
        terminated, truncated = np.zeros(n, np.bool_), np.zeros(n, np.bool_)
        for i, action in enumerate(gym.vector.utils.iterate(self.action_space, actions)):
            obs[i], rewards[i], terminated[i], truncated[i], _ = self.envs[i].step(action)
        self._last = obs
        return self._batch(obs), rewards, terminated, truncated, {}

    def get_attr(self, name: str) -> list[Any]:
        return [env.get_wrapper_attr(name) for env in self.envs]

    def set_attr(self, name: str, values: list[Any]) -> None:
        for env, value in zip(self.envs, values, strict=True):
            env.set_wrapper_attr(name, value)

    def close(self) -> None:
        for env in self.envs:
            env.close()


class VecEnv:
    """``num_envs`` copies of an env, stepped together, with heron's Step layout (module doc).

    ``env_fn`` (a picklable no-argument callable) replaces ``make_env`` for algorithms with their
    own wrapper stack (DreamerV2's pixels and action repeat)."""

    tensors = False  # its Steps hold numpy arrays (a native tensor env's may hold tensors: heron.envs.native)

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int,
        mode: str = "sync",
        flatten_dict: bool = True,
        max_episode_steps: int | None = None,
        render_mode: str | None = None,
        env_fn: Callable[[], gym.Env] | None = None,
        **kwargs: Any,
    ):
        check_env_id(env_id)
        self.env_id, self.num_envs, self.seed = env_id, num_envs, seed
        fns: list[Callable[[], gym.Env]] = [
            env_fn
            or (
                lambda: make_env(
                    env_id,
                    render_mode=render_mode,
                    flatten_dict=flatten_dict,
                    max_episode_steps=max_episode_steps,
                    training=True,
                    **kwargs,
                )
            )
            for _ in range(num_envs)
        ]
        # heron's Atari stack ends episodes at lives and GameStats reports whole games; an
        # algorithm's own stack (env_fn, e.g. DreamerV2's) plays whole games as episodes
        self.whole_games = atari.is_atari(env_id) and env_fn is None
        self.envs: AsyncVectorEnv | SyncVectorEnv | SerialEnvs
        if mode == "async":
            self.envs = AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.DISABLED)
        elif self.whole_games:  # the game statistics arrive in infos
            self.envs = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.DISABLED)
        else:
            self.envs = SerialEnvs(fns)
        self.single_observation_space = observation_space(self.envs.single_observation_space)
        self.single_action_space = self.envs.single_action_space
        space = self.envs.single_observation_space
        self.obs_dtype: Any = (
            {k: obs_dtype(v) for k, v in space.spaces.items()}
            if isinstance(space, gym.spaces.Dict)
            else obs_dtype(space)
        )
        self._obs = obs_converter(space)
        self.episode_returns = np.zeros(num_envs, np.float64)
        self.episode_lengths = np.zeros(num_envs, np.int64)
        self._pre_reset_rng: list[dict] = []
        self.obs: np.ndarray | None = None
        self.crashed = False

    def _rng_states(self) -> list[dict]:
        return [generator_state(g) for g in self.envs.get_attr("np_random")]

    def reset(self) -> np.ndarray:
        """Seed sub-env i with ``seed + i`` and return the first observations [N, ...]."""
        self._pre_reset_rng = [
            generator_state(np.random.default_rng(self.seed + i)) for i in range(self.num_envs)
        ]  # what reset(seed=...) will install
        obs, _ = self._call("reset", self.envs.reset, seed=[self.seed + i for i in range(self.num_envs)])
        self.obs = self._obs(obs)
        self.episode_returns[:] = 0
        self.episode_lengths[:] = 0
        return self.obs

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """An env call whose failure (the env raised, its worker died) ends training as EnvCrashed."""
        try:
            return env_call(self.env_id, what, fn, *args, **kwargs)
        except EnvCrashed:
            self.crashed = True
            raise

    def step(self, actions: np.ndarray) -> Step:
        next_obs, rewards, terminated, truncated, infos = self._call("step", self.envs.step, actions)
        next_obs = self._obs(next_obs)
        rewards = np.asarray(rewards, np.float32)
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        self.episode_returns += rewards
        self.episode_lengths += 1
        done = terminated | truncated
        episodes = []
        obs = next_obs
        if done.any():
            idx = np.flatnonzero(done)
            episodes = [(int(i), float(self.episode_returns[i]), int(self.episode_lengths[i])) for i in idx]
            if self.whole_games:  # Atari with episodic life: log whole games (raw scores), not lives
                games = np.flatnonzero(infos.get("_game_return", np.zeros(self.num_envs, bool)))
                episodes = [(int(i), float(infos["game_return"][i]), int(infos["game_length"][i])) for i in games]
            self.episode_returns[idx] = 0
            self.episode_lengths[idx] = 0
            states = self._rng_states()
            for i in idx:
                self._pre_reset_rng[i] = states[i]
            reset_obs = self._obs(self._call("reset", self.envs.reset, options={"reset_mask": done})[0])
            if isinstance(next_obs, dict):
                obs = {k: v.copy() for k, v in next_obs.items()}
                for k, v in obs.items():
                    v[idx] = reset_obs[k][idx]
            else:
                obs = next_obs.copy()
                obs[idx] = reset_obs[idx]
        self.obs = obs
        return Step(obs, next_obs, rewards, terminated, truncated, episodes)

    # -- resume -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """What resume needs: per sub-env, the RNG state to replay its latest reset with (when the
        episode just started) or to continue from (when an episode is in flight). After a crash the
        envs cannot be asked: every env starts a new episode on resume, from fresh seeds."""
        if self.crashed:
            return {
                "rng": [
                    generator_state(np.random.default_rng([self.seed, i, int(self.episode_lengths.sum())]))
                    for i in range(self.num_envs)
                ],
                "fresh": [False] * self.num_envs,
            }
        current = self._rng_states()
        fresh = self.episode_lengths == 0
        return {
            "rng": [self._pre_reset_rng[i] if fresh[i] else current[i] for i in range(self.num_envs)],
            "fresh": fresh.tolist(),
        }

    def load_state_dict(self, state: dict) -> np.ndarray:
        """Restore after ``reset()``. A sub-env whose episode had just started when the checkpoint
        was written replays that reset exactly (same RNG state, so the same first observation and
        internal state); one with an episode in flight starts a new episode from the RNG state it
        had, because a simulator's internal state cannot be saved in general. The interrupted
        episode is not counted in ``charts/episodic_return``."""
        if "rng" not in state:
            raise atari.wrong_backend(state)
        if len(state["rng"]) != self.num_envs:
            raise HeronError(f"checkpoint has {len(state['rng'])} envs, this run has {self.num_envs}")
        gens = []
        for s in state["rng"]:
            g = np.random.default_rng()
            g.bit_generator.state = s
            gens.append(g)
        self.envs.set_attr("np_random", gens)
        self._pre_reset_rng = [generator_state(g) for g in gens]
        obs, _ = self._call("reset", self.envs.reset, options={"reset_mask": np.ones(self.num_envs, bool)})
        self.obs = self._obs(obs)
        self.episode_returns[:] = 0
        self.episode_lengths[:] = 0
        return self.obs

    def close(self) -> None:
        if self.crashed and isinstance(self.envs, AsyncVectorEnv):
            # a dead worker cannot answer gymnasium's close protocol: end the workers directly
            for process in self.envs.processes:
                if process.is_alive():
                    process.terminate()
                process.join(timeout=5)
            for pipe in self.envs.parent_pipes:
                pipe.close()
            self.envs.closed = True
            return
        self.envs.close()


def probe_spaces(env_id: str, flatten_dict: bool = True) -> tuple[gym.Space, gym.Space]:
    """(observation space as heron presents it, action space) of one env, made and closed."""
    env = make_env(env_id, flatten_dict=flatten_dict)
    try:
        return observation_space(env.observation_space), env.action_space
    finally:
        env.close()


def require_box_actions(space: gym.Space, algo: str, env_id: str) -> None:
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise HeronError(f"{algo} needs a continuous (Box) action space; {env_id} has {space}")
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise HeronError(f"{algo} rescales actions to the bounds, but {env_id}'s action bounds are not finite")


def require_vector_obs(space: gym.Space, algo: str, env_id: str) -> None:
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise HeronError(f"{algo} uses MLPs and needs vector (or Dict) observations; {env_id} has {space}")
