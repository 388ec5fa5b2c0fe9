"""What SAC and TD3 share around their update steps: spaces, the replay buffer, the gradient step
as the loop takes it (``Learn``), snapshots for checkpoints and resume (the per-step cadences are
``Run.after_step``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from heron.envs.make import VecEnv
from heron.errors import HeronError
from heron.ops import dist
from heron.ops.rng import rng_state, set_rng_state
from heron.rl.buffers import ReplayBuffer
from heron.runtime.run import Run


def spaces_of(obs_space: gym.Space, act_space: gym.Space) -> dict:
    """What a saved policy needs to rebuild its networks without making an env."""
    assert obs_space.shape is not None and isinstance(act_space, gym.spaces.Box), "checked (check)"
    return {
        "obs_shape": list(obs_space.shape),
        "action_low": torch.as_tensor(act_space.low, dtype=torch.float32),
        "action_high": torch.as_tensor(act_space.high, dtype=torch.float32),
    }


def replay_buffer(cfg: Any, run: Run, envs: VecEnv, device: torch.device, extra: dict | None = None) -> ReplayBuffer:
    """This process's replay buffer: its share of --buffer-size, for its envs, sampled with its own stream."""
    obs_shape, act_shape = envs.single_observation_space.shape, envs.single_action_space.shape
    assert obs_shape is not None and act_shape is not None, "Box spaces (check)"
    return ReplayBuffer(
        run.local(cfg.buffer_size),
        envs.num_envs,
        obs_shape,
        envs.obs_dtype,
        act_shape,
        device=device if cfg.buffer_device == "auto" else cfg.buffer_device,
        extra=extra,
        seed=run.rank_seed(),
        out_device=device,
    )


def store(rb: ReplayBuffer, norm: Any, obs: Any, actions: Any, step: Any, **extra: Any) -> None:
    """A vector env step into the buffer: the observation normaliser (``--obs-norm``) learns from
    the new observations of the envs that stepped (``step.valid``: all, or those not restarting),
    and their transitions go in with termination and truncation apart; ``extra``: per-env columns
    (a recurrent policy's states)."""
    dist.update_norm(norm, torch.as_tensor(step.next_obs if step.valid is None else step.next_obs[step.valid]))
    rb.add(
        step.valid,
        obs=obs,
        next_obs=step.next_obs,
        actions=actions,
        rewards=step.rewards,
        terminated=step.terminated,
        truncated=step.truncated,
        **extra,
    )


def snapshot(modules: dict[str, Any], n_updates: int, np_rng: np.random.Generator | None, envs: VecEnv) -> dict:
    """state_dicts of networks/optimizers/tensors plus counters and every RNG state."""
    out = {k: (m.detach().clone() if isinstance(m, torch.Tensor) else m.state_dict()) for k, m in modules.items()}
    return {**out, "n_updates": n_updates, "rng": rng_state(np_rng), "envs": envs.state_dict()}


def restore(
    run: Run, modules: dict[str, Any], rb: ReplayBuffer, envs: VecEnv, np_rng: np.random.Generator
) -> tuple[np.ndarray, int, int]:
    """Load the run's latest checkpoint into ``modules``, the buffer, RNGs and envs; returns
    (obs to act on, env step, update count)."""
    s = run.resume_state
    assert s is not None, "a resumed run"
    for k, m in modules.items():
        if isinstance(m, torch.Tensor):
            with torch.no_grad():
                m.copy_(s[k])
        else:
            m.load_state_dict(s[k])
    if run.resume_buffer is None:
        raise HeronError(f"{run.run_dir}: the latest checkpoint has no replay buffer file")
    rb.load_state_dict(run.resume_buffer)
    # Episodes in flight at the checkpoint are cut here: their last stored step becomes a
    # truncation, so sequence sampling never joins them to the episodes that start on resume.
    rb.mark_truncated(~np.asarray(s["envs"]["fresh"], dtype=np.bool_))
    set_rng_state(s["rng"], np_rng)
    obs = envs.load_state_dict(s["envs"])
    return obs, int(s["step"]), int(s["n_updates"])
