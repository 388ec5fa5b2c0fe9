"""Evaluations in a worker process while training goes on (``--eval-async``).

A periodic evaluation plays ``--eval-episodes`` whole episodes on the CPU. On a GPU that is where
the time goes: PPO trains 10,000 HalfCheetah steps in about 2 s on an H200 and its evaluation of
10 episodes takes about 1 s of CPU. With a spare core, a worker process plays them instead, from a
snapshot of the policy's state at the evaluation's step, and the training loop goes on.

What stays as it was in this process:

- The results. The worker builds the policy from the snapshot with the algorithm's
  ``load_policy`` (what ``heron eval`` does with a checkpoint) and plays the same episodes from the
  same seeds, so eval.csv, ``best.pt`` (the snapshot, written when the result arrives) and the
  logs hold what an evaluation in this process gives. Only the time a row is written differs.
- Exact resume. One evaluation is in flight at a time. A checkpoint waits for one of an earlier
  step; one of the checkpoint's own step is recorded in it as ``eval_pending``, and a resumed run
  plays it again from the checkpoint's own policy state, after dropping any row of it that reached
  eval.csv before the run ended.
- Faults. An env that crashes in the worker ends the run as it would here (EnvCrashed, with a
  checkpoint of the last complete step). A worker that cannot start, cannot make the env, or dies
  is reported once, and its evaluation and every later one run in this process.

The worker is a fresh interpreter (``python -c "...evalworker import main; main(FD)"``), not a fork: forking a
process that holds CUDA and OpenMP thread pools is unsafe, and spawning through multiprocessing
would import the user's main script again. It talks over a socket pair, keeps one torch thread,
ignores SIGINT and SIGTERM (the training process's stop request: that process ends it) and dies with
its parent.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any

import torch

from heron.core.faults import EnvCrashed, first_line, inject

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
    """The training side: ``submit`` an evaluation, ``ready``/``receive`` its returns.

    ``receive`` returns the episode returns (a list), raises EnvCrashed for an env that crashed in
    the worker, and raises ``WorkerLost`` (with the reason) when the worker itself failed."""

    def __init__(self, algo: str, cfg: Any, env_spec: Any = None):
        self.algo, self.cfg, self.env_spec = algo, cfg, env_spec
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None

    def start(self) -> None:
        ours, theirs = socket.socketpair()
        # one thread each for torch and numpy's BLAS: the worker keeps to its own core
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "HERON_EVAL_WORKER": "1"}  # an env may ask where it runs
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", f"from heron.core.evalworker import main; "
                                          f"main({theirs.fileno()})"],
                                         pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        spec = None
        if self.env_spec is not None:
            try:
                spec = pickle.dumps(self.env_spec)
            except Exception:  # a closure's entry point: the worker resolves the id itself
                spec = None
        self._send(("setup", self.algo, dataclasses.asdict(self.cfg), list(sys.path), spec))

    def submit(self, step: int, blob: bytes) -> None:
        if self.proc is None:
            self.start()
        self._send(("eval", step, blob))

    def ready(self, timeout: float = 0.0) -> bool:
        """Whether the reply is there (within ``timeout`` seconds)."""
        try:
            return self.conn is not None and self.conn.poll(timeout)
        except OSError:
            return True  # receive() reports it

    def receive(self) -> list[float]:
        try:
            kind, payload = pickle.loads(self.conn.recv_bytes())
        except (EOFError, OSError) as exc:
            raise WorkerLost(f"the evaluation worker ended ({self._exit_reason()})") from exc
        if kind == "returns":
            return payload
        if kind == "crashed":
            raise EnvCrashed(payload)
        raise WorkerLost(f"the evaluation worker failed: {payload}")

    def _send(self, msg: tuple) -> None:
        try:
            self.conn.send_bytes(pickle.dumps(msg))
        except OSError as exc:
            raise WorkerLost(f"the evaluation worker ended ({self._exit_reason()})") from exc

    def _exit_reason(self) -> str:
        if self.proc is None:
            return "never started"
        try:
            code = self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            return "its connection broke"
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"

    def close(self) -> None:
        """Ask the worker to end; kill it if it is busy or hung (an evaluation in flight is
        discarded: a checkpoint records it as pending)."""
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
def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the training process dies, even by kill -9."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass  # elsewhere the closed socket ends the worker at its next receive


def _setup(algo: str, cfg_fields: dict, path: list[str], spec: bytes | None) -> tuple[Any, Any, Any]:
    sys.path[:] = path
    from heron import registry
    from heron.core.envs import check_env_id

    module = registry.get(algo)
    cfg = module.Config(**cfg_fields)
    try:
        check_env_id(cfg.env_id)
    except Exception:
        if spec is None:
            raise
        import gymnasium as gym

        env_spec = pickle.loads(spec)  # registered at run time in the training process (not by an import)
        gym.register(**{f.name: getattr(env_spec, f.name) for f in dataclasses.fields(env_spec) if f.init})
    from heron.api import eval_env_fn

    return module, cfg, eval_env_fn(module, cfg)


def main(fd: int) -> None:
    # Ctrl-C and a SIGTERM to the process group are the training process's stop request: it decides
    # what becomes of the evaluation in flight (waited for, or recorded as pending), then ends this one
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent()
    torch.set_num_threads(1)
    conn = Connection(fd)
    module = cfg = env_fn = None
    while True:
        try:
            msg = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if msg[0] == "end":
            return
        try:
            if msg[0] == "setup":
                module, cfg, env_fn = _setup(*msg[1:])
                continue
            from heron.core.envs import evaluate
            from heron.core.run import EVAL_SEED_OFFSET

            _, step, blob = msg
            inject("eval_worker")  # tests: HERON_FAULT=eval_worker@N:exit, the worker dying
            policy = module.load_policy(cfg, load_snapshot(blob), "cpu")
            returns = evaluate(policy.on_host(), cfg.env_id, cfg.eval_episodes, cfg.seed + EVAL_SEED_OFFSET,
                               env_fn=env_fn, at_once=cfg.eval_envs)
            reply: tuple = ("returns", returns.tolist())
        except EnvCrashed as exc:
            reply = ("crashed", str(exc))
        except BaseException as exc:  # reported; the training process evaluates in its own stead
            reply = ("failed", first_line(exc))
        try:
            conn.send_bytes(pickle.dumps(reply))
        except OSError:
            return
        if reply[0] == "failed" and msg[0] == "setup":
            return


def unsupported(algo: str, cfg: Any, distributed: bool) -> str | None:
    """Why this run's evaluations cannot move to a worker; None when they can."""
    from heron import registry
    from heron.core.envs import _CALLABLES, is_callable_id

    if not getattr(registry.get(algo), "EVAL_IN_WORKER", False):
        return f"{algo}'s evaluation acts on the training device and samples from its random stream"
    if distributed:
        return "under torchrun the ranks share each evaluation"
    if cfg.precision not in ("32", "tf32"):
        return f"the worker's policy is float32, and --precision {cfg.precision} evaluates in {cfg.precision}"
    if is_callable_id(cfg.env_id) or cfg.env_id in _CALLABLES:
        return "the env is a callable that only this process knows (define it in a module to evaluate elsewhere)"
    return None


def wanted(algo: str, cfg: Any, distributed: bool, threads: int, on_gpu: bool) -> bool:
    """``--eval-async``: ``on`` where it applies (``check`` refused the rest before the run began).
    ``auto``: for a run that trains on a GPU (its steps leave the CPU idle but for the envs, and an
    evaluation is then a large share of the wall time) with a core that neither torch's threads nor
    the async env workers keep, so that the worker never takes time from training."""
    from heron.core import cores

    if cfg.eval_async == "off" or cfg.eval_every == 0 or unsupported(algo, cfg, distributed) is not None:
        return False
    spare = len(cores.usable_cpus()) > threads + cores.env_workers(cfg.num_envs, cfg.vector_mode)
    return cfg.eval_async == "on" or (on_gpu and spare)


def check(algo: str, cfg: Any, distributed: bool) -> None:
    """``--eval-async on`` where it cannot apply: a one-line error before anything is written."""
    from heron.config import HeronError

    if cfg.eval_async == "on" and (why := unsupported(algo, cfg, distributed)) is not None:
        raise HeronError(f"--eval-async on cannot apply: {why}; use auto or off")

