"""Return estimators: pure tensor functions over rollouts laid out ``[T, N]`` (time, env).

Every function takes ``values`` = V(obs_t) and ``next_values`` = V(next_obs_t), where ``next_obs_t``
is the TRUE observation that followed step t (heron's ``Step.next_obs``: the final observation
where an episode ended). That is what makes truncation right: a step cut by a time limit bootstraps
from the value of its final observation, while a terminated step does not bootstrap at all, and
neither lets the estimate leak into the next episode.

Timeline of one env (| marks an episode end at step t, obs' = next_obs)::

    t:          0      1      2 |    3      4
    obs_t:      s0     s1     s2     s0'    s1'
    next_obs_t: s1     s2     sF     s1'    s2'     <- sF: final obs of episode 1
    done_t:     0      0      1      0      0       (terminated or truncated)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Generalized Advantage Estimation (Schulman et al. 2016, eq. 16), [T, N] -> advantages [T, N]:

        delta_t = r_t + gamma * (1 - terminated_t) * V(next_obs_t) - V(obs_t)
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1},    A_T = 0

    The recursion stops at every episode end (done = terminated or truncated); a truncated step
    still bootstraps through ``next_values`` in its delta. Returns (value targets) are A + V.
    """
    assert rewards.shape == values.shape == next_values.shape == terminated.shape == truncated.shape
    deltas = rewards + gamma * next_values.masked_fill(terminated, 0.0) - values  # [T, N]
    if deltas.device.type == "cpu":  # a step per t in numpy: cheaper per operation than torch, the loop's numbers
        return sequential_sums(deltas, terminated | truncated, gamma * lam)
    return discounted_sums(deltas, terminated | truncated, gamma * lam)


def sequential_sums(x: torch.Tensor, done: torch.Tensor, c: float) -> torch.Tensor:
    """``discounted_sums`` as the recursion reads, one step at a time from the last, in numpy (on the
    CPU, where a numpy operation on a few envs costs a fraction of a torch operation's overhead): the
    same operations in the same order as a torch loop, so the same bits, which seeded runs keep."""
    xs = x.detach().numpy()
    decay = np.asarray(c, xs.dtype) * (1 - done.numpy()).astype(xs.dtype)
    out = np.empty_like(xs)
    last = np.zeros_like(xs[0])
    for t in range(len(xs) - 1, -1, -1):
        last = xs[t] + decay[t] * last
        out[t] = last
    return torch.from_numpy(out)


