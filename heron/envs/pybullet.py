"""PyBullet's locomotion envs (``HopperBulletEnv-v0`` and the others TD3's walkthrough names) as
Gymnasium envs: ``pybullet_envs`` is written against the old ``gym`` API."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import gymnasium as gym
import numpy as np

PYBULLET_IDS = {
    "HopperBulletEnv-v0": "HopperBulletEnv",
    "AntBulletEnv-v0": "AntBulletEnv",
    "HalfCheetahBulletEnv-v0": "HalfCheetahBulletEnv",
    "Walker2DBulletEnv-v0": "Walker2DBulletEnv",
    "InvertedPendulumBulletEnv-v0": "InvertedPendulumBulletEnv",
    "ReacherBulletEnv-v0": "ReacherBulletEnv",
}

_PYBULLET_MODULES = (
    "pybullet_envs.gym_locomotion_envs",
    "pybullet_envs.gym_pendulum_envs",
    "pybullet_envs.gym_manipulator_envs",
)


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

        # stand-in modules, given their attributes here (typed Any: a module has none declared)
        shim: Any = types.ModuleType("gym")
        registration: Any = types.ModuleType("gym.envs.registration")
        registration.registry = types.SimpleNamespace(env_specs={}, all=lambda: [])
        registration.register = lambda *args, **kwargs: None
        registration.make = registration.spec = None
        envs: Any = types.ModuleType("gym.envs")
        envs.registration, envs.registry = registration, registration.registry
        shim.Env, shim.spaces, shim.utils, shim.envs = gym.Env, gym.spaces, gymnasium.utils, envs
        shim.__version__ = "0.26.2"  # what pybullet_envs compares against: the new-API branch
        stand_ins.update(
            {
                "gym": shim,
                "gym.spaces": gym.spaces,
                "gym.utils": gymnasium.utils,
                "gym.utils.seeding": gymnasium.utils.seeding,
                "gym.envs": envs,
                "gym.envs.registration": registration,
            }
        )
    try:
        importlib.import_module("pkg_resources")
    except Exception:  # setuptools >= 81 dropped it; pybullet_envs only needs parse_version
        pkg: Any = types.ModuleType("pkg_resources")
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
