"""The gradient-step builder (heron.core.update.build_step): which step a run gets, in its one order,
and the line that tells the user which and why."""

from types import SimpleNamespace

import torch

from heron.algos.ppo import lean as ppo_lean
from heron.algos.td3 import lean as td3_lean
from heron.core.graphs import GraphedStep
from heron.core.precision import Precision
from heron.core.update import build_step


def autograd(batch):  # a stand-in for an algorithm's make_update step
    return {"kind": "autograd"}


class HandWritten:
    def __call__(self, batch):
        return {"kind": "hand-written"}


def _cfg(**kw):
    return SimpleNamespace(**{"fused_update": True, "compile": False, "cuda_graphs": False, "precision": "32", **kw})


def _build(cfg, **kw):
    said = []
    step = build_step(cfg, autograd, HandWritten, log=said.append, **kw)
    return step, said


def test_the_hand_written_step_where_it_applies_and_the_reason_where_not():
    step, said = _build(_cfg())
    assert isinstance(step, HandWritten)
    assert said == [f"update: hand-written step ({__name__}; precision 32)"]
    step, said = _build(_cfg(), why_not="recurrent networks")
    assert step is autograd and said == [f"update: autograd step ({__name__}; recurrent networks)"]
    step, said = _build(_cfg(fused_update=False))
    assert step is autograd and said == [f"update: autograd step ({__name__}; --fused-update false)"]
    said = []
    assert build_step(_cfg(), autograd, log=said.append) is autograd  # an algorithm without one
    assert said == [f"update: autograd step ({__name__}; the algorithm's only step)"]


def test_cuda_graphs_record_the_chosen_step_here_or_leave_it_to_the_caller():
    step, said = _build(_cfg(cuda_graphs=True))
    assert isinstance(step, GraphedStep) and said[0].endswith("precision 32), recorded as CUDA graphs")
    step, said = _build(_cfg(cuda_graphs=True), record=False)  # SAC and TD3 record it with the gather
    assert isinstance(step, HandWritten) and said[0].endswith(", recorded as CUDA graphs")


def test_the_algorithms_reasons_keep_their_steps_where_they_were_measured():
    cuda = Precision("32", torch.device("cuda"))
    assert "no faster" in td3_lean.supported(cuda, compiled=False)  # TD3's hand-written step: the CPU's
    assert td3_lean.supported(Precision("32", torch.device("cpu")), compiled=False) is None
    model = SimpleNamespace()  # PPO records its autograd step: the graphs' reason comes before the model's
    assert "records the autograd step" in ppo_lean.supported(model, cuda, compiled=False, graphs=True)
