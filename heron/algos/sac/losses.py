"""SAC losses: pure functions of tensors (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
Applications", arXiv:1812.05905; equation numbers refer to that paper).

Each loss has its derivative beside it (``*_grad``): the hand-written gradient step
(``heron/algos/sac/lean.py``) calls both, the autograd step the value alone, and
``tests/test_losses.py`` holds every derivative to ``torch.autograd.grad`` of its value. A change to
a loss is a change to its pair here; the tanh-Gaussian's pair is ``heron.core.nets.tanh_normal``."""

from __future__ import annotations

import torch


def soft_q_target(rewards: torch.Tensor, terminated: torch.Tensor, next_q: torch.Tensor,
                  next_log_prob: torch.Tensor, alpha: torch.Tensor, gamma: float) -> torch.Tensor:
    """y = r + gamma * (1 - terminated) * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))  (eq. 2-3).

    rewards, terminated, next_log_prob: [B]; next_q: [2, B] (the target critics). Truncated
    transitions are not terminated: they bootstrap."""
    assert next_q.dim() == 2 and next_q.shape[1] == rewards.shape[0]
    soft_value = next_q.min(0).values - alpha * next_log_prob
    return rewards + gamma * (~terminated).float() * soft_value


def critic_losses(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared soft Bellman residual of each critic (eq. 5): q [E, B], target [B] -> [E]."""
    assert q.dim() == 2 and q.shape[1] == target.shape[0]
    return (q - target.detach()).pow(2).mean(1)


def critic_losses_grad(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """d(sum of ``critic_losses``)/dq: 2 (q - target) / B, [E, B]."""
    return (q - target).mul(2.0 / q.shape[1])


def actor_loss(log_prob: torch.Tensor, q: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """J_pi = E[alpha * log pi(a|s) - min_i Q_i(s, a)] with a reparameterized (eq. 7 and 9)."""
    assert q.dim() == 2 and q.shape[1] == log_prob.shape[0]
    return (alpha * log_prob - q.min(0).values).mean()


def actor_loss_grad(log_prob: torch.Tensor, q: torch.Tensor,
                    alpha: torch.Tensor) -> tuple[torch.Tensor, float, torch.Tensor]:
    """The derivatives of ``actor_loss``, in three parts: dJ/dlog pi, the same for every row
    (alpha / B); dJ/dq, which is -1 / B at the member that gives each row's minimum and 0 at the
    others; and that member for each row [B]."""
    B = log_prob.shape[0]
    return alpha / B, -1.0 / B, q.min(0).indices


def alpha_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """J(alpha) = E[-log(alpha) * (log pi(a|s) + H_target)] (eq. 18, optimized in log space as in
    skrl and SB3 for a positive alpha)."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


def alpha_loss_grad(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """d ``alpha_loss`` / dlog_alpha: -mean(log pi(a|s) + H_target)."""
    return torch.neg((log_prob.detach() + target_entropy).mean())
