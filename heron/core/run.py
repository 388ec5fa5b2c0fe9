"""A run: its directory, device, seeding, logger, checkpoints and evaluations.

``Run.start(algo, cfg)`` makes a new run directory; ``Run.resume(run_dir)`` reopens one at its latest
checkpoint. Algorithms receive the Run and call ``run.checkpoint``, ``run.evaluate`` and
``run.logger.log``; they never touch paths themselves.
"""

from __future__ import annotations

import csv
import math
import os
import random
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import yaml

from heron.config import HeronError, to_dict
from heron.core import checkpoint as ckpt
from heron.core.envs import evaluate as run_episodes
from heron.core.logger import Logger, truncate_csv

EVAL_SEED_OFFSET = 1_000_000  # evaluation episodes use seeds far from the training envs'
EVAL_HEADER = ["step", "mean_return", "std_return", "episodes", "wall_time"]


class Interrupted(Exception):
    """Training stopped by SIGINT/SIGTERM after a checkpoint of the current step was written."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise HeronError(f"--device {name} requested but CUDA is not available")
    return torch.device(name)


def choose_threads(requested: int, num_envs: int, vector_mode: str) -> int:
    """Intra-op threads. Small RL networks gain little from a second thread, and torch stalls badly
    when its threads compete with env subprocesses for cores, so we stay at one thread per free core."""
    if requested > 0:
        return requested
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    free = cores - (num_envs if vector_mode == "async" else 0)
    return max(1, min(free, 4))


def seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    else:
        torch.use_deterministic_algorithms(False)


def default_run_dir(algo: str, cfg: Any) -> Path:
    env = re.sub(r"[^\w.-]+", "_", cfg.env_id).strip("_")  # module:name, <callable ...>: a plain file name
    return Path("runs") / f"{env}__{algo}__{cfg.seed}__{time.strftime('%Y%m%d-%H%M%S')}"


def write_config(run_dir: Path, algo: str, cfg: Any) -> None:
    text = yaml.safe_dump({"algo": algo, **to_dict(cfg)}, sort_keys=False)
    tmp = run_dir / ".config.yaml.tmp"
    tmp.write_text(text)
    os.replace(tmp, run_dir / "config.yaml")


def read_config(run_dir: str | Path) -> tuple[str, dict]:
    """(algo, raw config dict) from a run directory's config.yaml."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise HeronError(f"run directory not found: {run_dir}")
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise HeronError(f"{run_dir} is not a heron run directory (no config.yaml)")
    data = read_yaml(path)
    algo = data.pop("algo", None)
    if not algo:
        raise HeronError(f"{path}: missing 'algo'")
    return str(algo), data


