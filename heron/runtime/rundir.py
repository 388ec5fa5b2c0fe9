"""A run directory on disk: its config file, the lock that keeps one process in it, eval.csv, and
reading its latest checkpoint back (checked before anything in the directory changes).

Layout: ``config.yaml``, ``metrics.csv``, ``eval.csv``, TensorBoard events, ``checkpoints/``
(``heron.runtime.checkpoint``), ``videos/``, ``.lock``."""

from __future__ import annotations

import fcntl
import math
import os
import re
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from heron.config import to_dict
from heron.errors import HeronError, WriteFailed
from heron.ops import dist
from heron.runtime import checkpoint as ckpt
from heron.runtime.faults import inject
from heron.runtime.logger import METRICS_HEADER, complete_rows, write_csv

EVAL_HEADER = ["step", "mean_return", "std_return", "episodes", "wall_time"]


def default_run_dir(algo: str, cfg: Any) -> Path:
    env = re.sub(r"[^\w.-]+", "_", cfg.env_id).strip("_")  # module:name, <callable ...>: a plain file name
    return Path("runs") / f"{env}__{algo}__{cfg.seed}__{time.strftime('%Y%m%d-%H%M%S')}"


def write_config(run_dir: Path, algo: str, cfg: Any) -> None:
    """Atomically: a kill mid-write leaves the previous config.yaml (a resume reads it)."""
    text = yaml.safe_dump({"algo": algo, **to_dict(cfg)}, sort_keys=False)
    tmp = run_dir / ".config.yaml.tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            inject("config")
            os.fsync(f.fileno())
        os.replace(tmp, run_dir / "config.yaml")
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise WriteFailed(f"cannot write {run_dir / 'config.yaml'}: {exc.strerror or exc}") from None


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


class RunLock:
    """One live process per run directory: an exclusive ``flock`` on ``RUN_DIR/.lock``. The kernel
    releases it when its holder dies, even by kill -9, so a stale lock never blocks a resume; the
    file keeps the holder's pid, host and command for the refusal message."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / ".lock"
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise HeronError(f"{self.path.parent} is in use by {holder}; wait for it to end or stop it first") from None
        os.ftruncate(fd, 0)
        command = (
            " ".join(["heron", *sys.argv[1:]])
            if sys.argv and sys.argv[0].endswith(("heron", "__main__.py"))
            else "a heron process"
        )
        os.write(fd, f"process {os.getpid()} on {socket.gethostname()} ({command[:200]})\n".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def drop_eval_rows(run_dir: Path, steps: set[int]) -> None:
    """eval.csv and metrics.csv without the evaluation rows of ``steps``: a resumed run plays those
    evaluations again (they were unconcluded when its checkpoint was written, and may have landed
    before the run ended)."""
    if not steps:
        return
    for name, header, is_eval in (
        ("eval.csv", EVAL_HEADER, lambda r: True),
        ("metrics.csv", METRICS_HEADER, lambda r: r[2].startswith("eval/")),
    ):
        path = run_dir / name
        if path.exists():
            write_csv(
                path, header, [r for r in complete_rows(path, len(header)) if not (int(r[0]) in steps and is_eval(r))]
            )


def attempt(write: Callable[..., Any], *args: Any, **kwargs: Any) -> WriteFailed | None:
    """``write(...)``, returning its WriteFailed instead of raising it (for ``dist.agree``: a failed
    write on one rank ends every rank)."""
    try:
        write(*args, **kwargs)
    except WriteFailed as exc:
        return exc
    return None


def read_latest(run_dir: Path, algo: str, cfg: Any, spaces: dict | None, world: dist.World) -> tuple[Path, dict]:
    """The latest committed checkpoint and its state (rank 0's), checked: heron's, this algorithm's,
    for these spaces, saved by as many processes as this job has, short of --total-steps."""
    latest = ckpt.latest_checkpoint(run_dir / "checkpoints")
    if latest is None:
        raise HeronError(f"{run_dir} has no checkpoint to resume from")
    state = ckpt.load(latest)
    check_state(state, latest, algo, spaces)
    saved_world = int(state.get("world_size", 1))
    if saved_world != world.size:
        how = (
            "one process" if saved_world == 1 else f"torchrun --nproc-per-node ... with {saved_world} processes in all"
        )
        raise HeronError(
            f"{latest} was written by {saved_world} process(es) and this job has {world.size}: "
            f"each rank's envs, replay data and random streams are its own; resume with {how}"
        )
    if int(state["step"]) >= cfg.total_steps and not state.get("eval_pending"):  # (kept ones: played, then done)
        raise HeronError(
            f"{run_dir} already reached {int(state['step'])} steps; pass a larger --total-steps to train on"
        )
    return latest, state


def read_shard(run_dir: Path, step: int, rank: int) -> tuple[dict, dict | None]:
    """Rank ``rank``'s own part of the checkpoint at ``step``: its state and its replay data."""
    path = ckpt.state_path(run_dir / "checkpoints", step, rank)
    if not path.exists():
        raise HeronError(f"{path} is missing: the checkpoint at step {step} has no part for rank {rank}")
    buffer = ckpt.buffer_path(path)
    return ckpt.load(path), (ckpt.load(buffer, mmap=True) if buffer.exists() else None)


def check_state(state: Any, path: Path, algo: str, spaces: dict | None) -> None:
    """A checkpoint fit for this run: heron's, this algorithm's, and (given the env's ``spaces``)
    saved for spaces equal to the env's."""
    if not isinstance(state, dict) or "step" not in state or "actor" not in state:
        raise HeronError(f"corrupt or unreadable checkpoint {path}: not a heron checkpoint")
    saved_algo = state.get("algo", algo)
    if saved_algo != algo:
        raise HeronError(f"{path} is a {saved_algo} checkpoint, not {algo}'s")
    if spaces is not None and "spaces" in state:
        diff = ckpt.spaces_mismatch(state["spaces"], spaces)
        if diff:
            raise HeronError(
                f"{path} was trained on other spaces than the env gives now ({diff}); use the env it was trained on"
            )


def best_logged_eval(path: Path) -> float:
    scores = []
    for row in complete_rows(path, len(EVAL_HEADER)):
        try:
            scores.append(float(row[1]))
        except ValueError:
            pass
    return max(scores, default=-math.inf)
