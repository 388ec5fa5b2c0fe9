"""DreamerV3's losses and the functions they are built from (Hafner et al. 2023, "Mastering Diverse
Domains through World Models"), as pure functions of tensors. Where the paper, the official JAX
code (danijar/dreamerv3) and sheeprl 0.8.4's ``dreamer_v3`` differ, the official code decides and
the docstring says so.

Shapes: sequence batches ``[T, B, ...]`` for the world model, imagined trajectories ``[H, M]`` for
behaviour learning. Stochastic states are ``S`` categoricals of ``K`` classes, logits ``[..., S, K]``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from heron.algos.dreamer.losses import categorical_kl


# -- symlog and two-hot -------------------------------------------------------------------------------
def symlog(x: torch.Tensor) -> torch.Tensor:
    """sign(x) ln(1 + |x|) (paper eq. 9): squashes large magnitudes, the identity near 0."""
    return torch.sign(x) * torch.log1p(x.abs())


def symexp(x: torch.Tensor) -> torch.Tensor:
    """sign(x) (exp(|x|) - 1), the inverse of ``symlog``."""
    return torch.sign(x) * torch.expm1(x.abs())


def twohot_bins(n: int = 255, limit: float = 20.0) -> torch.Tensor:
    """The bins of the reward and value heads: ``symexp`` of ``n`` points equally spaced in
    [-limit, limit], so they are dense near 0 and sparse at large magnitudes. Built symmetric (the
    negative half mirrored), so that the middle bin is exactly 0 and uniform probabilities predict
    exactly 0, as the official code's ``symexp_twohot`` head does."""
    if n % 2 == 1:
        half = symexp(torch.linspace(-limit, 0.0, (n - 1) // 2 + 1, dtype=torch.float64))
        bins = torch.cat([half, -half[:-1].flip(0)])
    else:
        half = symexp(torch.linspace(-limit, 0.0, n // 2, dtype=torch.float64))
        bins = torch.cat([half, -half.flip(0)])
    return bins.float()


def _positions(bins: torch.Tensor, space: str) -> torch.Tensor:
    """Where the bins sit for the interpolation and the mean: at their values (``raw``, the official
    code's ``symexp_twohot``) or at the symlog of them, equally spaced (``symlog``: the official
    code's first release and sheeprl encode symlog(x) there and predict symexp of the mean)."""
    return bins if space == "raw" else symlog(bins)


def _neighbours(x: torch.Tensor, bins: torch.Tensor, space: str = "raw") -> tuple[torch.Tensor, ...]:
    """The two bins around each value of ``x`` [...] and their two-hot weights (``twohot``)."""
    x = x.detach().to(bins.dtype)
    points = _positions(bins, space)
    x = x if space == "raw" else symlog(x)
    K = points.shape[0]
    below = ((points <= x.unsqueeze(-1)).sum(-1) - 1).clamp(0, K - 1)
    above = (K - (points > x.unsqueeze(-1)).sum(-1)).clamp(0, K - 1)
    equal = below == above
    to_below = torch.where(equal, 1.0, (points[below] - x).abs())
    to_above = torch.where(equal, 1.0, (points[above] - x).abs())
    total = to_below + to_above
    return below, above, to_above / total, to_below / total


def twohot(x: torch.Tensor, bins: torch.Tensor, space: str = "raw") -> torch.Tensor:
    """Two-hot encoding of ``x`` [...] over ``bins`` [K] -> [..., K]: the weight of the two bins
    around x, each in proportion to x's closeness to it (sums to 1, and the weighted mean of the
    bins' positions is x's); a value outside the bins goes to the end bin. ``space``: where x and
    the bins are placed (``_positions``): the raw values (the official code, the default) or their
    symlog (sheeprl, the official code's first release); the weights differ between two bins, the
    bins are the same."""
    below, above, w_below, w_above = _neighbours(x, bins, space)
    out = torch.zeros(*x.shape, bins.shape[0], dtype=bins.dtype, device=bins.device)
    out.scatter_add_(-1, below.unsqueeze(-1), w_below.unsqueeze(-1))
    return out.scatter_add_(-1, above.unsqueeze(-1), w_above.unsqueeze(-1))


def twohot_nll(logits: torch.Tensor, target: torch.Tensor, bins: torch.Tensor, space: str = "raw") -> torch.Tensor:
    """Cross-entropy of the head's categorical over the bins with the two-hot target: [..., K], [...]
    -> [...]. Read from the two bins the target touches (the same as with ``twohot``'s encoding,
    without the [..., K] target)."""
    return _twohot_ce(F.log_softmax(logits.float(), -1), target, bins, space)


def _twohot_ce(log_probs: torch.Tensor, target: torch.Tensor, bins: torch.Tensor, space: str) -> torch.Tensor:
    below, above, w_below, w_above = _neighbours(target, bins, space)
    return -(
        w_below * log_probs.gather(-1, below.unsqueeze(-1)).squeeze(-1)
        + w_above * log_probs.gather(-1, above.unsqueeze(-1)).squeeze(-1)
    )


def twohot_mean(logits: torch.Tensor, bins: torch.Tensor, space: str = "raw") -> torch.Tensor:
    """The prediction of a two-hot head: the expected bin, [..., K] -> [...] (in ``symlog`` space
    symexp of the expected position). Summed from the middle out, pairing each negative bin with its
    mirror, so that a symmetric distribution predicts exactly 0 (the official code's symmetric sum; a
    left-to-right sum leaves rounding residue)."""
    probs = logits.float().softmax(-1)
    points = _positions(bins, space)
    K = points.shape[0]
    m = K // 2
    if K % 2:
        pairs = probs[..., :m].flip(-1) * points[:m].flip(0) + probs[..., m + 1 :] * points[m + 1 :]
        mean = probs[..., m] * points[m] + pairs.sum(-1)
    else:
        mean = (probs[..., :m].flip(-1) * points[:m].flip(0) + probs[..., m:] * points[m:]).sum(-1)
    return mean if space == "raw" else symexp(mean)


def unimix_logits(logits: torch.Tensor, unimix: float) -> torch.Tensor:
    """Logits of (1 - unimix) softmax(logits) + unimix / K over the last dimension (paper section
    "Robustness": 1% uniform in the latents and the discrete actions, so no class has probability 0
    and the KL stays finite)."""
    if unimix <= 0:
        return logits
    probs = logits.softmax(-1)
    return torch.log((1.0 - unimix) * probs + unimix / logits.shape[-1])


# -- the world model ----------------------------------------------------------------------------------
def symlog_mse(pred: torch.Tensor, target: torch.Tensor, event_dims: int) -> torch.Tensor:
    """Squared error between the prediction and symlog(target), summed over the last ``event_dims``
    dimensions (the vector decoder; paper eq. 10)."""
    return (pred - symlog(target)).square().flatten(-event_dims).sum(-1)


def mse(pred: torch.Tensor, target: torch.Tensor, event_dims: int) -> torch.Tensor:
    """Squared error summed over the last ``event_dims`` dimensions (the image decoder)."""
    return (pred - target).square().flatten(-event_dims).sum(-1)


def world_model_loss(
    obs_loss: torch.Tensor,
    reward_loss: torch.Tensor,
    continue_loss: torch.Tensor,
    posterior_logits: torch.Tensor,
    prior_logits: torch.Tensor,
    kl_dynamic: float = 0.5,
    kl_representation: float = 0.1,
    kl_free_nats: float = 1.0,
    kl_regularizer: float = 1.0,
    continue_scale_factor: float = 1.0,
) -> dict[str, torch.Tensor]:
    """The world model's loss (paper eq. 5), each term per step [T, B] before the mean:

        pred + kl_regularizer * (dyn * max(free, KL(sg(post) || prior)) + rep * max(free, KL(post || sg(prior))))

    with pred = observation + reward + continue_scale * continue. Free bits clip each step's KL
    (not the batch's mean, as DreamerV2's ``kl_free_avg`` did): below 1 nat a state's KL has no
    gradient. Returns the total and its parts (detached), ``kl`` the plain KL."""
    assert obs_loss.shape == reward_loss.shape == continue_loss.shape == posterior_logits.shape[:-2]
    dyn = categorical_kl(posterior_logits.detach(), prior_logits)
    rep = categorical_kl(posterior_logits, prior_logits.detach())
    kl_loss = kl_dynamic * dyn.clamp(min=kl_free_nats) + kl_representation * rep.clamp(min=kl_free_nats)
    cont = continue_scale_factor * continue_loss
    total = (kl_regularizer * kl_loss + obs_loss + reward_loss + cont).mean()
    return {
        "loss": total,
        "kl": dyn.mean().detach(),
        "kl_loss": kl_loss.mean().detach(),
        "observation": obs_loss.mean().detach(),
        "reward": reward_loss.mean().detach(),
        "continue": cont.mean().detach(),
    }


# -- behaviour ----------------------------------------------------------------------------------------
def percentile_scale(
    returns: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
    decay: float = 0.99,
    limit: float = 1.0,
    percentiles: tuple[float, float] = (0.05, 0.95),
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return normalisation (paper eq. 12): exponential moving averages of the 5th and 95th
    percentiles of the returns, and the scale S = max(limit, high - low) that the advantages are
    divided by, so that large returns are scaled down and small ones are not scaled up. The averages
    start at 0 and are not debiased (the official code's ``debias: False``). Returns the new
    (low, high) and S."""
    x = returns.detach().float().flatten()
    # the percentiles made on x's device, not copied from the host (a copy would make the step wait
    # for the GPU, and a CUDA graph could not record it)
    q = torch.quantile(x, torch.stack([x.new_full((), p) for p in percentiles]))
    low = decay * low + (1.0 - decay) * q[0]
    high = decay * high + (1.0 - decay) * q[1]
    return low, high, torch.clamp(high - low, min=limit)


def actor_loss(
    log_probs: torch.Tensor,
    entropy: torch.Tensor,
    returns: torch.Tensor,
    baseline: torch.Tensor,
    weights: torch.Tensor,
    scale: torch.Tensor,
    rho: float,
    eta: float,
) -> torch.Tensor:
    """The actor's loss (paper eq. 11) over the imagined steps t = 0 .. H-1 [H, M]:

        -w_t * (rho * ln pi(a_t | s_t) sg(A_t) + (1 - rho) * A_t + eta * H[pi(.|s_t)]),
        A_t = (R_t - v(s_t)) / max(1, S)

    R_t the lambda-return of step t (it starts with the reward of a_t), v the critic, S the
    percentile range (``percentile_scale``), w_t the chance of reaching s_t. rho = 1: REINFORCE
    (discrete actions), rho = 0: backpropagation of the returns through the learned dynamics
    (continuous actions)."""
    assert log_probs.shape == entropy.shape == returns.shape == baseline.shape == weights.shape
    advantage = (returns - baseline) / scale.detach()
    objective = rho * log_probs * advantage.detach() + (1.0 - rho) * advantage + eta * entropy
    return -(weights.detach() * objective).mean()


def critic_loss(
    logits: torch.Tensor,
    returns: torch.Tensor,
    target_values: torch.Tensor,
    weights: torch.Tensor,
    bins: torch.Tensor,
    slow_regularizer: float = 1.0,
    space: str = "raw",
) -> torch.Tensor:
    """The critic's loss (paper eq. 10 and the official code's ``slowreg``): the two-hot
    cross-entropy towards the lambda-returns, plus ``slow_regularizer`` times the cross-entropy
    towards the slow (EMA) critic's own predictions, weighted by the chance of reaching each
    imagined state. ``logits`` [H, M, K]; the rest [H, M]; ``space`` as ``twohot``'s."""
    assert logits.shape[:-1] == returns.shape == target_values.shape == weights.shape
    log_probs = F.log_softmax(logits.float(), -1)  # one log-softmax for both terms
    loss = _twohot_ce(log_probs, returns, bins, space) + slow_regularizer * _twohot_ce(
        log_probs, target_values, bins, space
    )
    return (weights.detach() * loss).mean()
