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

from heron.rl.distributions import HALF_LOG_2PI
from heron.rl.returns import lambda_return


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


def categorical_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(p || q) of S independent K-way categoricals, [..., S, K] -> [...]."""
    logp, logq = F.log_softmax(p_logits, -1), F.log_softmax(q_logits, -1)
    return (logp.exp() * (logp - logq)).sum((-2, -1))


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


def imagination_targets(
    rewards: torch.Tensor,
    discounts: torch.Tensor | None,
    values: torch.Tensor,
    alive: torch.Tensor,
    gamma: float,
    lam: float,
    current: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lambda-return targets and step weights of an imagined trajectory s_0 .. s_H.

    Inputs are predictions at every imagined state, [H + 1, M]: ``rewards`` (reward head),
    ``discounts`` (the continue model's mean, which learns gamma * (1 - is_terminal) as in the
    official code and sheeprl, so it is a discount already; None without a continue model: gamma
    alone) and ``values`` (target critic). ``alive`` [M] is 1 - is_terminal of the real start
    states. Returns (V^lambda, weights), each [H, M], for steps t = 0 .. H-1.

    ``current`` (DreamerV2: paper eq. 4, and the official code that sheeprl follows): the reward
    and discount of step t are predicted at s_t. With a continue model the first discount is the
    real one, gamma * alive. Then v(s) estimates the return including the reward of arriving at s::

        V_t = r(s_t) + d_t ((1 - lambda) v(s_{t+1}) + lambda V_{t+1}),   V_H = v(s_H)
        d_0 = gamma alive,   d_t = c(s_t)

    ``current=False`` (DreamerV3's correction): the reward and discount of the move s_t -> s_{t+1}
    are predicted at s_{t+1}, where the data trains the heads, so that
    V_t = r(s_{t+1}) + d_t (...) with d_t = c(s_{t+1}).

    Weights carry no gradient. The weight of step t is the predicted chance of reaching s_t,
    prod_{k<t} d_k. With ``current=False`` every step from a terminal start also gets weight 0:
    its imagined future is not part of the episode."""
    assert rewards.shape == values.shape and (discounts is None or discounts.shape == rewards.shape)
    assert alive.shape == rewards.shape[1:]
    heads = slice(0, -1) if current else slice(1, None)
    r = rewards[heads]  # [H, M]
    if discounts is None:
        d = torch.full_like(r, gamma)
    else:
        d = discounts[heads]
        if current:
            d = torch.cat([gamma * alive[None].to(d.dtype), d[1:]])
    targets = lambda_return(r, values[:-1], d, values[-1], lam)
    with torch.no_grad():
        weights = torch.cumprod(torch.cat([torch.ones_like(d[:1]), d[:-1]]), 0)
        if not current:
            weights = weights * alive
    return targets, weights


def actor_steps(
    log_probs: torch.Tensor,
    entropies: torch.Tensor,
    targets: torch.Tensor,
    values: torch.Tensor,
    weights: torch.Tensor,
    current: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which imagined steps the actor loss scores, and against which target. Time line (H = 3)::

        states     s_0 -a_0-> s_1 -a_1-> s_2 -a_2-> s_3
        targets    V_0        V_1        V_2
        values     v_0        v_1        v_2        v_3

    ``current`` (the official code and sheeprl, with the paper's reward alignment): V_{t+1} starts
    with r(s_{t+1}), the reward a_t earns, so a_t is scored by V_{t+1} against the baseline v(s_t)
    with weight w_t, for t = 0 .. H-2 (the last action leads to the bootstrap state only). With
    ``next`` (DreamerV3), V_t already starts with the reward of a_t: t = 0 .. H-1 against V_t.

    Inputs: ``log_probs``, ``entropies`` [H, M] of a_t at s_t; ``targets``, ``weights`` [H, M]
    (``imagination_targets``); ``values`` [H + 1, M]. Returns (log_probs, entropies, targets,
    baselines, weights), aligned, each [H - 1, M] (``current``) or [H, M]."""
    assert log_probs.shape == entropies.shape == targets.shape == weights.shape == values[:-1].shape
    if current:
        return log_probs[:-1], entropies[:-1], targets[1:], values[:-2], weights[:-1]
    return log_probs, entropies, targets, values[:-1], weights
