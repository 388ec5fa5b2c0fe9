"""Acting in numpy on the CPU.

Every algorithm acts at every env step on a batch of a few observations. There, each torch call
costs microseconds of dispatch whatever its size, and numpy's calls on the same arrays about one:
PPO's Hopper-v5 acting step (one env, 64-64 tanh MLPs) takes a tenth of the time in numpy, TD3's
(256-256 ReLU actor) a fifth. The pieces here read the parameters as numpy views (no copy: an
optimizer's in-place steps show through) and run the layers with the torch path's operations in
the same order and in float32; only the products' and transcendental functions' rounding may
differ in the last bits, which the algorithms' tests bound against their torch acting.

Each algorithm decides where it applies (``eligible``): feed-forward MLPs, float32 CPU weights, and
products small enough that numpy's BLAS keeps them on the calling thread. Under mixed precision
PPO keeps acting in torch, in its compute type: its acting log-probs enter the update's ratio,
which must start at 1. SAC's and TD3's training loops act in float32 numpy then too, on the
actor's float32 weights, as a saved policy does: their actions enter no loss, and at an env's few
rows a bfloat16 product gains nothing (TD3's 256-256 actor on one Hopper row: 0.15 ms a step in
torch bfloat16, 0.017 ms in numpy). Evaluations keep the run's precision. PPO on a GPU acts on a
CPU copy of its model (``CpuTwin``), refreshed once per rollout.
"""

from __future__ import annotations

import copy
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

# OpenBLAS (numpy's BLAS) splits a product over threads from M * N * K = 2^18 on; below it runs on
# the calling thread, so numpy acting stays within the run's --torch-threads
PRODUCT_MAX = 2 ** 18 - 1


def linears(module: nn.Module) -> list[nn.Linear]:
    """The ``nn.Linear`` layers of a sequential MLP, in order."""
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


def eligible(batch: int, layers: Sequence[nn.Linear], amp_dtype: torch.dtype | None = None) -> bool:
    """Whether numpy may run ``layers`` on ``batch`` rows: float32 weights on the CPU, every product
    below ``PRODUCT_MAX``, and no mixed precision where ``amp_dtype`` is given (PPO, and every
    evaluation; module doc)."""
    return amp_dtype is None and all(
        layer.weight.device.type == "cpu" and layer.weight.dtype == torch.float32
        and batch * layer.weight.numel() <= PRODUCT_MAX for layer in layers)


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=x)


class NumpyMLP:
    """Linear layers with ``hidden`` between them (not after the last), as the fused MLPs and
    ``addmm`` compute them: ``h @ W^T + b``. The weight views are made again only when a
    parameter's storage moves (a key of data pointers per call)."""

    def __init__(self, layers: Sequence[nn.Linear], hidden: Callable[[np.ndarray], np.ndarray]):
        self.layers, self.hidden = list(layers), hidden
        self._key: tuple | None = None
        self._arrays: list[tuple[np.ndarray, np.ndarray]] = []

    def arrays(self) -> list[tuple[np.ndarray, np.ndarray]]:
        key = tuple(layer.weight.data_ptr() for layer in self.layers)
        if key != self._key:
            self._arrays = [(layer.weight.detach().numpy().T, layer.bias.detach().numpy()) for layer in self.layers]
            self._key = key
        return self._arrays

    def __call__(self, x: np.ndarray) -> np.ndarray:
        arrays = self.arrays()
        for w, b in arrays[:-1]:
            x = self.hidden(x @ w + b)
        w, b = arrays[-1]
        return x @ w + b


class CpuTwin:
    """A CPU copy of a module that lives on an accelerator, for acting in numpy there too: where the
    weights move only between rollouts (PPO), copying them to the host once per rollout spares every
    env step its kernel launches and its two host syncs. ``refresh()`` brings the copy's parameters
    and buffers (normalizer statistics included) up to the module's."""

    def __init__(self, module: nn.Module):
        self.module, self.twin = module, copy.deepcopy(module).cpu()

    def refresh(self) -> nn.Module:
        self.twin.load_state_dict(self.module.state_dict())
        return self.twin


class HostCopy:
    """A host copy of a module on an accelerator whose parameters move at every few gradient steps
    (SAC's and TD3's actor, ``--act-on-host``): acting reads the copy in numpy, so an env step's
    acting launches nothing on the device and waits for nothing there. ``stale()`` marks the copy
    out of date (after a step that trains the module); ``current()`` then brings it up to date with
    one gather of the parameters into a flat device buffer and one transfer into pinned host
    memory, which the copy's parameters are views of. It waits for the transfer, and so for the
    steps launched before it. On the CPU it is a plain copy, the same logic. (``CpuTwin`` copies a
    whole state dict, buffers included, once per PPO rollout; this copies the parameters alone, often,
    in one transfer.)"""

    def __init__(self, module: nn.Module):
        self._params = list(module.parameters())
        self._device = device = self._params[0].device
        self.twin = copy.deepcopy(module).cpu().requires_grad_(False)
        sizes = [p.numel() for p in self._params]
        self._flat = None if device.type == "cpu" else torch.empty(sum(sizes), device=device)
        self._host = torch.empty(sum(sizes), pin_memory=device.type == "cuda")
        for p, view in zip(self.twin.parameters(), self._host.split(sizes)):
            p.data = view.view_as(p)
        self._stale = True

    def stale(self) -> None:
        self._stale = True

    @torch.no_grad()
    def current(self) -> nn.Module:
        if self._stale:
            if self._flat is None:
                torch.cat([p.reshape(-1) for p in self._params], out=self._host)
            else:
                torch.cat([p.reshape(-1) for p in self._params], out=self._flat)
                self._host.copy_(self._flat, non_blocking=True)
                torch.cuda.current_stream(self._device).synchronize()
            self._stale = False
        return self.twin


def normalize(obs: np.ndarray, norm: nn.Module) -> np.ndarray:
    """``RunningNorm.forward`` in numpy: float32 observations, standardized with the module's
    float32 statistics and clipped (the module's current statistics, read at every call)."""
    x = np.asarray(obs).astype(np.float32)
    if not norm.enabled:
        return x
    mean, std = norm._float32()
    return np.clip((x - mean.numpy()) / std.numpy(), -norm.clip, norm.clip)
