"""The policies' distributions that more than one algorithm shares: the Gaussian's log-density and
entropy (``normal_log_prob``, ``normal_entropy``: SAC, PPO, DreamerV2 and DreamerV3), the squashing
of an actor's output into the action bounds (``squash``: TD3's deterministic actor, SAC's mode) and
SAC's tanh-Gaussian (``TanhGaussian``), each in torch and, where acting runs in numpy, with its numpy
twin beside it (the same operations in the same order; ``tests/test_distributions.py`` holds them
to the torch versions).

The readable gradient steps differentiate these with autograd; the hand-written steps
(``heron.accel.handwritten``) call them, and their derivatives, named after them (``squash_grad``,
``tanh_gaussian_log_std_grad``, ``tanh_gaussian_rsample_grad`` there)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def normal_log_prob(z: Any, log_std: Any) -> Any:
    """log N(x; mean, std) per entry, from the standardized ``z`` = (x - mean) / std and log(std):
    -z^2 / 2 - log std - log(2 pi) / 2. Tensors, or numpy arrays (an acting twin's)."""
    return -0.5 * z**2 - log_std - HALF_LOG_2PI


def normal_entropy(log_std: Any) -> Any:
    """The entropy of N(mean, std) per entry: 1/2 + log(2 pi) / 2 + log std."""
    return (0.5 + HALF_LOG_2PI) + log_std


def squash(z: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``z`` into the action bounds, a = tanh(z) * scale + bias; returns (a, tanh(z)), the second
    for its derivative (``heron.accel.handwritten.common.squash_grad``)."""
    t = torch.tanh(z)
    return t * scale + bias, t


class TanhGaussian:
    """SAC's policy: pi(a|s) = tanh(N(mean(s), std(s))) rescaled into the bounds, a = tanh(u) *
    scale + bias (Haarnoja et al. 2018, appendix C; CleanRL's SAC), from an actor's output [..., 2A]:
    the means, then raw log-stds squashed into [LOG_STD_MIN, LOG_STD_MAX] (``log_std``).

    In torch: ``params`` (the output as mean and log-std), ``rsample`` (a reparameterized sample
    with its log-probability, by the change of variables), ``sample`` (the same with its normals
    drawn here) and ``mode`` (the squashed mean). The entropy has no closed form: SAC estimates it
    with the samples' -log pi. Their numpy twins act on a CPU: ``numpy_gaussian`` (the Gaussian,
    means then stds), ``draw`` (actions from it, given the normals) and ``numpy_mode``."""

    # -- torch ----------------------------------------------------------------------------------------
    @staticmethod
    def log_std(raw: torch.Tensor) -> torch.Tensor:
        """An unbounded output into [LOG_STD_MIN, LOG_STD_MAX] with tanh (SpinUp / D. Yarats; CleanRL's
        SAC)."""
        return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1)

    @staticmethod
    def params(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's output [..., 2A] as (mean, log_std), each [..., A]."""
        mean, raw_log_std = out.chunk(2, -1)
        return mean, TanhGaussian.log_std(raw_log_std)

    @staticmethod
    def rsample(
        mean: torch.Tensor, log_std: torch.Tensor, eps: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Reparameterized sample ``a = tanh(u) * scale + bias`` with ``u = mean + std * eps`` (``eps``
        standard normal, drawn by the caller) and its log-density by change of variables (SAC paper,
        appendix C, eq. 21):

            log pi(a|s) = sum_i [ log N(u_i; mean_i, std_i) - log(scale_i * (1 - tanh(u_i)^2)) ]

        The Jacobian term uses the stable identity log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)).
        Returns actions [..., A], log-probs [...] and (tanh(u), std) for its derivative
        (``heron.accel.handwritten.common.tanh_gaussian_rsample_grad``)."""
        std = log_std.exp()
        u = mean + std * eps
        log_normal = normal_log_prob((u - mean) / std, log_std)
        log_det = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u)) + torch.log(scale)
        action, t = squash(u, scale, bias)
        return action, (log_normal - log_det).sum(-1), (t, std)

    @staticmethod
    def sample(
        mean: torch.Tensor, log_std: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``rsample`` with its standard normals drawn here (``torch.randn_like(mean)``): actions
        [..., A] and log-probs [...]."""
        return TanhGaussian.rsample(mean, log_std, torch.randn_like(mean), scale, bias)[:2]

    @staticmethod
    def mode(mean: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """The deterministic action: the squashed mean."""
        return squash(mean, scale, bias)[0]

    # -- the numpy twins --------------------------------------------------------------------------------
    @staticmethod
    def numpy_gaussian(out: np.ndarray) -> np.ndarray:
        """``params`` of an output [N, 2A] as the Gaussian [N, 2A]: the means, then the standard
        deviations (``out`` is overwritten)."""
        dim = out.shape[-1] // 2
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (np.tanh(out[:, dim:]) + 1)
        out[:, dim:] = np.exp(log_std)
        return out

    @staticmethod
    def draw(gaussian: Any, normals: Any, scale: Any, bias: Any) -> Any:
        """Actions [N, A] from ``gaussian`` ([N, 2A]: means, then stds) and standard normals [N, A]:
        ``tanh(mean + std * normals) * scale + bias``, ``sample``'s actions; numpy arrays, or
        tensors (a tensor env's)."""
        A = normals.shape[-1]
        tanh = torch.tanh if isinstance(gaussian, torch.Tensor) else np.tanh
        return tanh(gaussian[:, :A] + gaussian[:, A:] * normals) * scale + bias

    @staticmethod
    def numpy_mode(out: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
        """``mode`` of an output [N, 2A]: the squashed means, rescaled."""
        return np.tanh(out[:, : out.shape[-1] // 2]) * scale + bias
