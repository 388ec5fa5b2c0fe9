"""A vector env that steps its sub-envs itself (``--vector-mode native``): an id registered with a
``vector_entry_point`` (Gymnasium's CartPole, heron's ``heron/TorchPendulum-v1``, a user's own),
read in whichever of Gymnasium's autoreset modes it declares, with the Step layout every algorithm
reads (``heron.envs.make``):

* ``DISABLED``: finished sub-envs are reset right after the step (``reset_mask``), as heron's own
  vector envs do;
* ``SAME_STEP``: the step returns the reset observation; the episode's final observation, which a
  truncation bootstraps from, comes from ``infos["final_obs"]``;
* ``NEXT_STEP`` (Gymnasium's default): the step after a finished one resets those sub-envs and
  ignores their actions. That row is not a transition: ``Step.valid`` is False there, and the
  loops store nothing of it. The next observation to act on is then the reset one.

Observations, rewards and flags may be numpy arrays or torch tensors. SAC, TD3 and PPO keep a
tensor env's as tensors on its device (``keep_tensors``); DreamerV2 reads numpy. An env that offers
``state_dict()``/``load_state_dict()`` resumes exactly; any other's episodes start anew from fresh
seeds on resume, and the episodes in flight end as truncations (said once in the run's log);
everything else resumes exactly.
"""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from heron.envs.ids import check_env_id, gym_env_id
from heron.envs.make import obs_converter, obs_dtype, observation_space
from heron.envs.step import Step, env_call
from heron.envs.user_vector import autoreset_mode, numpy_of
from heron.errors import EnvCrashed, HeronError


def require_vector_entry_point(env_id: str) -> None:
    """What --vector-mode native needs of an id, checked before a run directory exists."""
    if gym.spec(gym_env_id(env_id)).vector_entry_point is None:
        raise HeronError(
            f"{env_id} has no vector entry point: --vector-mode native needs an env registered with "
            "one (gymnasium.register(..., vector_entry_point=...)); use --vector-mode sync or async"
        )


def _same_device(a: torch.device, b: torch.device) -> bool:
    """Whether two devices are one (``cuda`` without an index: the current one)."""
    if a.type != b.type:
        return False
    current = torch.cuda.current_device() if a.type == "cuda" and torch.cuda.is_available() else 0
    return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)


def check_tensor_step(
    env_id: str, num_envs: int, device: torch.device, obs: Any, rewards: Any, terminated: Any, truncated: Any
) -> None:
    """What a tensor env's step must return (docs/guide/vector-envs.md): observations [N, ...],
    rewards [N] (floating point) and the two flags [N] (bool), all tensors on the device its
    reset's observations were on. HeronError naming the first that is not."""
    outputs = (
        ("observations", obs, None),
        ("rewards", rewards, "float"),
        ("terminated", terminated, "bool"),
        ("truncated", truncated, "bool"),
    )
    for name, x, want in outputs:
        if not isinstance(x, torch.Tensor):
            raise HeronError(f"{env_id}: a tensor env's step returns {name} as {type(x).__name__}, not a torch tensor")
        if not _same_device(x.device, device):
            raise HeronError(
                f"{env_id}: a tensor env's step returns {name} on {x.device}, its observations on {device}"
            )
        if x.shape[:1] != (num_envs,) or (want and x.dim() != 1):
            raise HeronError(
                f"{env_id}: a tensor env's step returns {name} of shape {tuple(x.shape)} for {num_envs} "
                f"envs (expected [{num_envs}{', ...' if want is None else ''}])"
            )
        if (want == "bool" and x.dtype != torch.bool) or (want == "float" and not x.is_floating_point()):
            raise HeronError(f"{env_id}: a tensor env's step returns {name} as {x.dtype}, not {want}")


