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

from typing import Callable

import numpy as np
import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor, terminated: torch.Tensor,
        truncated: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """Generalized Advantage Estimation (Schulman et al. 2016, eq. 16), [T, N] -> advantages [T, N]:

        delta_t = r_t + gamma * (1 - terminated_t) * V(next_obs_t) - V(obs_t)
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1},    A_T = 0

    The recursion stops at every episode end (done = terminated or truncated); a truncated step
    still bootstraps through ``next_values`` in its delta. Returns (value targets) are A + V.
    """
    assert rewards.shape == values.shape == next_values.shape == terminated.shape == truncated.shape
    not_term = 1.0 - terminated.float()
    not_done = 1.0 - (terminated | truncated).float()
    deltas = rewards + gamma * not_term * next_values - values  # [T, N]
    decay = gamma * lam * not_done
    adv = torch.empty_like(deltas)
    last = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        last = deltas[t] + decay[t] * last
        adv[t] = last
    return adv


def nstep_returns(rewards: torch.Tensor, next_values: torch.Tensor, terminated: torch.Tensor,
                  truncated: torch.Tensor, gamma: float, n: int) -> torch.Tensor:
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



def lambda_return(rewards: torch.Tensor, values: torch.Tensor, discounts: torch.Tensor, bootstrap: torch.Tensor,
                  lam: float) -> torch.Tensor:
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

    It runs once per env step on a handful of numbers, so it works in numpy float64 (a tenth of
    the cost of the same arithmetic on tiny torch tensors)."""

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8,
                 moments: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor, int]] | None = None):
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.ret = np.zeros(num_envs, np.float64)
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4
        self.moments = moments  # data-parallel runs: the moments of every rank's returns (dist.global_moments)

    def __call__(self, rewards: np.ndarray, done: np.ndarray) -> np.ndarray:
        """rewards [N] -> scaled rewards [N] (float32); folds the returns into the statistics first."""
        self.ret = self.ret * self.gamma + rewards
        if self.moments is not None:
            m, v, b = self.moments(torch.from_numpy(self.ret))
            b_mean, b_var = float(m), float(v)
        else:  # numpy's mean and var written out (the same sums; their wrappers were most of the call)
            b = self.ret.size
            b_mean = self.ret.sum() / b
            dev = self.ret - b_mean
            b_mean, b_var = float(b_mean), float((dev * dev).sum() / b)
        delta, total = b_mean - self.mean, self.count + b
        self.mean += delta * b / total
        self.var = (self.var * self.count + b_var * b + delta * delta * self.count * b / total) / total
        self.count = total
        self.ret[done] = 0.0
        scaled = rewards / np.sqrt(self.var + self.eps)
        return np.minimum(np.maximum(scaled, -self.clip), self.clip).astype(np.float32)  # np.clip, without its wrapper

    def state_dict(self) -> dict:
        return {"ret": torch.from_numpy(self.ret.copy()), "mean": torch.tensor(self.mean, dtype=torch.float64),
                "var": torch.tensor(self.var, dtype=torch.float64), "count": torch.tensor(self.count, dtype=torch.float64)}

    def load_state_dict(self, state: dict) -> None:
        self.ret = state["ret"].numpy().astype(np.float64).copy()
        self.mean, self.var, self.count = (float(state[k]) for k in ("mean", "var", "count"))
