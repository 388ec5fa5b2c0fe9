"""Evaluations in a worker process while training goes on (``--eval-async``).

A periodic evaluation plays ``--eval-episodes`` whole episodes on the CPU. On a GPU that is where
the time goes: PPO's evaluation of 10 HalfCheetah episodes takes a large share of the time it
spends training the 10,000 steps between two evaluations (docs/benchmarks/speed.md, "Evaluation
cost"). With a spare core, a worker process plays them instead, from a snapshot of the policy's
state at the evaluation's step, and the training loop goes on.

What stays as it was in this process:

- The results. The worker builds the policy from the snapshot with the algorithm's
  ``load_policy`` (what ``heron eval`` does with a checkpoint) and plays the same episodes from the
  same seeds, so eval.csv, ``best.pt`` (the snapshot, written when the result arrives) and the
  logs hold what an evaluation in this process gives. Only the time a row is written differs.
  (The worker acts with one thread: a policy on torch's path, recurrent or convolutional, may
  round differently in the last bits than in a process with more threads, as any change of the
  thread count may.)
- Exact resume. One evaluation is in flight at a time; the next waits for it. Checkpoints do not
  wait (but the last step's): one written while evaluations are unconcluded keeps their steps and
  policy states (``eval_pending``), and a resumed run plays them, in step order, after dropping any
  rows of them that reached the logs before the run ended. A stop request while an evaluation is
  awaited ends the wait, and the evaluations are kept the same way (up to two: the awaited one and
  the new one). A run stopped at its last step with evaluations kept can be resumed to play them.
- Faults. An env that crashes in the worker ends the run as it would here (EnvCrashed, with a
  checkpoint of the last complete step). A worker that cannot set up (import heron, make the
  env), does not start within START_SECONDS or dies is reported once, with its reason, and its
  evaluations and every later one run in this process.

The worker is a fresh interpreter (``python -c BOOT``), not a fork: forking a process that holds
CUDA and OpenMP thread pools is unsafe, and spawning through multiprocessing would import the
user's main script again. It talks over a socket pair, keeps one torch thread, runs in its own
session and ignores SIGINT and SIGTERM (a stop request is the training process's, and that process
ends it), and dies with its parent.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import os
import pickle
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

import torch

from heron.errors import EnvCrashed, first_line
from heron.runtime.algorithm import Algorithm
from heron.runtime.faults import inject

START_SECONDS = 120.0  # a worker that has not said it is ready by then is given up (imports on a slow disk)


def snapshot_bytes(state: dict) -> bytes:
    """A policy state as bytes (``torch.save``): a copy that the training's next in-place update
    cannot change, and that crosses the socket without torch's shared-memory pickling."""
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def load_snapshot(blob: bytes) -> dict:
    return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=False)


