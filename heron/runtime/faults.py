"""Faults a run survives, and how they end it (docs/guide/runs.md, "Faults and what heron does").

The exceptions themselves (``Fault``, ``Diverged``, ``EnvCrashed``, ``WriteFailed``, and
``HeronError`` for bad input) live in ``heron.errors``.

* ``DivergenceGuard``: watches every update's metrics for non-finite values with device-side
  tensor ops only (one per update, a few per 64 updates); the host sync that reads its flag
  happens where the run syncs anyway (logging, evaluation, checkpoints), and on a GPU at the
  latest every 16,384 updates.
* ``close_bounded``: closing envs on the way out may hang (a dead worker, an OpenGL context
  interrupted mid-render); a watchdog ends the process instead.
* ``inject``: fault-injection points for the tests (``HERON_FAULT``), inert otherwise.
"""

from __future__ import annotations

import errno
import faulthandler
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch


# -- divergence -------------------------------------------------------------------------------------
def _scalar(v: torch.Tensor) -> torch.Tensor:
    """A metric as one float32 number (a float32 scalar as it is: the guard runs every update)."""
    if v.dim() == 0:
        return v if v.dtype == torch.float32 else v.float()
    return v.float().sum()


class DivergenceGuard:
    """Non-finite metrics of the update steps, recorded without a host sync.

    Per update the watched values become one row on the device (one ``stack``: the guard runs at
    every update, where each extra operation showed in TD3's loop); every ``FOLD`` updates the rows
    are folded into the flag, ``ok &= all(isfinite(rows))``. The folded rows stay until the flag is
    read (``tripped``, where the run syncs anyway; on the CPU, where reading it costs nothing, at
    each fold; elsewhere at the latest after ``KEEP`` folds, one sync per ``FOLD * KEEP`` updates),
    so once it is down, ``describe`` names the first bad update's non-finite values and env step.
    ``ignore``: name prefixes left out; under a loss scale (16-mixed) the gradient norms, which are
    infinite on the steps the GradScaler skips to lower its scale."""

    FOLD = 64
    KEEP = 256

    def __init__(self, device: torch.device, ignore: tuple[str, ...] = ()):
        self.ignore, self.device = ignore, torch.device(device)
        self.ok = torch.ones((), dtype=torch.bool, device=device)
        self.bad = False  # a read found the flag down: nothing after the first bad update is recorded
        self.width = 0  # rows are padded with zeros to the widest set of names seen
        self._zero = torch.zeros((), device=device)
        self.rows: list[torch.Tensor] = []  # not yet folded, with their (names, env step)
        self.meta: list[tuple[tuple[str, ...], int]] = []
        self.folded: list[tuple[torch.Tensor, list[tuple[tuple[str, ...], int]]]] = []  # not yet read

    def watch(self, metrics: dict[str, Any], step: int) -> dict[str, Any]:
        if self.bad:
            return metrics
        names = tuple(k for k, v in metrics.items() if isinstance(v, torch.Tensor) and not k.startswith(self.ignore))
        if not names:
            return metrics
        if len(names) > self.width:
            self._fold()
            self.width = len(names)
        values = [_scalar(metrics[k]) for k in names]
        values += [self._zero] * (self.width - len(names))
        self.rows.append(torch.stack(values))
        self.meta.append((names, step))
        if len(self.rows) >= self.FOLD:
            self._fold()
        return metrics

    def _fold(self) -> None:
        if not self.rows:
            return
        rows = torch.stack(self.rows)
        self.ok = self.ok & rows.isfinite().all()
        self.folded.append((rows, self.meta))
        self.rows, self.meta = [], []
        if self.device.type == "cpu" or len(self.folded) >= self.KEEP:
            self._read()

    def _read(self) -> None:
        """The host sync: forget the folded rows while the flag is up; keep them once it is down."""
        if not self.bad:
            if bool(self.ok):
                self.folded.clear()
            else:
                self.bad = True

    def tripped(self) -> bool:
        self._fold()
        self._read()  # only where the run syncs anyway
        return self.bad

    def describe(self) -> str:
        """'losses/qf1_loss = inf at env step 1234 (also ...)': the first update that went bad."""
        self._fold()
        for rows, meta in self.folded:
            for (names, step), row in zip(meta, rows.tolist()):
                bad = [f"{name} = {v}" for name, v in zip(names, row) if not math.isfinite(v)]
                if bad:
                    more = bad[1:4] + ([f"{len(bad) - 4} more"] if len(bad) > 4 else [])
                    also = f" (also {', '.join(more)})" if more else ""
                    return f"{bad[0]} at env step {step}{also}"
        return "a metric"


