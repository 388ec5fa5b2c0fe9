"""A run's lifecycle: opening (``Run.start`` a new run directory, ``Run.resume`` one at its latest
checkpoint), this rank's share under torchrun, the per-step cadences (logs, evaluations,
checkpoints, stop requests), the checkpoint itself, the end and the close.

An algorithm's ``train`` receives the Run and calls ``run.after_step`` after each vector step and
``run.finish`` at the end; it never touches paths itself. Around this module: the run directory
and its lock (``heron.runtime.rundir``), the process setup (``heron.runtime.setup``) and evaluations
(``heron.runtime.evaluation``).
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from heron.accel.precision import Precision
from heron.config import to_dict
from heron.errors import Diverged, Fault, HeronError, Interrupted, first_line, install_hint
from heron.ops import dist
from heron.runtime import checkpoint as ckpt
from heron.runtime import cores, evalworker
from heron.runtime.algorithm import Algorithm
from heron.runtime.evaluation import Evaluations, registered_spec
from heron.runtime.faults import DivergenceGuard, close_bounded, nonfinite_tensor, release
from heron.runtime.logger import METRICS_HEADER, Logger, NullLogger, truncate_csv
from heron.runtime.process import ProcessSettings
from heron.runtime.rundir import (
    EVAL_HEADER,
    RunLock,
    attempt,
    best_logged_eval,
    default_run_dir,
    drop_eval_rows,
    read_latest,
    read_shard,
    write_config,
)
from heron.runtime.setup import cuda_graphs_note, join, seed_everything, start_threads

FIRST_TIMED_CHECKPOINT = 60.0  # seconds; timed checkpoints then come at 2, 4, 8 min up to --checkpoint-minutes
CHECKPOINT_SHARE = 0.02  # timed checkpoints never take more than this share of the wall time


@dataclass
class Run:
    algo: str
    cfg: Any
    run_dir: Path
    device: torch.device
    logger: Logger | NullLogger
    module: Algorithm  # the algorithm (heron.algos.<name>)
    precision: Precision  # --precision: autocast layers, optimizer steps, the loss scale
    guard: DivergenceGuard  # non-finite metrics, watched on the device
    world: dist.World = field(default_factory=dist.World)  # this process's rank in a torchrun job
    lock: RunLock | None = None
    governor: cores.ThreadGovernor | None = None  # --torch-threads 0: the thread count follows the load
    evaluations: Evaluations = field(init=False)  # the run's evaluations, made with it (__post_init__)
    resume_state: dict | None = None  # the latest checkpoint's state when resuming
    resume_buffer: dict | None = None
    last_checkpoint_step: int = -1
    wall_start: float = field(default_factory=time.time)
    stop_requested: bool = False
    step: int = 0  # the last env step whose work is complete (after_step)
    state_fn: Callable[[], tuple[dict, dict | None]] | None = None  # (state, buffer state) at that step
    owned: list = field(default_factory=list)  # envs closed (bounded) when the run closes
    last_checkpoint_time: float = field(default_factory=time.monotonic)
    checkpoint_cost: float = 0.0  # seconds the latest checkpoint took
    checkpoints_written: int = 0
    synced: dict = field(default_factory=dict)  # modules that must be identical on every rank
    finished: bool = False
    _old_handlers: dict = field(default_factory=dict)
    process_settings: ProcessSettings | None = None  # the caller's, restored by close()

    def __post_init__(self) -> None:
        # what the evaluations need of the run, given once: its options and place, the stop request
        # and the divergence check (read when they are needed)
        self.evaluations = Evaluations(
            self.algo,
            self.cfg,
            self.run_dir,
            self.device,
            self.world,
            self.logger,
            self.module,
            stopping=lambda: self.stop_requested,
            check_finite=self.check_finite,
            env_fn=evalworker.eval_env_fn(self.module, self.cfg),
        )

    @property
    def ckpt_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    # -- opening ----------------------------------------------------------------------------------
    @classmethod
    def start(cls, module: Algorithm, cfg: Any) -> Run:
        """A new run directory for the algorithm ``module`` (``heron.algos.<name>``). Under torchrun
        rank 0 makes and locks it, and every rank learns its name (or rank 0's reason for refusing)
        before any of them trains."""
        algo = evalworker.algo_name(module)
        world, device = join(cfg)
        run_dir = Path(cfg.run_dir) if cfg.run_dir else default_run_dir(algo, cfg)
        lock, problem = None, None
        if world.is_main:
            try:
                lock = cls._claim(algo, cfg, run_dir)
            except (HeronError, Fault) as exc:
                problem = exc
        try:
            dist.agree(problem)
            run_dir = Path(dist.gather(str(run_dir))[0])
            cfg = type(cfg)(**{**vars(cfg), "run_dir": str(run_dir)})
            return cls._open(module, cfg, run_dir, 0, lock, world, device)
        except BaseException:
            if lock is not None:
                lock.release()
            dist.close()
            raise

    @staticmethod
    def _claim(algo: str, cfg: Any, run_dir: Path) -> RunLock:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HeronError(f"cannot create run directory {run_dir}: {exc.strerror or exc}") from None
        lock = RunLock(run_dir)
        lock.acquire()
        try:
            if ckpt.step_checkpoints(run_dir / "checkpoints"):
                raise HeronError(
                    f"{run_dir} already holds checkpoints; continue it with --resume {run_dir} "
                    "or choose another --run-dir"
                )
            for name, header in (("metrics.csv", METRICS_HEADER), ("eval.csv", EVAL_HEADER)):
                truncate_csv(run_dir / name, -1, header)  # rows of an earlier start that never checkpointed
            write_config(run_dir, algo, type(cfg)(**{**vars(cfg), "run_dir": str(run_dir)}))
            return lock
        except BaseException:
            lock.release()
            raise

    @classmethod
    def resume(cls, module: Algorithm, cfg: Any, spaces: dict | None = None) -> Run:
        """Reopen a run at its latest checkpoint. Everything is checked (the lock, the checkpoint's
        algorithm, step, world size and, given the env's ``spaces``, that they match the saved ones)
        before anything in the run directory changes. Under torchrun every rank checks the commit
        itself before the process group forms (a different world size ends every rank with exit 2,
        no collective started), then reads its own shard."""
        algo = evalworker.algo_name(module)
        run_dir = Path(cfg.run_dir)
        world = dist.from_env()
        lock = RunLock(run_dir) if world.is_main else None
        problem: HeronError | Fault | None = None
        if lock is not None:
            try:
                lock.acquire()
            except HeronError as exc:
                if not world.distributed:
                    raise
                lock, problem = None, exc  # told to every rank once the group has formed
        try:
            latest, state = read_latest(run_dir, algo, cfg, spaces, world)
            step = int(state["step"])
            world, device = join(cfg)
            buffer_state = None
            try:
                if world.is_main and problem is None:
                    buffer_state = (
                        ckpt.load(ckpt.buffer_path(latest), mmap=True) if ckpt.buffer_path(latest).exists() else None
                    )
                    ckpt.remove_leftovers(run_dir / "checkpoints")
                    truncate_csv(run_dir / "eval.csv", step, EVAL_HEADER)
                    # evaluations the checkpoint keeps are played again: rows of them that landed go
                    drop_eval_rows(run_dir, {int(p["step"]) for p in state.get("eval_pending") or []})
                    write_config(run_dir, algo, cfg)  # records a new --total-steps target
                elif not world.is_main:
                    state, buffer_state = read_shard(run_dir, step, world.rank)
            except (HeronError, Fault) as exc:
                problem = exc
            dist.agree(problem)
            run = cls._open(module, cfg, run_dir, step, lock, world, device)
        except BaseException:
            if lock is not None:
                lock.release()
            dist.close()
            raise
        run.resume_state, run.resume_buffer = state, buffer_state
        run.precision.load_state_dict(state.get("precision"))
        # the final evaluation comes after the final checkpoint: its score is in eval.csv only
        logged = best_logged_eval(run_dir / "eval.csv") if world.is_main else -math.inf
        evaluations = run.evaluations
        evaluations.best = max([float(state.get("best_eval", -math.inf)), *dist.gather(logged)])
        run.last_checkpoint_step = run.step = step
        evaluations.pending = [
            (int(p["step"]), evalworker.snapshot_bytes(p["state"])) for p in state.get("eval_pending") or []
        ]
        evaluations.in_checkpoint = bool(evaluations.pending)
        return run

    @classmethod
    def _open(
        cls,
        module: Algorithm,
        cfg: Any,
        run_dir: Path,
        start_step: int,
        lock: RunLock | None,
        world: dist.World,
        device: torch.device,
    ) -> Run:
        settings = ProcessSettings.take()  # put back by close(): a run called from Python leaves them as found
        try:
            run = cls._setup(module, cfg, run_dir, start_step, lock, world, device)
        except BaseException:
            settings.restore()
            raise
        run.process_settings = settings
        return run

    @classmethod
    def _setup(
        cls,
        module: Algorithm,
        cfg: Any,
        run_dir: Path,
        start_step: int,
        lock: RunLock | None,
        world: dist.World,
        device: torch.device,
    ) -> Run:
        algo = evalworker.algo_name(module)
        thread_note, governor = start_threads(cfg, cfg.num_envs // world.size, world)
        seed_everything(cfg.seed, cfg.torch_deterministic)  # the same on every rank: identical initialisation
        precision = Precision(cfg.precision, device, cfg.torch_deterministic)
        # a skipped 16-mixed step (the loss scale too high) has an infinite gradient norm: not a divergence
        guard = DivergenceGuard(device, ignore=("grads/",) if precision.scaler is not None else ())
        if not world.is_main:
            run = cls(
                algo,
                cfg,
                run_dir,
                device,
                NullLogger(),
                lock=None,
                guard=guard,
                world=world,
                precision=precision,
                governor=governor,
                module=module,
            )
            run._catch_signals()
            return run
        wandb_run = None
        if cfg.track:
            try:
                import wandb
            except ImportError:
                raise HeronError(f"--track needs wandb: {install_hint('wandb')}") from None
            wandb_run = wandb.init(
                project=cfg.wandb_project,
                config={"algo": algo, **to_dict(cfg)},
                name=run_dir.name,
                dir=str(run_dir),
                sync_tensorboard=False,
                resume="allow",
                id=run_dir.name.replace("/", "_"),
            )
        logger = Logger(
            run_dir,
            cfg.total_steps,
            start_step=start_step,
            progress=cfg.progress,
            wandb_run=wandb_run,
            description=f"{algo} {cfg.env_id}",
            defer_episodes=world.distributed,
        )
        run = cls(
            algo,
            cfg,
            run_dir,
            device,
            logger,
            lock=lock,
            guard=guard,
            world=world,
            precision=precision,
            governor=governor,
            module=module,
        )
        if evalworker.wanted(module, cfg, world.distributed, torch.get_num_threads(), device.type == "cuda"):
            # started at the first step
            run.evaluations.worker = evalworker.EvalWorker(module, cfg, registered_spec(cfg.env_id))
        for note in (thread_note, cuda_graphs_note(cfg, device, world)):
            if note is not None:
                logger.print(f"heron: note: {note}")  # no action asked for: quiet under --progress none
        if (slow := precision.slow_warning()) is not None:
            logger.warn(slow)
        run._catch_signals()
        return run

    # -- this rank's share (torchrun) ---------------------------------------------------------------
    def local(self, n: int) -> int:
        """This rank's share of a global count (--num-envs, --batch-size, --buffer-size; checked to divide)."""
        return n // self.world.size

    def env_seed(self, local_envs: int) -> int:
        """The seed of this rank's first env: rank r's envs take seeds seed + r*n ... seed + r*n + n - 1,
        so the ranks together step the very envs one process with all of them would."""
        return self.cfg.seed + self.world.rank * local_envs

    def rank_seed(self) -> int:
        """The seed of this rank's own sampling streams (``dist.rank_seed``: --seed itself on rank 0)."""
        return dist.rank_seed(self.cfg.seed, self.world)

    def sync_start(self, **modules: torch.nn.Module) -> None:
        """The networks are built: every rank takes rank 0's parameters and buffers (they were
        initialised from the same seed; this makes sure), registers them for the check at every
        checkpoint, and from here draws from its own random streams (a rank other than 0
        reseeds), so that the ranks' exploration and minibatches differ."""
        self.synced.update(modules)
        if not self.world.distributed:
            return
        for module in modules.values():
            dist.broadcast_state(module)
        if not self.world.is_main:
            seed_everything(self.rank_seed(), self.cfg.torch_deterministic)

    def _catch_signals(self) -> None:
        """Ctrl-C or SIGTERM (a preempted job) asks the loop to stop at the end of the current step,
        where it writes a checkpoint to resume from; a second Ctrl-C interrupts at once."""
        if threading.current_thread() is not threading.main_thread():
            return

        def request_stop(signum, frame):
            if self.stop_requested and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self.stop_requested = True
            release()  # a test's held fault point goes on

        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old_handlers[sig] = signal.signal(sig, request_stop)

    # -- during training --------------------------------------------------------------------------
    def due(self, step: int, prev_step: int, every: int) -> bool:
        """True when a multiple of ``every`` lies in (prev_step, step]."""
        return every > 0 and step // every > prev_step // every

    def own(self, envs: Any) -> Any:
        """Envs the run closes when it ends, however it ends, with a bounded wait."""
        self.owned.append(envs)
        return envs

    def watch(self, metrics: dict, step: int) -> dict:
        """An update's metrics, watched for NaN/inf on the device (no host sync); returns them."""
        return self.guard.watch(metrics, step)

    def check_finite(self) -> None:
        """Raise Diverged if an update since the start went non-finite (one host sync: called where
        the run syncs anyway, at logging, evaluations and checkpoints). Under torchrun on every
        rank, with the first rank's finding."""
        mine = self.guard.describe() if self.guard.tripped() else None
        found = [(r, d) for r, d in enumerate(dist.gather(mine)) if d is not None]
        if found:
            rank, what = found[0]
            where = f" on rank {rank}" if self.world.distributed else ""
            raise Diverged(
                f"{self.algo} diverged{where}: {what}; stopped before writing anything non-finite; {self.kept()}"
            )

    def gather_episodes(self) -> None:
        """Under torchrun: every rank's finished episodes reach rank 0's logs, in step order."""
        if not self.world.distributed:
            return
        mine, self.logger.pending = self.logger.pending, []
        everyone = sorted((e for part in dist.gather(mine) for e in part), key=lambda e: e[0])
        if isinstance(self.logger, Logger):  # rank 0's
            for step, ret, length in everyone:
                self.logger.log_episode(step, ret, length)

    def kept(self) -> str:
        found = ckpt.step_checkpoints(self.ckpt_dir)
        if not found:
            return "no checkpoint was written"
        step, latest = found[-1]
        return f"the latest checkpoint is step {step} ({latest})"

    def after_step(
        self,
        step: int,
        prev_step: int,
        metrics: dict,
        extra: dict,
        policy: Any,
        policy_state: Callable[[], dict],
        full_state: Callable[[], tuple[dict, dict | None]],
    ) -> None:
        """After each vector step (PPO: each iteration): losses and ``extra`` every --log-every,
        evaluation every --eval-every, a checkpoint every --checkpoint-every env steps or when the
        timed cadence is due (``timed_checkpoint_due``), a stop request, the progress display.
        ``full_state() -> (state, buffer state)`` is what a checkpoint of this step holds."""
        self.step, self.state_fn = step, full_state  # an env crash checkpoints here (save_after_crash)
        cfg = self.cfg
        if self.due(step, prev_step, cfg.log_every):
            self.gather_episodes()
            if metrics:
                self.check_finite()
                metrics = dist.mean_metrics(metrics)  # the global batch's losses
                self.logger.log(step, {**metrics, "charts/SPS": self.logger.sps(step), **extra})
        evaluations = self.evaluations
        if evaluations.worker is not None and evaluations.worker.proc is None:
            evaluations.start_worker(policy)
        if self.due(step, prev_step, cfg.eval_every):
            if evaluations.worker is not None:
                evaluations.evaluate_elsewhere(step, policy_state)
            else:
                evaluations.pump(wait=True)  # a resumed run's kept evaluations come first
                evaluations.evaluate(step, policy, policy_state)
        elif evaluations.pending:  # conclude what has landed (a resumed run: send what its checkpoint kept)
            evaluations.pump(wait=False)
        if evaluations.pending and step >= cfg.total_steps:  # the last step: its checkpoint waits for them
            evaluations.pump(wait=True)
        timed = self.timed_checkpoint_due()
        if self.world.distributed:  # one collective decides both, so every rank acts at the same step
            timed, self.stop_requested = dist.any_rank(timed, self.stop_requested)
        if self.due(step, prev_step, cfg.checkpoint_every) or timed:
            self.checkpoint(step, *full_state())
        self.stop_if_requested(step, full_state)
        if self.governor is not None and (note := self.governor.poll()) is not None:
            self.logger.warn(note)
        self.logger.progress(step)

    def timed_checkpoint_due(self) -> bool:
        """--checkpoint-minutes M: the first timed checkpoint after a minute, then 2, 4, 8, ... minutes
        up to M between checkpoints (a kill early in a run loses little; later, writing a large
        replay buffer costs little), and never more than CHECKPOINT_SHARE of the time."""
        if self.cfg.checkpoint_minutes <= 0:
            return False
        interval = min(self.cfg.checkpoint_minutes * 60.0, FIRST_TIMED_CHECKPOINT * 2**self.checkpoints_written)
        interval = max(interval, self.checkpoint_cost / CHECKPOINT_SHARE)
        return time.monotonic() - self.last_checkpoint_time >= interval

    def checkpoint(self, step: int, state: dict, buffer_state: dict | None = None) -> None:
        """Under torchrun every rank calls this at the same step: the ranks must agree (finite,
        parameters and statistics identical: ``dist.check_in_sync``), every rank other than 0
        writes its shard, and once all have landed rank 0 writes the state file that commits the
        checkpoint (``heron.runtime.checkpoint``)."""
        self.check_finite()
        bad = nonfinite_tensor(state)
        dist.agree(
            Diverged(f"{self.algo} diverged: {bad} is not finite at env step {step}; not written; {self.kept()}")
            if bad
            else None
        )
        dist.check_in_sync(self.synced)
        self.gather_episodes()
        # evaluations not concluded (--eval-async) are not waited for: the checkpoint keeps them, and a
        # resumed run plays them again (best_eval here is that of the evaluations concluded)
        evaluations = self.evaluations
        pending = [{"step": s, "state": evalworker.load_snapshot(blob)} for s, blob in evaluations.pending] or None
        evaluations.in_checkpoint = bool(pending)
        t0 = time.monotonic()
        state = {
            **state,
            "step": step,
            "best_eval": evaluations.best,
            "algo": self.algo,
            "world_size": self.world.size,
            "precision": self.precision.state_dict(),
            "eval_pending": pending,
        }
        self.logger.flush()  # logs on disk cover at least what the checkpoint covers
        if self.world.distributed:  # every other rank's shard first, then rank 0's commit
            dist.agree(
                None
                if self.world.is_main
                else attempt(ckpt.save_part, ckpt.state_path(self.ckpt_dir, step, self.world.rank), state, buffer_state)
            )
        dist.agree(
            attempt(ckpt.save_checkpoint, self.ckpt_dir, step, state, buffer_state, keep=self.cfg.keep_checkpoints)
            if self.world.is_main
            else None
        )
        self.last_checkpoint_step = step
        self.last_checkpoint_time = time.monotonic()
        self.checkpoint_cost = self.last_checkpoint_time - t0
        self.checkpoints_written += 1
        if os.environ.get("HERON_CRASH_AFTER_CHECKPOINT") == str(step):  # fault injection for resume tests
            os._exit(17)

    def save_after_crash(self) -> str:
        """An env crashed: checkpoint the last complete step if nothing has yet (the learner's state
        is that step's: the crash came before the next step changed it). Returns what was kept.
        Under torchrun the other ranks are elsewhere in the step, not at a checkpoint: the job ends
        at its latest checkpoint."""
        hint = f"; continue with: heron train --resume {self.run_dir}" if self.last_checkpoint_step >= 0 else ""
        if self.world.distributed:
            return f"on rank {self.world.rank}; {self.kept()}{hint}"
        if self.state_fn is None or self.step <= self.last_checkpoint_step:
            return self.kept() + hint
        try:
            self.checkpoint(self.step, *self.state_fn())
        except Exception as exc:
            return f"could not write a checkpoint ({first_line(exc)}); {self.kept()}"
        return f"checkpoint saved at step {self.step}; continue with: heron train --resume {self.run_dir}"

    def finish(
        self, step: int, policy: Any, state_fn: Callable[[], dict], full_state: Callable[[], tuple[dict, dict | None]]
    ) -> dict:
        """End of training: the final checkpoint, then a final deterministic evaluation (with video
        when --capture-video) unless one just ran at this step. Returns the run's summary."""
        self.step, self.state_fn = step, full_state
        evaluations = self.evaluations
        if evaluations.worker is not None and evaluations.worker.proc is None and evaluations.pending:
            evaluations.start_worker(policy)  # resumed at its last step to play the evaluations it kept
        evaluations.pump(wait=True)  # all of them (a stop ends the wait: the checkpoint below keeps them)
        self.gather_episodes()
        if step % self.cfg.log_every:  # the last multiple of --log-every is behind us
            self.logger.log(step, {"charts/SPS": self.logger.sps(step)})
        if self.last_checkpoint_step != step or evaluations.in_checkpoint:
            self.checkpoint(step, *full_state())  # first: a stop request during the evaluation loses nothing
        result = evaluations.last
        if result is None or result["step"] != step:
            result = evaluations.evaluate(step, policy, state_fn, video=self.cfg.capture_video)
        elif self.cfg.capture_video and self.world.is_main:  # evaluated at this step already: film one episode
            evaluations.film(step, policy)
        if evaluations.pending:
            steps = ", ".join(str(s) for s, _ in evaluations.pending)
            raise Interrupted(
                f"stopped before the evaluations of steps {steps} "
                f"were played; the final checkpoint (step {step}) keeps them; play them with: heron "
                f"train --resume {self.run_dir}"
            )
        if result is None:
            raise Interrupted(
                f"stopped during the final evaluation; the final checkpoint (step {step}) is saved; "
                f"evaluate it with: heron eval {self.run_dir}"
            )
        self.finished = True
        self.logger.print(
            f"done: {step} steps in {(time.time() - self.wall_start) / 60:.1f} min; final "
            f"evaluation {result['mean_return']:.1f} +- {result['std_return']:.1f} "
            f"({result['episodes']} episodes); run directory {self.run_dir}"
        )
        return {
            "run_dir": str(self.run_dir),
            "step": step,
            "env_id": self.cfg.env_id,
            "mean_return": result["mean_return"],
            "std_return": result["std_return"],
            "episodes": result["episodes"],
            "best_eval": evaluations.best,
        }

    def stop_if_requested(self, step: int, full_state: Callable[[], tuple[dict, dict | None]]) -> None:
        if not self.stop_requested:
            return
        if self.last_checkpoint_step != step:
            self.checkpoint(step, *full_state())
        raise Interrupted(
            f"stopped at step {step}; checkpoint saved; continue with: heron train --resume {self.run_dir}"
        )

    def close(self) -> None:
        """However the run ended: logs closed, the lock released, then the envs closed with a bounded
        wait (a hung worker or renderer cannot keep the process alive); then signals restored, so a
        second Ctrl-C still interrupts a slow close, and the caller's thread count and torch flags
        (``heron.runtime.process``)."""
        self.logger.close()
        if self.lock is not None:
            self.lock.release()
        if self.evaluations.worker is not None:
            self.evaluations.worker.close()
            self.evaluations.worker, self.evaluations.sent = None, False
        for envs in reversed(self.owned):
            try:
                close_bounded(envs.close, f"the {self.cfg.env_id} envs")
            except Exception:
                pass  # a crashed worker's pipe: nothing left to close
        self.owned.clear()
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()
        if self.process_settings is not None:
            self.process_settings.restore()
            self.process_settings = None
        if self.finished:  # after a fault another rank may be gone or elsewhere: the process exit ends it
            dist.close(together=True)
