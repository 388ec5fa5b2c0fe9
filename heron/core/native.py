"""A vector env that steps its sub-envs itself (``--vector-mode native``): an id registered with a
``vector_entry_point`` (Gymnasium's CartPole, heron's ``heron/TorchPendulum-v1``, a user's own),
read in whichever of Gymnasium's autoreset modes it declares, with the Step layout every algorithm
reads (``heron.core.envs``):

* ``DISABLED``: finished sub-envs are reset right after the step (``reset_mask``), as heron's own
  vector envs do;
* ``SAME_STEP``: the step returns the reset observation; the episode's final observation, which a
  truncation bootstraps from, comes from ``infos["final_obs"]``;
* ``NEXT_STEP`` (Gymnasium's default): the step after a finished one resets those sub-envs and
  ignores their actions. That row is not a transition: ``Step.valid`` is False there, and the
  loops store nothing of it. The next observation to act on is then the reset one.

Observations, rewards and flags may be numpy arrays or torch tensors on the CPU; they reach the
loops as numpy. A native vector env's internal state cannot be saved: on resume its episodes start
anew from fresh seeds, and the episodes in flight end as truncations (said once in the run's log);
everything else resumes exactly.
"""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from heron.core.envids import check_env_id, gym_env_id
from heron.core.envs import obs_converter, obs_dtype, observation_space
from heron.core.faults import env_call
from heron.core.transitions import Step
from heron.errors import EnvCrashed, HeronError

MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED)


def autoreset_mode(envs: Any) -> AutoresetMode:
    """The autoreset mode a vector env declares in ``metadata["autoreset_mode"]``."""
    mode = (getattr(envs, "metadata", None) or {}).get("autoreset_mode")
    try:
        mode = AutoresetMode(mode)
    except ValueError:
        raise HeronError(f"vector env {type(envs).__name__} declares no autoreset mode heron can read "
                         f"(metadata['autoreset_mode'] = {mode!r}; expected one of "
                         f"{', '.join(m.value for m in MODES)})") from None
    return mode


def require_vector_entry_point(env_id: str) -> None:
    """What --vector-mode native needs of an id, checked before a run directory exists."""
    if gym.spec(gym_env_id(env_id)).vector_entry_point is None:
        raise HeronError(f"{env_id} has no vector entry point: --vector-mode native needs an env registered with "
                         "one (gymnasium.register(..., vector_entry_point=...)); use --vector-mode sync or async")


def _numpy(x: Any, what: str) -> np.ndarray:
    if type(x).__module__.startswith("torch"):
        if x.device.type != "cpu":
            raise HeronError(f"the vector env returns {what} on {x.device}: --vector-mode native reads tensors on "
                             "the CPU only")
        return x.numpy()
    return np.asarray(x)


