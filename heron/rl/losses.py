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
