"""Environment ids: which env an id names and whether this machine can make it.

An id is a Gymnasium id (``Hopper-v5``, ``ALE/Pong-v5``, ``PongNoFrameskip-v4``), a PyBullet id
(``heron.envs.pybullet``), one of heron's partially observable variants (``heron/...-NoVel-v1``),
EnvPool's vector env of a Gymnasium task (``envpool/<id>``, ``heron.envs.envpool``), a user's
``module:name`` (a module that registers ``name``, or a factory or env class in it) or,
for ``heron.train(env=fn)``, a callable known to this process. ``check_env_id`` turns an unknown id
or a missing optional extra into a one-line ``HeronError``.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from heron.envs import atari
from heron.envs.pybullet import PYBULLET_IDS
from heron.envs.user_vector import OneOfVector, lend
from heron.errors import HeronError, first_line, install_hint

# Environment families that live outside Gymnasium's default registry: id prefix -> module that
# registers them on import, and the extra that installs it.
_PLUGINS = {
    "ALE/": ("ale_py", "atari"),
}
_MUJOCO_NAMES = (
    "Hopper",
    "HalfCheetah",
    "Walker2d",
    "Ant",
    "Humanoid",
    "Swimmer",
    "Reacher",
    "InvertedPendulum",
    "InvertedDoublePendulum",
    "Pusher",
    "HumanoidStandup",
)


class KeepObservation(gym.ObservationWrapper):
    """Keep only some entries of a vector observation: velocities masked out make classic control
    tasks partially observable, the standard test for recurrent policies."""

    def __init__(self, env: gym.Env, keep: tuple[int, ...]):
        super().__init__(env)
        self.keep = np.asarray(keep)
        box = env.observation_space
        assert isinstance(box, gym.spaces.Box), "a vector observation"
        self.observation_space = gym.spaces.Box(box.low[self.keep], box.high[self.keep], dtype=box.dtype)

    def observation(self, obs):
        return obs[self.keep]


def _masked(base: str, keep: tuple[int, ...]) -> Callable[..., gym.Env]:
    def make(**kwargs: Any) -> gym.Env:
        return KeepObservation(gym.make(base, **kwargs).unwrapped, keep)

    return make


# Partially observable variants (heron's own ids): positions only, velocities masked out.
POMDP_IDS = {
    "heron/Pendulum-NoVel-v1": ("Pendulum-v1", (0, 1), 200),  # cos, sin of the angle; no angular velocity
    "heron/CartPole-NoVel-v1": ("CartPole-v1", (0, 2), 500),  # cart position, pole angle
}
for _id, (_base, _keep, _steps) in POMDP_IDS.items():
    if _id not in gym.registry:
        gym.register(_id, entry_point=_masked(_base, _keep), max_episode_steps=_steps)
# heron's tensor Pendulum (heron.envs.torch_pendulum) for gymnasium.make_vec(..., vectorization_mode=
# "vector_entry_point"); one env of it (evaluation, gym.make) is Gymnasium's Pendulum, the same dynamics
if "heron/TorchPendulum-v1" not in gym.registry:
    gym.register(
        "heron/TorchPendulum-v1",
        entry_point="gymnasium.envs.classic_control.pendulum:PendulumEnv",
        vector_entry_point="heron.envs.torch_pendulum:TorchPendulum",
        max_episode_steps=200,
    )


# -- users' own environments --------------------------------------------------------------------
# "module:name" imports the module first (Gymnasium's own convention for "module:EnvId"); when the
# module registers no env of that name, ``name`` may be a factory function or an env class in it,
# which heron registers as "heron-user/module.name". heron.train(env=fn) with a callable that a new
# process cannot import (a lambda, a closure, something defined in __main__) gets an id of the
# form "<callable module.qualname>", known to this process only: resume and evaluate take it again.
# A factory with a ``num_envs`` parameter makes vector envs: heron registers it as the id's vector
# entry point (``--vector-mode native``) and plays single envs on one-env vector envs of it
# (``heron.envs.user_vector.OneOfVector``). A vector env instance (heron.train(env=envs)) is lent to the
# run: its vector entry point returns it, its single envs come from ``eval_env`` or its own id.
_CALLABLES: dict[str, Any] = {}  # env id -> the callable given for it in this process


def is_callable_id(env_id: str) -> bool:
    return env_id.startswith("<callable ") and env_id.endswith(">")


def callable_env_id(fn: Any) -> str:
    """The id heron records for ``heron.train(algo, env=fn)``: ``module:qualname`` when another
    process can import ``fn`` by that path, else a ``<callable ...>`` id valid in this process."""
    if not callable(fn):
        raise HeronError(
            f"env must be a callable that returns a gymnasium.Env (a function or an Env class), got {type(fn).__name__}"
        )
    module, qualname = getattr(fn, "__module__", None) or "?", getattr(fn, "__qualname__", type(fn).__name__)
    if module != "__main__" and "<" not in qualname:
        try:
            found: Any = importlib.import_module(module)
            for part in qualname.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError):
            found = None
        if found is fn:
            return f"{module}:{qualname}"
    env_id = f"<callable {module}.{qualname}>"
    use_callable(env_id, fn)
    return env_id


def instance_env_id(envs: gym.vector.VectorEnv) -> str:
    """The id heron records for ``heron.train(algo, env=envs)``, a vector env instance."""
    return f"<callable {type(envs).__module__}.{type(envs).__qualname__} instance>"


def takes_num_envs(fn: Any) -> bool:
    """Whether ``fn`` is a vector env factory: it has a ``num_envs`` parameter."""
    try:
        return "num_envs" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def use_callable(env_id: str, fn: Any, eval_env: Callable[..., Any] | None = None) -> None:
    """Make ``env_id`` (a run's recorded id) mean ``fn`` in this process: an env callable, a vector
    env factory, or a vector env instance (whose single envs come from ``eval_env``)."""
    if isinstance(fn, gym.vector.VectorEnv):
        vector, one = lend(fn, eval_env)
        _CALLABLES[env_id] = fn
        _register(_gym_id(env_id), one, env_id, replace=True, vector=vector)
        return
    if not callable(fn):
        raise HeronError(
            f"env must be a callable that returns a gymnasium.Env or a vector env, or a vector env; "
            f"got {type(fn).__name__}"
        )
    _CALLABLES[env_id] = fn
    _register(_gym_id(env_id), fn, env_id, replace=True)


def forget_callable(env_id: str) -> None:
    _CALLABLES.pop(env_id, None)
    gym.registry.pop(_gym_id(env_id), None)


def _gym_id(env_id: str) -> str:
    """A registry id (no ':' so that gym.make does not import) for a factory heron registers."""
    return "heron-user/" + re.sub(r"[^\w.-]+", "_", env_id.strip("<>").removeprefix("callable ").replace(":", "."))


def _accepted(fn: Callable[..., Any], kwargs: dict) -> dict:
    """The keyword arguments ``fn`` takes, of those Gymnasium passes."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): give it nothing
        return {}
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    return {k: v for k, v in kwargs.items() if takes_all or k in {p.name for p in params}}


def _register(
    gym_id: str, fn: Callable[..., Any], label: str, replace: bool = False, vector: Callable[..., Any] | None = None
) -> None:
    """Register ``fn`` (an env callable, or a vector env factory) under ``gym_id``; ``vector``, or
    ``fn`` itself when it takes ``num_envs``, becomes the id's vector entry point."""
    if gym_id in gym.registry and not replace:
        return
    gym.registry.pop(gym_id, None)
    if vector is None and takes_num_envs(fn):
        vector = fn

    def make(**kwargs: Any) -> gym.Env:
        env = fn(**_accepted(fn, {**kwargs, "num_envs": 1} if takes_num_envs(fn) else kwargs))
        if isinstance(env, gym.vector.VectorEnv):
            return OneOfVector(env, label)
        if not isinstance(env, gym.Env):
            raise HeronError(f"{label} returned {type(env).__name__}, not a gymnasium.Env or a vector env")
        return env

    def make_vec(num_envs: int, **kwargs: Any) -> gym.vector.VectorEnv:
        assert vector is not None, "registered only with a vector factory"
        envs = vector(**_accepted(vector, {**kwargs, "num_envs": num_envs}))
        if not isinstance(envs, gym.vector.VectorEnv):
            raise HeronError(
                f"{label} returned {type(envs).__name__} for num_envs={num_envs}, not a gymnasium.vector.VectorEnv"
            )
        return envs

    gym.register(gym_id, entry_point=make, vector_entry_point=make_vec if vector is not None else None)  # type: ignore[arg-type]  # gymnasium's VectorEnvCreator


def _import_user_module(module: str, env_id: str) -> Any:
    """Import the module of a ``module:name`` id; the working directory counts, as for ``python -m``."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or module
        if not (module == missing or module.startswith(missing + ".")):  # the module itself imports a missing one
            raise HeronError(f"importing {module} for --env-id {env_id} failed: {first_line(exc)}") from None
        raise HeronError(
            f"cannot import module {module!r} for --env-id {env_id}: run heron from the directory "
            f"that holds it, add that directory to PYTHONPATH, or pip install your package"
        ) from None
    except HeronError:
        raise
    except Exception as exc:  # the module raised while importing
        raise HeronError(f"importing {module} for --env-id {env_id} failed: {first_line(exc)}") from None


def gym_env_id(env_id: str) -> str:
    """The registry id ``gym.make`` gets for ``env_id`` (registering a user's factory on first use);
    HeronError when it names nothing."""
    if env_id in _CALLABLES:
        return _gym_id(env_id)
    if is_callable_id(env_id):
        raise HeronError(
            f"environment {env_id} was given to heron.train(env=...) as a callable that cannot be "
            "imported (a lambda, a closure or a function of __main__): pass it again with "
            "heron.evaluate(run_dir, env=...) or heron.resume(run_dir, env=...), or define it in a "
            "module and train with its import path"
        )
    if ":" not in env_id:
        return env_id
    module_name, name = env_id.split(":", 1)
    module = _import_user_module(module_name, env_id)
    if name in gym.registry:
        return name
    found: Any = module
    for part in name.split("."):
        found = getattr(found, part, None)
    if callable(found):
        gym_id = _gym_id(env_id)
        _register(gym_id, found, env_id)
        return gym_id
    registered = [k for k in gym.registry if not k.startswith("heron-user/")]
    close = difflib.get_close_matches(
        name, registered + [k for k in dir(module) if not k.startswith("_")], n=3, cutoff=0.6
    )
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise HeronError(f"{module_name} registers no environment {name!r} and has no env factory of that name{hint}")


def check_env_id(env_id: str) -> None:
    """Raise HeronError (with close matches) unless ``env_id`` can be made here. DeepMind Control
    ids (``dmc_<domain>_<task>``) are registered into Gymnasium's registry here, on first use; a
    user's ``module:name`` is imported (and its factory registered) here."""
    if ":" in env_id or is_callable_id(env_id) or env_id in _CALLABLES:
        gym_env_id(env_id)
        return
    if env_id.startswith("dmc_"):
        from heron.envs import dmc

        dmc.register(env_id)
        return
    if env_id.startswith("envpool/"):  # EnvPool's vector env of a Gymnasium task (heron.envs.envpool)
        _require("envpool", "envpool", env_id)
        from heron.envs import envpool

        envpool.register(env_id)
        return
    if env_id in PYBULLET_IDS:
        _require("pybullet", "pybullet", env_id)
        return
    for prefix, (module, extra) in _PLUGINS.items():
        if env_id.startswith(prefix):
            _require(module, extra, env_id)
    if env_id.endswith("NoFrameskip-v4") or env_id.endswith("Deterministic-v4"):
        _require("ale_py", "atari", env_id)
    if atari.is_atari(env_id):
        _require("cv2", "atari", env_id)  # the 84x84 resize of the standard preprocessing
    if env_id not in gym.registry:
        known = list(gym.registry) + list(PYBULLET_IDS)
        close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise HeronError(f"unknown environment id {env_id!r}{hint}")
    if env_id.split("-")[0] in _MUJOCO_NAMES:
        _require("mujoco", "mujoco", env_id)


def _require(module: str, extra: str, env_id: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError:
        raise HeronError(f"{env_id} needs the optional extra {extra}: {install_hint(extra)}") from None
