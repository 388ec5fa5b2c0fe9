"""One ``log(step, metrics)`` call, several sinks: CSV, TensorBoard, optional Weights & Biases,
and a progress display (a rich bar on a terminal, plain periodic lines otherwise).

Metric values may be tensors; they are converted here, which is where training's host syncs
happen (every ``log_every`` steps), never inside an update step.
"""

from __future__ import annotations

import csv
import math
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import torch


def _scalar(v: Any) -> float:
    if isinstance(v, torch.Tensor):
        return float(v.detach().float().mean().item())
    return float(v)


METRICS_HEADER = ["step", "wall_time", "metric", "value"]


def truncate_csv(path: Path, last_step: int, header: list[str]) -> None:
    """Keep the rows of a step-indexed CSV up to ``last_step`` (those after it were logged past the
    checkpoint a run resumes from, and will be logged again), under ``header`` (written again if a
    crash lost it). Rewritten atomically."""
    if not path.exists():
        return
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r and r[0].isdigit() and int(r[0]) <= last_step]
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    os.replace(tmp, path)


class Logger:
    def __init__(self, run_dir: Path, total_steps: int, start_step: int = 0, progress: str = "auto",
                 tensorboard: bool = True, wandb_run: Any = None, description: str = "train"):
        self.run_dir = Path(run_dir)
        self.total_steps, self.start_step = total_steps, start_step
        path = self.run_dir / "metrics.csv"
        if start_step:
            truncate_csv(path, start_step, METRICS_HEADER)  # rows logged after the checkpoint
        new = not path.exists() or path.stat().st_size == 0
        self._csv_file = open(path, "a", newline="")
        self._csv = csv.writer(self._csv_file)
        if new:
            self._csv.writerow(METRICS_HEADER)
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir), purge_step=start_step or None)
        self._wandb = wandb_run
        self.recent_returns: deque[float] = deque(maxlen=20)
        self.t0, self.step0 = time.time(), start_step
        self._last_line = time.time()
        mode = progress
        if mode == "auto":
            mode = "bar" if sys.stdout.isatty() else "log"
        self.mode = mode
        self._bar = None
        if mode == "bar":
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[info]}"), TimeRemainingColumn())
            self._task = self._bar.add_task(description, total=total_steps, completed=start_step, info="")
            self._bar.start()

    # -- metrics --------------------------------------------------------------------------------
    def log(self, step: int, metrics: dict[str, Any]) -> None:
        now = time.time()
        values = {k: _scalar(v) for k, v in metrics.items()}
        for k, v in values.items():
            self._csv.writerow([step, f"{now:.3f}", k, repr(v)])
            if self._tb is not None:
                self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(values, step=step)
        if "charts/episodic_return" in values:
            self.recent_returns.append(values["charts/episodic_return"])

    def episode(self, step: int, ret: float, length: int) -> None:
        self.log(step, {"charts/episodic_return": ret, "charts/episodic_length": length})

    def sps(self, step: int) -> float:
        return (step - self.step0) / max(time.time() - self.t0, 1e-9)

    def flush(self) -> None:
        self._csv_file.flush()
        if self._tb is not None:
            self._tb.flush()

    # -- progress -------------------------------------------------------------------------------
    def progress(self, step: int, extra: str = "") -> None:
        sps = self.sps(step)
        ret = f"return {sum(self.recent_returns) / len(self.recent_returns):.1f}" if self.recent_returns else ""
        info = "  ".join(x for x in (f"{sps:.0f} SPS", ret, extra) if x)
        if self._bar is not None:
            self._bar.update(self._task, completed=step, info=info)
        elif self.mode == "log" and time.time() - self._last_line >= 10.0:
            self._last_line = time.time()
            left = (self.total_steps - step) / sps if sps > 0 else math.inf
            eta = f"{left / 60:.1f} min left" if math.isfinite(left) else ""
            self.print(f"step {step}/{self.total_steps}  {info}  {eta}".rstrip())

    def print(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text)
        elif self.mode != "none":
            print(text, flush=True)

    def warn(self, text: str) -> None:
        """A one-line warning on stderr, shown whatever --progress says."""
        print(f"heron: warning: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        self.flush()
        self._csv_file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
