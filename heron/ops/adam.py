"""The optimizer every algorithm steps: torch's fused Adam with a lean step (``Adam``)."""

from __future__ import annotations

from typing import Any

import torch

from heron.ops import torch_private as private


class Adam(torch.optim.Adam):
    """torch's fused Adam (one kernel for all parameters, on CPU and CUDA) with a lean path for
    the step every algorithm takes: ``lean_step`` makes the same kernel call as ``step`` with the
    lists of parameters and state built once, not regrouped by device and type and run through
    the optimizer's hook machinery at every call (three calls per SAC update). State,
    ``state_dict`` and results are those of ``torch.optim.Adam``; anything unusual (a missing
    gradient, the first step, a tensor learning rate, amsgrad, a GradScaler) goes through ``step``.

    torch wraps ``add_param_group``, ``state_dict``, ``load_state_dict`` and ``zero_grad`` in
    ``torch._disable_dynamo`` and ``step`` in a graph break, and each imports ``torch._dynamo`` on
    its first call: a noticeable delay in every run's startup, for a compiler heron's optimizer
    step never meets. This class calls the wrapped functions themselves and creates the state of
    its first lean step with Adam's own initializer, so a run that does not compile never imports
    it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._lean: list | None = None
        super().__init__(*args, **kwargs)

    def _lean_lists(self) -> list | None:
        lists = []
        for group in self.param_groups:
            params = group["params"]
            if (
                group["amsgrad"]
                or group["maximize"]
                or group["capturable"]
                or group["differentiable"]
                or group.get("decoupled_weight_decay")
                or not group["fused"]
                or not isinstance(group["lr"], float)
                or any(p not in self.state or "step" not in self.state[p] for p in params)
                or len({(p.device, p.dtype) for p in params}) > 1
            ):
                return None
            states = [self.state[p] for p in params]
            steps = [s["step"] for s in states]
            # one step counter for the group when its parameters agree (always, unless a state was
            # edited by hand): one increment per step instead of one per parameter (torch's
            # _foreach_add_ on CPU scalars runs them one by one, even for PPO's 12 tensors);
            # written back to every parameter's state before anything reads it (``_sync_steps``)
            counter = steps[0].clone() if bool(torch.stack(steps).eq(steps[0]).all()) else None
            lists.append(
                (group, params, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], steps, counter)
            )
        return lists

    def _sync_steps(self) -> None:
        """Every parameter's ``state["step"]`` from its group's counter (before reads and other steps)."""
        for *_, steps, counter in self._lean or ():
            if counter is not None:
                for step in steps:
                    step.copy_(counter)

    def step(self, closure=None):
        if self._lean is not None:  # (never under torch.compile: Dynamo before torch 2.13 cannot set it)
            self._sync_steps()
            self._lean = None  # torch's step moves the per-parameter counters: lists and counters anew
        return super().step(closure)

    def lean_step(self) -> None:
        if self._lean is None:
            if not self.state and all(p.grad is not None for g in self.param_groups for p in g["params"]):
                for group in self.param_groups:  # the first step: Adam's state, as its step() creates it
                    private.init_adam_group(self, group)
            self._lean = self._lean_lists()
            if self._lean is None:
                self.step()  # the first step creates the state; the next one builds the lists
                return
        for group, params, *_ in self._lean:
            if any(p.grad is None for p in params) or not isinstance(group["lr"], float):
                self.step()
                return
        for group, params, exp_avgs, exp_avg_sqs, steps, counter in self._lean:
            beta1, beta2 = group["betas"]
            if counter is not None:
                counter.add_(1)
                steps = [counter] * len(params)
            else:
                private.foreach_add_(steps, 1)
            private.fused_adam_(
                params,
                [p.grad for p in params],
                exp_avgs,
                exp_avg_sqs,
                [],
                steps,
                amsgrad=False,
                lr=group["lr"],
                beta1=beta1,
                beta2=beta2,
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=False,
                grad_scale=None,
                found_inf=None,
            )

    def zero_grad(self, set_to_none: bool = True) -> None:
        private.undecorated(torch.optim.Optimizer.zero_grad)(self, set_to_none)

    def state_dict(self) -> dict:
        """torch's, with the learning rates as floats and ``capturable`` off (``--cuda-graphs``
        sets both again after loading: ``heron.accel.graphs.capturable``), so a checkpoint resumes
        the same way with or without graphs and on any device."""
        self._sync_steps()
        state = private.undecorated(torch.optim.Optimizer.state_dict)(self)
        for group in state["param_groups"]:  # torch's copies of the groups
            if isinstance(group["lr"], torch.Tensor):
                group["lr"] = float(group["lr"])
            group["capturable"] = False
        return state

    def lean_zero_grad(self) -> None:
        """``zero_grad(set_to_none=True)`` without the machinery."""
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    def load_state_dict(self, state_dict: dict) -> None:
        private.undecorated(torch.optim.Optimizer.load_state_dict)(self, state_dict)
        self._lean = None  # new state tensors

    def add_param_group(self, param_group: dict) -> None:
        self._sync_steps()
        private.undecorated(torch.optim.Optimizer.add_param_group)(self, param_group)
        self._lean = None


def adam(params, lr: float, eps: float = 1e-8, beta1: float = 0.9) -> Adam:
    """Adam with the fused kernel and the lean step (``Adam``)."""
    return Adam(params, lr=lr, betas=(beta1, 0.999), eps=eps, fused=True)