def nonfinite_tensor(state: Any, prefix: str = "") -> str | None:
    """The name of the first floating-point tensor in a (nested) state that holds a NaN or inf."""
    if isinstance(state, torch.Tensor):
        if state.is_floating_point() and not bool(torch.isfinite(state).all()):
            return prefix or "tensor"
        return None
    items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, (list, tuple)) else ()
    for key, value in items:
        found = nonfinite_tensor(value, f"{prefix}.{key}" if prefix else str(key))
        if found:
            return found
    return None


# -- closing without hanging ------------------------------------------------------------------------
def close_bounded(close: Callable[[], Any], what: str, timeout: float = 10.0) -> None:
    """Call ``close()``; if it has not returned within ``timeout`` seconds, print one line and end
    the process (exit 1). A Python timer does it when the interpreter is responsive; faulthandler's
    C watchdog (no GIL needed) two seconds later when it is not."""

    def give_up() -> None:
        print(
            f"heron: error: closing {what} did not finish within {timeout:.0f} s; exiting without waiting",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)

    timer = threading.Timer(timeout, give_up)
    timer.daemon = True
    timer.start()
    devnull = open(os.devnull, "w")
    faulthandler.dump_traceback_later(timeout + 2.0, exit=True, file=devnull)
    try:
        close()
    finally:
        faulthandler.cancel_dump_traceback_later()
        timer.cancel()
        timer.join()  # wakes at once: no thread of the run's outlives it
        devnull.close()


# -- fault injection (tests) ------------------------------------------------------------------------
_counts: dict[str, int] = {}


def armed(point: str) -> str | None:
    """The action ``HERON_FAULT=point[@n][:action]`` asks for now: at the n-th (default first) time
    ``point`` is reached. Inert (one dict lookup) when HERON_FAULT is unset."""
    spec = os.environ.get("HERON_FAULT")
    if not spec:
        return None
    where, _, action = spec.partition(":")
    name, _, nth = where.partition("@")
    if name != point:
        return None
    _counts[point] = _counts.get(point, 0) + 1
    return (action or "pause") if _counts[point] == int(nth or 1) else None


_released = threading.Event()


def release() -> None:
    """A stop request arrived: a ``hold`` fault point goes on (the run's signal handler calls this)."""
    _released.set()


def inject(point: str, action: str | None = None) -> None:
    """Act on an armed fault point: ``pause`` (write ``HERON_FAULT_MARKER`` and sleep until killed),
    ``mark`` (write the marker and go on), ``hold`` (write the marker and wait for a stop request:
    a signal that lands at a known step), ``enospc`` (raise a disk-full OSError), ``exit`` (die at
    once, status 17)."""
    action = action or armed(point)
    if action is None:
        return
    if action in ("pause", "mark", "hold") and os.environ.get("HERON_FAULT_MARKER"):
        with open(os.environ["HERON_FAULT_MARKER"], "a") as f:  # appended: each rank of a torchrun job
            f.write(f"{point} {os.getpid()}\n")
    if action == "pause":
        while True:
            time.sleep(3600)
    if action == "hold":  # until a stop request arrives (``release``), then on
        while not _released.is_set():
            time.sleep(0.02)
    if action == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if action == "exit":
        os._exit(17)
