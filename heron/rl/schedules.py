"""Learning-rate schedules as multiplicative factors of the update count (for LambdaLR)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch


def lr_lambda(kind: str, total_updates: int) -> Callable[[int], float]:
    """constant: 1; linear: 1 -> 0; cosine: 1 -> 0 along half a cosine, over ``total_updates``."""
    total = max(1, total_updates)
    if kind == "constant":
        return lambda n: 1.0
    if kind == "linear":
        return lambda n: max(0.0, 1.0 - n / total)
    if kind == "cosine":
        return lambda n: 0.5 * (1.0 + math.cos(math.pi * min(n, total) / total))
    raise ValueError(f"unknown schedule {kind!r}")


def set_lr(optimizer, lr: float) -> None:
    """Set every param group's learning rate (schedules derive it from the update count, so a
    resumed run needs no scheduler state). A tensor learning rate (``--cuda-graphs``,
    ``heron.accel.graphs.capturable``) is filled in place, where the recorded step reads it."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr
