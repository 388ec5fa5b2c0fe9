"""A run's evaluations: the deterministic episodes every --eval-every env steps, played in the
training process or sent to a worker process (--eval-async, ``heron.runtime.evalworker``), concluded
in step order into the logs, eval.csv and ``best.pt``.

``Evaluations`` is an object the run holds (``Run.evaluations``, ``heron.runtime.run``), with its
own state (the worker, the evaluations not yet concluded, the best and the latest score) and what it
needs of the run given when it is made: the run's options, directory, logger and rank, and two
callables, whether a stop was requested and the run's divergence check."""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from heron.envs.ids import gym_env_id
from heron.errors import EnvCrashed, WriteFailed
from heron.ops import dist
from heron.runtime import checkpoint as ckpt
from heron.runtime import evalworker
from heron.runtime.algorithm import Algorithm
from heron.runtime.episodes import EVAL_SEED_OFFSET
from heron.runtime.episodes import evaluate as run_episodes
from heron.runtime.faults import inject
from heron.runtime.rundir import EVAL_HEADER, attempt


def on_host(policy: Any) -> Any:
    """The policy an evaluation acts with: ``Policy.on_host()`` where the policy has it."""
    return policy.on_host() if hasattr(policy, "on_host") else policy


def registered_spec(env_id: str) -> Any:
    """The Gymnasium spec ``env_id`` resolves to here, for a worker process that cannot register it
    by importing (a test's or a notebook's ``gym.register``); None when there is none."""
    try:
        return gym.spec(gym_env_id(env_id))
    except Exception:
        return None


@dataclass
class Evaluations:
    """A run's evaluations (module doc)."""

    algo: str
    cfg: Any
    run_dir: Path
    device: torch.device
    world: dist.World
    logger: Any  # heron.runtime.logger.Logger (NullLogger on a rank other than 0)
    module: Algorithm | None  # the algorithm (heron.algos.<name>), rebuilt in a worker from its name
    stopping: Callable[[], bool]  # the run's stop request
    check_finite: Callable[[], None]  # the run's divergence check, before anything is evaluated
    env_fn: Callable[[str | None], Any] | None = None  # the algorithm's own env stack, if any
    on_eval: Callable[[dict], None] | None = None  # api.train(callback=...): told each evaluation (rank 0)
    worker: evalworker.EvalWorker | None = None  # --eval-async: the worker process evaluations go to
    best: float = -math.inf  # the best mean return concluded
    last: dict | None = None  # the latest evaluation concluded
    pending: list = field(default_factory=list)  # (step, policy snapshot) of evaluations not yet concluded
    sent: bool = False  # the first of them is with the worker
    in_checkpoint: bool = False  # the latest checkpoint keeps some of them

    @property
    def ckpt_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    def evaluate(
        self, step: int, policy: Any, state_fn: Callable[[], dict] | None = None, video: bool = False
    ) -> dict | None:
        """Deterministic evaluation: logs ``eval/mean_return``, appends to eval.csv and saves
        ``best.pt`` when the mean improves. A stop request cuts it short: nothing is logged, None.
        Under torchrun the episodes are dealt round the ranks (rank r plays episodes r, r + N, ...,
        with the seeds one process would give them) and gathered; rank 0 films and writes."""
        self.check_finite()
        inject("eval")
        episodes, size = self.cfg.eval_episodes, self.world.size
        mine = list(range(self.world.rank, episodes, size))
        video_path = str(self.run_dir / "videos" / f"eval_step_{step}.mp4") if video and self.world.is_main else None
        returns: np.ndarray | None = np.zeros(0)
        if mine:  # a policy may sample (DreamerV2's latents): its draws must not shift training's random stream
            with torch.random.fork_rng(devices=self._rng_devices()):
                returns = run_episodes(
                    on_host(policy),
                    self.cfg.env_id,
                    mine,
                    self.cfg.seed + EVAL_SEED_OFFSET,
                    video_path=video_path,
                    env_fn=self.env_fn,
                    should_stop=lambda: self.stopping(),
                    at_once=self.cfg.eval_envs,
                )
        parts = dist.gather(None if returns is None else returns.tolist())
        if any(part is None for part in parts):
            self.logger.print(f"evaluation at step {step} cut short by the stop request")
            return None
        returns = np.zeros(episodes)
        for rank, part in enumerate(parts):
            returns[rank::size] = part
        return self._conclude(step, returns, state_fn)

    def _conclude(self, step: int, returns: np.ndarray, state_fn: Callable[[], dict] | None) -> dict:
        """An evaluation's returns into the logs, eval.csv and (improved, given ``state_fn``: the
        policy state of ``step``) ``best.pt``; then the callback."""
        result = {
            "step": step,
            "mean_return": float(returns.mean()),
            "std_return": float(returns.std()),
            "episodes": len(returns),
        }
        improved = result["mean_return"] > self.best
        if improved:
            self.best = result["mean_return"]
        dist.agree(attempt(self._record_eval, result, state_fn if improved else None) if self.world.is_main else None)
        self.last = result
        if self.on_eval is not None and self.world.is_main:
            self.on_eval(dict(result))  # may raise to end the run (heron tune's pruning)
        return result

    # -- evaluations in a worker process (--eval-async; heron.runtime.evalworker) -------------------------
    def start_worker(self, policy: Any) -> None:
        """At the first step: start the worker, unless the policy evaluates on the accelerator
        (convolutions on pixels: ``Policy.on_host``), where the results are the accelerator's and its
        evaluations stay in this process."""
        if not getattr(policy, "evaluates_on_host", lambda: True)():
            if self.cfg.eval_async == "on":
                self.logger.print(
                    "heron: note: --eval-async: this policy evaluates on the GPU (its convolutions), "
                    "so its evaluations stay in the training process"
                )
            self.worker = None
            return
        assert self.worker is not None, "a run with --eval-async has a worker to start"
        try:
            self.worker.start()
        except (OSError, evalworker.WorkerLost) as exc:
            self._lose_worker(f"cannot start an evaluation worker ({exc})")

    def evaluate_elsewhere(self, step: int, state_fn: Callable[[], dict]) -> None:
        """The evaluation of ``step``, with a snapshot of the policy state, to the worker once the one
        before it has been concluded (one in flight at a time). A stop request while waiting for that
        one leaves both unconcluded: the checkpoint that follows keeps them."""
        self.check_finite()
        inject("eval")
        self.pending.append((step, evalworker.snapshot_bytes(state_fn())))  # first: an env crash reported
        self.pump(wait=True, keep=1)  # while waiting keeps it
        self.pump(wait=False)

    def pump(self, wait: bool, keep: int = 0) -> None:
        """Move the unconcluded evaluations along, in step order: conclude the first when its returns
        are in, send the next. ``wait``: until ``keep`` are left, or a stop request. Without a worker
        (it was lost, or a resumed run has none) they are played here."""
        while len(self.pending) > keep:
            step, blob = self.pending[0]
            if self.worker is None:
                try:
                    if self._conclude_here(step, blob) is None:
                        return  # cut short by a stop request: it stays, for the checkpoint
                except EnvCrashed:
                    self.pending.pop(0)  # as an evaluation here: the run ends on it, and a resume goes on
                    raise
                self.pending.pop(0)
                continue
            if not self.sent:
                if not self.worker.started_up(0.1 if wait else 0.0):
                    if not wait or self.stopping():
                        return
                    continue
                try:
                    self.worker.submit(step, blob)
                except evalworker.WorkerLost as exc:
                    self._lose_worker(str(exc))
                    continue
                self.sent = True
            if not self.worker.ready(0.1 if wait else 0.0):
                if not wait or self.stopping():
                    return
                continue
            try:
                returns = self.worker.receive()
            except evalworker.WorkerLost as exc:
                self._lose_worker(str(exc))  # its evaluation is played here, next time round
                continue
            except EnvCrashed:
                self.pending.pop(0)  # as an evaluation here: the run ends on it (a checkpoint of the last step)
                self.sent = False
                raise
            self.pending.pop(0)
            self.sent = False
            self._conclude(step, np.asarray(returns, np.float64), partial(evalworker.load_snapshot, blob))

    def _lose_worker(self, reason: str) -> None:
        self.logger.warn(f"{reason}; evaluations run in the training process from now on")
        if self.worker is not None:
            self.worker.close()
        self.worker, self.sent = None, False

    def _conclude_here(self, step: int, blob: bytes) -> dict | None:
        """The evaluation of a snapshot, played in this process; None when a stop request cut it short."""
        if self.stopping():
            return None
        state = evalworker.load_snapshot(blob)
        with torch.random.fork_rng(devices=self._rng_devices()):  # building the policy draws its initial weights
            returns = evalworker.play(self.module, self.cfg, state, self.device, self.env_fn, lambda: self.stopping())
        if returns is None:
            self.logger.print(f"evaluation at step {step} cut short by the stop request")
            return None
        return self._conclude(step, returns, lambda: state)

    def _rng_devices(self) -> list[int]:
        return [self.device.index or 0] if self.device.type == "cuda" else []

    def _record_eval(self, result: dict, state_fn: Callable[[], dict] | None) -> None:
        """Rank 0: the evaluation into the logs and eval.csv, and ``best.pt`` (given ``state_fn``)."""
        step = result["step"]
        self.logger.log(step, {"eval/mean_return": result["mean_return"], "eval/std_return": result["std_return"]})
        path = self.run_dir / "eval.csv"
        new = not path.exists()
        try:
            with open(path, "a", newline="") as f:
                w = csv.writer(f)
                if new:
                    w.writerow(EVAL_HEADER)
                w.writerow(
                    [step, result["mean_return"], result["std_return"], result["episodes"], f"{time.time():.3f}"]
                )
        except OSError as exc:
            raise WriteFailed(f"cannot write {path}: {exc.strerror or exc}") from None
        if state_fn is not None:
            ckpt.save_atomic(
                {**state_fn(), "step": step, "best_eval": self.best, "algo": self.algo},
                self.ckpt_dir / "best.pt",
                "best",
            )
        self.logger.print(
            f"eval @ {step}: {result['mean_return']:.1f} +- {result['std_return']:.1f} "
            f"over {result['episodes']} episodes"
        )

    def film(self, step: int, policy: Any) -> None:
        """One episode on video (--capture-video), where the final evaluation ran at this step already."""
        path = self.run_dir / "videos" / f"eval_step_{step}.mp4"
        run_episodes(
            on_host(policy),
            self.cfg.env_id,
            1,
            self.cfg.seed + EVAL_SEED_OFFSET,
            video_path=str(path),
            env_fn=self.env_fn,
            should_stop=lambda: self.stopping(),
        )
