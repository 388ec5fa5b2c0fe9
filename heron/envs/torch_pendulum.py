"""Pendulum as a tensor vector env: thousands of pendulums stepped by a handful of torch operations,
on the CPU or a GPU, with Gymnasium's ``Pendulum-v1`` dynamics, reward and episode length.

``TorchPendulum`` is a ``gymnasium.vector.VectorEnv`` whose observations, rewards and flags are
torch tensors on its device (actions may be tensors or arrays). It is heron's reference for the
tensor-env contract (``docs/guide/vector-envs.md``) and a fast task for many-env off-policy training:

    env = gymnasium.make_vec("heron/TorchPendulum-v1", num_envs=4096, vectorization_mode="vector_entry_point")

Dynamics, per env (Gymnasium's): the torque is clipped to [-2, 2]; the angular velocity gains
``(3 g / (2 l) sin(theta) + 3 / (m l^2) u) dt`` and is clipped to [-8, 8]; the angle moves by the new
velocity times ``dt``; the reward is ``-(normalized angle^2 + 0.1 velocity^2 + 0.001 u^2)`` of the
state before the step; episodes never terminate and are truncated after ``max_episode_steps`` (200).
Starts are uniform in angle [-pi, pi] and velocity [-1, 1].

The env ends episodes in any of Gymnasium's three autoreset modes (``autoreset_mode``), so that it
also serves to check code that has to read all three:

* ``NEXT_STEP`` (Gymnasium's default): the step after a done one resets those envs, ignoring
  their actions, and returns reward 0 and no flags for them;
* ``SAME_STEP``: done envs reset within the step; the returned observation is the reset one and
  ``infos["final_obs"]`` (with the mask ``infos["_final_obs"]``) holds the last one of the episode;
* ``DISABLED``: done envs wait for ``reset(options={"reset_mask": mask})``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space


class TorchPendulum(VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    max_speed, max_torque, dt, g, m, length = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        max_episode_steps: int = 200,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        g: float = 10.0,
        render_mode: str | None = None,
        **kwargs: Any,
    ):
        if num_envs <= 0:
            raise ValueError(f"num_envs must be positive, got {num_envs}")
        self.num_envs, self.device, self.dtype = num_envs, torch.device(device), dtype
        self.max_episode_steps, self.g = max_episode_steps, g
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.metadata = {**type(self).metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = render_mode
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        self.single_observation_space = spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = spaces.Box(-self.max_torque, self.max_torque, shape=(1,), dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.generator = torch.Generator(device=self.device)
        self.theta = torch.zeros(num_envs, device=self.device, dtype=dtype)
        self.theta_dot = torch.zeros_like(self.theta)
        self.steps = torch.zeros(num_envs, device=self.device, dtype=torch.int64)
        self.pending = torch.zeros(num_envs, device=self.device, dtype=torch.bool)  # NEXT_STEP: reset at the next step

    # -- state --------------------------------------------------------------------------------
    def _obs(self) -> torch.Tensor:
        return torch.stack([torch.cos(self.theta), torch.sin(self.theta), self.theta_dot], dim=1).to(torch.float32)

    def _start(self, mask: torch.Tensor | None = None) -> None:
        """Fresh starts for the envs of ``mask`` (all when None)."""
        n = self.num_envs if mask is None else int(mask.sum())
        if n == 0:
            return
        u = torch.rand(2, n, generator=self.generator, device=self.device, dtype=self.dtype) * 2 - 1
        theta, theta_dot = u[0] * math.pi, u[1]
        if mask is None:
            self.theta, self.theta_dot = theta, theta_dot
            self.steps.zero_()
        else:
            self.theta[mask], self.theta_dot[mask] = theta, theta_dot
            self.steps[mask] = 0

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        if seed is not None:
            self.generator.manual_seed(int(seed if isinstance(seed, int) else seed[0]))
        mask = (options or {}).get("reset_mask")
        if mask is not None:
            mask = torch.as_tensor(mask, device=self.device, dtype=torch.bool)
            if mask.shape != (self.num_envs,):
                raise ValueError(f"reset_mask must have shape ({self.num_envs},), got {tuple(mask.shape)}")
            self._start(mask)
            self.pending &= ~mask
        else:
            self._start()
            self.pending.zero_()
        return self._obs(), {}

    def step(self, actions: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        u = torch.as_tensor(actions, device=self.device).to(self.dtype).reshape(self.num_envs)
        u = u.clamp(-self.max_torque, self.max_torque)
        theta, theta_dot = self.theta, self.theta_dot
        angle = torch.remainder(theta + math.pi, 2 * math.pi) - math.pi
        reward = -(angle**2 + 0.1 * theta_dot**2 + 0.001 * u**2)
        new_theta_dot = (
            theta_dot
            + (3 * self.g / (2 * self.length) * torch.sin(theta) + 3.0 / (self.m * self.length**2) * u) * self.dt
        )
        new_theta_dot = new_theta_dot.clamp(-self.max_speed, self.max_speed)
        self.theta, self.theta_dot = theta + new_theta_dot * self.dt, new_theta_dot
        self.steps += 1
        terminated = torch.zeros(self.num_envs, device=self.device, dtype=torch.bool)
        truncated = self.steps >= self.max_episode_steps
        reward = reward.to(torch.float32)
        infos: dict[str, Any] = {}
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            was = self.pending
            if bool(was.any()):
                self._start(was)
                reward = torch.where(was, torch.zeros_like(reward), reward)
                truncated = truncated & ~was
            self.pending = terminated | truncated
            return self._obs(), reward, terminated, truncated, infos
        obs = self._obs()
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            done = terminated | truncated
            if bool(done.any()):
                infos["final_obs"], infos["_final_obs"] = obs.clone(), done
                self._start(done)
                obs = self._obs()
        return obs, reward, terminated, truncated, infos

    def state_dict(self) -> dict:
        """Everything the env's future depends on, to resume it exactly."""
        return {
            "theta": self.theta.cpu(),
            "theta_dot": self.theta_dot.cpu(),
            "steps": self.steps.cpu(),
            "pending": self.pending.cpu(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.theta = state["theta"].to(self.device, self.dtype)
        self.theta_dot = state["theta_dot"].to(self.device, self.dtype)
        self.steps = state["steps"].to(self.device)
        self.pending = state["pending"].to(self.device)
        self.generator.set_state(state["generator"])
