"""The Dreamers' envs and spaces: the env stack (``heron.envs.dreamer``) with the run's options, the
spaces a saved agent rebuilds itself from (checked before a run directory exists), and the actions
the env receives from the policy's one-hot or [-1, 1] ones."""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from heron.algos.dreamer.config import DreamerConfig
from heron.envs import dreamer as denvs
from heron.envs.native import require_vector_entry_point
from heron.errors import HeronError


def env_fn(cfg: DreamerConfig, render_mode: str | None = None) -> gym.Env:
    return denvs.make(
        cfg.env_id, cfg.action_repeat, cfg.observation, cfg.grayscale, cfg.max_episode_steps, render_mode=render_mode
    )


def eval_env(cfg: DreamerConfig):
    """Evaluation envs: the training stack (``heron.api`` hands this to Run and ``heron eval``)."""
    return functools.partial(env_fn, cfg)


def spaces_of(cfg: DreamerConfig, obs_space: gym.spaces.Dict, act_space: gym.Space) -> dict:
    """What a saved agent needs to rebuild itself: observation spec, encoder keys, actions."""
    spec = {k: [list(s.shape or ()), str(s.dtype)] for k, s in obs_space.spaces.items()}
    images = [k for k, (shape, _) in spec.items() if len(shape) == 3]
    vectors = [k for k, (shape, _) in spec.items() if len(shape) == 1]
    if cfg.cnn_keys or cfg.mlp_keys:
        cnn, mlp = list(cfg.cnn_keys), list(cfg.mlp_keys)
    else:
        cnn, mlp = images, ([] if images else vectors)
    for k in cnn + mlp:
        if k not in spec:
            raise HeronError(f"observation key {k!r} not in {cfg.env_id}'s observations ({', '.join(spec)})")
    for k in cnn:
        if k not in images or spec[k][0][1:] != [denvs.SIZE, denvs.SIZE]:
            raise HeronError(f"--cnn-keys {k}: needs a [C, 64, 64] image, {cfg.env_id} gives {spec[k][0]}")
    for k in mlp:
        if k not in vectors:
            raise HeronError(f"--mlp-keys {k}: needs a vector, {cfg.env_id} gives {spec[k][0]}")
    if not cnn + mlp:
        raise HeronError(f"{cfg.ALGO} has nothing to encode for {cfg.env_id}: choose --cnn-keys or --mlp-keys")
    out: dict[str, Any]
    if isinstance(act_space, gym.spaces.Discrete):
        out = {"discrete": True, "action_dim": int(act_space.n)}
    elif (
        isinstance(act_space, gym.spaces.Box)
        and len(act_space.shape) == 1
        and np.all(np.isfinite(act_space.low))
        and np.all(np.isfinite(act_space.high))
    ):
        out = {
            "discrete": False,
            "action_dim": int(act_space.shape[0]),
            "action_low": torch.as_tensor(act_space.low, dtype=torch.float32),
            "action_high": torch.as_tensor(act_space.high, dtype=torch.float32),
        }
    else:
        raise HeronError(f"{cfg.ALGO} supports Discrete and bounded 1-D Box actions; {cfg.env_id} has {act_space}")
    return {"obs_spec": spec, "cnn_keys": cnn, "mlp_keys": mlp, **out}


def check(cfg: DreamerConfig) -> dict:
    """Reject an env or option the Dreamers cannot handle, before a run directory exists; returns
    the spaces a checkpoint saves (resume and eval compare them)."""
    if cfg.vector_mode == "native":
        require_vector_entry_point(cfg.env_id)
    env = env_fn(cfg)
    try:
        assert isinstance(env.observation_space, gym.spaces.Dict), "the Dreamers' env stack makes Dict observations"
        return spaces_of(cfg, env.observation_space, env.action_space)
    finally:
        env.close()


def obs_spec(spaces: dict) -> dict[str, tuple]:
    return {k: tuple(shape) for k, (shape, _) in spaces["obs_spec"].items()}


def model_spec(spaces: dict) -> tuple[dict[str, tuple], tuple[str, ...], tuple[str, ...], int, bool]:
    """What an agent is built from (both Dreamers' ``Agent(*model_spec(spaces), cfg)``): the
    observation spec, the encoder's image and vector keys, the action size and whether the actions
    are discrete."""
    return (
        obs_spec(spaces),
        tuple(spaces["cnn_keys"]),
        tuple(spaces["mlp_keys"]),
        spaces["action_dim"],
        spaces["discrete"],
    )


def to_env_actions(actions: torch.Tensor, spaces: dict) -> np.ndarray:
    """One-hot -> indices; [-1, 1] -> the action bounds."""
    if spaces["discrete"]:
        return actions.argmax(-1).cpu().numpy()
    low, high = spaces["action_low"].to(actions.device), spaces["action_high"].to(actions.device)
    return (low + (actions + 1.0) * 0.5 * (high - low)).cpu().numpy()
