"""DreamerV3's continuous actions: an independent normal per action dimension around tanh of the
actor's mean, and the clipping of its samples (its discrete actions and latents are the shared
``heron.algos.dreamer.distributions``, with 1% uniform mixed into their logits)."""

from __future__ import annotations

import torch

from heron.rl.distributions import normal_entropy, normal_log_prob


def clip_actions(actions: torch.Tensor, limit: float) -> torch.Tensor:
    """Continuous actions scaled back to magnitude ``limit`` where they exceed it, with the scale's
    gradient stopped (the official code's action clipping before the dynamics and the env)."""
    if limit <= 0:
        return actions
    return actions * (limit / actions.abs().clamp(min=limit)).detach()


class Normal:
    """Normal(tanh(m), std) per action dimension, independent (DreamerV3's continuous actions: the
    official code's ``bounded_normal``, sheeprl's ``scaled_normal``)."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor):
        self.mean, self.std = mean, std

    def rsample(self) -> torch.Tensor:
        return self.mean + self.std * torch.randn_like(self.mean)

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        z = (x - self.mean) / self.std
        return normal_log_prob(z, self.std.log()).sum(-1)

    def entropy(self) -> torch.Tensor:
        return normal_entropy(self.std.log()).sum(-1)

    def mode(self) -> torch.Tensor:
        return self.mean
