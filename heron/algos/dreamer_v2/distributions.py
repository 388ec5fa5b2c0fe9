"""DreamerV2's continuous actions: a normal truncated to [-1, 1] (its discrete actions and latents
are the shared ``heron.algos.dreamer.distributions``)."""

from __future__ import annotations

import math

import torch

from heron.rl.distributions import normal_log_prob


class TruncatedNormal:
    """Normal(mean, std) truncated to [-1, 1], reparameterized through the inverse CDF (the
    DreamerV2 paper's continuous action distribution)."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, low: float = -1.0, high: float = 1.0, eps: float = 1e-6):
        self.mean, self.std, self.low, self.high, self.eps = mean, std, low, high, eps
        self.alpha, self.beta = (low - mean) / std, (high - mean) / std
        self.cdf_a, self.cdf_b = self._cdf(self.alpha), self._cdf(self.beta)
        self.z = (self.cdf_b - self.cdf_a).clamp_min(eps)

    @staticmethod
    def _cdf(x: torch.Tensor) -> torch.Tensor:
        return 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))

    @staticmethod
    def _log_pdf(x: torch.Tensor) -> torch.Tensor:
        return normal_log_prob(x, 0.0)

    def rsample(self) -> torch.Tensor:
        u = torch.rand_like(self.mean)
        p = (self.cdf_a + u * (self.cdf_b - self.cdf_a)).clamp(self.eps, 1.0 - self.eps)
        x = self.mean + self.std * math.sqrt(2.0) * torch.erfinv(2.0 * p - 1.0)
        return x.clamp(self.low + self.eps, self.high - self.eps)

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        xi = (x - self.mean) / self.std
        return (self._log_pdf(xi) - self.std.log() - self.z.log()).sum(-1)

    def entropy(self) -> torch.Tensor:
        a_pdf, b_pdf = self._log_pdf(self.alpha).exp(), self._log_pdf(self.beta).exp()
        ent = (
            math.log(math.sqrt(2 * math.pi * math.e))
            + self.std.log()
            + self.z.log()
            + (self.alpha * a_pdf - self.beta * b_pdf) / (2.0 * self.z)
        )
        return ent.sum(-1)

    def mode(self) -> torch.Tensor:
        return self.mean.clamp(self.low, self.high)
