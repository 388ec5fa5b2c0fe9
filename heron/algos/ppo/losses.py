"""PPO's losses: pure functions of tensors (no config, no optimizer), each with a hand-computed test.

The readable step (``heron.algos.ppo.learn.make_update``) differentiates them with autograd. The
hand-written step (``heron.accel.handwritten.ppo``) takes their values, and the terms they are made
of (``policy_terms``, ``value_terms``), from here, and their derivatives from its own ``*_grad``; it
steps aside where an edit here leaves those behind. The policy head's log-probs and entropy are
``heron.algos.ppo.networks``'."""

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


def policy_loss(
    logp: torch.Tensor, logp_old: torch.Tensor, adv: torch.Tensor, clip_coef: float, dual_clip: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clipped surrogate (Schulman et al. 2017, eq. 7), as a loss to minimize:

        r = pi(a|s) / pi_old(a|s)
        L = -min(r A, clip(r, 1 - eps, 1 + eps) A)

    With ``dual_clip`` = c > 1 (Ye et al. 2020, eq. 5), for A < 0 the objective is also bounded
    below by c A, so a huge ratio on a bad action cannot produce an unbounded step:

        L = min(-min(r A, clip(r) A), -c A)   where A < 0

    Returns (loss, approximate KL(old || new) by the (r - 1) - log r estimator, fraction of
    clipped ratios), all scalars without host syncs.
    """
    loss, approx_kl, clipfrac, *_ = policy_terms(logp, logp_old, adv, clip_coef, dual_clip)
    return loss, approx_kl, clipfrac


def policy_terms(
    logp: torch.Tensor, logp_old: torch.Tensor, adv: torch.Tensor, clip_coef: float, dual_clip: float
) -> tuple[torch.Tensor, ...]:
    """``policy_loss``'s three values, then what its derivative reuses: r, r A, clip(r) A."""
    assert logp.shape == logp_old.shape == adv.shape, (logp.shape, logp_old.shape, adv.shape)
    log_ratio = logp - logp_old
    ratio = log_ratio.exp()
    surr1, surr2 = ratio * adv, ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv
    clipped = -torch.min(surr1, surr2)
    if dual_clip:
        clipped = torch.where(adv < 0, torch.min(clipped, -dual_clip * adv), clipped)
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clipfrac = ((ratio - 1).abs() > clip_coef).float().mean()
    return clipped.mean(), approx_kl, clipfrac, ratio, surr1, surr2


def value_loss(
    values: torch.Tensor, values_old: torch.Tensor, returns: torch.Tensor, clip_coef: float, clip: bool = True
) -> torch.Tensor:
    """0.5 * mean squared error to the returns; with ``clip``, the pessimistic maximum of the plain
    and the clipped error, where the clipped value stays within +-clip_coef of the rollout's value
    (the PPO2 baselines trick, DI-engine's ``use_value_clip``):

        L = 0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2))
    """
    return value_terms(values, values_old, returns, clip_coef, clip)[0]


def value_terms(
    values: torch.Tensor, values_old: torch.Tensor, returns: torch.Tensor, clip_coef: float, clip: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """``value_loss``, then what its derivative reuses: V - R, (V - R)^2, and with ``clip`` the
    clipped value's error V_clipped - R, its square and V - V_old (else None)."""
    assert values.shape == values_old.shape == returns.shape
    diff = values - returns
    err = diff.pow(2)
    if not clip:
        return 0.5 * err.mean(), diff, err, None, None, None
    delta = values - values_old
    diff_c = values_old + delta.clamp(-clip_coef, clip_coef) - returns
    err_c = diff_c.pow(2)
    return 0.5 * torch.max(err, err_c).mean(), diff, err, diff_c, err_c, delta


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """1 - Var[R - V] / Var[R]: 1 is a perfect critic, 0 no better than a constant."""
    var = returns.var()
    return torch.where(var > 0, 1 - (returns - values).var() / var, torch.zeros_like(var))
