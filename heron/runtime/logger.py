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

from heron.errors import WriteFailed
from heron.runtime.faults import armed, inject

FLUSH_SECONDS = 2.0  # logged rows reach the disk this soon: a SIGKILL loses at most this much of the logs
BAR_SECONDS = 0.1  # the progress bar's line is made at most this often (rich redraws at 10 Hz)


def _scalar(v: Any) -> float:
    if isinstance(v, torch.Tensor):
        return float(v.detach().float().mean().item())
    return float(v)


METRICS_HEADER = ["step", "wall_time", "metric", "value"]


def complete_rows(path: Path, width: int) -> list[list[str]]:
    """The data rows of a step-indexed CSV that were written whole. A kill mid-write leaves a last
    line without its newline (dropped: even ``...,-12`` may be a cut ``-12.5``); rows of another
    width or without a step are dropped too. The header is not returned."""
    if not path.is_file():
        return []
    with open(path, newline="", errors="replace") as f:
        lines = [line for line in f if line.endswith("\n")]
    return [r for r in csv.reader(lines) if len(r) == width and r[0].isdigit()]


def truncate_csv(path: Path, last_step: int, header: list[str]) -> None:
    """Keep the complete rows of a step-indexed CSV up to ``last_step`` (those after it were logged
    past the checkpoint a run resumes from, and will be logged again; a row torn by a kill is
    dropped), under ``header`` (written again if a crash lost it). Rewritten atomically."""
    if not path.exists():
        return
    write_csv(path, header, [r for r in complete_rows(path, len(header)) if int(r[0]) <= last_step])


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    """A whole CSV, written beside ``path`` and renamed over it: a kill mid-write leaves the old file."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    os.replace(tmp, path)


class Logger:
    def __init__(
        self,
        run_dir: Path,
        total_steps: int,
        start_step: int = 0,
        progress: str = "auto",
        tensorboard: bool = True,
        wandb_run: Any = None,
        description: str = "train",
        defer_episodes: bool = False,
    ):
        self.run_dir = Path(run_dir)
        self.defer_episodes = defer_episodes  # torchrun: episodes wait to be logged with every rank's
        self.pending: list[tuple[int, float, int]] = []
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

            self._tb = SummaryWriter(str(self.run_dir), purge_step=start_step or None, flush_secs=FLUSH_SECONDS)
        self._flushed = time.monotonic()
        self._wandb = wandb_run
        self.recent_returns: deque[float] = deque(maxlen=20)
        self.t0, self.step0 = time.time(), start_step
        self._last_line = time.time()
        mode = progress
        if mode == "auto":
            mode = "bar" if sys.stdout.isatty() else "log"
        self.mode = mode
        self._bar, self._bar_updated = None, -math.inf
        if mode == "bar":
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
            )
            self._task = self._bar.add_task(description, total=total_steps, completed=start_step, info="")
            self._bar.start()

    # -- metrics --------------------------------------------------------------------------------
    def log(self, step: int, metrics: dict[str, Any]) -> None:
        now = time.time()
        values = {k: _scalar(v) for k, v in metrics.items()}
        try:
            for k, v in values.items():
                self._csv.writerow([step, f"{now:.3f}", k, repr(v)])
                if self._tb is not None:
                    self._tb.add_scalar(k, v, step)
        except OSError as exc:
            raise self._write_failed(exc) from exc
        action = armed("csv")
        if action:  # tests: killed with a row half-written
            self._csv_file.write(f"{step},{now:.3f},torn")
            self._csv_file.flush()
            inject("csv", action)
        if self._wandb is not None:
            self._wandb.log(values, step=step)
        if "charts/episodic_return" in values:
            self.recent_returns.append(values["charts/episodic_return"])

    def episode(self, step: int, ret: float, length: int) -> None:
        if self.defer_episodes:
            self.pending.append((step, ret, length))
        else:
            self.log_episode(step, ret, length)

    def log_episode(self, step: int, ret: float, length: int) -> None:
        self.log(step, {"charts/episodic_return": ret, "charts/episodic_length": length})

    def sps(self, step: int) -> float:
        return (step - self.step0) / max(time.time() - self.t0, 1e-9)

    def flush(self, fault_point: str = "") -> None:
        try:
            if fault_point:
                inject(fault_point)  # tests: the disk fills up here
            self._csv_file.flush()
        except OSError as exc:
            raise self._write_failed(exc) from exc
        if self._tb is not None:
            self._tb.flush()
        self._flushed = time.monotonic()

    def flush_if_due(self) -> None:
        """Called every env step: logs reach the disk within FLUSH_SECONDS of being written."""
        if time.monotonic() - self._flushed >= FLUSH_SECONDS:
            self.flush("log-flush")

    def _write_failed(self, exc: OSError) -> WriteFailed:
        return WriteFailed(f"cannot write {self.run_dir / 'metrics.csv'}: {exc.strerror or exc}")

    # -- progress -------------------------------------------------------------------------------
    def progress(self, step: int, extra: str = "") -> None:
        """Called every env step (PPO: every iteration). The line is made only when it is shown:
        the bar's at most every ``BAR_SECONDS`` (rich redraws at 10 Hz) and at the last step, the
        plain log's every 10 s; the other steps pay a clock read."""
        self.flush_if_due()
        if self._bar is not None:
            now = time.monotonic()
            if now - self._bar_updated < BAR_SECONDS and step < self.total_steps:
                return
            self._bar_updated = now
            self._bar.update(self._task, completed=step, info=self._info(step, extra))
        elif self.mode == "log" and time.time() - self._last_line >= 10.0:
            self._last_line = time.time()
            sps, info = self.sps(step), self._info(step, extra)
            left = (self.total_steps - step) / sps if sps > 0 else math.inf
            eta = f"{left / 60:.1f} min left" if math.isfinite(left) else ""
            self.print(f"step {step}/{self.total_steps}  {info}  {eta}".rstrip())

    def _info(self, step: int, extra: str) -> str:
        ret = f"return {sum(self.recent_returns) / len(self.recent_returns):.1f}" if self.recent_returns else ""
        return "  ".join(x for x in (f"{self.sps(step):.0f} SPS", ret, extra) if x)

    def print(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text)
        elif self.mode != "none":
            print(text, flush=True)

    def warn(self, text: str) -> None:
        """A one-line warning on stderr, shown whatever --progress says."""
        print(f"heron: warning: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Best effort: on the way out after a fault (a full disk) the first error is the one reported."""
        if self._bar is not None:
            redraw = getattr(self._bar.live, "_refresh_thread", None)  # rich's 10 Hz redraw thread
            self._bar.stop()
            if redraw is not None:  # rich's stop only signals it to end: a closed logger leaves no thread
                redraw.join(timeout=1.0)
            self._bar = None
        for close in (
            self._csv_file.close,
            *((self._tb.close,) if self._tb is not None else ()),
            *((self._wandb.finish,) if self._wandb is not None else ()),
        ):
            try:
                close()
            except Exception:
                pass


class NullLogger:
    """The logger of a torchrun rank other than 0: it writes and shows nothing; its finished
    episodes wait in ``pending`` until rank 0 gathers them (``Run.gather_episodes``)."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, float, int]] = []

    def episode(self, step: int, ret: float, length: int) -> None:
        self.pending.append((step, ret, length))

    def sps(self, step: int) -> float:
        return 0.0

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        pass

    def flush(self, fault_point: str = "") -> None:
        pass

    def progress(self, step: int, extra: str = "") -> None:
        pass

    def print(self, text: str) -> None:
        pass

    def warn(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass
