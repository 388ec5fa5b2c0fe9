"""DeepMind Control Suite tasks as Gymnasium environments: ids ``dmc_<domain>_<task>``.

``dmc_walker_walk``, ``dmc_cartpole_swingup``, ``dmc_ball_in_cup_catch`` (domain ``ball_in_cup``):
the id is split against dm_control's own domain names, longest first, so underscores inside a
domain name are fine. ``register(env_id)`` puts an id into ``gymnasium.registry`` (idempotent);
``gym.make(env_id, from_pixels=True)`` then gives image observations.

Episodes: dm_control ends an episode after ``time_limit`` seconds (usually 1000 control steps)
with discount 1, which is a time limit, not a termination. Here dm_control's own limit is
switched off and Gymnasium's ``TimeLimit`` (``max_episode_steps``, computed from the task's
default time limit and control timestep) truncates instead, so ``terminated`` is True only for a
real termination (a LAST step with discount 0).

Seeding: all of a task's randomness comes from one ``np.random.RandomState`` that is re-seeded at
every reset from Gymnasium's ``np_random``; ``reset(seed=s)`` therefore always gives the same
first observation, and an env's random state is entirely its ``np_random``.

dm_control is imported lazily (the ``dmc`` extra). It picks its OpenGL backend from
``MUJOCO_GL`` when first imported: EGL by default on machines without a display (as in
``heron.envs.make``); OSMesa (Debian's ``libosmesa6`` with ``MUJOCO_GL=osmesa``) where EGL is
missing.
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
import math
import os
import sys
from typing import Any

import gymnasium as gym
import numpy as np

from heron.errors import HeronError, install_hint

PREFIX = "dmc_"
DEFAULT_EPISODE_STEPS = 1000  # for tasks without a time limit (lqr)
_GL_HINT = (
    "for headless rendering install Debian's libosmesa6 and set MUJOCO_GL=osmesa (or use MUJOCO_GL=egl where EGL works)"
)


def is_dmc(env_id: str) -> bool:
    """Ids served by this module (``dmc_<domain>_<task>``)."""
    return env_id.startswith(PREFIX)


def _suite():
    """dm_control.suite, imported on first use, with one-line errors for what can go wrong."""
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        spec = importlib.util.find_spec("dm_control")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise HeronError(f"DeepMind Control Suite ids need dm_control: {install_hint('dmc')}")
    _triton_first()
    try:
        from dm_control import suite
    except ModuleNotFoundError as exc:
        raise HeronError(f"dm_control is installed but cannot be imported ({exc}): {install_hint('dmc')}") from exc
    except Exception as exc:  # the OpenGL backend named by MUJOCO_GL failed to load
        raise HeronError(
            f"dm_control could not load its OpenGL backend "
            f"(MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}: {_one_line(exc)}); "
            f"{_GL_HINT}"
        ) from exc
    return suite


def _triton_first() -> None:
    """Import triton (which CUDA builds of torch bring) before dm_control loads its OpenGL: triton
    3.8.0 (torch 2.14.1) segfaults on import once Mesa's EGL has rendered in the process, and torch
    imports it later in every run (``torch.optim`` imports ``torch._dynamo``). Imported first, both
    work. Nothing happens where triton is absent (CPU builds of torch)."""
    if "triton" in sys.modules:
        return
    try:
        if importlib.util.find_spec("triton") is None:
            return
        import triton  # noqa: F401
    except Exception:
        pass  # a triton that cannot load here is torch's concern, not a reason to refuse DMC


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _all_tasks(suite) -> list[tuple[str, str]]:
    return list(dict.fromkeys(list(suite.ALL_TASKS) + list(suite.BENCHMARKING)))


def parse(env_id: str) -> tuple[str, str]:
    """``dmc_<domain>_<task>`` -> (domain, task), checked against dm_control's task list."""
    suite = _suite()
    tasks = _all_tasks(suite)
    rest = env_id[len(PREFIX) :] if is_dmc(env_id) else env_id
    for domain in sorted({d for d, _ in tasks}, key=len, reverse=True):
        if rest.startswith(domain + "_") and (domain, rest[len(domain) + 1 :]) in tasks:
            return domain, rest[len(domain) + 1 :]
    known = [f"{PREFIX}{d}_{t}" for d, t in tasks]
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}?" if close else f"known ids look like {known[0]}"
    raise HeronError(f"unknown DeepMind Control task {env_id!r}: {hint}")


def _load(suite, domain: str, task: str, time_limit: float | None, random: Any = None):
    """suite.load with our settings; a dm_control/mujoco version mismatch becomes a HeronError."""
    task_kwargs: dict[str, Any] = {}
    if time_limit is not None:
        task_kwargs["time_limit"] = time_limit
    if random is not None:
        task_kwargs["random"] = random
    try:
        return suite.load(domain, task, task_kwargs=task_kwargs, environment_kwargs={"flat_observation": False})
    except AttributeError as exc:  # e.g. 'MjModel' object has no attribute ...: bindings too new
        from importlib.metadata import version

        raise HeronError(
            f"dm_control {version('dm_control')} does not work with mujoco "
            f"{version('mujoco')} ({_one_line(exc)}): install the mujoco version "
            f"dm_control was built for ({install_hint('dmc')})"
        ) from exc


