"""What PPO accepts and how its envs are made: the action and observation spaces a run supports
(checked before a run directory exists, and saved with every checkpoint so that resume, eval and
``heron.load`` rebuild the network without an env), and the vector env of this process."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from heron.algos.ppo.config import Config
from heron.envs import atari
from heron.envs.make import VecEnv, probe_spaces
from heron.envs.native import NativeVecEnv, require_vector_entry_point
from heron.errors import HeronError
from heron.runtime.run import Run


def action_info(space: gym.Space, env_id: str) -> dict:
    """What the action head needs to know about an action space (saved with the policy)."""
    if isinstance(space, gym.spaces.Discrete) and int(space.start) == 0:
        return {"kind": "discrete", "n": int(space.n)}
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1 and not np.any(space.start):
        return {"kind": "multidiscrete", "nvec": [int(n) for n in space.nvec]}
    if isinstance(space, gym.spaces.MultiBinary) and len(space.shape) == 1:
        return {"kind": "multidiscrete", "nvec": [2] * int(space.shape[0])}
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return {
            "kind": "box",
            "low": torch.as_tensor(space.low, dtype=torch.float32),
            "high": torch.as_tensor(space.high, dtype=torch.float32),
        }
    raise HeronError(f"ppo supports Discrete, MultiDiscrete, MultiBinary and 1-D Box actions; {env_id} has {space}")


def obs_parts(env_id: str) -> list | None:
    """For Dict observations holding images: [key, shape, is_image] of each entry, in the order
    of the flattened vector (the network splits it again: CNNs for images, the rest as vectors).
    None when the observation is not such a Dict (plain flattening serves)."""
    raw, _ = probe_spaces(env_id, flatten_dict=False)
    if not isinstance(raw, gym.spaces.Dict):
        return None
    parts = []
    for key, space in raw.spaces.items():
        image = isinstance(space, gym.spaces.Box) and len(space.shape) == 3 and space.dtype == np.uint8
        shape = list(space.shape) if isinstance(space, gym.spaces.Box) else [gym.spaces.flatdim(space)]
        parts.append([str(key), shape, image])
    return parts if any(image for _, _, image in parts) else None


def spaces_of(cfg: Config, obs_space: gym.Space, act_space: gym.Space) -> dict:
    """What a saved policy needs to rebuild its network without making an env."""
    assert obs_space.shape is not None, "checked (check)"
    return {
        "obs_shape": list(obs_space.shape),
        "obs_dtype": str(np.dtype(obs_space.dtype)),
        "action": action_info(act_space, cfg.env_id),
        "obs_parts": obs_parts(cfg.env_id),
    }


def check(cfg: Config) -> dict:
    """Reject spaces PPO cannot handle, before a run directory exists; returns the spaces a
    checkpoint saves (resume and eval compare them)."""
    obs_space, act_space = probe_spaces(cfg.env_id)
    action_info(act_space, cfg.env_id)
    image = isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 3 and obs_space.dtype == np.uint8
    vector = isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1
    if not (image or vector):
        raise HeronError(
            f"ppo needs vector observations, uint8 images or a Dict of those; {cfg.env_id} has {obs_space}"
        )
    if cfg.vector_mode == "native":
        require_vector_entry_point(cfg.env_id)
    else:
        atari.choose_backend(cfg.env_id, cfg.env_backend)
    return spaces_of(cfg, obs_space, act_space)


def make_envs(cfg: Config, run: Run):
    """This process's envs (all of them without torchrun), seeded where its share begins."""
    n = run.local(cfg.num_envs)
    if cfg.vector_mode == "native":
        return NativeVecEnv(cfg.env_id, n, run.env_seed(n), keep_tensors=True, train_device=run.device)
    backend = atari.choose_backend(
        cfg.env_id, cfg.env_backend, run.resume_state["envs"] if run.resume_state is not None else None
    )
    if backend == "envpool":
        return atari.EnvPoolVecEnv(cfg.env_id, n, run.env_seed(n))
    if backend == "ale":
        return atari.AleVecEnv(cfg.env_id, n, run.env_seed(n), threads=torch.get_num_threads())
    return VecEnv(cfg.env_id, n, run.env_seed(n), cfg.vector_mode)
