"""SAC losses: pure functions of tensors (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
Applications", arXiv:1812.05905; equation numbers refer to that paper).

The readable step (``heron.algos.sac.train.make_update``) differentiates them with autograd. The
hand-written step (``heron.accel.handwritten.sac``) computes the same values with these functions
and their derivatives with its own ``*_grad``; edit a loss here and every run follows the edit (the
hand-written step steps aside until its derivative follows: ``heron.accel.step``)."""

from __future__ import annotations

import torch

from heron.rl.losses import critic_losses  # the soft Bellman residual (eq. 5), as TD3's critics'

__all__ = ["actor_loss", "alpha_loss", "critic_losses", "soft_q_target"]


def soft_q_target(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    next_q: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor,
    gamma: float | torch.Tensor,
) -> torch.Tensor:
    """y = r + gamma * (1 - terminated) * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))  (eq. 2-3).

    rewards, terminated, next_log_prob: [B]; next_q: [2, B] (the target critics). Truncated
    transitions are not terminated: they bootstrap. ``gamma``: one number, or with n-step returns
    each transition's own discount [B]."""
    assert next_q.dim() == 2 and next_q.shape[1] == rewards.shape[0]
    soft_value = next_q.min(0).values - alpha * next_log_prob
    return rewards + gamma * (~terminated).float() * soft_value


def actor_loss(log_prob: torch.Tensor, q: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """J_pi = E[alpha * log pi(a|s) - min_i Q_i(s, a)] with a reparameterized (eq. 7 and 9)."""
    assert q.dim() == 2 and q.shape[1] == log_prob.shape[0]
    return (alpha * log_prob - q.min(0).values).mean()


def alpha_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """J(alpha) = E[-log(alpha) * (log pi(a|s) + H_target)] (eq. 18, optimized in log space as in
    skrl and SB3 for a positive alpha)."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()
