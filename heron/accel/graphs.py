"""CUDA graphs for update steps.

An update step is a pure tensor function ``batch -> metrics`` with fixed shapes and no host syncs.
A CUDA graph records one call and replays it with a single launch. That pays where the GPU mostly
waits on Python: DreamerV2's step is about 4,000 small kernels (a 50-step RSSM loop and a 15-step
imagination, forward and backward), each a little GPU work behind a much longer eager-mode
dispatch.

``GraphedStep(fn)`` is a drop-in replacement for ``fn``: every call is one real gradient step,
and nothing changes in what is computed.

1. The first ``warmup`` calls run eagerly on a side stream. Capture needs the optimizer state,
   the cuBLAS/cuDNN workspaces and autograd's caches to exist already.
2. The next call copies its batch into static input tensors and records ``fn`` on them. Recording
   runs no kernels, so the recorded graph is then replayed once for that same batch.
3. Every later call copies its batch into the static inputs and replays.

The returned metrics are the graph's static outputs. Each replay overwrites them, so they hold
the latest step's values. The logger reads them every ``log_every`` steps, which is what it needs.

``GraphedSteps(fn)`` is the same for a step with a variant, ``fn(batch, variant)``: SAC and TD3
update the actor only every ``policy_frequency``-th step and average their targets every
``target_network_frequency``-th (TD3: after each actor step), so they record a graph for each
(actor step, averaging) pair that occurs, usually two. Each has its own warm-up, capture, static
tensors and memory pool: graphs replayed in any order must not share a pool. Their input is the
batch's row indices: the gather from the device replay buffer is recorded with the update and the
averaging (``heron.accel.step.Learn``).

Under ``--compile`` (SAC, TD3, PPO) ``fn`` is the compiled step. Its warm-up calls compile it,
once per variant, and the capture records Inductor's fused kernels, as LeanRL pairs
torch.compile with CUDA graphs.

What ``fn`` must obey (PyTorch's whole-network capture rules):
- Optimizers use device-side step counters (``capturable=True``). DreamerV2 builds its
  optimizers so and keeps its learning rates fixed (Python floats, baked into the graph). SAC, TD3
  and PPO hand their optimizers to the recorded step (``GraphedStep(fn, optimizers=...)``), which
  calls ``capturable(*optimizers)`` at its first call, after any resume brought back the saved
  groups: it sets the flag and makes every learning rate a device tensor, which
  ``heron.rl.schedules.set_lr`` fills in place, so the recorded step follows the schedules
  (PPO's annealing, SAC's ``--lr-schedule``).
- Parameters and buffers are updated in place: target-network copies (``load_state_dict``,
  Polyak's lerp) and running normalizer statistics made between steps are seen by the next
  replay. Nothing inside may cache a tensor computed outside the graph (``RunningNorm`` computes
  its float32 statistics afresh while a capture runs).
- No host syncs: no ``.item()``, no data-dependent Python branches.
- Random numbers (Gumbel noise, reparameterized samples, target-policy noise) come from the CUDA
  generator, whose graph-safe Philox offsets advance at every replay, so each step draws fresh
  noise.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch

Batch = dict[str, torch.Tensor]


class GraphedStep:
    """``device``: where the static inputs live, for inputs given on the host (replays copy them
    in; the warm-up and the capture see device copies). Without it the inputs are device tensors.
    ``optimizers``: the ones ``fn`` steps, made ``capturable`` before the first call."""

    def __init__(
        self,
        fn: Callable[[Batch], dict[str, torch.Tensor]],
        warmup: int = 3,
        device: str | torch.device | None = None,
        optimizers: tuple[torch.optim.Optimizer, ...] = (),
    ):
        if warmup < 1:
            raise ValueError("CUDA graph capture needs at least one eager warm-up call")
        self.fn, self.warmup, self.optimizers = fn, warmup, tuple(optimizers)
        self.device = None if device is None else torch.device(device)
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_in: Batch = {}
        self.static_out: dict[str, torch.Tensor] = {}
        self._stream: torch.cuda.Stream | None = None

    def __call__(self, batch: Batch) -> dict[str, torch.Tensor]:
        self.calls += 1
        if self.calls == 1:
            capturable(*self.optimizers)  # after any resume, which brings back the saved groups
        if self.graph is None and self.device is not None:
            batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        if self.graph is None and self.calls <= self.warmup:
            if self._stream is None:
                self._stream = torch.cuda.Stream()
            self._stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self._stream):
                out = self.fn(batch)
            torch.cuda.current_stream().wait_stream(self._stream)
            return out
        if self.graph is None:
            self.static_in = {k: v.clone() for k, v in batch.items()}
            torch.cuda.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_out = self.fn(self.static_in)
        else:
            if batch.keys() != self.static_in.keys():
                raise ValueError(f"batch keys changed: {sorted(batch)} vs {sorted(self.static_in)}")
            for k, v in batch.items():
                self.static_in[k].copy_(v, non_blocking=True)
        self.graph.replay()
        return self.static_out


class GraphedSteps:
    """``fn(batch, variant)`` with one ``GraphedStep`` per variant (module doc)."""

    def __init__(
        self,
        fn: Callable[[Batch, Any], dict[str, torch.Tensor]],
        warmup: int = 3,
        device: str | torch.device | None = None,
        optimizers: tuple[torch.optim.Optimizer, ...] = (),
    ):
        self.fn, self.warmup, self.device, self.optimizers = fn, warmup, device, tuple(optimizers)
        self.steps: dict[Hashable, GraphedStep] = {}

    def __call__(self, batch: Batch, variant: Hashable) -> dict[str, torch.Tensor]:
        step = self.steps.get(variant)
        if step is None:

            def bound(batch: Batch, variant: Hashable = variant) -> dict[str, torch.Tensor]:
                return self.fn(batch, variant)

            step = self.steps[variant] = GraphedStep(bound, self.warmup, self.device, self.optimizers)
        return step(batch)


def capturable(*optimizers: torch.optim.Optimizer) -> None:
    """Make optimizers safe to record (module doc): device-side step counters and each learning
    rate a device tensor that ``set_lr`` fills in place. Call it after loading their state (a
    checkpoint brings back the saved param groups, which hold plain floats: ``heron.ops.adam.Adam``
    saves them so, and a checkpoint resumes with or without graphs)."""
    for opt in optimizers:
        opt._warned_capturable_if_run_uncaptured = True  # torch's warning for the eager warm-up steps
        for group in opt.param_groups:
            group["capturable"] = True
            if not isinstance(group["lr"], torch.Tensor):
                group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=group["params"][0].device)
