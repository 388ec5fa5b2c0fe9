"""TD3 networks: a deterministic tanh actor scaled to the action bounds (step 2) and twin critics
evaluated as one ensemble, with member 0 as the Q1 path for the actor loss (step 3)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from heron.accel import acting
from heron.rl.distributions import squash
from heron.rl.nets import EnsembleMLP, RunningNorm, mlp


class Actor(nn.Module):
    """a = tanh(mlp(norm(s))) rescaled to [low, high] (the TD3 paper's deterministic actor)."""

    scale: torch.Tensor  # buffers
    bias: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, norm: RunningNorm, obs_dim: int, hidden: tuple[int, ...], low: torch.Tensor, high: torch.Tensor):
        super().__init__()
        self.norm = norm
        self.net = mlp(obs_dim, hidden, low.numel())
        self.register_buffer("scale", (high - low).float() / 2)
        self.register_buffer("bias", (high + low).float() / 2)
        self.register_buffer("low", low.float())
        self.register_buffer("high", high.float())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return squash(self.net(self.norm(obs)), self.scale, self.bias)[0]

    @torch.no_grad()
    def act(
        self, obs: torch.Tensor, state: torch.Tensor, deterministic: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy interface (heron.accel.acting): the greedy action; exploration noise is added by
        the training loop."""
        return self(obs), state

    def numpy_mode(self, batch: int):
        """``act`` in numpy for ``batch`` observations (``heron.accel.acting.Policy``), or None where
        it stays in torch (``NumpyActor.of``)."""
        return NumpyActor.of(self, batch)


class NumpyActor:
    """``Actor.forward`` in numpy for acting on the CPU (``heron.accel.acting``): obs [N, D] arrays
    -> greedy actions [N, A], float32, within float32 rounding of the torch forward."""

    def __init__(self, actor: Actor):
        self.norm, self.mlp = actor.norm, acting.NumpyMLP(acting.linears(actor.net), "relu")
        self.scale, self.bias = actor.scale.numpy(), actor.bias.numpy()

    @staticmethod
    def of(actor: Actor, num_envs: int, mixed: bool = False) -> NumpyActor | None:
        """The numpy actor where it applies (``acting.eligible``), else None. ``mixed``: under mixed
        precision too, in float32 (training's acting; ``heron.accel.acting``)."""
        amp = None if mixed else actor.net.amp_dtype
        return NumpyActor(actor) if acting.eligible(num_envs, acting.linears(actor.net), amp) else None

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return np.tanh(self.mlp(acting.normalize(obs, self.norm))) * self.scale + self.bias


class Critic(nn.Module):
    def __init__(self, norm: RunningNorm, obs_dim: int, hidden: tuple[int, ...], action_dim: int, members: int = 2):
        super().__init__()
        self.norm = norm
        self.q = EnsembleMLP(members, obs_dim + action_dim, hidden, 1)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """obs [B, D], actions [B, A] -> Q values [E, B]."""
        return self.q(torch.cat([self.norm(obs), actions], -1)).squeeze(-1)

    def q1(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The first critic alone [B], for the actor loss."""
        return self.q.member(0, torch.cat([self.norm(obs), actions], -1)).squeeze(-1)


def build(
    obs_dim: int, low: torch.Tensor, high: torch.Tensor, hidden: tuple[int, ...], obs_norm: bool
) -> tuple[Actor, Critic]:
    norm = RunningNorm((obs_dim,), enabled=obs_norm)
    return Actor(norm, obs_dim, hidden, low, high), Critic(norm, obs_dim, hidden, low.numel())
