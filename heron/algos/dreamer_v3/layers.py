"""DreamerV3's building blocks and their initialisation: the LayerNorm-SiLU MLPs (no bias before a
norm), the norm over an image's channels, and the paper's initialisation (truncated normal over
the average fan; the output layers' scaled uniform)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

EPS = 1e-3  # the LayerNorms' epsilon (the official code's and sheeprl's)


def ln_mlp(in_dim: int, units: int, layers: int, out_dim: int | None = None) -> nn.Sequential:
    """``layers`` x (Linear without bias, LayerNorm, SiLU), then a linear output when ``out_dim``."""
    mods: list[nn.Module] = []
    for i in range(layers):
        mods += [nn.Linear(in_dim if i == 0 else units, units, bias=False), nn.LayerNorm(units, eps=EPS), nn.SiLU()]
    if out_dim is not None:
        mods.append(nn.Linear(units if layers else in_dim, out_dim))
    return nn.Sequential(*mods)


class ChannelNorm(nn.LayerNorm):
    """LayerNorm over the channels of an [N, C, H, W] feature map (each pixel on its own)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def _fan_avg(module: Any) -> float:  # a Linear, Conv2d or ConvTranspose2d
    space = math.prod(module.kernel_size) if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)) else 1
    if isinstance(module, nn.Linear):
        return (module.in_features + module.out_features) / 2.0
    return space * (module.in_channels + module.out_channels) / 2.0


def trunc_normal_fan_avg_(weight: torch.Tensor, fan_avg: float) -> None:
    """A normal truncated at two standard deviations, scaled so that its variance is 1 / fan_avg."""
    std = math.sqrt(1.0 / fan_avg) / 0.87962566103423978  # the truncated normal's std ratio
    nn.init.trunc_normal_(weight, 0.0, std, -2.0 * std, 2.0 * std)


def init_weights(module: nn.Module) -> None:
    """The paper's initialisation (the official code's ``trunc_normal`` over the average fan, as
    sheeprl has it): weights from a normal truncated at two standard deviations, with the standard
    deviation that gives variance 1 / fan_avg after the truncation; zero biases; LayerNorms at 1
    and 0. Use with ``module.apply``."""
    if isinstance(module, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
        trunc_normal_fan_avg_(module.weight, _fan_avg(module))
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def init_output(layer: Any, scale: float) -> None:  # a Linear, Conv2d or ConvTranspose2d
    """An output layer's initialisation (the official code's ``outscale``): uniform with variance
    ``scale`` / fan_avg, zero bias. Scale 0 for the reward and value heads: they start predicting 0."""
    limit = math.sqrt(3.0 * scale / _fan_avg(layer))
    with torch.no_grad():
        layer.weight.uniform_(-limit, limit)
        if layer.bias is not None:
            layer.bias.zero_()
