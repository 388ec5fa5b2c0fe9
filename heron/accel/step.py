"""How an algorithm's gradient step runs: one builder for every algorithm.

An algorithm hands ``build_step`` its readable step (``make_update`` in its ``train.py``, on its
``losses.py``: autograd computes the gradients) and, where it has one, the name of its hand-written
step in ``heron.accel.handwritten`` with the networks that step works on. ``build_step`` decides,
always in this order:

1. **Which step.** The hand-written step where the algorithm has one, ``--fused-update`` is on, it
   applies to the run (its module's ``supported``) and it computes what the readable step computes
   from the losses and networks as they stand: before the run's first update, one step of each on a
   synthetic batch, from the same state and random draws, must leave the same gradients and
   metrics (``heron.accel.handwritten.check``; the run's own numbers are untouched). Otherwise the
   readable step. A researcher's edit to a loss, a network or ``make_update`` thus always takes
   effect; the speed comes back when the hand-written step's derivatives follow it.
2. **--compile** wraps the readable step in ``torch.compile``. The hand-written step is never
   compiled: under --compile the readable step runs (``supported`` says so).
3. **--cuda-graphs** records the step after a few eager calls and replays it (``heron.accel.graphs``),
   the compiled step included (LeanRL's pairing); its optimizers become ``capturable`` at its first
   call. PPO and the Dreamers call the step on one batch shape, recorded here (``GraphedStep``); SAC
   and TD3 record it together with the replay gather and the target averaging, one recording per
   delayed-step variant (``Learn``), so they pass ``record=False``.

The run's log opens with the choice and its reason, for example
``update: hand-written step (heron.accel.handwritten.sac; precision 32)``,
``update: autograd step (heron.algos.sac.recurrent; recurrent networks)`` or
``update: autograd step (heron.algos.sac.train; the hand-written step disagrees with it: critic
gradient off by 1.7e+00)``."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any

import torch

from heron.accel.graphs import GraphedStep, GraphedSteps
from heron.errors import first_line
from heron.ops import dist
from heron.ops import torch_private as private
from heron.rl.buffers import ReplayBuffer
from heron.rl.nets import Polyak

HANDWRITTEN = ("sac", "td3", "ppo")  # the modules of heron.accel.handwritten that hold a step


def compile_step(fn: Any) -> Any:
    """``torch.compile(fn)`` (``--compile``), with Inductor as deterministic as the run asked."""
    private.inductor_config().deterministic = torch.are_deterministic_algorithms_enabled()
    return torch.compile(fn)


def build_step(
    cfg: Any,
    autograd: Callable,
    handwritten: str | None = None,
    nets: Any = None,
    precision: Any = None,
    record: bool = True,
    log: Callable[[str], None] | None = None,
    optimizers: tuple[torch.optim.Optimizer, ...] = (),
) -> Callable:
    """The gradient step this run calls (module doc). ``autograd``: the readable step;
    ``handwritten``: the name of the algorithm's hand-written step (a module of
    ``heron.accel.handwritten``; None: it has none), with ``nets`` (what its ``train.py`` hands the
    readable step: networks and optimizers) and the run's ``precision``; ``record``: whether
    --cuda-graphs records the step here (False: the caller records it); ``log``: told the choice in
    one line (the run's log); ``optimizers``: the ones the step steps (made ``capturable`` where it
    is recorded here)."""
    step, reason = autograd, "the algorithm's only step"
    if handwritten is not None:
        step, reason = _handwritten(cfg, autograd, handwritten, nets, precision)
    if step is not autograd:
        what = f"hand-written step ({type(step).__module__}; precision {cfg.precision})"
    else:
        what = f"autograd step ({autograd.__module__}; {reason})"
        if cfg.compile:
            step, what = compile_step(step), what + ", compiled"
    if cfg.cuda_graphs:
        what += ", recorded as CUDA graphs"
        if record:
            step = GraphedStep(step, optimizers=optimizers)
    if log is not None:
        log(f"update: {what}")
    return step


def _handwritten(cfg: Any, autograd: Callable, name: str, nets: Any, precision: Any) -> tuple[Callable, str]:
    """The hand-written step named ``name`` where it applies and agrees with ``autograd``, else
    ``autograd``; with the reason for the readable step."""
    if name not in HANDWRITTEN:
        raise ValueError(f"no hand-written step {name!r} in heron.accel.handwritten ({', '.join(HANDWRITTEN)})")
    if not getattr(cfg, "fused_update", False):
        return autograd, "--fused-update false"
    module = importlib.import_module(f"heron.accel.handwritten.{name}")
    from heron.accel.handwritten.check import disagreement, tolerance

    problem: str | None
    try:
        why_not = module.supported(cfg, nets, precision)
        if why_not is not None:
            return autograd, why_not
        fast = module.build(cfg, nets, precision)
        args, state = module.probe(cfg, nets), module.state(nets)
    except Exception as exc:  # networks it cannot follow (an edited network)
        problem = f"cannot follow these networks ({first_line(exc)})"
    else:
        problem = disagreement(autograd, fast, args, state, tolerance(precision.dtype))
    # under torchrun every rank takes the same step (its collectives must meet the others')
    if dist.all_ranks(problem is None):
        return fast, ""
    return autograd, f"the hand-written step {problem or 'disagrees with it on another rank'}"


class Learn:
    """One gradient step as SAC's and TD3's loops take it: ``learn(update_actor, average)`` draws a
    batch from the replay buffer (with ``cfg.n_step`` > 1, n-step transitions), runs
    ``update(batch, update_actor)`` and then, when ``average``, the targets' Polyak step
    (``cfg.tau``); it returns the update's metrics.

    ``shape``: the batch's leading shape, [B] (TD3), [B, 1] (SAC) or [B, L] with ``sequences``
    (recurrent SAC: windows of L steps). The batch holds the fields the update names in its
    ``fields`` attribute (the hand-written steps: ``STEP_FIELDS``), else every stored field.

    Under --cuda-graphs the three are recorded together, one graph per (update_actor, average)
    (``GraphedSteps``), and ``optimizers`` become ``capturable`` at the first call. With the replay
    on the training device the graph's one input is the batch's rows, drawn on the host from the
    buffer's generator as in the eager path (the same rows, and a checkpoint holds the stream).
    The gather, the update and the averaging then replay with one launch and one small copy, where
    the eager gather and averaging around a recorded update were about a dozen launches and copies
    per step: a gather per field, a copy of each into the graph's inputs, the Polyak step. With the
    replay in host memory (--buffer-device cpu) the gathered batch is the graph's input."""

    def __init__(
        self,
        cfg: Any,
        update: Callable[[dict[str, torch.Tensor], bool], dict[str, torch.Tensor]],
        rb: ReplayBuffer,
        shape: tuple[int, ...],
        polyak: Polyak,
        optimizers: tuple[torch.optim.Optimizer, ...] = (),
        sequences: bool = False,
    ):
        self.rb, self.shape, self.sequences = rb, tuple(shape), sequences
        self.fields: tuple[str, ...] | None = getattr(update, "fields", None)
        tau = cfg.tau

        def step(batch: dict[str, torch.Tensor], variant: tuple[bool, bool]) -> dict[str, torch.Tensor]:
            update_actor, average = variant
            metrics = update(batch, update_actor)
            if average:
                polyak(tau)
            return metrics

        graphs = cfg.cuda_graphs
        self.n_step, self.gamma = cfg.n_step, cfg.gamma
        self.rows_in = graphs and rb.out_device == rb.device  # the gather is recorded too
        self.step: Callable[[Any, tuple[bool, bool]], dict[str, torch.Tensor]]
        if self.rows_in:
            self.step = GraphedSteps(
                lambda rows, variant: step(self.read(rows), variant), device=rb.device, optimizers=optimizers
            )
        else:
            self.step = GraphedSteps(step, optimizers=optimizers) if graphs else step

    def rows(self) -> dict[str, torch.Tensor]:
        """The batch's rows, drawn on the host: ``{"rows"}``, or with n-step returns the windows
        and which of their steps are stored (``ReplayBuffer.nstep_rows``)."""
        if self.sequences:
            return {"rows": self.rb.sequence_indices(*self.shape)}
        rows = self.rb.indices(math.prod(self.shape))
        if self.n_step > 1:
            window, stored = self.rb.nstep_rows(rows, self.n_step)
            return {"rows": window, "stored": stored}
        return {"rows": rows}

    def read(self, rows: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self.n_step > 1:
            return self.rb.gather_nstep(rows["rows"], rows["stored"], self.gamma, self.fields, self.shape)
        return self.rb.gather(rows["rows"], self.fields, self.shape)

    def __call__(self, update_actor: bool, average: bool) -> dict[str, torch.Tensor]:
        if self.rows_in:
            return self.step(self.rows(), (update_actor, average))
        return self.step(self.read(self.rows()), (update_actor, average))
