"""Replay storage.

``ReplayBuffer`` keeps transitions in preallocated torch tensors laid out ``[T, N, ...]`` (time
slot, env): every vector step writes one row, so per-env sequences stay contiguous for the
recurrent variants. It is circular, keeps observation dtypes (uint8 stays uint8), samples uniformly
with tensor indexing (no Python loop over the batch), can live on the training device, and its
footprint is its arrays and nothing more.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from heron.config import HeronError

_TORCH_DTYPES = {np.dtype(np.uint8): torch.uint8, np.dtype(np.float32): torch.float32}


class ReplayBuffer:
    """Circular transition storage with uniform and sequence sampling.

    Fields: obs, next_obs [T, N, *obs_shape]; actions [T, N, *act_shape]; rewards, terminated,
    truncated [T, N]; plus optional ``extra`` fields (e.g. recurrent hidden states) [T, N, *shape].
    """

    def __init__(self, capacity: int, num_envs: int, obs_shape: tuple, obs_dtype: np.dtype,
                 action_shape: tuple, device: str | torch.device = "cpu",
                 extra: dict[str, tuple] | None = None, seed: int = 0):
        if capacity < num_envs:
            raise HeronError(f"--buffer-size {capacity} is smaller than --num-envs {num_envs}")
        self.rows = capacity // num_envs  # T: time slots
        self.num_envs = num_envs
        self.device = torch.device(device)
        odt = _TORCH_DTYPES[np.dtype(obs_dtype)]
        shapes: dict[str, tuple[tuple, torch.dtype]] = {
            "obs": (tuple(obs_shape), odt),
            "next_obs": (tuple(obs_shape), odt),
            "actions": (tuple(action_shape), torch.float32),
            "rewards": ((), torch.float32),
            "terminated": ((), torch.bool),
            "truncated": ((), torch.bool),
        }
        for name, shape in (extra or {}).items():
            shapes[name] = (tuple(shape), torch.float32)
        self.data = {name: torch.zeros((self.rows, num_envs, *shape), dtype=dt, device=self.device)
                     for name, (shape, dt) in shapes.items()}
        self.pos = 0  # next row to write
        self.full = False
        self.generator = torch.Generator(device="cpu").manual_seed(seed)

    @property
    def capacity(self) -> int:
        return self.rows * self.num_envs

    def __len__(self) -> int:
        return (self.rows if self.full else self.pos) * self.num_envs

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.data.values())

    def add(self, **row: Any) -> None:
        """Write one vector step: each field given as an array/tensor of shape [N, ...]."""
        for name, value in row.items():
            self.data[name][self.pos].copy_(torch.as_tensor(value), non_blocking=True)
        self.pos = (self.pos + 1) % self.rows
        self.full = self.full or self.pos == 0

    def mark_truncated(self, envs: np.ndarray) -> None:
        """Flag the newest stored step of the given envs ([N] bool) as truncated."""
        if (self.full or self.pos > 0) and envs.any():
            last = (self.pos - 1) % self.rows
            self.data["truncated"][last, torch.as_tensor(envs, device=self.device)] = True

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        """Uniform transitions: every field as [B, ...] on the buffer's device."""
        filled = self.rows if self.full else self.pos
        t = torch.randint(0, filled, (batch_size,), generator=self.generator)
        e = torch.randint(0, self.num_envs, (batch_size,), generator=self.generator)
        flat = (t * self.num_envs + e).to(self.device)  # index into the [T * N] view
        return {name: v.flatten(0, 1).index_select(0, flat) for name, v in self.data.items()}

    def sample_sequences(self, batch_size: int, length: int) -> dict[str, torch.Tensor]:
        """``batch_size`` windows of ``length`` consecutive steps of one env: fields [B, L, ...].

        Windows never cross the write position (where old and new data meet); they may cross
        episode boundaries, which the consumer handles with ``terminated | truncated``."""
        filled = self.rows if self.full else self.pos
        if filled < length:
            raise HeronError(f"buffer holds {filled} steps per env, fewer than the sequence length {length}")
        # Valid starts: `filled - length + 1` windows, counted from the oldest row.
        oldest = self.pos if self.full else 0
        start = torch.randint(0, filled - length + 1, (batch_size,), generator=self.generator)
        e = torch.randint(0, self.num_envs, (batch_size,), generator=self.generator)
        t = (oldest + start[:, None] + torch.arange(length)[None, :]) % self.rows  # [B, L]
        flat = (t * self.num_envs + e[:, None]).flatten().to(self.device)  # [B * L]
        return {name: v.flatten(0, 1).index_select(0, flat).view(batch_size, length, *v.shape[2:])
                for name, v in self.data.items()}

    # -- checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        filled = self.rows if self.full else self.pos
        return {
            "data": {k: v[:filled].cpu() for k, v in self.data.items()},
            "pos": self.pos, "full": self.full, "rows": self.rows, "num_envs": self.num_envs,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        if state["rows"] != self.rows or state["num_envs"] != self.num_envs:
            raise HeronError("checkpoint's replay buffer has a different size or number of envs")
        for k, v in state["data"].items():
            self.data[k][: len(v)].copy_(v)
        self.pos, self.full = int(state["pos"]), bool(state["full"])
        self.generator.set_state(state["generator"])


class RolloutBuffer:
    """The newest ``rollouts`` rollouts of ``steps`` x ``num_envs``: fields ``[K, T, N, ...]`` plus
    per-rollout, per-env fields ``[K, N, ...]`` (the recurrent state at the rollout's start).

    On-policy PPO keeps one rollout (K = 1) and needs nothing of it in a checkpoint; off-policy PPO
    keeps K, overwriting the oldest, and checkpoints them (``state_dict``).
    """

    def __init__(self, rollouts: int, steps: int, num_envs: int, fields: dict[str, tuple[tuple, torch.dtype]],
                 per_env: dict[str, tuple[tuple, torch.dtype]], device: str | torch.device = "cpu"):
        self.rollouts, self.steps, self.num_envs = rollouts, steps, num_envs
        self.data = {name: torch.zeros((rollouts, steps, num_envs, *shape), dtype=dt, device=device)
                     for name, (shape, dt) in fields.items()}
        self.data.update({name: torch.zeros((rollouts, num_envs, *shape), dtype=dt, device=device)
                          for name, (shape, dt) in per_env.items()})
        self.slot, self.count = 0, 0  # the slot being written; rollouts stored

    def writing(self) -> dict[str, torch.Tensor]:
        """Views of the slot being written: [T, N, ...] and [N, ...]."""
        return {name: t[self.slot] for name, t in self.data.items()}

    def commit(self) -> None:
        """The written slot is complete: count it, and move on to the oldest."""
        self.count = min(self.count + 1, self.rollouts)
        self.slot = (self.slot + 1) % self.rollouts

    def stored(self) -> dict[str, torch.Tensor]:
        """The complete rollouts, [k, T, N, ...] / [k, N, ...] with k = min(count, K)."""
        return {name: t[:self.count] for name, t in self.data.items()}

    def state_dict(self) -> dict | None:
        if self.rollouts == 1:
            return None  # on-policy: consumed by the update that preceded the checkpoint
        return {"data": {k: v[:self.count].cpu() for k, v in self.data.items()}, "slot": self.slot,
                "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.slot, self.count = int(state["slot"]), int(state["count"])
        for k, v in state["data"].items():
            if k not in self.data or v.shape[1:] != self.data[k].shape[1:] or len(v) > self.rollouts:
                raise HeronError(f"checkpointed rollout field {k!r} does not fit this run's settings")
            self.data[k][:len(v)] = v.to(self.data[k].device)