class NativeVecEnv:
    """``num_envs`` envs stepped by the env's own vector implementation, with ``VecEnv``'s interface."""

    def __init__(self, env_id: str, num_envs: int, seed: int, envs: gym.vector.VectorEnv | None = None):
        check_env_id(env_id)
        self.env_id, self.num_envs, self.seed = env_id, num_envs, seed
        if envs is None:
            require_vector_entry_point(env_id)
            envs = env_call(env_id, "make_vec", gym.make_vec, gym_env_id(env_id), num_envs=num_envs,
                            vectorization_mode="vector_entry_point")
        if envs.num_envs != num_envs:
            raise HeronError(f"the vector env has {envs.num_envs} envs, the run asks for {num_envs}")
        self.envs = envs
        self.mode = autoreset_mode(envs)
        space = envs.single_observation_space
        if not isinstance(space, gym.spaces.Box):
            raise HeronError(f"{env_id}: --vector-mode native takes Box observations, the vector env has "
                             f"{type(space).__name__}; use --vector-mode sync (heron flattens Dict observations)")
        self.single_observation_space = observation_space(space)
        self.single_action_space = envs.single_action_space
        self.obs_dtype = obs_dtype(space)
        self._convert = obs_converter(space)
        self.whole_games = False
        self.episode_returns = np.zeros(num_envs, np.float64)
        self.episode_lengths = np.zeros(num_envs, np.int64)
        self.pending = np.zeros(num_envs, bool)  # NEXT_STEP: the next step resets these
        self.restarts = 0  # resumes, each of which started every episode anew
        self.obs: Any = None
        self.crashed = False

    def _obs(self, x: Any) -> Any:
        return self._convert(_numpy(x, "observations"))

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return env_call(self.env_id, what, fn, *args, **kwargs)
        except EnvCrashed:
            self.crashed = True
            raise

    def reset(self, seed: int | None = None) -> Any:
        """Every sub-env from a new episode, seeded ``seed + i`` (the run's seed by default)."""
        obs, _ = self._call("reset", self.envs.reset, seed=self.seed if seed is None else seed)
        self.obs = np.array(self._obs(obs))
        self.episode_returns[:] = 0
        self.episode_lengths[:] = 0
        self.pending[:] = False
        return self.obs

    def step(self, actions: np.ndarray) -> Step:
        out, rewards, terminated, truncated, infos = self._call("step", self.envs.step, actions)
        out = np.array(self._obs(out))  # a copy: an env may write its next observations into the same buffer
        rewards = _numpy(rewards, "rewards").astype(np.float32)
        terminated = _numpy(terminated, "flags").astype(bool)
        truncated = _numpy(truncated, "flags").astype(bool)
        valid = None
        if self.pending.any():  # NEXT_STEP's reset rows: no transition
            valid = ~self.pending
            rewards, terminated, truncated = rewards * valid, terminated & valid, truncated & valid
        live = np.ones(self.num_envs, bool) if valid is None else valid
        self.episode_returns += rewards * live
        self.episode_lengths += live
        done = terminated | truncated
        next_obs, obs = out, out
        episodes = []
        if done.any():
            idx = np.flatnonzero(done)
            episodes = [(int(i), float(self.episode_returns[i]), int(self.episode_lengths[i])) for i in idx]
            self.episode_returns[idx] = 0
            self.episode_lengths[idx] = 0
            if self.mode == AutoresetMode.SAME_STEP:
                final = infos.get("final_obs")
                if final is None:
                    raise HeronError(f"{self.env_id}: a same-step autoreset env must return infos['final_obs'] "
                                     "where an episode ended")
                next_obs = out.copy()
                for i in idx:  # an array of per-env observations (Gymnasium's) or a batched array or tensor
                    next_obs[i] = self._obs(_numpy(final[i], "observations"))
            elif self.mode == AutoresetMode.DISABLED:
                reset = self._obs(self._call("reset", self.envs.reset, options={"reset_mask": done})[0])
                obs = out.copy()
                obs[idx] = reset[idx]
        self.pending = done if self.mode == AutoresetMode.NEXT_STEP else self.pending
        self.obs = obs
        return Step(obs, next_obs, rewards, terminated, truncated, episodes, valid=valid)

    # -- resume -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Which sub-envs are between episodes (``fresh``), and how many resumes came before: the
        envs' own states cannot be saved."""
        fresh = (self.episode_lengths == 0) | self.pending
        return {"native": True, "restarts": self.restarts, "fresh": fresh.tolist()}

    def load_state_dict(self, state: dict) -> Any:
        """Start every sub-env anew, from seeds no earlier start used. The episodes in flight at
        the checkpoint end there (``offpolicy.restore`` marks their last stored step truncated)."""
        if not state.get("native"):
            raise HeronError("this checkpoint was written with another --vector-mode; resume needs the same")
        self.restarts = int(state.get("restarts", 0)) + 1
        cut = len(state["fresh"]) - sum(state["fresh"])
        print(f"heron: note: {self.env_id}'s native vector env cannot save its state: every env starts a new episode "
              f"on resume ({cut} episode(s) in flight end as truncations)", file=sys.stderr)
        return self.reset(seed=self.seed + 1_000_003 * self.restarts)

    def close(self) -> None:
        try:
            self.envs.close()
        except Exception:
            if not self.crashed:
                raise



