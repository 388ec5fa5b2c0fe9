"""DreamerV2's three losses (Hafner et al. 2021, "Mastering Atari with Discrete World Models"), as
pure functions of tensors; sheeprl's DreamerV2 gives the exact composition.

Shapes: sequence batches ``[B, T, ...]`` for the world model, imagined trajectories ``[H, B]`` for
behaviour learning. Stochastic states are ``S`` categorical variables of ``K`` classes each; their
logits are ``[..., S, K]`` and a KL between two such states is summed over the S variables (they
form one independent distribution), so free nats apply to the whole state, as in the paper.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from heron.algos.dreamer.losses import categorical_kl
from heron.rl.distributions import HALF_LOG_2PI


def gaussian_nll(mean: torch.Tensor, target: torch.Tensor, event_dims: int) -> torch.Tensor:
    """-log N(target; mean, 1), summed over the last ``event_dims`` dimensions (the decoder's and
    reward head's unit-variance Gaussians)."""
    diff = target - mean
    if not event_dims:
        return 0.5 * diff * diff + HALF_LOG_2PI
    diff = diff.flatten(-event_dims)  # the constant is added once per sample, not per pixel
    return 0.5 * (diff * diff).sum(-1) + diff.shape[-1] * HALF_LOG_2PI


def bernoulli_nll(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """-log Bernoulli(target; sigmoid(logits)) of the continue model."""
    return F.binary_cross_entropy_with_logits(logits, target, reduction="none")


def kl_balanced(
    posterior_logits: torch.Tensor, prior_logits: torch.Tensor, alpha: float, free_nats: float, free_avg: bool
) -> torch.Tensor:
    """KL balancing (paper eq. 2 and algorithm 2):

        alpha * KL(sg(posterior) || prior) + (1 - alpha) * KL(posterior || sg(prior))

    The first term trains the prior toward the posterior, the second (weighted less) regularizes
    the posterior. Free nats: each term is clamped from below at ``free_nats``, after averaging over
    the batch (``free_avg``) or per sample before averaging."""
    lhs = categorical_kl(posterior_logits.detach(), prior_logits)  # [B, T]
    rhs = categorical_kl(posterior_logits, prior_logits.detach())
    if free_avg:
        lhs, rhs = lhs.mean().clamp(min=free_nats), rhs.mean().clamp(min=free_nats)
    else:
        lhs, rhs = lhs.clamp(min=free_nats).mean(), rhs.clamp(min=free_nats).mean()
    return alpha * lhs + (1.0 - alpha) * rhs


def reconstruction_loss(
    obs_nll: torch.Tensor,
    reward_nll: torch.Tensor,
    posterior_logits: torch.Tensor,
    prior_logits: torch.Tensor,
    kl_balancing_alpha: float = 0.8,
    kl_free_nats: float = 0.0,
    kl_free_avg: bool = True,
    kl_regularizer: float = 1.0,
    continue_nll: torch.Tensor | None = None,
    continue_scale_factor: float = 1.0,
) -> dict[str, torch.Tensor]:
    """The world-model loss of sheeprl's DreamerV2:

        loss = kl_regularizer * KL_balanced + E[-log p(obs)] + E[-log p(r)] + scale * E[-log p(continue)]

    ``obs_nll``, ``reward_nll``, ``continue_nll`` are per-step negative log-likelihoods [B, T];
    the logits are [B, T, S, K]. Returns the total and each part (detached parts for logging)."""
    assert obs_nll.shape == reward_nll.shape == posterior_logits.shape[:-2] == prior_logits.shape[:-2]
    kl = kl_balanced(posterior_logits, prior_logits, kl_balancing_alpha, kl_free_nats, kl_free_avg)
    observation, reward = obs_nll.mean(), reward_nll.mean()
    cont = continue_scale_factor * continue_nll.mean() if continue_nll is not None else torch.zeros_like(kl)
    total = kl_regularizer * kl + observation + reward + cont
    return {
        "loss": total,
        "kl": kl.detach(),
        "observation": observation.detach(),
        "reward": reward.detach(),
        "continue": cont.detach(),
    }


def actor_loss(
    log_probs: torch.Tensor,
    entropy: torch.Tensor,
    lambda_values: torch.Tensor,
    baseline: torch.Tensor,
    weights: torch.Tensor,
    rho: float,
    eta: float,
) -> torch.Tensor:
    """Actor loss (paper eq. 6), over the imagined steps that ``actor_steps`` aligns, [H', B]:

        -rho * ln pi(a_t | z_t) * sg(V - v(z_t)) - (1 - rho) * V - eta * H[pi(.|z_t)]

    where V is the lambda-return that a_t is scored by (V^lambda_{t+1} with the paper's alignment),
    weighted by ``weights`` (the cumulative discount predicted along the trajectory, so steps after
    a predicted episode end count less). rho = 1 is REINFORCE (discrete actions), rho = 0 is
    backpropagation through the learned dynamics (continuous actions)."""
    assert log_probs.shape == entropy.shape == lambda_values.shape == baseline.shape == weights.shape
    advantage = (lambda_values - baseline).detach()
    objective = rho * log_probs * advantage + (1.0 - rho) * lambda_values + eta * entropy
    return -(weights * objective).mean()


def critic_loss(values: torch.Tensor, lambda_values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Critic loss (paper eq. 5, sheeprl's DreamerV2): -E[weights * log N(sg(V^lambda); v, 1)] over [H, B]."""
    assert values.shape == lambda_values.shape == weights.shape
    return (weights * gaussian_nll(values, lambda_values.detach(), 0)).mean()
