"""DreamerV2's building blocks and their initialisation: the ELU MLPs, the references' Xavier
initialisation (with the fans of a layer that heron splits in parts), and the transposed
convolution of a 1x1 map as one matrix product (``PointDeconv``)."""

from __future__ import annotations

import math

import torch
from torch import nn


def mlp(in_dim: int, units: int, layers: int, out_dim: int | None = None) -> nn.Sequential:
    """``layers`` Linear+ELU layers of ``units``, then a linear output when ``out_dim`` is given."""
    mods: list[nn.Module] = []
    for i in range(layers):
        mods += [nn.Linear(in_dim if i == 0 else units, units), nn.ELU()]
    if out_dim is not None:
        mods.append(nn.Linear(units if layers else in_dim, out_dim))
    return nn.Sequential(*mods)


def xavier_(weight: torch.Tensor, fan_in: int, fan_out: int) -> None:
    """Glorot/Xavier uniform, U(-b, b) with b = sqrt(6 / (fan_in + fan_out)), with the fans given: a
    layer that heron splits in parts (the RSSM's) gets the bound of the whole layer."""
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        weight.uniform_(-bound, bound)


def init_weights(module: nn.Module) -> None:
    """The references' initialization (Keras's default in danijar/dreamerv2, ``init_weights`` in
    sheeprl): Xavier-uniform weights and zero biases on every Linear, Conv2d and ConvTranspose2d (the
    GRU's projection included). PyTorch's default (Kaiming-uniform with a=sqrt(5), uniform biases)
    starts the 4 x 400 heads almost constant across states. Use with ``module.apply``."""
    if isinstance(module, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.xavier_uniform_(module.weight)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


class PointDeconv(nn.ConvTranspose2d):
    """A transposed convolution of a 1x1 input ([N, in] or [N, in, 1, 1] -> [N, out, k, k], channels
    last): a matrix product with the weight seen as [in, out * k * k], one GEMM instead of oneDNN's
    slow 1x1 deconvolution (the same parameters and result; the deconvolution was a sizeable part of
    a DreamerV2 step on a CPU at the Atari sizes). A module, so that ``--precision`` puts autocast
    around it as around any layer."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]  # no output_size: one 1x1 input
        k = self.kernel_size
        bias = self.bias
        assert bias is not None, "made with a bias"
        y = torch.addmm(bias.repeat_interleave(k[0] * k[1]), x.reshape(x.shape[0], -1), self.weight.flatten(1))
        return y.view(-1, self.out_channels, *k).contiguous(memory_format=torch.channels_last)
