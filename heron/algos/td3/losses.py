"""TD3 losses and target: pure functions of tensors (Fujimoto, van Hoof, Meger 2018, "Addressing
Function Approximation Error in Actor-Critic Methods", arXiv:1802.09477; Algorithm 1).

The readable step (``heron.algos.td3.train.make_update``) differentiates them with autograd; the
hand-written step (``heron.accel.handwritten.td3``) computes the same values with them and their
derivatives with its own ``*_grad``, and steps aside where an edit here leaves them behind."""

from __future__ import annotations

import torch

from heron.rl.losses import critic_losses  # step 11: each critic's MSE against the shared target

__all__ = ["actor_loss", "critic_losses", "smoothed_target_actions", "td_target"]


def smoothed_target_actions(
    next_actions: torch.Tensor,
    noise: torch.Tensor,
    noise_clip: float,
    scale: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
) -> torch.Tensor:
    """Target policy smoothing (eq. 14-15, steps 5-6 of the walkthrough):
    a' = clip(pi'(s') + clip(eps, -c, c), low, high); ``noise`` is eps already drawn (in units of
    the action half-range ``scale``)."""
    eps = noise.clamp(-noise_clip, noise_clip) * scale
    return torch.max(torch.min(next_actions + eps, high), low)


def td_target(
    rewards: torch.Tensor, terminated: torch.Tensor, next_q: torch.Tensor, gamma: float | torch.Tensor
) -> torch.Tensor:
    """Clipped double-Q target y = r + gamma * (1 - terminated) * min(Q'_1, Q'_2)(s', a')  (eq. 10;
    steps 7-9). next_q: [2, B]. Truncation is not termination: it bootstraps."""
    assert next_q.dim() == 2 and next_q.shape[1] == rewards.shape[0]
    return rewards + gamma * (~terminated).float() * next_q.min(0).values


def actor_loss(q1: torch.Tensor) -> torch.Tensor:
    """Deterministic policy gradient through the first critic only (step 13): -mean Q1(s, pi(s))."""
    return -q1.mean()
