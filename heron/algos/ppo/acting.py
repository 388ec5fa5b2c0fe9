"""How PPO's rollout acts: ``RolloutActing``, one object the loop calls at every env step.

Each call is ``ActorCritic.step`` and ``ActionHead.sample_logp`` on the step's observations with
the rollout's sampling noise, taken the fastest way that gives the same numbers:

* in numpy (``networks.NumpyActing``) for feed-forward MLPs with float32 weights on the CPU; a model
  on a GPU acts so on a CPU copy of itself (``heron.accel.acting.CpuTwin``), refreshed once per
  rollout (the weights and statistics move only between rollouts: one copy to the host per
  rollout, no kernel launch per env step);
* else, under --cuda-graphs, as a recorded CUDA graph (``networks.RecordedActing``: CNNs, a shared
  body, mixed precision);
* else in torch on the training device, the recurrent bodies included.

A tensor env's observations (``heron.envs.native``) are acted on in torch, and its actions handed
back as tensors: nothing of such an env becomes a numpy array.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from heron.accel.acting import CpuTwin
from heron.algos.ppo.networks import ActorCritic, RecordedActing


class RolloutActing:
    """``rollout(noise)`` once per rollout, with its noise [T, N, K] (``ActionHead.noise``); then
    ``act(t, obs, state)`` at its step t -> (the observations as the rollout stores them, the
    actions for the env, the actions, their log-probs, the normalized values, the new recurrent
    state). The observations come back as the device tensor where they were uploaded to act
    (stored from there, not uploaded twice), else as given."""

    def __init__(self, model: ActorCritic, num_envs: int, device: torch.device, cfg: Any):
        self.model, self.num_envs, self.device = model, num_envs, device
        twin = CpuTwin(model) if device.type != "cpu" else None
        self.twin = twin if twin is not None and twin.twin.numpy_acting(num_envs) is not None else None
        feedforward = model.state_size == 0
        self.recorded = RecordedActing(model, device) if cfg.cuda_graphs and self.twin is None and feedforward else None
        self.fast: Any = None
        self.noise = torch.empty(0)  # the rollout's (``rollout``)
        self.noise_np = np.empty(0)  # its numpy copy, where numpy acts

    def rollout(self, noise: torch.Tensor) -> None:
        """Before a rollout: its noise, and the numpy acting step on the weights as they now are."""
        self.noise = noise
        self.fast = (
            None
            if self.recorded is not None
            else (self.twin.refresh() if self.twin is not None else self.model).numpy_acting(self.num_envs)
        )
        self.noise_np = noise.cpu().numpy() if self.fast is not None else np.empty(0)

    def act(self, t: int, obs: Any, state: torch.Tensor) -> tuple[Any, Any, Any, Any, Any, torch.Tensor]:
        tensor_env = isinstance(obs, torch.Tensor)
        if self.recorded is not None:  # the frames go up once (to the graph's input and the rollout)
            obs_t = torch.as_tensor(obs, device=self.device)
            return (obs_t, *self.recorded(obs_t, self.noise[t]), state)
        if self.fast is not None and not tensor_env:
            return (obs, *self.fast(obs, self.noise_np[t]), state)
        obs_t = torch.as_tensor(obs, device=self.device)
        head = self.model.pi_head
        with torch.no_grad():
            params, values, state = self.model.step(obs_t, state)
            actions, logp = head.sample_logp(params, self.noise[t])
        to_env = head.to_env(actions)
        return obs_t, to_env if tensor_env else to_env.cpu().numpy(), actions, logp, values, state
