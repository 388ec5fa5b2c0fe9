"""Environments: the ONE place in heron that knows Gymnasium's layout.

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

import difflib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from heron.core import atari
from heron.core.checkpoint import generator_state
from heron.core.faults import close_bounded, env_call, inject
from heron.core.transitions import Step
from heron.errors import EnvCrashed, HeronError, first_line

# Headless MuJoCo rendering (videos): EGL unless the user chose a backend (osmesa on machines
# without EGL: Debian's libosmesa6 with MUJOCO_GL=osmesa). GLFW needs a display.
if not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")

# Environment families that live outside Gymnasium's default registry: id prefix -> module that
# registers them on import, and the extra that installs it.
_PLUGINS = {
    "ALE/": ("ale_py", "atari"),
}
PYBULLET_IDS = {
    "HopperBulletEnv-v0": "HopperBulletEnv",
    "AntBulletEnv-v0": "AntBulletEnv",
    "HalfCheetahBulletEnv-v0": "HalfCheetahBulletEnv",
    "Walker2DBulletEnv-v0": "Walker2DBulletEnv",
    "InvertedPendulumBulletEnv-v0": "InvertedPendulumBulletEnv",
    "ReacherBulletEnv-v0": "ReacherBulletEnv",
}
_MUJOCO_NAMES = ("Hopper", "HalfCheetah", "Walker2d", "Ant", "Humanoid", "Swimmer", "Reacher",
                 "InvertedPendulum", "InvertedDoublePendulum", "Pusher", "HumanoidStandup")


class KeepObservation(gym.ObservationWrapper):
    """Keep only some entries of a vector observation: velocities masked out make classic control
    tasks partially observable, the standard test for recurrent policies."""

    def __init__(self, env: gym.Env, keep: tuple[int, ...]):
        super().__init__(env)
        self.keep = np.asarray(keep)
        box = env.observation_space
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


# -- users' own environments --------------------------------------------------------------------
# "module:name" imports the module first (Gymnasium's own convention for "module:EnvId"); when the
# module registers no env of that name, ``name`` may be a factory function or an env class in it,
# which heron registers as "heron-user/module.name". heron.train(env=fn) with a callable that a new
# process cannot import (a lambda, a closure, something defined in __main__) gets an id of the
# form "<callable module.qualname>", known to this process only: resume and evaluate take it again.
_CALLABLES: dict[str, Callable[..., Any]] = {}  # env id -> the callable given for it in this process


def is_callable_id(env_id: str) -> bool:
    return env_id.startswith("<callable ") and env_id.endswith(">")


def callable_env_id(fn: Any) -> str:
    """The id heron records for ``heron.train(algo, env=fn)``: ``module:qualname`` when another
    process can import ``fn`` by that path, else a ``<callable ...>`` id valid in this process."""
    if not callable(fn):
        raise HeronError(f"env must be a callable that returns a gymnasium.Env (a function or an Env class), "
                         f"got {type(fn).__name__}")
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


def use_callable(env_id: str, fn: Any) -> None:
    """Make ``env_id`` (a run's recorded id) mean ``fn`` in this process."""
    if not callable(fn):
        raise HeronError(f"env must be a callable that returns a gymnasium.Env, got {type(fn).__name__}")
    _CALLABLES[env_id] = fn
    _register(_gym_id(env_id), fn, env_id, replace=True)


def forget_callable(env_id: str) -> None:
    _CALLABLES.pop(env_id, None)
    gym.registry.pop(_gym_id(env_id), None)


def _gym_id(env_id: str) -> str:
    """A registry id (no ':' so that gym.make does not import) for a factory heron registers."""
    return "heron-user/" + re.sub(r"[^\w.-]+", "_", env_id.strip("<>").removeprefix("callable ").replace(":", "."))


def _register(gym_id: str, fn: Callable[..., Any], label: str, replace: bool = False) -> None:
    if gym_id in gym.registry and not replace:
        return
    gym.registry.pop(gym_id, None)

    def make(**kwargs: Any) -> gym.Env:
        try:
            params = inspect.signature(fn).parameters.values()
            takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
            kwargs = {k: v for k, v in kwargs.items() if takes_all or k in {p.name for p in params}}
        except (TypeError, ValueError):  # no signature to read (a builtin): give it nothing
            kwargs = {}
        env = fn(**kwargs)
        if not isinstance(env, gym.Env):
            raise HeronError(f"{label} returned {type(env).__name__}, not a gymnasium.Env")
        return env

    gym.register(gym_id, entry_point=make)


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
        raise HeronError(f"cannot import module {module!r} for --env-id {env_id}: run heron from the directory "
                         f"that holds it, add that directory to PYTHONPATH, or pip install your package") from None
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
        raise HeronError(f"environment {env_id} was given to heron.train(env=...) as a callable that cannot be "
                         "imported (a lambda, a closure or a function of __main__): pass it again with "
                         "heron.evaluate(run_dir, env=...) or heron.resume(run_dir, env=...), or define it in a "
                         "module and train with its import path")
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
    close = difflib.get_close_matches(name, registered + [k for k in dir(module) if not k.startswith("_")], n=3,
                                      cutoff=0.6)
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
        from heron.core import dmc

        dmc.register(env_id)
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
        raise HeronError(f"{env_id} needs the optional extra: pip install 'heron[{extra}]'") from None


_PYBULLET_MODULES = ("pybullet_envs.gym_locomotion_envs", "pybullet_envs.gym_pendulum_envs",
                     "pybullet_envs.gym_manipulator_envs")


def _import_pybullet_envs() -> list[Any]:
    """pybullet_envs' env modules (locomotion, pendulum, manipulator). pybullet_envs is written
    against the old ``gym`` package (not installable next to numpy 2). It uses only ``gym.Env``,
    ``gym.spaces``, ``gym.utils.seeding`` and a registry it writes to, so where ``gym`` is absent it
    is given those from Gymnasium (and a registry we ignore), and ``pkg_resources.parse_version``
    where setuptools no longer has it. The stand-ins are in ``sys.modules`` only while pybullet_envs
    imports (it binds what it needs then), and the folders it puts on ``sys.path`` are taken off
    again: the process is left as it was, so a later ``import gym`` fails as it should."""
    if all(name in sys.modules for name in _PYBULLET_MODULES):
        return [sys.modules[name] for name in _PYBULLET_MODULES]
    import types

    path, stand_ins = list(sys.path), {}
    try:
        importlib.import_module("gym")
    except Exception:
        import gymnasium.utils.seeding

        shim = types.ModuleType("gym")
        registration = types.ModuleType("gym.envs.registration")
        registration.registry = types.SimpleNamespace(env_specs={}, all=lambda: [])
        registration.register = lambda *args, **kwargs: None
        registration.make = registration.spec = None
        envs = types.ModuleType("gym.envs")
        envs.registration, envs.registry = registration, registration.registry
        shim.Env, shim.spaces, shim.utils, shim.envs = gym.Env, gym.spaces, gymnasium.utils, envs
        shim.__version__ = "0.26.2"  # what pybullet_envs compares against: the new-API branch
        stand_ins.update({"gym": shim, "gym.spaces": gym.spaces, "gym.utils": gymnasium.utils,
                          "gym.utils.seeding": gymnasium.utils.seeding, "gym.envs": envs,
                          "gym.envs.registration": registration})
    try:
        importlib.import_module("pkg_resources")
    except Exception:  # setuptools >= 81 dropped it; pybullet_envs only needs parse_version
        pkg = types.ModuleType("pkg_resources")
        pkg.parse_version = lambda v: tuple(int(p) for p in str(v).split(".") if p.isdigit())
        stand_ins["pkg_resources"] = pkg
    sys.modules.update(stand_ins)
    try:
        return [importlib.import_module(name) for name in _PYBULLET_MODULES]
    finally:
        sys.path[:] = path
        for name, module in stand_ins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


class PyBulletAdapter(gym.Env):
    """Presents a pybullet_envs locomotion env (old Gym API) as a Gymnasium env.

    Old API: ``reset() -> obs`` and ``step(a) -> (obs, reward, done, info)``; episodes are cut at
    1000 steps by the TimeLimit that ``make_env`` adds, so ``done`` here is a true termination.
    Initial states are drawn from a RandomState seeded from this env's ``np_random`` at every
    reset, so seeding and heron's exact resume work as for any Gymnasium env.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 60}

    def __init__(self, name: str, render_mode: str | None = None):
        loco, pend, manip = _import_pybullet_envs()
        cls = next(getattr(m, name) for m in (loco, pend, manip) if hasattr(m, name))
        self._env = cls(render=False) if name in dir(loco) else cls()
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, self._env.observation_space.shape, np.float32)
        low, high = self._env.action_space.low, self._env.action_space.high
        self.action_space = gym.spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        legacy = np.random.RandomState(int(self.np_random.integers(2**31)))  # robots call .randint
        self._env.np_random = self._env.robot.np_random = legacy
        return np.asarray(self._env.reset(), np.float32), {}

    def step(self, action):
        obs, reward, done, info = self._env.step(np.asarray(action))
        return np.asarray(obs, np.float32), float(reward), bool(done), False, dict(info)

    def render(self):
        return self._env.render(mode="rgb_array")

    def close(self):
        self._env.close()


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


def make_env(env_id: str, render_mode: str | None = None, flatten_dict: bool = True,
             max_episode_steps: int | None = None, training: bool = False, **kwargs: Any) -> gym.Env:
    """One Gymnasium env with heron's observation conventions (no seeding: VecEnv seeds).

    Atari ids (``ALE/<Game>-v5``, ``<Game>NoFrameskip-v4``) get the standard preprocessing of
    ``heron.core.atari``; ``training=True`` adds its training-only wrappers (episodic life, reward
    clipping, whole-game statistics)."""
    check_env_id(env_id)
    if env_id in PYBULLET_IDS:
        env = PyBulletAdapter(PYBULLET_IDS[env_id], render_mode=render_mode)
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
        return gym.spaces.Box(space.low.astype(obs_dtype(space)), space.high.astype(obs_dtype(space)),
                              dtype=obs_dtype(space))
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
        out = gym.vector.utils.create_empty_array(self.single_observation_space, self.num_envs)
        return gym.vector.utils.concatenate(self.single_observation_space, items, out)

    def reset(self, seed: int | list[int | None] | None = None, options: dict | None = None) -> tuple[Any, dict]:
        seeds = ([seed + i for i in range(self.num_envs)] if isinstance(seed, int)
                 else seed if seed is not None else [None] * self.num_envs)
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

    def __init__(self, env_id: str, num_envs: int, seed: int, mode: str = "sync",
                 flatten_dict: bool = True, max_episode_steps: int | None = None,
                 render_mode: str | None = None, env_fn: Callable[[], gym.Env] | None = None, **kwargs: Any):
        check_env_id(env_id)
        self.env_id, self.num_envs, self.seed = env_id, num_envs, seed
        fns: list[Callable[[], gym.Env]] = [
            env_fn or (lambda: make_env(env_id, render_mode=render_mode, flatten_dict=flatten_dict,
                                        max_episode_steps=max_episode_steps, training=True, **kwargs))
            for _ in range(num_envs)
        ]
        # heron's Atari stack ends episodes at lives and GameStats reports whole games; an
        # algorithm's own stack (env_fn, e.g. DreamerV2's) plays whole games as episodes
        self.whole_games = atari.is_atari(env_id) and env_fn is None
        if mode == "async":
            self.envs = AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.DISABLED)
        elif self.whole_games:  # the game statistics arrive in infos
            self.envs = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.DISABLED)
        else:
            self.envs = SerialEnvs(fns)
        self.single_observation_space = observation_space(self.envs.single_observation_space)
        self.single_action_space = self.envs.single_action_space
        space = self.envs.single_observation_space
        self.obs_dtype: Any = ({k: obs_dtype(v) for k, v in space.spaces.items()}
                               if isinstance(space, gym.spaces.Dict) else obs_dtype(space))
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
        self._pre_reset_rng = [generator_state(np.random.default_rng(self.seed + i))
                               for i in range(self.num_envs)]  # what reset(seed=...) will install
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
            return {"rng": [generator_state(np.random.default_rng([self.seed, i, int(self.episode_lengths.sum())]))
                            for i in range(self.num_envs)], "fresh": [False] * self.num_envs}
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


EVAL_SEED_OFFSET = 1_000_000  # evaluation episodes use seeds far from the training envs'
EVAL_EPISODE_CAP = 100_000  # agent steps; longer than any standard env's time limit (Atari: 27,000)


def evaluate(policy: Any, env_id: str, episodes: int | list[int], seed: int, video_path: str | None = None,
             flatten_dict: bool = True, max_episode_steps: int | None = None,
             env_fn: Callable[[str | None], gym.Env] | None = None,
             should_stop: Callable[[], bool] | None = None, at_once: int = 1) -> np.ndarray | None:
    """Run ``episodes`` episodes with ``policy.predict(obs, deterministic=True)`` and return their
    returns. Episode k starts from ``reset(seed=seed + k)``: the same start states at every
    evaluation, independent of training's random state, so that evaluating never perturbs a run.
    ``env_fn(render_mode)`` replaces ``make_env`` (an algorithm's own wrapper stack); Dict
    observations reach the policy as dicts of arrays. When ``should_stop()`` turns true (a stop
    request) the evaluation ends at once and returns None, writing no video. An episode that has not
    ended after EVAL_EPISODE_CAP steps (an env without a time limit) is cut there, with a warning,
    instead of hanging the run. ``episodes`` may list the episode numbers k to play (a rank's share
    of an evaluation).

    ``at_once``: a policy that acts on batches (``policy.batched``: ``predict`` on [B, ...] and
    ``reset(B)``) plays up to this many episodes together, each in its own env instance, with one
    batched ``predict`` per step. The episodes and their start states are the same; the policy's
    per-call work (a forward pass; on a GPU its launches and host syncs) is paid once per step of
    the group instead of once per episode. A row whose episode has ended is still fed its last
    observation until the group ends, so a recurrent state keeps its row. With a video the episodes
    are played one after another in one env, and the frames go to the file as they are rendered.

    The envs are made afresh at every call: some envs' episodes depend on what the instance played
    before, whatever the seed (PyBullet's locomotion envs), and an evaluation must depend on the
    policy alone, so that ``heron eval`` of a checkpoint and a resumed run reproduce it."""
    render_mode = "rgb_array" if video_path else None
    numbers = list(range(episodes)) if isinstance(episodes, int) else list(episodes)
    together = 1 if video_path or not getattr(policy, "batched", False) else max(1, min(at_once, len(numbers)))
    envs: list[gym.Env] = []
    video: VideoFile | None = None

    def call(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return env_call(env_id, f"{what} (evaluation)", fn, *args, **kwargs)

    try:
        for _ in range(together):
            envs.append(env_fn(render_mode) if env_fn is not None else
                        make_env(env_id, render_mode=render_mode, flatten_dict=flatten_dict,
                                 max_episode_steps=max_episode_steps))
        convert = obs_converter(envs[0].observation_space)
        if video_path:
            video = VideoFile(video_path, fps=envs[0].metadata.get("render_fps", 30))
        returns: list[float] = []
        for start in range(0, len(numbers), together):
            group = list(zip(envs, numbers[start:start + together]))
            obs = [convert(call("reset", env.reset, seed=seed + k)[0]) for env, k in group]
            if together > 1:
                policy.reset(len(group))
            else:
                policy.reset()
            totals, live, t = np.zeros(len(group)), np.ones(len(group), bool), 0
            while live.any():
                if should_stop is not None and should_stop():
                    return None
                if t == EVAL_EPISODE_CAP:
                    print(f"heron: warning: an evaluation episode of {env_id} ran {t} steps without ending: cut "
                          "there (give the env a time limit; heron check-env shows it)", file=sys.stderr, flush=True)
                    break
                t += 1
                if video is not None:
                    video.append(_render(envs[0], env_id))
                if together > 1:
                    actions = policy.predict(_stack(obs), deterministic=True)
                else:
                    actions = [policy.predict(obs[0], deterministic=True)]
                for i in np.flatnonzero(live):
                    o, reward, terminated, truncated, _ = call("step", group[i][0].step, actions[i])
                    obs[i] = convert(o)
                    totals[i] += float(reward)
                    live[i] = not (terminated or truncated)
            returns.extend(totals.tolist())
        if video is not None:
            video.commit()
    finally:
        if video is not None:
            video.discard()
        for env in envs:
            close_bounded(env.close, f"the {env_id} evaluation env")
    return np.asarray(returns, np.float64)


def _stack(obs: list[Any]) -> Any:
    """Per-env observations (arrays, or dicts of arrays) as one batch."""
    if isinstance(obs[0], dict):
        return {k: np.stack([o[k] for o in obs]) for k in obs[0]}
    return np.stack(obs)


def _render(env: gym.Env, env_id: str) -> np.ndarray:
    try:
        return env.render()
    except Exception as exc:  # no OpenGL backend, no pygame, ...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HeronError(f"cannot render {env_id} for video: {reason} (for MuJoCo on a machine without "
                         "EGL: apt-get install libosmesa6 and set MUJOCO_GL=osmesa)") from None


class VideoFile:
    """An mp4 written frame by frame, so that no evaluation's frames are held in memory (10 MuJoCo
    episodes are 10,000 frames of 480 x 480 x 3, 7 GB), into a temporary file that ``commit()``
    renames into place: an interrupted write (Ctrl-C, a kill, a stop request) never leaves a
    half-written mp4 under the final name, and ``discard()`` removes an uncommitted one."""

    def __init__(self, path: str, fps: int):
        import imageio.v2 as imageio

        self.final = Path(path)
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.final.with_name(f".{self.final.stem}.partial{os.getpid()}{self.final.suffix}")
        self.writer = imageio.get_writer(str(self.tmp), fps=fps, macro_block_size=1)
        self.frames = 0

    def append(self, frame: np.ndarray) -> None:
        self.writer.append_data(frame)
        self.frames += 1
        if self.frames == 2:
            inject("video")

    def commit(self) -> None:
        self.writer.close()
        os.replace(self.tmp, self.final)

    def discard(self) -> None:
        """Close the writer; the temporary file is removed unless ``commit()`` moved it."""
        self.writer.close()
        self.tmp.unlink(missing_ok=True)