def read_yaml(path: str | Path) -> dict:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise HeronError(f"config file not found: {path}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise HeronError(f"malformed config file {path}{where}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise HeronError(f"malformed config file {path}: expected a mapping of option: value")
    return data


@dataclass
class Run:
    algo: str
    cfg: Any
    run_dir: Path
    device: torch.device
    logger: Logger
    resume_state: dict | None = None  # the latest checkpoint's state when resuming
    resume_buffer: dict | None = None
    best_eval: float = -math.inf
    last_checkpoint_step: int = -1
    last_eval: dict | None = None
    wall_start: float = field(default_factory=time.time)
    stop_requested: bool = False
    eval_env_fn: Callable[[str | None], Any] | None = None  # the algorithm's own env stack, if any
    _old_handlers: dict = field(default_factory=dict)

    @property
    def ckpt_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    # -- opening ----------------------------------------------------------------------------------
    @classmethod
    def start(cls, algo: str, cfg: Any) -> "Run":
        run_dir = Path(cfg.run_dir) if cfg.run_dir else default_run_dir(algo, cfg)
        if ckpt.step_checkpoints(run_dir / "checkpoints"):
            raise HeronError(f"{run_dir} already holds checkpoints; continue it with --resume {run_dir} "
                             "or choose another --run-dir")
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg = type(cfg)(**{**vars(cfg), "run_dir": str(run_dir)})
        write_config(run_dir, algo, cfg)
        return cls._open(algo, cfg, run_dir, start_step=0)

    @classmethod
    def resume(cls, algo: str, cfg: Any) -> "Run":
        run_dir = Path(cfg.run_dir)
        latest = ckpt.latest_checkpoint(run_dir / "checkpoints")
        if latest is None:
            raise HeronError(f"{run_dir} has no checkpoint to resume from")
        state = ckpt.load(latest)
        if not isinstance(state, dict) or "step" not in state:
            raise HeronError(f"corrupt or unreadable checkpoint {latest}: not a heron checkpoint")
        if int(state["step"]) >= cfg.total_steps:
            raise HeronError(f"{run_dir} already reached {int(state['step'])} steps; pass a larger --total-steps "
                             "to train on")
        buffer_state = ckpt.load(ckpt.buffer_path(latest), mmap=True) if ckpt.buffer_path(latest).exists() else None
        truncate_csv(run_dir / "eval.csv", int(state["step"]), EVAL_HEADER)
        write_config(run_dir, algo, cfg)  # records a new --total-steps target
        run = cls._open(algo, cfg, run_dir, start_step=int(state["step"]))
        run.resume_state, run.resume_buffer = state, buffer_state
        run.best_eval = float(state.get("best_eval", -math.inf))
        run.last_checkpoint_step = int(state["step"])
        return run

    @classmethod
    def _open(cls, algo: str, cfg: Any, run_dir: Path, start_step: int) -> "Run":
        device = resolve_device(cfg.device)
        torch.set_num_threads(choose_threads(cfg.torch_threads, cfg.num_envs, cfg.vector_mode))
        seed_everything(cfg.seed, cfg.torch_deterministic)
        wandb_run = None
        if cfg.track:
            try:
                import wandb
            except ImportError:
                raise HeronError("--track needs wandb: pip install 'heron[wandb]'") from None
            wandb_run = wandb.init(project=cfg.wandb_project, config={"algo": algo, **to_dict(cfg)},
                                   name=run_dir.name, dir=str(run_dir), sync_tensorboard=False,
                                   resume="allow", id=run_dir.name.replace("/", "_"))
        logger = Logger(run_dir, cfg.total_steps, start_step=start_step, progress=cfg.progress,
                        wandb_run=wandb_run, description=f"{algo} {cfg.env_id}")
        run = cls(algo, cfg, run_dir, device, logger)
        run._catch_signals()
        return run

    def _catch_signals(self) -> None:
        """Ctrl-C or SIGTERM (a preempted job) asks the loop to stop at the end of the current step,
        where it writes a checkpoint to resume from; a second Ctrl-C interrupts at once."""
        if threading.current_thread() is not threading.main_thread():
            return

        def request_stop(signum, frame):
            if self.stop_requested and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self.stop_requested = True

        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old_handlers[sig] = signal.signal(sig, request_stop)

    # -- during training --------------------------------------------------------------------------
    def due(self, step: int, prev_step: int, every: int) -> bool:
        """True when a multiple of ``every`` lies in (prev_step, step]."""
        return every > 0 and step // every > prev_step // every

    def checkpoint(self, step: int, state: dict, buffer_state: dict | None = None) -> None:
        state = {**state, "step": step, "best_eval": self.best_eval, "algo": self.algo}
        self.logger.flush()  # logs on disk cover at least what the checkpoint covers
        ckpt.save_checkpoint(self.ckpt_dir, step, state, buffer_state, keep=self.cfg.keep_checkpoints)
        self.last_checkpoint_step = step
        if os.environ.get("HERON_CRASH_AFTER_CHECKPOINT") == str(step):  # fault injection for resume tests
            os._exit(17)

    def evaluate(self, step: int, policy: Any,
                 state_fn: Callable[[], dict] | None = None, video: bool = False) -> dict:
        """Deterministic evaluation: logs ``eval/mean_return``, appends to eval.csv and saves
        ``best.pt`` when the mean improves."""
        video_path = str(self.run_dir / "videos" / f"eval_step_{step}.mp4") if video else None
        if video_path:
            Path(video_path).parent.mkdir(parents=True, exist_ok=True)
        # a policy may sample (DreamerV2's latents): its draws must not shift training's random stream
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            returns = run_episodes(policy, self.cfg.env_id, self.cfg.eval_episodes, self.cfg.seed + EVAL_SEED_OFFSET,
                                   video_path=video_path, env_fn=self.eval_env_fn)
        result = {"step": step, "mean_return": float(returns.mean()), "std_return": float(returns.std()),
                  "episodes": len(returns)}
        self.logger.log(step, {"eval/mean_return": result["mean_return"], "eval/std_return": result["std_return"]})
        path = self.run_dir / "eval.csv"
        new = not path.exists()
        with open(path, "a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(EVAL_HEADER)
            w.writerow([step, result["mean_return"], result["std_return"], len(returns), f"{time.time():.3f}"])
        if result["mean_return"] > self.best_eval:
            self.best_eval = result["mean_return"]
            if state_fn is not None:
                ckpt.save_atomic({**state_fn(), "step": step, "best_eval": self.best_eval, "algo": self.algo},
                                 self.ckpt_dir / "best.pt")
        self.last_eval = result
        self.logger.print(f"eval @ {step}: {result['mean_return']:.1f} +- {result['std_return']:.1f} "
                          f"over {len(returns)} episodes")
        return result

    def finish(self, step: int, policy: Any, state_fn: Callable[[], dict],
               full_state_fn: Callable[[], tuple[dict, dict | None]]) -> dict:
        """End of training: a final deterministic evaluation (with video when --capture-video) unless
        one just ran at this step, then the final checkpoint. Returns the run's summary."""
        if step % self.cfg.log_every:  # the last multiple of --log-every is behind us
            self.logger.log(step, {"charts/SPS": self.logger.sps(step)})
        result = self.last_eval
        if result is None or result["step"] != step:
            result = self.evaluate(step, policy, state_fn, video=self.cfg.capture_video)
        elif self.cfg.capture_video:  # evaluated at this step already: just film one episode
            path = self.run_dir / "videos" / f"eval_step_{step}.mp4"
            path.parent.mkdir(parents=True, exist_ok=True)
            run_episodes(policy, self.cfg.env_id, 1, self.cfg.seed + EVAL_SEED_OFFSET, video_path=str(path),
                         env_fn=self.eval_env_fn)
        if self.last_checkpoint_step != step:
            state, buffer_state = full_state_fn()
            self.checkpoint(step, state, buffer_state)
        self.logger.print(f"done: {step} steps in {(time.time() - self.wall_start) / 60:.1f} min; final "
                          f"evaluation {result['mean_return']:.1f} +- {result['std_return']:.1f} "
                          f"({result['episodes']} episodes); run directory {self.run_dir}")
        return {"run_dir": str(self.run_dir), "step": step, "env_id": self.cfg.env_id,
                "mean_return": result["mean_return"], "std_return": result["std_return"],
                "episodes": result["episodes"], "best_eval": self.best_eval}

    def stop_if_requested(self, step: int, full_state_fn: Callable[[], tuple[dict, dict | None]]) -> None:
        if not self.stop_requested:
            return
        if self.last_checkpoint_step != step:
            state, buffer_state = full_state_fn()
            self.checkpoint(step, state, buffer_state)
        raise Interrupted(f"stopped at step {step}; checkpoint saved; continue with: heron train --resume {self.run_dir}")

    def close(self) -> None:
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()
        self.logger.close()