class EvalWorker:
    """The training side. ``start`` the process (it replies "ready" once it has imported heron and
    resolved the env), ``submit`` an evaluation once ``started_up``, then ``ready``/``receive`` its
    returns. ``receive`` returns the episode returns (a list), raises EnvCrashed for an env that
    crashed in the worker, and raises ``WorkerLost`` with the reason when the worker failed: it
    could not set up (the reason it gave), died, or did not start within START_SECONDS."""

    def __init__(self, module: Algorithm, cfg: Any, env_spec: Any = None):
        self.module, self.cfg, self.env_spec = module, cfg, env_spec
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.set_up = False  # its "ready" has come
        self.started_at = 0.0
        self._held: tuple | None = None  # a reply read ahead (by ready()), for receive()

    def start(self) -> None:
        ours, theirs = socket.socketpair()
        # one thread each for torch and numpy's BLAS: the worker keeps to its own core; the parent's
        # import path (a notebook's sys.path.insert); a flag an env may read to know where it runs
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "HERON_EVAL_PATH": json.dumps(sys.path),
            "HERON_EVAL_WORKER": "1",
        }
        try:
            # its own session: a Ctrl-C or a signal to the training's process group does not reach it
            # (the training process ends it); the parent-death signal is set before the heavy imports
            self.proc = subprocess.Popen(
                [sys.executable, "-c", BOOT.format(fd=theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self.started_at = time.monotonic()
        spec = None
        if self.env_spec is not None:
            try:
                spec = pickle.dumps(self.env_spec)
            except Exception:  # a closure's entry point: the worker resolves the id itself
                spec = None
        self._send(("setup", self.module.__name__, dataclasses.asdict(self.cfg), spec))

    def started_up(self, timeout: float = 0.0) -> bool:
        """Whether it can take an evaluation: it said "ready", or it failed (``receive`` says why)."""
        if not self.set_up:
            self._next(timeout)  # takes in its "ready", or holds its failure
        return self.set_up or self._held is not None

    def submit(self, step: int, blob: bytes) -> None:
        if self._held is None:  # else it failed already: receive() reports that
            self._send(("eval", step, blob))

    def ready(self, timeout: float = 0.0) -> bool:
        """Whether a reply is there to receive (within ``timeout`` seconds)."""
        return self._next(timeout) is not None

    def receive(self) -> list[float]:
        while (msg := self._next(1.0)) is None:
            pass
        self._held = None
        kind, payload = msg
        if kind == "returns":
            return payload
        if kind == "crashed":
            raise EnvCrashed(payload)
        if kind == "failed":
            raise WorkerLost(f"the evaluation worker failed: {payload}")
        raise WorkerLost(f"the evaluation worker ended ({payload})")

    def _next(self, timeout: float) -> tuple | None:
        """The next reply other than "ready" within ``timeout`` seconds (kept until received); a
        connection that broke, or a worker not up after START_SECONDS, as ("lost", reason)."""
        if self._held is not None:
            return self._held
        assert self.conn is not None, "started"
        try:
            while self.conn.poll(timeout):
                msg = pickle.loads(self.conn.recv_bytes())
                if msg[0] == "ready":
                    self.set_up, timeout = True, 0.0
                    continue
                self._held = msg
                return msg
        except (EOFError, OSError):
            self._held = ("lost", self._exit_reason())
            return self._held
        if not self.set_up and time.monotonic() - self.started_at > START_SECONDS:
            self._held = ("lost", f"not ready within {START_SECONDS:.0f} s of its start")
        return self._held

    def _send(self, msg: tuple) -> None:
        assert self.conn is not None, "started"
        try:
            self.conn.send_bytes(pickle.dumps(msg))
        except OSError as exc:
            raise WorkerLost(f"the evaluation worker ended ({self._exit_reason()})") from exc

    def _exit_reason(self) -> str:
        assert self.proc is not None, "started"
        try:
            code = self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            return "its connection broke"
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"

    def close(self) -> None:
        """Ask the worker to end; kill it if it is busy or hung (an evaluation in flight is dropped:
        a checkpoint keeps it as pending)."""
        if self.conn is not None:
            try:
                self.conn.send_bytes(pickle.dumps(("end",)))
            except OSError:
                pass
            self.conn.close()
            self.conn = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


class WorkerLost(Exception):
    """The evaluation worker could not do an evaluation (not the env's fault)."""


# -- the worker's side ---------------------------------------------------------------------------------
# Before anything heavy: the training process's import path (not python -c's current directory first),
# SIGINT and SIGTERM ignored (the training process's stop request; that process ends this one), and on
# Linux a SIGKILL when the training process dies, even by kill -9.
BOOT = """import json, os, signal, sys
sys.path[:] = json.loads(os.environ.pop("HERON_EVAL_PATH"))
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
try:
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except Exception:
    pass  # elsewhere the closed socket ends the worker at its next receive
from heron.runtime.evalworker import main
main({fd})
"""


def _setup(module_name: str, cfg_fields: dict, spec: bytes | None) -> tuple[Any, Any, Any]:
    import gymnasium as gym

    from heron.envs.ids import check_env_id, gym_env_id

    module = importlib.import_module(module_name)
    cfg = module.Config(**cfg_fields)
    env_spec = pickle.loads(spec) if spec is not None else None
    try:
        check_env_id(cfg.env_id)
    except Exception:
        if env_spec is None:
            raise
    if env_spec is not None and gym.registry.get(env_spec.id) != env_spec:
        # registered (or registered again) at run time in the training process, not by an import
        gym.registry[env_spec.id] = env_spec
    gym_env_id(cfg.env_id)
    return module, cfg, eval_env_fn(module, cfg)


def main(fd: int) -> None:
    torch.set_num_threads(1)
    conn = Connection(fd)
    module = cfg = env_fn = None
    broken: str | None = None  # why setting up failed: the answer to every evaluation
    while True:
        try:
            msg = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if msg[0] == "end":
            return
        reply: tuple
        if msg[0] == "setup":
            try:
                module, cfg, env_fn = _setup(*msg[1:])
                reply = ("ready",)
            except BaseException as exc:
                broken = f"setting up: {first_line(exc)}"
                reply = ("failed", broken)
        elif broken is not None:
            reply = ("failed", broken)
        else:
            try:
                inject("eval_worker")  # tests: HERON_FAULT=eval_worker@N:exit, the worker dying
                reply = ("returns", play(module, cfg, load_snapshot(msg[2]), "cpu", env_fn).tolist())
            except EnvCrashed as exc:
                reply = ("crashed", str(exc))
            except BaseException as exc:  # reported; the training process evaluates in its own stead
                reply = ("failed", first_line(exc))
        try:
            conn.send_bytes(pickle.dumps(reply))
        except OSError:
            return


def play(module: Any, cfg: Any, state: dict, device: Any, env_fn: Any, should_stop: Any = None) -> Any:
    """The run's evaluation of a policy state, wherever it is played (the worker, or the training
    process in its stead): the algorithm's ``load_policy``, as ``heron eval`` builds it, acting on the
    host, in the run's episodes from the run's seeds. The returns; None when ``should_stop`` cut it."""
    from heron.runtime.episodes import EVAL_SEED_OFFSET, evaluate

    policy = module.load_policy(cfg, state, device)
    return evaluate(
        policy.on_host(),
        cfg.env_id,
        cfg.eval_episodes,
        cfg.seed + EVAL_SEED_OFFSET,
        env_fn=env_fn,
        should_stop=should_stop,
        at_once=cfg.eval_envs,
    )


def algo_name(module: Algorithm) -> str:
    """The algorithm's name (``sac``) from its module (``heron.algos.sac``)."""
    return module.__name__.rsplit(".", 1)[-1]


def eval_env_fn(module: Algorithm, cfg: Any) -> Any:
    """The algorithm's own evaluation env factory ``f(render_mode) -> env`` (its wrapper stack), or
    None for heron's standard ``make_env``."""
    maker = getattr(module, "eval_env", None)
    return maker(cfg) if maker is not None else None


def periodic(cfg: Any) -> bool:
    """Whether the run has evaluations before its final one (a worker has something to overlap)."""
    return 0 < cfg.eval_every < cfg.total_steps


def unsupported(module: Algorithm, cfg: Any, distributed: bool) -> str | None:
    """Why this run's evaluations cannot move to a worker; None when they can."""
    from heron.envs.ids import is_callable_id

    if not getattr(module, "EVAL_IN_WORKER", False):
        return f"{algo_name(module)}'s evaluation acts on the training device and samples from its random stream"
    if distributed:
        return "under torchrun the ranks share each evaluation"
    if cfg.precision not in ("32", "tf32"):
        return f"the worker's policy is float32, and --precision {cfg.precision} evaluates in {cfg.precision}"
    if is_callable_id(cfg.env_id):
        return "the env is a callable that only this process knows (define it in a module to evaluate elsewhere)"
    if cfg.track:
        return "W&B takes a run's steps in order, and an evaluation from the worker lands after later steps"
    return None


def wanted(module: Algorithm, cfg: Any, distributed: bool, threads: int, on_gpu: bool) -> bool:
    """``--eval-async``: ``on`` where it applies (``check`` refused the rest before the run began).
    ``auto``: for a run that trains on a GPU (its steps leave the CPU idle but for the envs, and an
    evaluation is then a large share of the wall time) with a core that neither torch's threads, the
    async env workers nor other processes keep, so that the worker takes no time from training.
    Neither where the final evaluation is the only one."""
    from heron.runtime import cores

    if cfg.eval_async == "off" or not periodic(cfg) or unsupported(module, cfg, distributed) is not None:
        return False
    if cfg.eval_async == "on":
        return True
    if not on_gpu:
        return False
    taken = threads + cores.env_workers(cfg.num_envs, cfg.vector_mode) + cores.busy_cores(cores.others_now())
    return len(cores.usable_cpus()) > taken


def check(module: Algorithm, cfg: Any, distributed: bool) -> None:
    """``--eval-async on`` where it cannot apply: a one-line error before anything is written."""
    from heron.errors import HeronError

    if cfg.eval_async == "on" and (why := unsupported(module, cfg, distributed)) is not None:
        raise HeronError(f"--eval-async on cannot apply: {why}; use auto or off")
