"""Checkpoints: atomic writes, safe loads, RNG capture.

Layout inside ``RUN_DIR/checkpoints/``:

* ``step_<N>.pt``: everything to resume at env step N except the replay data (networks,
  optimizers, entropy coefficient, normalizer statistics, counters, RNG states, env states;
  learning-rate schedules are functions of the saved update count, so they need no state).
  Written last, so it is the commit point of a checkpoint.
* ``step_<N>.buffer.pt``: the replay buffer at step N; only the latest one is kept.
* ``best.pt``: the state of the best deterministic evaluation so far (no replay data).
* Data-parallel runs (torchrun): rank 0's state is ``step_<N>.pt`` as above, holding the world
  size; every other rank R writes its own ``step_<N>.rank<R>.pt`` (its envs, RNG streams and
  counters beside the shared networks) and ``step_<N>.rank<R>.buffer.pt`` (its share of the replay
  data) first. Rank 0 writes ``step_<N>.pt`` only once every shard has landed, so a checkpoint at
  step N exists for all ranks or, without its commit file, for none (its shards are leftovers).

Writes go to a temporary file in the same directory, are fsynced and renamed over the target, then
the directory is fsynced: a crash leaves either the old or the new file, never a torn one. Loads
use ``torch.load(weights_only=True)``, which never unpickles arbitrary objects.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

from heron.errors import HeronError, WriteFailed
from heron.runtime.faults import inject

_STEP_RE = re.compile(r"^step_(\d+)\.pt$")
_PART_RE = re.compile(r"^step_(\d+)\.(.+)$")  # any file of a checkpoint: its state, replay data, shards


def save_atomic(obj: Any, path: str | Path, fault_point: str = "save") -> None:
    """Write ``obj`` to ``path`` or leave ``path`` as it was (raises WriteFailed: disk full, I/O)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            inject(fault_point)  # tests: killed or out of space with the file half-way
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        raise WriteFailed(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        if tmp.exists():
            tmp.unlink()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load(path: str | Path, map_location: str | torch.device = "cpu", mmap: bool = False) -> Any:
    """A checkpoint's contents (``mmap``: tensors stay in the file's pages until read, so a large
    replay buffer is copied into place without a second copy in memory)."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise HeronError(f"checkpoint not found: {path}") from None
    except Exception as exc:  # truncated file, not a zip, unpickling refused, ...
        reason = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        raise HeronError(f"corrupt or unreadable checkpoint {path}: {reason}") from None


def step_checkpoints(ckpt_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every step-numbered checkpoint, oldest first."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in ckpt_dir.iterdir() if (m := _STEP_RE.match(p.name))]
    return sorted(found)


def buffer_path(state_path: Path) -> Path:
    return state_path.with_name(state_path.name.replace(".pt", ".buffer.pt"))


def state_path(ckpt_dir: str | Path, step: int, rank: int = 0) -> Path:
    """Rank 0's state file (the commit), or rank R's shard."""
    return Path(ckpt_dir) / (f"step_{step:09d}.pt" if rank == 0 else f"step_{step:09d}.rank{rank}.pt")


def save_part(path: Path, state: dict, buffer_state: dict | None) -> None:
    """A state file and its replay data (first), or neither."""
    if buffer_state is not None:
        save_atomic(buffer_state, buffer_path(path), "checkpoint-buffer")
    try:
        save_atomic(state, path, "checkpoint-state")
    except WriteFailed:
        buffer_path(path).unlink(missing_ok=True)  # its state never landed: give the space back
        raise


def save_checkpoint(ckpt_dir: str | Path, step: int, state: dict, buffer_state: dict | None, keep: int) -> Path:
    """Rank 0's part, which commits the checkpoint (the shards of other ranks are written before)."""
    path = state_path(ckpt_dir, step)
    save_part(path, state, buffer_state)
    prune(ckpt_dir, keep)
    return path


def prune(ckpt_dir: str | Path, keep: int) -> None:
    """Keep the newest ``keep`` checkpoints (with their shards), and the replay data of the newest only."""
    ckpt_dir = Path(ckpt_dir)
    existing = [step for step, _ in step_checkpoints(ckpt_dir)]
    dropped = set(existing[:-keep]) if keep > 0 else set()
    older = set(existing[:-1])
    for p in ckpt_dir.iterdir():
        m = _PART_RE.match(p.name)
        if m and (int(m.group(1)) in dropped or (int(m.group(1)) in older and p.name.endswith(".buffer.pt"))):
            p.unlink(missing_ok=True)


def remove_leftovers(ckpt_dir: str | Path) -> None:
    """After a crash: temporary files of interrupted writes, and replay files and rank shards whose
    commit (rank 0's state file, written last) never landed."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return
    committed = {step for step, _ in step_checkpoints(ckpt_dir)}
    for p in ckpt_dir.iterdir():
        m = _PART_RE.match(p.name)
        orphan = m is not None and m.group(2) != "pt" and int(m.group(1)) not in committed
        if orphan or (p.name.startswith(".") and ".tmp" in p.name):
            p.unlink(missing_ok=True)


def latest_checkpoint(ckpt_dir: str | Path) -> Path | None:
    found = step_checkpoints(ckpt_dir)
    return found[-1][1] if found else None


def spaces_mismatch(saved: Any, current: Any, path: str = "") -> str | None:
    """Where a checkpoint's saved spaces and the env's differ ("obs_shape: [3] saved, [4] now"), or None."""

    def show(x: Any) -> str:
        return str(x.tolist() if isinstance(x, torch.Tensor) else x)[:80]

    if isinstance(saved, dict) and isinstance(current, dict):
        for key in sorted(set(saved) | set(current), key=str):
            found = spaces_mismatch(saved.get(key), current.get(key), f"{path}.{key}" if path else str(key))
            if found:
                return found
        return None
    if isinstance(saved, (list, tuple)) and isinstance(current, (list, tuple)) and len(saved) == len(current):
        differ = any(spaces_mismatch(a, b, path) for a, b in zip(saved, current))
        return f"{path}: {show(saved)} saved, {show(current)} now" if differ else None
    if isinstance(saved, torch.Tensor) or isinstance(current, torch.Tensor):
        same = (
            isinstance(saved, torch.Tensor)
            and isinstance(current, torch.Tensor)
            and saved.shape == current.shape
            and torch.equal(saved.cpu(), current.cpu())
        )
    else:
        same = saved == current
    return None if same else f"{path}: {show(saved)} saved, {show(current)} now"
