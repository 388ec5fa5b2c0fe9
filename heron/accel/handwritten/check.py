"""The start-up check of a hand-written step against the readable step it stands in for.

A hand-written step computes every value with its algorithm's ``losses.py`` and every derivative
with its own ``*_grad`` functions. A researcher who edits a loss, a network or the readable step
(``make_update``) without the matching derivative would otherwise train with the old gradient and
no sign of it. So before a run's first update, ``disagreement`` takes one step of each from the same
state, on the same synthetic batch (the hand-written module's ``probe``), with the same random
draws, and compares what they leave behind: every parameter's gradient and every metric the steps
return. Where they differ by more than float rounding, the run takes the readable step and its
first log line says why.

The run's own numbers are untouched: the check works under a forked RNG (every random draw of the
run is the one it would have made without the check), and afterwards puts back every parameter,
buffer, optimizer state and gradient of the networks the steps change (``state``), so the first
real update starts from exactly where it would have. It costs two gradient steps and a copy of the
networks, a few tens of milliseconds at the default sizes."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from heron.errors import first_line

Saved = dict[str, Any]


def _tensors(thing: Any) -> list[torch.Tensor]:
    """The tensors of a named piece whose gradients the steps write: a module's parameters, or a tensor."""
    if isinstance(thing, nn.Module):
        return list(thing.parameters())
    return [thing] if isinstance(thing, torch.Tensor) and thing.requires_grad else []


def snapshot(state: dict[str, Any]) -> Saved:
    """Copies of what ``restore`` puts back: modules' state dicts, optimizers' state dicts, tensors,
    and every gradient attribute as it is (the tensor itself, or None)."""
    saved: Saved = {}
    for name, thing in state.items():
        if isinstance(thing, nn.Module):
            saved[name] = {k: v.detach().clone() for k, v in thing.state_dict().items()}
        elif isinstance(thing, torch.optim.Optimizer):
            saved[name] = copy.deepcopy(thing.state_dict())
        else:
            saved[name] = thing.detach().clone()
    saved["grads"] = [(t, t.grad) for thing in state.values() for t in _tensors(thing)]
    return saved


@torch.no_grad()
def restore(state: dict[str, Any], saved: Saved) -> None:
    """Everything ``snapshot`` copied, written back in place (the same tensors, the same storage)."""
    for name, thing in state.items():
        if isinstance(thing, nn.Module):
            for key, value in thing.state_dict(keep_vars=True).items():
                value.copy_(saved[name][key])
        elif isinstance(thing, torch.optim.Optimizer):
            thing.load_state_dict(copy.deepcopy(saved[name]))
        else:
            thing.copy_(saved[name])
    for t, grad in saved["grads"]:
        t.grad = grad


def _gradients(state: dict[str, Any]) -> dict[str, list[torch.Tensor | None]]:
    return {
        name: [None if t.grad is None else t.grad.detach().clone() for t in _tensors(thing)]
        for name, thing in state.items()
        if _tensors(thing)
    }


def _off(ref: torch.Tensor, got: torch.Tensor) -> float:
    """How far ``got`` is from ``ref``, relative to ``ref``'s largest entry."""
    ref, got = ref.detach().double(), got.detach().double()
    return float((ref - got).abs().max() / ref.abs().max().clamp_min(1e-12))


def _run(
    step: Callable, args: tuple, state: dict[str, Any], saved: Saved, seed: int, devices: list
) -> tuple[dict[str, torch.Tensor], dict[str, list[torch.Tensor | None]]]:
    restore(state, saved)
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        metrics = {k: v.detach().clone() for k, v in step(*args).items() if isinstance(v, torch.Tensor)}
    return metrics, _gradients(state)


def tolerance(dtype: torch.dtype | None) -> float:
    """The largest relative difference between the two steps taken as rounding: in float32 (None)
    the steps' gradients and metrics agree to about 1e-5 (SAC, TD3 and PPO at their defaults on
    Pendulum-v1, Hopper-v5 and CartPole-v1), under bf16-mixed (``dtype`` the products' type) to
    about 4e-4; an edit such as a Huber critic loss moves a gradient by tens of percent."""
    return 1e-3 if dtype is None else 1e-2


def disagreement(
    readable: Callable, fast: Callable, args: tuple, state: dict[str, Any], tolerance: float, seed: int = 0
) -> str | None:
    """None when one step of ``fast`` leaves the gradients and metrics one step of ``readable``
    leaves, from the same state and random draws; else what differs most, as
    ``"disagrees with it: critic gradient off by 3.1e-01"``. ``state``: the pieces the steps change, by name (modules,
    optimizers, tensors); ``tolerance``: the largest relative difference taken as rounding."""
    devices = sorted({t.device.index or 0 for thing in state.values() for t in _tensors(thing) if t.is_cuda})
    saved = snapshot(state)
    try:
        ref_metrics, ref_grads = _run(readable, args, state, saved, seed, devices)
        try:
            got_metrics, got_grads = _run(fast, args, state, saved, seed, devices)
        except Exception as exc:  # a network the hand-written step cannot follow
            return f"fails on these networks ({first_line(exc)})"
    finally:
        restore(state, saved)
    worst, what = 0.0, ""
    for name, refs in ref_grads.items():
        for ref, got in zip(refs, got_grads[name]):
            if (ref is None) != (got is None):
                return f"disagrees with it: {name} gradient {'missing' if got is None else 'where it has none'}"
            if ref is not None and got is not None and (off := _off(ref, got)) > worst:
                worst, what = off, f"{name} gradient"
    for key, ref in ref_metrics.items():
        if key not in got_metrics:
            return f"disagrees with it: no {key}"
        # a metric near zero (a loss at its optimum) is compared on the scale of one
        off = float((ref.double() - got_metrics[key].double()).abs().max() / ref.double().abs().max().clamp_min(1.0))
        if off > worst:
            worst, what = off, key
    return f"disagrees with it: {what} off by {worst:.1e}" if worst > tolerance else None