# steps per block of ``discounted_sums`` and the most weights [T/B, B, B, ...] one call may hold
SUM_BLOCK, SUM_WEIGHTS = 64, 2**24
_powers: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _block_powers(c: float, block: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """c^(k-t) [t, k] where k >= t (0 below), and c^(B-t) [t], for blocks of B steps (kept: a run
    asks for the same one at every call)."""
    key = (c, block, dtype, device)
    if key not in _powers:
        if len(_powers) > 64:
            _powers.clear()
        steps = torch.arange(block, device=device)
        gaps = (steps[None, :] - steps[:, None]).to(dtype)  # [t, k]: k - t
        _powers[key] = (
            torch.where(gaps >= 0, torch.pow(c, gaps.clamp_min(0)), 0.0),
            torch.pow(c, (block - steps).to(dtype)),
        )
    return _powers[key]


def discounted_sums(x: torch.Tensor, done: torch.Tensor, c: float) -> torch.Tensor:
    """y_t = x_t + c * (1 - done_t) * y_{t+1}, y_T = 0, over [T, ...] (GAE's recursion), without a
    Python step per t, for GPUs: a rollout of 128 or 256 steps was 400-800 kernel launches, re-run
    before every epoch (``--recompute-adv``).

    Unrolled, y_t = sum over k >= t of c^(k-t) x_k, for the k up to the episode's end: the product
    of the decays from t to k-1 is c^(k-t) where no episode ends in [t, k), else 0. With
    e_k = the episode ends before step k (an exclusive cumulative count), "none in [t, k)" is
    e_k == e_t. So within blocks of B steps y is one weighted sum, W[t, k] = c^(k-t) where k >= t
    and e_k == e_t, for all blocks at once; then the blocks are chained from the last, each step t
    of a block adding c^(B-t) * y(the next block's first step) where no episode ends from t to the
    block's end. (The powers are computed, not multiplied step by step: the same numbers to about
    1e-6 of the loop's, tests/test_ppo.py.)"""
    T, rest = x.shape[0], x.shape[1:]
    ones = [1] * len(rest)
    block = max(1, min(SUM_BLOCK, T, SUM_WEIGHTS // (T * max(1, math.prod(rest)))))
    blocks = -(-T // block)
    pad = blocks * block - T  # steps before the first, which add nothing (x = 0) and are dropped
    ends = done.long()
    if pad:
        x = torch.cat([x.new_zeros(pad, *rest), x])
        ends = torch.cat([ends.new_zeros(pad, *rest), ends])
    powers, to_end = _block_powers(c, block, x.dtype, x.device)
    upto = torch.cumsum(ends, 0).view(blocks, block, *rest)  # episode ends up to and including each step
    before = upto - ends.view(blocks, block, *rest)  # e: ends before each step
    w = torch.where(before[:, None] == before[:, :, None], powers.view(1, block, block, *ones), 0.0)  # [b, t, k, ...]
    y = (w * x.view(blocks, 1, block, *rest)).sum(2)  # [b, t, ...]
    if blocks > 1:  # where no episode ends from step t to its block's end: y_t += c^(B-t) y(next block's first)
        gain = torch.where(before == upto[:, -1:], to_end.view(1, block, *ones), 0.0)
        ys, gains = list(y.unbind(0)), gain.unbind(0)
        for b in range(blocks - 2, -1, -1):
            ys[b] = ys[b] + gains[b] * ys[b + 1][0]
        y = torch.stack(ys)
    return y.reshape(blocks * block, *rest)[pad:]


def nstep_returns(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    n: int,
) -> torch.Tensor:
    """n-step value targets (Sutton & Barto eq. 7.1), [T, N] -> [T, N]:

        G_t = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated_{t+m-1}) V(next_obs_{t+m-1})

    where m <= n is cut short by the episode's end (done at t+m-1) or the rollout's end (t+m-1 =
    T-1). n = 1 is the TD(0) target; n >= T equals GAE with lambda = 1 plus V.
    """
    T = rewards.shape[0]
    not_term = 1.0 - terminated.float()
    done = terminated | truncated
    last_row = torch.zeros_like(done)
    last_row[-1] = True  # the rollout's end closes every window

    def ahead(x: torch.Tensor, k: int) -> torch.Tensor:  # row t holds x[t + k] (zeros past the end)
        return torch.cat([x[k:], torch.zeros_like(x[:k])]) if k else x

    out = torch.zeros_like(rewards)
    open_ = torch.ones_like(done)  # [T, N]: the window of G_t still collects rewards
    for k in range(min(n, T)):
        out = out + open_ * gamma**k * ahead(rewards, k)
        closes = open_ & (ahead(done, k) | ahead(last_row, k) | (k == n - 1))
        out = out + closes * gamma ** (k + 1) * ahead(not_term, k) * ahead(next_values, k)
        open_ = open_ & ~closes
    return out


def lambda_return(
    rewards: torch.Tensor, values: torch.Tensor, discounts: torch.Tensor, bootstrap: torch.Tensor, lam: float
) -> torch.Tensor:
    """TD(lambda) targets along an imagined trajectory (Dreamer: Hafner et al. 2021, eq. 4), [H, B] -> [H, B]:

        V^lambda_t = r_t + d_t * ((1 - lambda) * v_{t+1} + lambda * V^lambda_{t+1}),   V^lambda_H = v_H

    ``rewards[t]`` and ``discounts[t]`` (gamma times the continue probability) belong to the move
    from state t to state t+1; ``values[t]`` = v(state t) for t < H and ``bootstrap`` = v(state H)::

        state:      s0 ---r0,d0---> s1 ---r1,d1---> s2 ... s_{H-1} ---r_{H-1},d_{H-1}---> s_H
        values:     v0              v1                     v_{H-1}                        bootstrap

    lambda = 1 gives the discounted Monte Carlo return bootstrapped at H; lambda = 0 the one-step
    TD target r_t + d_t v_{t+1}.
    """
    assert rewards.shape == values.shape == discounts.shape and bootstrap.shape == values.shape[1:]
    next_values = torch.cat([values[1:], bootstrap[None]])  # [H, B]: v_{t+1}
    inputs = rewards + discounts * next_values * (1.0 - lam)
    out = torch.empty_like(rewards)
    last = bootstrap
    for t in range(rewards.shape[0] - 1, -1, -1):
        last = inputs[t] + discounts[t] * lam * last
        out[t] = last
    return out


class RewardScaler:
    """Reward scaling for continuous control (Engstrom et al. 2020, "Implementation Matters",
    section 3): divide rewards by the running standard deviation of the discounted return
    ``R_t = gamma R_{t-1} + r_t`` (per env, reset at episode ends), clip to +-clip. Its statistics
    are part of the checkpoint (``state_dict``), so resume continues with the same scale.

    It runs once per env step on a handful of numbers, so it works in numpy float64 (far cheaper
    than the same arithmetic on tiny torch tensors); a tensor env's rewards are scaled in torch, on
    their device (its running returns then live there)."""

    def __init__(
        self,
        num_envs: int,
        gamma: float,
        clip: float = 10.0,
        eps: float = 1e-8,
        moments: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor, int]] | None = None,
    ):
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.ret: Any = np.zeros(num_envs, np.float64)  # a tensor's rewards make it a tensor (``_tensors``)
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4
        self.moments = moments  # data-parallel runs: the moments of every rank's returns (dist.global_moments)

    def __call__(self, rewards: Any, done: Any) -> Any:
        """rewards [N] -> scaled rewards [N] (float32); folds the returns into the statistics first."""
        if isinstance(rewards, torch.Tensor):
            return self._tensors(rewards, done)
        self.ret = self.ret * self.gamma + rewards
        if self.moments is not None:
            m, v, b = self.moments(torch.from_numpy(self.ret))
            b_mean, b_var = float(m), float(v)
        else:  # numpy's mean and var written out (the same sums; their wrappers were most of the call)
            b = self.ret.size
            b_mean = self.ret.sum() / b
            dev = self.ret - b_mean
            b_mean, b_var = float(b_mean), float((dev * dev).sum() / b)
        self._fold(b_mean, b_var, b)
        self.ret[done] = 0.0
        scaled = rewards / np.sqrt(self.var + self.eps)
        return np.minimum(np.maximum(scaled, -self.clip), self.clip).astype(np.float32)  # np.clip, without its wrapper

    def _tensors(self, rewards: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """``__call__`` for a tensor env's rewards: the same sums in torch float64."""
        self.ret = torch.as_tensor(self.ret, dtype=torch.float64).to(rewards.device) * self.gamma + rewards
        if self.moments is not None:
            m, v, b = self.moments(self.ret)
        else:
            m, v, b = self.ret.mean(), self.ret.var(correction=0), self.ret.numel()
        self._fold(float(m), float(v), b)
        self.ret[done] = 0.0
        return torch.clamp(rewards / math.sqrt(self.var + self.eps), -self.clip, self.clip).float()

    def _fold(self, b_mean: float, b_var: float, b: int) -> None:
        """Merge a batch's mean and variance of the returns (``b`` of them) into the running ones."""
        delta, total = b_mean - self.mean, self.count + b
        self.mean += delta * b / total
        self.var = (self.var * self.count + b_var * b + delta * delta * self.count * b / total) / total
        self.count = total

    def state_dict(self) -> dict:
        ret = self.ret.cpu().clone() if isinstance(self.ret, torch.Tensor) else torch.from_numpy(self.ret.copy())
        return {
            "ret": ret,
            "mean": torch.tensor(self.mean, dtype=torch.float64),
            "var": torch.tensor(self.var, dtype=torch.float64),
            "count": torch.tensor(self.count, dtype=torch.float64),
        }

    def load_state_dict(self, state: dict) -> None:
        self.ret = state["ret"].numpy().astype(np.float64).copy()  # (a tensor env's rewards move it to their device)
        self.mean, self.var, self.count = (float(state[k]) for k in ("mean", "var", "count"))