class NativeVecEnv:
    """``num_envs`` envs stepped by the env's own vector implementation, with ``VecEnv``'s interface.

    With ``keep_tensors`` an env that returns torch tensors is read as tensors: the Step's
    observations, rewards and flags stay on the env's device (``device``), and actions are handed
    to it as tensors; ``train_device`` is the run's, which a GPU env must share (None: the env's own
    device, for a probe). Otherwise
    everything is read as numpy on the CPU."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int,
        envs: gym.vector.VectorEnv | None = None,
        keep_tensors: bool = False,
        train_device: torch.device | str | None = "cpu",
        restore_state: bool = True,
    ):
        check_env_id(env_id)
        self.env_id, self.num_envs, self.seed = env_id, num_envs, seed
        if envs is None:
            require_vector_entry_point(env_id)
            envs = env_call(
                env_id,
                "make_vec",
                gym.make_vec,
                gym_env_id(env_id),
                num_envs=num_envs,
                vectorization_mode="vector_entry_point",
            )
        if envs.num_envs != num_envs:
            raise HeronError(f"the vector env has {envs.num_envs} envs, the run asks for {num_envs}")
        self.envs: Any = envs  # a user's vector env may save its state (state_dict, load_state_dict)
        self.mode = autoreset_mode(envs)
        space = envs.single_observation_space
        if not isinstance(space, gym.spaces.Box):
            raise HeronError(
                f"{env_id}: --vector-mode native takes Box observations, the vector env has "
                f"{type(space).__name__}; use --vector-mode sync (heron flattens Dict observations)"
            )
        self.single_observation_space = observation_space(space)
        self.single_action_space = envs.single_action_space
        self.obs_dtype = obs_dtype(space)
        self._convert = obs_converter(space)
        self.keep_tensors = keep_tensors
        self.train_device = None if train_device is None else torch.device(train_device)
        self.restore_state = restore_state  # False: every episode starts anew on resume, even if the env saves
        self.tensors = False  # whether the env's outputs are read as tensors (known at the first reset)
        self.checked = False  # whether a tensor env's first step kept the contract (check_tensor_step)
        self.device = torch.device("cpu")  # where they are
        self.whole_games = False
        self.restarts = 0  # resumes, each of which started every episode anew
        self.obs: Any = None
        self.crashed = False

    def _obs(self, x: Any) -> Any:
        """Observations as the loops read them: a copy (an env may write its next observations
        into the same buffer), in heron's dtype, as numpy or as a tensor on the env's device."""
        if not self.tensors:
            return np.array(self._convert(numpy_of(x)))
        x = torch.as_tensor(x, device=self.device)
        return x.to(torch.uint8 if self.obs_dtype == np.uint8 else torch.float32, copy=True)

    def _as(self, x: Any, dtype: Any) -> Any:
        if self.tensors:
            return torch.as_tensor(x, device=self.device).to({np.float32: torch.float32, bool: torch.bool}[dtype])
        return numpy_of(x).astype(dtype)

    def _zeros(self, dtype: Any) -> Any:
        if self.tensors:
            return torch.zeros(
                self.num_envs,
                dtype={np.float64: torch.float64, np.int64: torch.int64, bool: torch.bool}[dtype],
                device=self.device,
            )
        return np.zeros(self.num_envs, dtype)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return env_call(self.env_id, what, fn, *args, **kwargs)
        except EnvCrashed:
            self.crashed = True
            raise

    def reset(self, seed: int | None = None) -> Any:
        """Every sub-env from a new episode, seeded ``seed + i`` (the run's seed by default)."""
        obs, _ = self._call("reset", self.envs.reset, seed=self.seed if seed is None else seed)
        self.tensors = self.keep_tensors and isinstance(obs, torch.Tensor)
        if self.tensors:
            self.device = obs.device
            if (
                self.device.type != "cpu"
                and self.train_device is not None
                and not _same_device(self.device, self.train_device)
            ):
                raise HeronError(
                    f"the vector env returns tensors on {self.device} and the run trains on "
                    f"{self.train_device}: pass --device {self.device}"
                )
        self.obs = self._obs(obs)
        self.episode_returns, self.episode_lengths = self._zeros(np.float64), self._zeros(np.int64)
        self.pending = self._zeros(bool)  # NEXT_STEP: the next step resets these
        return self.obs

    def step(self, actions: Any) -> Step:
        if self.tensors:
            actions = torch.as_tensor(actions, device=self.device)
        out, rewards, terminated, truncated, infos = self._call("step", self.envs.step, actions)
        if self.tensors and not self.checked:
            check_tensor_step(self.env_id, self.num_envs, self.device, out, rewards, terminated, truncated)
            self.checked = True
        out = self._obs(out)
        rewards = self._as(rewards, np.float32)
        terminated, truncated = self._as(terminated, bool), self._as(truncated, bool)
        valid = None
        if self.pending.any():  # NEXT_STEP's reset rows: no transition
            valid = ~self.pending
            rewards, terminated, truncated = rewards * valid, terminated & valid, truncated & valid
        self.episode_returns += rewards if valid is None else rewards * valid
        self.episode_lengths += 1 if valid is None else valid
        done = terminated | truncated
        next_obs, obs = out, out
        episodes = []
        if done.any():
            idx = (done.nonzero().flatten() if self.tensors else np.flatnonzero(done)).tolist()
            episodes = [(i, float(self.episode_returns[i]), int(self.episode_lengths[i])) for i in idx]
            self.episode_returns[idx] = 0
            self.episode_lengths[idx] = 0
            if self.mode == AutoresetMode.SAME_STEP:
                final = infos.get("final_obs")
                if final is None:
                    raise HeronError(
                        f"{self.env_id}: a same-step autoreset env must return infos['final_obs'] "
                        "where an episode ended"
                    )
                next_obs = self._obs(out)
                for i in idx:  # an array of per-env observations (Gymnasium's) or a batched array or tensor
                    next_obs[i] = self._obs(final[i])
            elif self.mode == AutoresetMode.DISABLED:
                reset = self._obs(self._call("reset", self.envs.reset, options={"reset_mask": done})[0])
                obs = self._obs(out)
                obs[idx] = reset[idx]
        started = None
        if self.mode == AutoresetMode.NEXT_STEP:
            started = self._zeros(bool) if valid is None else ~valid  # the reset rows' observations begin episodes
            self.pending = done
        self.obs = obs
        return Step(obs, next_obs, rewards, terminated, truncated, episodes, valid=valid, started=started)

    # -- resume -------------------------------------------------------------------------------
    def saves_state(self) -> bool:
        """Whether the env offers ``state_dict()`` and ``load_state_dict(state)`` (heron's tensor
        Pendulum does): then a resume continues its episodes exactly."""
        return self.restore_state and all(
            callable(getattr(self.envs, name, None)) for name in ("state_dict", "load_state_dict")
        )

    def state_dict(self) -> dict:
        """Which sub-envs are between episodes (``fresh``) and how many resumes came before; with an
        env that saves its state, that state and heron's view of it (the observations to act on,
        the episodes' running returns), so that nothing restarts."""
        state = {"native": True, "restarts": self.restarts}
        if not self.saves_state():
            return {**state, "fresh": ((self.episode_lengths == 0) | self.pending).tolist()}
        return {
            **state,
            "fresh": [True] * self.num_envs,
            "env": _copied(self.envs.state_dict()),
            "obs": _copied(self.obs),
            "episode_returns": _copied(self.episode_returns),
            "episode_lengths": _copied(self.episode_lengths),
            "pending": _copied(self.pending),
        }

    def load_state_dict(self, state: dict) -> Any:
        """Continue from a checkpoint's state: exactly, where the env saved its own; else every
        sub-env starts anew, from seeds no earlier start used, and the episodes in flight at the
        checkpoint end there (``offpolicy.restore`` marks their last stored step truncated)."""
        if not state.get("native"):
            raise HeronError("this checkpoint was written with another --vector-mode; resume needs the same")
        if "env" in state and self.saves_state():
            self.reset(seed=self.seed)  # (the kind and device of its outputs)
            self.envs.load_state_dict(state["env"])
            self.restarts = int(state["restarts"])
            self.obs = self._like(state["obs"])
            self.episode_returns, self.episode_lengths, self.pending = (
                self._like(state[k]) for k in ("episode_returns", "episode_lengths", "pending")
            )
            return self.obs
        self.restarts = int(state.get("restarts", 0)) + 1
        cut = len(state["fresh"]) - sum(state["fresh"])
        print(
            f"heron: note: {self.env_id}'s native vector env cannot save its state: every env starts a new episode "
            f"on resume ({cut} episode(s) in flight end as truncations)",
            file=sys.stderr,
        )
        return self.reset(seed=self.seed + 1_000_003 * self.restarts)

    def _like(self, x: Any) -> Any:
        """A saved array or tensor as this env's outputs are: a tensor on its device, or numpy."""
        if self.tensors:
            return torch.as_tensor(x).to(self.device)
        return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)

    def close(self) -> None:
        try:
            self.envs.close()
        except Exception:
            if not self.crashed:
                raise


def _copied(x: Any) -> Any:
    """``x`` (nested dicts and lists of tensors, arrays and plain values) with every tensor and array
    copied (on the CPU): a checkpoint's, untouched by the steps that follow."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", copy=True)
    if isinstance(x, np.ndarray):
        return x.copy()
    if isinstance(x, dict):
        return {k: _copied(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_copied(v) for v in x)
    return x


def vector_env(cfg: Any, num_envs: int, seed: int, device: torch.device | str = "cpu") -> Any:
    """SAC's and TD3's vector env as ``--vector-mode`` says: the env's own (``native``; a tensor env's
    outputs stay tensors, on its device, which a CUDA env shares with the run's ``device``) or heron's."""
    from heron.envs.make import VecEnv

    if cfg.vector_mode == "native":
        return NativeVecEnv(cfg.env_id, num_envs, seed, keep_tensors=True, train_device=device)
    return VecEnv(cfg.env_id, num_envs, seed, cfg.vector_mode)
