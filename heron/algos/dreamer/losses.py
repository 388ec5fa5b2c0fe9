"""The losses' pieces both Dreamers compute alike: the KL between the latents' categoricals, the
lambda-return targets and weights of an imagined trajectory (``imagination_targets``), and which
imagined steps the actor loss scores against which target (``actor_steps``). Each Dreamer's
``losses`` module builds its world-model, actor and critic losses on them."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from heron.rl.returns import lambda_return


def categorical_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(p || q) of S independent K-way categoricals, [..., S, K] -> [...]."""
    logp, logq = F.log_softmax(p_logits, -1), F.log_softmax(q_logits, -1)
    return (logp.exp() * (logp - logq)).sum((-2, -1))


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
