"""How an algorithm's gradient step runs: one builder for all four algorithms.

An algorithm hands ``build`` its autograd step (the readable one: ``make_update`` in its
``train.py``, on its ``losses.py``) and, where it has one, the class of its hand-written step
(``lean.LeanUpdate``) with the reason it cannot apply to this run (``lean.supported``; None when it
can). ``build`` decides, always in this order:

1. **Which step.** The hand-written step where the algorithm has one, ``--fused-update`` is on and
   it applies; otherwise the autograd step. The two compute the same values from the same
   ``losses.py`` functions (``tests/test_sac_lean.py``, ``tests/test_ppo_lean.py``).
2. **--compile** wraps the autograd step in ``torch.compile``. The hand-written step is never
   compiled: under --compile the autograd step runs (``lean.supported`` says so).
3. **--cuda-graphs** records the step after a few eager calls and replays it (``heron.core.graphs``),
   the compiled step included (LeanRL's pairing); its optimizers become ``capturable`` at its first
   call. PPO and DreamerV2 call the step on one batch
   shape, recorded here (``GraphedStep``); SAC and TD3 record it together with the replay gather
   and the target averaging, one recording per delayed-step variant (``offpolicy.Learn``), so they
   pass ``record=False``.

The run's log opens with the choice and its reason, for example
``update: hand-written step (heron.algos.td3.lean; precision 32)`` or
``update: autograd step (heron.algos.sac.train; recurrent networks)``."""

from __future__ import annotations

from typing import Any, Callable

import torch

from heron.core import torch_private as private
from heron.core.graphs import GraphedStep


def compile_step(fn: Any) -> Any:
    """``torch.compile(fn)`` (``--compile``), with Inductor as deterministic as the run asked."""
    private.inductor_config().deterministic = torch.are_deterministic_algorithms_enabled()
    return torch.compile(fn)


def build_step(cfg: Any, autograd: Callable, handwritten: Callable[[], Callable] | None = None,
               why_not: str | None = None, record: bool = True, log: Callable[[str], None] | None = None,
               optimizers: tuple[torch.optim.Optimizer, ...] = ()) -> Callable:
    """The gradient step this run calls (module doc). ``handwritten``: a no-argument maker of the
    hand-written step (None: the algorithm has none); ``why_not``: why it does not apply here;
    ``record``: whether --cuda-graphs records the step here (False: the caller records it);
    ``log``: told the choice in one line (the run's log); ``optimizers``: the ones the step steps
    (made ``capturable`` where it is recorded here)."""
    fused = getattr(cfg, "fused_update", False)
    if handwritten is not None and fused and why_not is None:
        step = handwritten()
        what = f"hand-written step ({type(step).__module__}; precision {cfg.precision})"
    else:
        step = autograd
        reason = ("the algorithm's only step" if handwritten is None else
                  "--fused-update false" if not fused else why_not)
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
