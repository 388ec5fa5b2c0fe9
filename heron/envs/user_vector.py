"""A user's vector env as heron sees it: the autoreset mode it declares, its outputs as numpy, one
env of it seen as a ``gymnasium.Env`` (``OneOfVector``), and an instance lent to a run
(``Borrowed``, ``lend``). ``heron.envs.ids`` registers users' vector envs with these;
``heron.envs.native`` steps them."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from heron.errors import HeronError

MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED)


def autoreset_mode(envs: Any) -> AutoresetMode:
    """The autoreset mode a vector env declares in ``metadata["autoreset_mode"]``."""
    mode = (getattr(envs, "metadata", None) or {}).get("autoreset_mode")
    try:
        mode = AutoresetMode(mode)
    except ValueError:
        raise HeronError(
            f"vector env {type(envs).__name__} declares no autoreset mode heron can read "
            f"(metadata['autoreset_mode'] = {mode!r}; expected one of "
            f"{', '.join(m.value for m in MODES)})"
        ) from None
    return mode


def numpy_of(x: Any) -> np.ndarray:
    """``x`` (a numpy array, a list or a torch tensor on any device) as a numpy array."""
    if type(x).__module__.startswith("torch"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


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
        return numpy_of(obs)[0], {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, infos = self.envs.step(np.asarray(action)[None])
        terminated, truncated = bool(numpy_of(terminated)[0]), bool(numpy_of(truncated)[0])
        obs = numpy_of(obs)[0]
        if (terminated or truncated) and self.mode == AutoresetMode.SAME_STEP:
            obs = numpy_of(infos["final_obs"][0])
        return obs, float(numpy_of(reward)[0]), terminated, truncated, {}

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
        raise HeronError(
            f"heron evaluates on single envs and cannot make one of the {type(envs).__name__} given "
            "(it was not made from a registered id): pass eval_env= (a callable that returns one env "
            "of it), or env= a factory with a num_envs parameter"
        )

    def one(**kwargs: Any) -> gym.Env:
        return gym.make(spec_id)

    return vector, one
