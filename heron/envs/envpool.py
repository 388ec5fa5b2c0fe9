"""EnvPool's vector envs for the tasks Gymnasium also has: ids ``envpool/<Gymnasium id>``
(``envpool/Pendulum-v1``, ``envpool/CartPole-v1``, ``envpool/Hopper-v4``), trained with
``--vector-mode native``.

EnvPool (https://github.com/sail-sg/envpool) steps its envs in a C++ thread pool and resets a
finished env at the step after (Gymnasium's next-step autoreset, which its envs declare). It seeds
its envs when the pool is made and ignores ``reset(seed=...)``; ``EnvPoolVector`` makes the pool
again when a reset asks for a new seed, so that a run's seed decides its episodes, as with every
other env. One env of such an id (evaluation, ``gym.make``) is Gymnasium's own env of that id.
Atari goes through heron's Atari backend instead (``--env-backend envpool``).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

PREFIX = "envpool/"
_SETS_ON_IMPORT = ("MPLBACKEND", "MPLCONFIGDIR")  # EnvPool's import sets these for matplotlib


def load() -> Any:
    """``import envpool``, leaving the process's environment variables as they were (EnvPool's
    import sets matplotlib's backend and config directory for the whole process)."""
    before = {k: os.environ.get(k) for k in _SETS_ON_IMPORT}
    try:
        return importlib.import_module("envpool")
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class EnvPoolVector(VectorEnv):
    """``num_envs`` envs of EnvPool's ``task_id``, seeded ``seed`` (sub-env i: EnvPool's
    ``seed + i``) and again at each reset that names a seed; numpy in and out."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, task_id: str, num_envs: int = 1, seed: int = 0, **kwargs: Any):
        self.task_id, self.num_envs, self.kwargs = task_id, num_envs, kwargs
        self._pool: Any = None
        self._make(seed)
        pool: Any = self._pool
        self.single_observation_space = pool.single_observation_space
        self.single_action_space = pool.single_action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def _make(self, seed: int) -> None:
        if self._pool is not None:
            self._pool.close()
        self._pool = load().make_gymnasium(self.task_id, num_envs=self.num_envs, seed=seed, **self.kwargs)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None:  # a new pool: EnvPool seeds its envs when it makes them
            self._make(seed)
        obs, _ = self._pool.reset()
        return obs, {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, rewards, terminated, truncated, _ = self._pool.step(np.asarray(actions))
        return obs, rewards, terminated, truncated, {}

    def close(self, **kwargs: Any) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def register(env_id: str) -> None:
    """Register ``envpool/<id>`` (EnvPool has the task, Gymnasium the single env); HeronError if
    either is missing."""
    from heron.errors import HeronError

    task = env_id.removeprefix(PREFIX)
    if env_id in gym.registry:
        return
    if task not in load().list_all_envs():
        raise HeronError(f"EnvPool has no task {task!r} ({env_id}); envpool.list_all_envs() lists its tasks")
    if task not in gym.registry:
        raise HeronError(
            f"{env_id}: Gymnasium has no env {task!r} to evaluate on (envpool/ ids name tasks that both have)"
        )
    spec = gym.spec(task)
    gym.register(
        env_id,
        entry_point=spec.entry_point,
        kwargs=dict(spec.kwargs),
        max_episode_steps=spec.max_episode_steps,
        vector_entry_point=lambda num_envs, **kwargs: EnvPoolVector(task, num_envs),  # type: ignore[arg-type]
    )
