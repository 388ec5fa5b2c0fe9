"""Losses more than one algorithm computes alike: pure functions of tensors, each algorithm's
``losses.py`` naming them where its paper does."""

from __future__ import annotations

import torch


def critic_losses(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Each critic's mean squared error against the shared, fixed target: q [E, B], target [B] ->
    [E]. SAC's soft Bellman residual (Haarnoja et al. 2018, eq. 5) and TD3's critic loss (Fujimoto et
    al. 2018, Algorithm 1): the critics' losses are summed for one optimizer step."""
    assert q.dim() == 2 and q.shape[1] == target.shape[0]
    return (q - target.detach()).pow(2).mean(1)


def critic_metrics(q: torch.Tensor, qf_losses: torch.Tensor) -> dict[str, torch.Tensor]:
    """The twin critics' logged values and losses (CleanRL's names): q [E, B], qf_losses [E]."""
    return {
        "losses/qf1_values": q[0].mean().detach(),
        "losses/qf2_values": q[1].mean().detach(),
        "losses/qf1_loss": qf_losses[0].detach(),
        "losses/qf2_loss": qf_losses[1].detach(),
        "losses/qf_loss": qf_losses.detach().mean(),
    }
