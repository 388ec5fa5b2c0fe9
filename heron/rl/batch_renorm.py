"""Batch renormalisation (Ioffe 2017, "Batch Renormalization: Towards Reducing Minibatch Dependence
in Batch-Normalized Models"), the layer CrossQ puts in SAC's critics and actor.

In training the layer normalises with the batch's statistics and corrects towards the running ones:

    y = (x - mu_B) / sigma_B * r + d,   r = clip(sigma_B / sigma, 1/r_max, r_max),
                                        d = clip((mu_B - mu) / sigma, -d_max, d_max)

with r and d held constant in the backward pass, sigma_B = sqrt(var_B + eps) and
sigma = sqrt(var + eps) from the running mean and variance. For the first ``warmup`` training
forwards r = 1 and d = 0 (plain batch normalisation: the running statistics are not yet worth
correcting towards). In evaluation it normalises with the running statistics alone,
y = (x - mu) / sigma. Both are followed by a learnt scale and shift.

The mode is an argument of every call (``forward(x, train)``), not module state: CrossQ switches
it around each forward of one gradient step, and a policy acting in an env always evaluates.
Under torchrun each rank's batch is its share of one batch: the batch's mean and variance are those
of all the ranks' rows together (their sums all-reduced, differentiably), so that data-parallel
training computes what one process computes on the whole batch, and the running statistics stay
identical on every rank.
The running statistics move towards each training batch's, ``stat += momentum * (batch - stat)``,
with the batch's unbiased variance (as ``torch.nn.BatchNorm1d`` keeps it); the warm-up counter is a
buffer, so a checkpoint carries it with the statistics, and reading it never waits for a device.
"""

from __future__ import annotations

import torch
from torch import nn

from heron.ops import dist
from heron.rl.nets import EnsembleLinear


class BatchRenorm(nn.Module):
    """Batch renormalisation over the batch dimension (-2) of ``x [..., B, F]``; the leading
    dimensions (an ensemble's members) keep statistics, scale and shift of their own:
    ``leading=(E,)`` for an ensemble of E members."""

    mean: torch.Tensor  # buffers: the running mean and variance [..., F], the training forwards so far
    var: torch.Tensor
    steps: torch.Tensor
    across_ranks = True  # under torchrun, statistics over every rank's rows (False: this process's alone)

    def __init__(
        self,
        features: int,
        leading: tuple[int, ...] = (),
        momentum: float = 0.01,
        eps: float = 1e-3,
        warmup: int = 100_000,
        r_max: float = 3.0,
        d_max: float = 5.0,
    ):
        super().__init__()
        shape = (*leading, 1, features)
        self.momentum, self.eps, self.warmup, self.r_max, self.d_max = momentum, eps, warmup, r_max, d_max
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor, train: bool) -> torch.Tensor:
        if not train:
            y = (x.float() - self.mean) * torch.rsqrt(self.var + self.eps)
            return (y * self.weight + self.bias).to(x.dtype)
        xf = x.float()  # statistics in float32 under --precision bf16-mixed
        ranks = dist.world_size() if self.across_ranks else 1
        if ranks == 1:
            n = x.shape[-2]
            mu_b = xf.mean(-2, keepdim=True)
            var_b = xf.var(-2, unbiased=False, keepdim=True)
        else:  # the sums of every rank's rows: the whole batch's moments on every rank
            n = x.shape[-2] * ranks
            sums = dist.sum_over_ranks(torch.cat([xf.sum(-2, keepdim=True), (xf * xf).sum(-2, keepdim=True)], -2))
            mu_b = sums[..., :1, :] / n
            var_b = (sums[..., 1:, :] / n - mu_b * mu_b).clamp_min(0.0)
        sigma_b = (var_b + self.eps).sqrt()
        with torch.no_grad():
            sigma = (self.var + self.eps).sqrt()
            renorm = self.steps >= self.warmup  # a tensor: no host sync
            r = torch.where(renorm, (sigma_b / sigma).clamp(1 / self.r_max, self.r_max), 1.0)
            d = torch.where(renorm, ((mu_b - self.mean) / sigma).clamp(-self.d_max, self.d_max), 0.0)
            self.mean.add_(self.momentum * (mu_b - self.mean))
            self.var.add_(self.momentum * (var_b * (n / max(n - 1, 1)) - self.var))
            self.steps.add_(1)
        y = (xf - mu_b) / sigma_b * r + d
        return (y * self.weight + self.bias).to(x.dtype)

    def extra_repr(self) -> str:
        return f"features={self.weight.shape[-1]}, momentum={self.momentum}, eps={self.eps}, warmup={self.warmup}"


class RenormMLP(nn.Module):
    """``members`` independent ReLU MLPs with a batch renormalisation before every linear layer, the
    output layer's included (CrossQ's networks): BRN, Linear, ReLU, ..., BRN, Linear.
    ``forward(x, train)``: x [B, in] (shared by the members) or [E, B, in] -> [E, B, out]; each
    member normalises its own batch. The output layer runs in float32 under mixed precision, as the
    fused MLPs' do (``amp_dtype``: set by ``--precision``)."""

    amp_dtype: torch.dtype | None = None

    def __init__(self, members: int, in_dim: int, hidden: tuple[int, ...], out_dim: int, momentum: float, warmup: int):
        super().__init__()
        dims = (in_dim, *hidden, out_dim)
        self.members = members
        self.norms = nn.ModuleList(BatchRenorm(a, (members,), momentum, warmup=warmup) for a in dims[:-1])
        self.layers = nn.ModuleList(EnsembleLinear(members, a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x: torch.Tensor, train: bool) -> torch.Tensor:
        if x.dim() == 2:
            x = x.expand(self.members, *x.shape)
        last = len(self.layers) - 1
        for i, (norm, layer) in enumerate(zip(self.norms, self.layers)):
            x = norm(x, train)
            assert isinstance(layer, EnsembleLinear)
            if self.amp_dtype is not None and i < last:
                with torch.autocast(x.device.type, self.amp_dtype):
                    x = torch.baddbmm(layer.bias.unsqueeze(1), x, layer.weight)
            else:
                x = torch.baddbmm(layer.bias.unsqueeze(1), x.float(), layer.weight)
            if i < last:
                x = torch.relu(x)
        return x