def episode_steps(domain: str, task: str) -> int:
    """The task's usual episode length in control steps: default time limit / control timestep."""
    suite = _suite()
    factory = getattr(suite, domain).SUITE[task]
    limit = inspect.signature(factory).parameters.get("time_limit")
    seconds = limit.default if limit is not None else inspect.Parameter.empty
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0:
        return DEFAULT_EPISODE_STEPS
    env = _load(suite, domain, task, time_limit=None)
    try:
        return max(1, round(seconds / env.control_timestep()))
    finally:
        env.physics.free()


def register(env_id: str) -> None:
    """Put ``env_id`` (``dmc_<domain>_<task>``) into Gymnasium's registry; a no-op if it is there."""
    if env_id in gym.registry:
        return
    domain, task = parse(env_id)
    gym.register(
        id=env_id,
        entry_point="heron.envs.dmc:DMCEnv",
        max_episode_steps=episode_steps(domain, task),
        kwargs={"domain": domain, "task": task},
    )


class DMCEnv(gym.Env):
    """One dm_control suite task as a ``gym.Env``.

    ``from_pixels=False``: float32 vector of the observation dict's entries, flattened and
    concatenated in the task's (fixed) key order. ``from_pixels=True``: uint8 ``(3, height, width)``
    camera images (channels first). ``render()`` (``render_mode="rgb_array"``) gives
    ``(render_height, render_width, 3)`` frames from the same camera. ``frame_skip`` repeats each
    action that many control steps (rewards summed, stopping at the episode end) and observes once:
    pixels are rendered for the last frame only.
    """

    # Gymnasium API; each instance sets render_fps to 1 / its control timestep.
    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}  # noqa: RUF012

    def __init__(
        self,
        domain: str,
        task: str,
        from_pixels: bool = False,
        height: int = 64,
        width: int = 64,
        camera_id: int | None = None,
        render_mode: str | None = None,
        render_height: int = 480,
        render_width: int = 480,
        frame_skip: int = 1,
    ):
        if int(frame_skip) < 1:
            raise HeronError(f"frame_skip must be at least 1, got {frame_skip}")
        self.frame_skip = int(frame_skip)
        if render_mode not in (None, "rgb_array"):
            raise HeronError(
                f"render_mode {render_mode!r} is not supported by DeepMind Control envs: use 'rgb_array' or None"
            )
        suite = _suite()
        if (domain, task) not in _all_tasks(suite):
            parse(f"{PREFIX}{domain}_{task}")  # raises with suggestions
        self.domain, self.task = domain, task
        self.from_pixels = bool(from_pixels)
        self.height, self.width = int(height), int(width)
        self.camera_id = (2 if domain == "quadruped" else 0) if camera_id is None else int(camera_id)
        self.render_mode = render_mode
        self.render_height, self.render_width = int(render_height), int(render_width)
        # The task draws all of its randomness from this; reset() re-seeds it from np_random.
        self._random = np.random.RandomState(0)
        self._env = _load(suite, domain, task, time_limit=float("inf"), random=self._random)
        self.metadata = {**DMCEnv.metadata, "render_fps": round(1.0 / self._env.control_timestep())}

        self._obs_keys = list(self._env.observation_spec().keys())
        if self.from_pixels:
            self.observation_space = gym.spaces.Box(0, 255, (3, self.height, self.width), np.uint8)
        else:
            size = sum(int(np.prod(spec.shape)) for spec in self._env.observation_spec().values())
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        spec = self._env.action_spec()
        low = np.broadcast_to(np.asarray(spec.minimum, np.float32), spec.shape)
        high = np.broadcast_to(np.asarray(spec.maximum, np.float32), spec.shape)
        self.action_space = gym.spaces.Box(low.copy(), high.copy(), spec.shape, np.float32)
        self._action_dtype = spec.dtype

        if self.from_pixels or render_mode == "rgb_array":
            self._check_rendering()

    def _check_rendering(self) -> None:
        try:
            frame = self._env.physics.render(self.height, self.width, camera_id=self.camera_id)
        except Exception as exc:  # no GL backend, EGL without a device, missing libOSMesa...
            self.close()
            raise HeronError(
                f"cannot render {self.domain}/{self.task} "
                f"(MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}: {_one_line(exc)}); "
                f"{_GL_HINT}"
            ) from exc
        if frame.shape != (self.height, self.width, 3):
            raise HeronError(f"dm_control rendered a {frame.shape} frame, expected {(self.height, self.width, 3)}")

    def _observation(self, time_step) -> np.ndarray:
        if self.from_pixels:
            frame = self._env.physics.render(self.height, self.width, camera_id=self.camera_id)
            return np.ascontiguousarray(frame.transpose(2, 0, 1), dtype=np.uint8)
        parts = [np.asarray(time_step.observation[k], np.float32).ravel() for k in self._obs_keys]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._random.seed(int(self.np_random.integers(2**32)))
        return self._observation(self._env.reset()), {}

    def step(self, action):
        action = np.asarray(action, dtype=self._action_dtype)
        reward = 0.0
        for _ in range(self.frame_skip):
            time_step = self._env.step(action)
            reward += float(time_step.reward) if time_step.reward is not None else 0.0
            if time_step.last():
                break
        terminated = bool(time_step.last() and time_step.discount == 0.0)
        return self._observation(time_step), reward, terminated, False, {}

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        return self._env.physics.render(self.render_height, self.render_width, camera_id=self.camera_id)

    def close(self) -> None:
        env, self._env = getattr(self, "_env", None), None
        if env is not None:
            env.physics.free()