class OneOfVector(gym.Env):
    """A vector env of one env, seen as a ``gymnasium.Env``: how heron probes the spaces of, checks
    and evaluates on an env that only comes vectorised (a factory with ``num_envs``). The step that
    ends an episode returns its final observation, in each autoreset mode; the next ``reset``
    starts the next episode."""

    def __init__(self, envs: gym.vector.VectorEnv, label: str):
        if envs.num_envs != 1:
            raise HeronError(f"{label} made {envs.num_envs} envs where one was asked for (num_envs=1)")
        self.envs, self.mode = envs, autoreset_mode(envs)
        self.observation_space = envs.single_observation_space
        self.action_space = envs.single_action_space
        self.metadata = {k: v for k, v in envs.metadata.items() if k != "autoreset_mode"}
        self.render_mode = getattr(envs, "render_mode", None)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        obs, _ = self.envs.reset(seed=seed, options=options)
        return _numpy(obs, "observations")[0], {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, infos = self.envs.step(np.asarray(action)[None])
        terminated, truncated = bool(_numpy(terminated, "flags")[0]), bool(_numpy(truncated, "flags")[0])
        obs = _numpy(obs, "observations")[0]
        if (terminated or truncated) and self.mode == AutoresetMode.SAME_STEP:
            obs = _numpy(infos["final_obs"][0], "observations")
        return obs, float(_numpy(reward, "rewards")[0]), terminated, truncated, {}

    def render(self) -> Any:
        frames = self.envs.render()
        return None if frames is None else frames[0]

    def close(self) -> None:
        self.envs.close()


class Borrowed(gym.vector.VectorEnv):
    """A user's vector env instance as a run sees it: everything is the env's, but ``close``, which
    stays with its owner."""

    def __init__(self, envs: gym.vector.VectorEnv):
        self._envs = envs
        self.num_envs, self.metadata = envs.num_envs, envs.metadata
        self.observation_space, self.action_space = envs.observation_space, envs.action_space
        self.single_observation_space = envs.single_observation_space
        self.single_action_space = envs.single_action_space
        self.render_mode = getattr(envs, "render_mode", None)

    def reset(self, **kwargs: Any) -> Any:
        return self._envs.reset(**kwargs)

    def step(self, actions: Any) -> Any:
        return self._envs.step(actions)

    def render(self) -> Any:
        return self._envs.render()

    def __getattr__(self, name: str) -> Any:  # what else the env offers (a device, a state to save)
        return getattr(self._envs, name)

    def close(self, **kwargs: Any) -> None:
        pass


def lend(envs: gym.vector.VectorEnv, eval_env: Any) -> tuple[Any, Any]:
    """(vector factory, single-env factory) for a user's vector env instance: the first returns the
    instance itself (heron does not close it), the second ``eval_env`` or one env of the id the
    instance was made from (``gymnasium.make_vec``)."""
    def vector(num_envs: int) -> Borrowed:
        if num_envs != envs.num_envs:
            raise HeronError(f"the vector env has {envs.num_envs} envs, the run asks for {num_envs}")
        return Borrowed(envs)

    if eval_env is not None:
        if not callable(eval_env):
            raise HeronError(f"eval_env must be a callable that returns a gymnasium.Env, got {type(eval_env).__name__}")
        return vector, eval_env
    spec_id = getattr(getattr(envs, "spec", None), "id", None)
    if spec_id is None or spec_id not in gym.registry:
        raise HeronError(f"heron evaluates on single envs and cannot make one of the {type(envs).__name__} given "
                         "(it was not made from a registered id): pass eval_env= (a callable that returns one env "
                         "of it), or env= a factory with a num_envs parameter")

    def one(**kwargs: Any) -> gym.Env:
        return gym.make(spec_id)

    return vector, one


def vector_env(cfg: Any, num_envs: int, seed: int) -> Any:
    """The run's vector env as ``--vector-mode`` says: the env's own (``native``) or heron's."""
    from heron.core.envs import VecEnv

    if cfg.vector_mode == "native":
        return NativeVecEnv(cfg.env_id, num_envs, seed)
    return VecEnv(cfg.env_id, num_envs, seed, cfg.vector_mode)
