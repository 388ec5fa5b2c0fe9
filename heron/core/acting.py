"""Acting in numpy on the CPU.

Every algorithm acts at every env step on a batch of a few observations. There, each torch call
costs microseconds of dispatch whatever its size, and numpy's calls on the same arrays far less:
PPO's Hopper-v5 acting step (one env, 64-64 tanh MLPs) and TD3's (256-256 ReLU actor) take several
times less time in numpy. The pieces here read the parameters as numpy views (no copy: an
optimizer's in-place steps show through) and run the layers with the torch path's operations in
the same order and in float32; only the products' and transcendental functions' rounding may
differ in the last bits, which the algorithms' tests bound against their torch acting.

Each algorithm decides where it applies (``eligible``): feed-forward MLPs, float32 CPU weights, and
products small enough that numpy's BLAS keeps them on the calling thread. Under mixed precision
PPO keeps acting in torch, in its compute type: its acting log-probs enter the update's ratio,
which must start at 1. SAC's and TD3's training loops act in float32 numpy then too, on the
actor's float32 weights, as a saved policy does: their actions enter no loss, and at an env's few
rows a bfloat16 product gains nothing (TD3's 256-256 actor on one Hopper row acts many times
faster in float32 numpy than in torch bfloat16). Evaluations keep the run's precision. PPO on a
GPU acts on a CPU copy of its model (``CpuTwin``), refreshed once per rollout. ``Acting`` is SAC's
and TD3's way to act, numpy or not, with acting ahead.

A tensor env (``heron.core.native``: a vector env that returns torch tensors) is acted on in torch:
its observations go to the actor as tensors, and what the loop adds to the actor's output
(normals, noise, random actions drawn from the run's generators) is made a tensor beside it
(``as_like``). No observation, action, reward or flag of such an env becomes a numpy array.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

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


def as_like(x: np.ndarray | torch.Tensor, like: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """``x`` in ``like``'s kind: a tensor on ``like``'s device, or a numpy array."""
    if isinstance(like, torch.Tensor):
        return torch.as_tensor(x).to(like.device)
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


class Acting:
    """What SAC's and TD3's loops act with: ``act(obs)`` is the actor's output on a batch of
    observations [N, ...] as a numpy array (TD3: the greedy actions; SAC: its Gaussian), computed the
    fastest way that gives the same numbers:

    * in numpy (``numpy_fn``, the algorithm's ``NumpyActor``) where it applies (``eligible``: float32
      weights on the CPU, products small enough for one thread);
    * else, under --cuda-graphs, as a recorded CUDA graph of ``torch_fn`` (``graphs.GraphedActor``);
    * else ``torch_fn`` itself, without gradients, on the training device.

    Acting ahead (``--act-ahead``): the loop tells ``before_updates`` whether the gradient steps it is
    about to take train the actor. When none does (the critic-only steps between delayed actor
    steps), the next env step's output is the same before them as after, so it is taken now and the
    next ``act`` returns it: on a GPU that env step then runs while the critics train. The numbers
    are the same either way (``tests/test_acting.py``).

    ``cfg`` gives ``cuda_graphs`` and ``act_ahead``; ``used``: whether the loop acts through this
    object (False for recurrent SAC, whose loop carries the actor's state and acts itself: then
    nothing is recorded or taken ahead)."""

    def __init__(self, torch_fn: Callable[[torch.Tensor], torch.Tensor], numpy_fn: Callable[[np.ndarray], np.ndarray] | None,
                 device: torch.device, cfg: Any, used: bool = True):
        from heron.core.graphs import GraphedActor

        self.torch_fn, self.numpy_fn, self.device, self.ahead = torch_fn, numpy_fn, device, cfg.act_ahead and used
        self.graphed = GraphedActor(torch_fn, device) if cfg.cuda_graphs and used and numpy_fn is None else None
        self._next: np.ndarray | None = None  # the next act's output, taken ahead

    def _output(self, obs: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        if isinstance(obs, torch.Tensor):  # a tensor env's: a tensor on the training device
            with torch.no_grad():
                return self.torch_fn(obs.to(self.device))
        if self.numpy_fn is not None:
            return self.numpy_fn(obs)
        if self.graphed is not None:
            return self.graphed(obs)
        with torch.no_grad():
            return self.torch_fn(torch.as_tensor(obs, device=self.device)).cpu().numpy()

    def act(self, obs: np.ndarray) -> np.ndarray:
        out, self._next = self._next, None
        return self._output(obs) if out is None else out

    def before_updates(self, obs: np.ndarray, actor_moves: bool, last: bool = False) -> None:
        """Before an env step's gradient steps: take the next act's output now where acting ahead
        applies (``actor_moves``: some of those steps train the actor; ``last``: no env step follows)."""
        if self.ahead and not actor_moves and not last:
            self._next = self._output(obs)


def normalize(obs: np.ndarray, norm: nn.Module) -> np.ndarray:
    """``RunningNorm.forward`` in numpy: float32 observations, standardized with the module's
    float32 statistics and clipped (the module's current statistics, read at every call)."""
    x = np.asarray(obs).astype(np.float32)
    if not norm.enabled:
        return x
    mean, std = norm._float32()
    return np.clip((x - mean.numpy()) / std.numpy(), -norm.clip, norm.clip)
