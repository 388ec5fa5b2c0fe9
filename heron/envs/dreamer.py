"""The environment stack of DreamerV2 and DreamerV3: every env becomes a Dict of ``rgb`` (uint8 [C, 64, 64]) and/or
``state`` (float32 vector) observations, with action repeat and an episode cap in env frames.

* Atari (``ALE/<Game>-v5``, ``<Game>NoFrameskip-v4``): Gymnasium's AtariPreprocessing with the
  frame skip set to ``--action-repeat`` (max-pooled over the last two frames), 30 no-ops, 64x64,
  RGB or ``--grayscale``, no frame stacking (the RSSM is the memory) and no life loss episodes.
  ``ALE/...-v5`` skips 4 frames itself, so it takes ``--action-repeat 1`` only (sheeprl's DreamerV2).
* DMC (``dmc_<domain>_<task>``): pixels rendered by MuJoCo at 64x64 (``--observation auto`` or
  ``pixels``) or the state vector.
* Any other Gymnasium env: its own observation (images resized to 64x64 channels-first, vectors as
  float32, Dict entries kept), or ``--observation pixels``: ``env.render()`` resized to 64x64.

``--max-episode-steps`` counts agent steps, as every other step count of the Dreamers here and as sheeprl's
``env.max_episode_steps`` (a TimeLimit outside the action repeat): sheeprl's 27000 on Atari is the
paper's 108,000 frames, 30 minutes of play at action repeat 4. It only ever shortens episodes: the
env's own limit still holds (dm_control's 1000 frames, 500 agent steps at action repeat 2).
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from heron.envs import atari
from heron.envs.ids import check_env_id
from heron.envs.make import make_env
from heron.errors import HeronError

_V5 = re.compile(r"^ALE/.+-v5$")
SIZE = 64


def _resize(frame: np.ndarray) -> np.ndarray:
    """HxWxC (or HxW) uint8 -> CxSIZExSIZE uint8."""
    if frame.ndim == 2:
        frame = frame[:, :, None]
    chw = np.ascontiguousarray(frame.transpose(2, 0, 1))
    if chw.shape[1:] != (SIZE, SIZE):  # area averaging (torch: no OpenCV needed outside Atari)
        x = torch.from_numpy(chw).unsqueeze(0).float()
        chw = F.interpolate(x, size=(SIZE, SIZE), mode="area")[0].round_().clamp_(0, 255).to(torch.uint8).numpy()
    return chw


def _is_image(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (2, 3)


def _image_space(space: gym.spaces.Box) -> gym.spaces.Box:
    shape = space.shape
    channels = (
        1 if len(shape) == 2 else (shape[0] if shape[0] in (1, 3, 4) and shape[-1] not in (1, 3, 4) else shape[-1])
    )
    return gym.spaces.Box(0, 255, (channels, SIZE, SIZE), np.uint8)


class DictObservation(gym.ObservationWrapper):
    """Images -> ``rgb`` [C, 64, 64] uint8 (channels first), vectors -> ``state`` float32; Dict
    observations keep their keys with the same conversions. With ``pixels`` the observation is
    ``env.render()`` (the env must be made with render_mode="rgb_array"), plus ``state``."""

    def __init__(self, env: gym.Env, pixels: bool = False):
        super().__init__(env)
        self.pixels = pixels
        space = env.observation_space
        spaces: dict[str, gym.Space] = {}
        if pixels:
            spaces["rgb"] = gym.spaces.Box(0, 255, (3, SIZE, SIZE), np.uint8)
        items = (
            space.spaces.items()
            if isinstance(space, gym.spaces.Dict)
            else [("rgb" if _is_image(space) else "state", space)]
        )
        self.keys: dict[str, tuple[str, bool]] = {}
        for key, sub in items:
            if _is_image(sub):
                if pixels and key == "rgb":
                    continue
                spaces[key] = _image_space(sub)  # type: ignore[arg-type]  # an image is a Box (_is_image)
                self.keys[key] = (key, True)
            elif isinstance(sub, gym.spaces.Box):
                dim = int(np.prod(sub.shape))
                spaces[key] = gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
                self.keys[key] = (key, False)
            else:
                raise HeronError(f"the Dreamers cannot encode the observation entry {key!r}: {sub}")
        self.observation_space = gym.spaces.Dict(spaces)
        self.single = not isinstance(space, gym.spaces.Dict)

    def observation(self, obs: Any) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        if self.pixels:
            out["rgb"] = _resize(np.asarray(self.env.render(), np.uint8))
        for key, (src, image) in self.keys.items():
            value = obs if self.single else obs[src]
            out[key] = _chw(np.asarray(value)) if image else np.asarray(value, np.float32).reshape(-1)
        return out


def _chw(img: np.ndarray) -> np.ndarray:
    if img.ndim == 3 and img.shape[0] in (1, 3, 4) and img.shape[-1] not in (1, 3, 4):
        img = img.transpose(1, 2, 0)
    return _resize(img)


class ActionRepeat(gym.Wrapper):
    """Repeat each action ``repeat`` times, summing rewards, stopping early at an episode end."""

    def __init__(self, env: gym.Env, repeat: int):
        super().__init__(env)
        self.repeat = repeat

    def step(self, action):
        total = 0.0
        for _ in range(self.repeat):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info


def check(env_id: str, action_repeat: int) -> None:
    check_env_id(env_id)
    if _V5.match(env_id) and action_repeat != 1:
        base = env_id[4:].rsplit("-", 1)[0]
        raise HeronError(
            f"{env_id} already skips 4 frames: use --action-repeat 1, or {base}NoFrameskip-v4 "
            f"for --action-repeat {action_repeat}"
        )
    if action_repeat < 1:
        raise HeronError(f"--action-repeat must be at least 1, got {action_repeat}")


def make(
    env_id: str,
    action_repeat: int = 1,
    observation: str = "auto",
    grayscale: bool = False,
    max_episode_steps: int = 0,
    render_mode: str | None = None,
) -> gym.Env:
    """One env with the Dreamers' observation and action-repeat conventions (module doc)."""
    check(env_id, action_repeat)
    if atari.is_atari(env_id):
        if observation == "state":
            raise HeronError(f"{env_id}: Atari gives pixels only; drop --observation state")
        base = (
            atari.make_base(env_id, render_mode) if not _V5.match(env_id) else gym.make(env_id, render_mode=render_mode)
        )
        env: gym.Env = gym.wrappers.AtariPreprocessing(
            base,
            noop_max=30,
            frame_skip=action_repeat,
            screen_size=SIZE,
            terminal_on_life_loss=False,
            grayscale_obs=grayscale,
            grayscale_newaxis=True,
            scale_obs=False,
        )
        return _cap(DictObservation(env), max_episode_steps)
    pixels = observation == "pixels" or (observation == "auto" and env_id.startswith("dmc_"))
    if env_id.startswith("dmc_"):
        # DMC repeats the action inside the env, so pixels are rendered once per agent step. The task's
        # own limit (in frames) becomes agent steps; --max-episode-steps can only shorten it.
        frames = gym.spec(env_id).max_episode_steps
        assert frames is not None, "DMC tasks have a limit"
        own = -(-frames // action_repeat)
        env = make_env(
            env_id,
            render_mode=render_mode,
            flatten_dict=False,
            from_pixels=pixels,
            height=SIZE,
            width=SIZE,
            frame_skip=action_repeat,
            max_episode_steps=min(own, max_episode_steps) if max_episode_steps else own,
        )
        env = DictObservation(env)
        if observation == "state" and "state" not in env.observation_space.spaces:  # type: ignore[attr-defined]
            raise HeronError(f"{env_id} has no vector observation for --observation state")
        return env
    mode = "rgb_array" if (pixels or render_mode) else None
    env = make_env(env_id, render_mode=mode, flatten_dict=False)
    env = DictObservation(env, pixels=pixels)
    if observation == "state" and "state" not in env.observation_space.spaces:  # type: ignore[attr-defined]
        raise HeronError(f"{env_id} has no vector observation for --observation state")
    return _cap(ActionRepeat(env, action_repeat) if action_repeat > 1 else env, max_episode_steps)


def _cap(env: gym.Env, max_episode_steps: int) -> gym.Env:
    """--max-episode-steps: a TimeLimit in agent steps, outside the action repeat (the env's own
    limit, inside, still holds)."""
    return gym.wrappers.TimeLimit(env, max_episode_steps) if max_episode_steps else env


class NativeStates:
    """A native vector env (``heron.envs.native``) as the Dreamers' loop reads its envs: vector
    observations under ``state`` (float32, flattened), as ``DictObservation`` gives them for one env.
    The env's own episodes restart on resume (``restore_state=False``): the Dreamers' replay closes
    the staged episodes at a checkpoint, so an env that continued them would split them."""

    def __init__(self, env_id: str, num_envs: int, seed: int):
        from heron.envs.native import NativeVecEnv

        self.envs = NativeVecEnv(env_id, num_envs, seed, restore_state=False)
        space = self.envs.single_observation_space
        if space.shape is None or len(space.shape) != 1:
            self.envs.close()
            raise HeronError(
                f"{env_id}: the Dreamers read a native vector env's vector observations only "
                f"(shape {space.shape}); use --vector-mode sync for images"
            )
        self.num_envs, self.single_action_space = num_envs, self.envs.single_action_space
        self.single_observation_space = gym.spaces.Dict(
            {"state": gym.spaces.Box(-np.inf, np.inf, space.shape, np.float32)}
        )

    def __getattr__(self, name: str) -> Any:  # mode, episode_lengths, state_dict, close, ...
        return getattr(self.envs, name)

    @staticmethod
    def _dict(obs: np.ndarray) -> dict[str, np.ndarray]:
        return {"state": obs.astype(np.float32, copy=False)}

    def reset(self) -> dict[str, np.ndarray]:
        return self._dict(self.envs.reset())

    def load_state_dict(self, state: dict) -> dict[str, np.ndarray]:
        return self._dict(self.envs.load_state_dict(state))

    def step(self, actions: np.ndarray) -> Any:
        step: Any = self.envs.step(actions)
        step.obs, step.next_obs = self._dict(step.obs), self._dict(step.next_obs)
        return step
