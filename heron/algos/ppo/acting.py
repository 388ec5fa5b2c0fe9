"""How PPO's rollout acts: ``RolloutActing``, one object the loop calls at every env step.

Each call is ``ActorCritic.step`` and ``ActionHead.sample_logp`` on the step's observations with
the rollout's sampling noise, taken the fastest way that gives the same numbers:

* in numpy (``NumpyActing``) for feed-forward MLPs with float32 weights on the CPU; a model
  on a GPU acts so on a CPU copy of itself (``heron.accel.acting.CpuTwin``), refreshed once per
  rollout (the weights and statistics move only between rollouts: one copy to the host per
  rollout, no kernel launch per env step);
* else, under --cuda-graphs, as a recorded CUDA graph (``RecordedActing``: CNNs, a shared
  body, mixed precision);
* else in torch on the training device, the recurrent bodies included.

A tensor env's observations (``heron.envs.native``) are acted on in torch, and its actions handed
back as tensors: nothing of such an env becomes a numpy array.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from heron.accel import acting
from heron.accel.acting import CpuTwin

if TYPE_CHECKING:
    from heron.algos.ppo.networks import ActorCritic


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


class NumpyActing:
    """PPO's acting step for feed-forward MLPs on the CPU in numpy (``heron.accel.acting``): obs
    [N, D] (float64 or float32 arrays, as envs return them) and the step's noise [N, K]
    (``ActionHead.noise``) -> the actions for the env, the actions, their log-probs and the
    normalized values, as arrays: ``ActorCritic.step`` and ``ActionHead.sample_logp``'s operations
    in the same order, in float32. Make one per rollout: a free log-std is read (clamped) when it is
    made, and the optimizer moves it between rollouts."""

    def __init__(self, model: ActorCritic):
        self.pi, self.v = acting.NumpyMLP(model._pi_direct, "tanh"), acting.NumpyMLP(model._v_direct, "tanh")
        self.norm = model.norm
        head = self.head = model.pi_head
        if head.kind == "box":
            self.low, self.high = head.low.numpy(), head.high.numpy()
        self.log_std = head.numpy_log_std()

    def mode(self, obs: np.ndarray) -> np.ndarray:
        """The deterministic actions for the env (``ActorCritic.act(..., deterministic=True)``): the
        mean clipped to the bounds, or each categorical's most likely choice."""
        actions = self.head.numpy_mode(self.pi(acting.normalize(obs, self.norm)))
        return self.head.numpy_to_env(actions, self.low, self.high) if self.head.kind == "box" else actions

    def __call__(self, obs: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        x = acting.normalize(obs, self.norm)
        out, values = self.pi(x), self.v(x)[:, 0]
        actions, logp = self.head.numpy_sample_logp(out, noise, self.log_std)
        if self.head.kind == "box":
            return self.head.numpy_to_env(actions, self.low, self.high), actions, logp, values
        return actions, actions, logp, values


class RecordedActing:
    """PPO's acting step recorded as a CUDA graph (``--cuda-graphs`` on a GPU) for the feed-forward
    bodies that do not act in numpy on a CPU twin (CNNs, a shared body, mixed precision): obs
    [N, ...] and the step's noise [N, K] -> what ``NumpyActing`` returns (the actions for
    the env, the actions, their log-probs, the normalized values), from ``ActorCritic.step`` and
    ``ActionHead.sample_logp``. The graph packs actions, log-probs and values into one float32
    [N, A + 2] output (``GraphedActor``), so an env step makes one copy back; integer actions
    travel as float32, exact below 2^24."""

    def __init__(self, model: ActorCritic, device: torch.device | str):
        head = self.head = model.pi_head
        self.width = head.dim if head.kind == "box" else len(head.sizes)  # action entries per env

        def packed(obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
            params, values, _ = model.step(obs, torch.zeros(len(obs), 0, device=obs.device))
            actions, logp = head.sample_logp(params, noise)
            return torch.cat(
                [actions.reshape(len(obs), -1).float(), logp[:, None].float(), values[:, None].float()], -1
            )  # [N, A + 2]

        self.graph = acting.GraphedActor(packed, device)
        if head.kind == "box":
            self.low, self.high = head.low.cpu().numpy(), head.high.cpu().numpy()

    def __call__(
        self, obs: np.ndarray | torch.Tensor, noise: np.ndarray | torch.Tensor
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``obs`` and ``noise`` arrays, or tensors already on the device (the rollout's: its frames
        uploaded once, its noise drawn there)."""
        out = self.graph(obs, noise)  # [N, A + 2]
        k, kind = self.width, self.head.kind
        if kind == "box":
            actions = out[:, :k]
            return np.minimum(np.maximum(actions, self.low), self.high), actions, out[:, k], out[:, k + 1]
        actions = out[:, 0 if kind == "discrete" else slice(0, k)].astype(np.int64)
        return actions, actions, out[:, k], out[:, k + 1]
