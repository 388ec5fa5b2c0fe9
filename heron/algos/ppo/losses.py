"""PPO's losses: pure functions of tensors (no config, no optimizer), each with a hand-computed test.

Each loss has its derivative beside it (``*_grad``, scaled by the loss's weight in the total, as
``scale``): the hand-written gradient step (``heron/algos/ppo/lean.py``) calls both, the autograd
step the value alone, and ``tests/test_losses.py`` holds every derivative to ``torch.autograd.grad``
of its value. The policy head's log-probs and entropy and their derivative are
``heron.algos.ppo.networks.ActionHead``'s."""

from __future__ import annotations

import torch


def advantages(mb: dict[str, torch.Tensor], normalize: bool) -> torch.Tensor:
    """The minibatch's advantages, normalized to zero mean and unit spread over the minibatch when
    ``normalize``: (A - mean) / (std + 1e-8). Under torchrun the global minibatch's statistics come
    with it (``adv_mean``, ``adv_std``), so every rank normalizes alike."""
    adv = mb["adv"]
    if normalize:
        adv_mean, adv_std = (mb["adv_mean"], mb["adv_std"]) if "adv_mean" in mb else (adv.mean(), adv.std())
        adv = (adv - adv_mean) / (adv_std + 1e-8)
    return adv


def policy_loss(logp: torch.Tensor, logp_old: torch.Tensor, adv: torch.Tensor, clip_coef: float,
                dual_clip: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clipped surrogate (Schulman et al. 2017, eq. 7), as a loss to minimize:

        r = pi(a|s) / pi_old(a|s)
        L = -min(r A, clip(r, 1 - eps, 1 + eps) A)

    With ``dual_clip`` = c > 1 (Ye et al. 2020, eq. 5), for A < 0 the objective is also bounded
    below by c A, so a huge ratio on a bad action cannot produce an unbounded step:

        L = min(-min(r A, clip(r) A), -c A)   where A < 0

    Returns (loss, approximate KL(old || new) by the (r - 1) - log r estimator, fraction of
    clipped ratios), all scalars without host syncs.
    """
    assert logp.shape == logp_old.shape == adv.shape, (logp.shape, logp_old.shape, adv.shape)
    log_ratio = logp - logp_old
    ratio = log_ratio.exp()
    clipped = -torch.min(ratio * adv, ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv)
    if dual_clip:
        clipped = torch.where(adv < 0, torch.min(clipped, -dual_clip * adv), clipped)
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clipfrac = ((ratio - 1).abs() > clip_coef).float().mean()
    return clipped.mean(), approx_kl, clipfrac


def policy_loss_grad(logp: torch.Tensor, logp_old: torch.Tensor, adv: torch.Tensor, clip_coef: float,
                     dual_clip: float = 0.0, scale: float = 1.0) -> torch.Tensor:
    """d(scale * ``policy_loss``)/dlogp: -A r / n where the unclipped term is the minimum (and the
    dual clip does not bound it), 0 where the clipped term or the bound is taken (n: the elements).
    Where the two terms tie (r within the clip range), both give this same derivative."""
    ratio = (logp - logp_old).exp()
    surr1, surr2 = ratio * adv, ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv
    through = surr1 <= surr2  # where min() takes the unclipped term
    if dual_clip:
        through &= ~((adv < 0) & (-torch.minimum(surr1, surr2) > -dual_clip * adv))
    return torch.where(through, adv * ratio, 0.0).mul_(-scale / logp.numel())


def value_loss(values: torch.Tensor, values_old: torch.Tensor, returns: torch.Tensor, clip_coef: float,
               clip: bool = True) -> torch.Tensor:
    """0.5 * mean squared error to the returns; with ``clip``, the pessimistic maximum of the plain
    and the clipped error, where the clipped value stays within +-clip_coef of the rollout's value
    (the PPO2 baselines trick, DI-engine's ``use_value_clip``):

        L = 0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2))
    """
    assert values.shape == values_old.shape == returns.shape
    err = (values - returns).pow(2)
    if clip:
        v_clipped = values_old + (values - values_old).clamp(-clip_coef, clip_coef)
        err = torch.max(err, (v_clipped - returns).pow(2))
    return 0.5 * err.mean()


def value_loss_grad(values: torch.Tensor, values_old: torch.Tensor, returns: torch.Tensor, clip_coef: float,
                    clip: bool = True, scale: float = 1.0) -> torch.Tensor:
    """d(scale * ``value_loss``)/dvalues: (V - R) / n, or with ``clip`` where the clipped error is the
    larger, (V_clipped - R) / n inside the clip range and 0 outside it (n: the elements)."""
    diff = values - returns
    g = diff
    if clip:
        delta = values - values_old
        diff_c = values_old + delta.clamp(-clip_coef, clip_coef) - returns
        g = torch.where(diff_c.pow(2) > diff.pow(2), diff_c * (delta.abs() <= clip_coef), diff)
    return g.mul(scale / values.numel())


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """1 - Var[R - V] / Var[R]: 1 is a perfect critic, 0 no better than a constant."""
    var = returns.var()
    return torch.where(var > 0, 1 - (returns - values).var() / var, torch.zeros_like(var))
