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

from heron.errors import HeronError
from heron.ops.rng import generator_state

_TORCH_DTYPES = {np.dtype(np.uint8): torch.uint8, np.dtype(np.float32): torch.float32}


class ReplayBuffer:
    """Circular transition storage with uniform and sequence sampling.

    Fields: obs, next_obs [T, N, *obs_shape]; actions [T, N, *act_shape]; rewards, terminated,
    truncated [T, N]; plus optional ``extra`` fields (e.g. recurrent hidden states) [T, N, *shape].
    """

    def __init__(
        self,
        capacity: int,
        num_envs: int,
        obs_shape: tuple,
        obs_dtype: np.dtype,
        action_shape: tuple,
        device: str | torch.device = "cpu",
        extra: dict[str, tuple] | None = None,
        seed: int = 0,
        out_device: str | torch.device | None = None,
    ):
        if capacity < num_envs:
            raise HeronError(f"--buffer-size {capacity} is smaller than --num-envs {num_envs}")
        self.rows = capacity // num_envs  # T: time slots
        self.num_envs = num_envs
        self.device = torch.device(device)
        # where sampled batches go: the training device (--buffer-device cpu with --device cuda)
        self.out_device = self.device if out_device is None else torch.device(out_device)
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
        self.data = {
            name: torch.zeros((self.rows, num_envs, *shape), dtype=dt, device=self.device)
            for name, (shape, dt) in shapes.items()
        }
        # on the CPU, rows are written through numpy views of the same memory: one numpy assignment
        # per field instead of a tensor conversion and a copy_ (the add runs at every env step)
        self._np = {name: v.numpy() for name, v in self.data.items()} if self.device.type == "cpu" else None
        self._np_rows = (
            None if self._np is None else {name: a.reshape(-1, *a.shape[2:]) for name, a in self._np.items()}
        )
        self.pos = 0  # next row to write
        self.full = False
        self.invalid: torch.Tensor | None = None  # [T, N] bool (CPU): rows that hold no transition, once there is one
        self.generator = torch.Generator(device="cpu").manual_seed(seed)

    @property
    def capacity(self) -> int:
        return self.rows * self.num_envs

    def __len__(self) -> int:
        return (self.rows if self.full else self.pos) * self.num_envs

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.data.values())

    def add(self, valid: np.ndarray | None = None, **row: Any) -> None:
        """Write one vector step: each field given as an array/tensor of shape [N, ...]. ``valid``
        ([N] bool, None: all) marks the envs whose row is a transition; the others' rows are never
        sampled (``heron.envs.native``: the step after an episode's end that only reset the env)."""
        if valid is not None and not valid.all() and self.invalid is None:
            self.invalid = torch.zeros((self.rows, self.num_envs), dtype=torch.bool)
        if self.invalid is not None:  # (a tensor env's flags stay tensors: heron.envs.native)
            self.invalid[self.pos] = False if valid is None else ~torch.as_tensor(valid).cpu()
        for name, value in row.items():
            if self._np is not None and not isinstance(value, torch.Tensor):
                self._np[name][self.pos] = value
            else:
                self.data[name][self.pos].copy_(torch.as_tensor(value), non_blocking=True)
        self.pos = (self.pos + 1) % self.rows
        self.full = self.full or self.pos == 0

    def mark_truncated(self, envs: np.ndarray) -> None:
        """Flag the newest stored step of the given envs ([N] bool) as truncated."""
        if (self.full or self.pos > 0) and envs.any():
            last = (self.pos - 1) % self.rows
            self.data["truncated"][last, torch.as_tensor(envs, device=self.device)] = True

    def sample(self, batch_size: int, fields: tuple[str, ...] | None = None) -> dict[str, torch.Tensor]:
        """Uniform transitions: every field (or those named in ``fields``) as [B, ...] on ``out_device``."""
        return self.gather(self.indices(batch_size), fields)

    def sample_sequences(self, batch_size: int, length: int) -> dict[str, torch.Tensor]:
        """``batch_size`` windows of ``length`` consecutive steps of one env: fields [B, L, ...]."""
        return self.gather(self.sequence_indices(batch_size, length), None, (batch_size, length))

    def indices(self, batch_size: int) -> torch.Tensor:
        """Rows of ``batch_size`` uniform transitions in the [T * N] view: [B] int64 on the host,
        drawn from the buffer's generator (``gather`` reads them)."""
        filled = self.rows if self.full else self.pos
        t = torch.randint(0, filled, (batch_size,), generator=self.generator)
        e = torch.randint(0, self.num_envs, (batch_size,), generator=self.generator)
        if self.invalid is not None:  # rows that are no transition: drawn again, from the same generator
            bad = self.invalid[t, e]
            while bad.any():
                k = int(bad.sum())
                t[bad] = torch.randint(0, filled, (k,), generator=self.generator)
                e[bad] = torch.randint(0, self.num_envs, (k,), generator=self.generator)
                bad = self.invalid[t, e]
        return t if self.num_envs == 1 else t * self.num_envs + e

    def sequence_indices(self, batch_size: int, length: int) -> torch.Tensor:
        """Rows of ``batch_size`` windows of ``length`` consecutive steps of one env: [B * L], window
        by window. Windows never cross the write position (where old and new data meet); they may
        cross episode boundaries, which the consumer handles with ``terminated | truncated``."""
        filled = self.rows if self.full else self.pos
        if filled < length:
            raise HeronError(f"buffer holds {filled} steps per env, fewer than the sequence length {length}")
        # Valid starts: `filled - length + 1` windows, counted from the oldest row.
        oldest = self.pos if self.full else 0
        start = torch.randint(0, filled - length + 1, (batch_size,), generator=self.generator)
        e = torch.randint(0, self.num_envs, (batch_size,), generator=self.generator)
        t = (oldest + start[:, None] + torch.arange(length)[None, :]) % self.rows  # [B, L]
        return (t * self.num_envs + e[:, None]).flatten()  # [B * L]

    def gather(
        self, rows: torch.Tensor, fields: tuple[str, ...] | None = None, shape: tuple[int, ...] | None = None
    ) -> dict[str, torch.Tensor]:
        """The given rows of the [T * N] view (from ``indices`` or ``sequence_indices``): every
        field (or those in ``fields``) as [*shape, ...] (shape: the rows' own, [B], by default) on
        ``out_device``. Rows on the buffer's device are read without leaving it, so the gather can
        be part of a recorded CUDA graph (``heron.accel.step.Learn``)."""
        names = self.data if fields is None else fields
        shape = tuple(rows.shape) if shape is None else tuple(shape)
        if self._np_rows is not None and rows.device.type == "cpu":  # numpy's take: faster than index_select on a CPU
            picked = rows.numpy()
            batch = {name: torch.from_numpy(self._np_rows[name].take(picked, axis=0)) for name in names}
        else:
            rows = rows.to(self.device, non_blocking=True)  # from pageable memory: staged, and no stream sync after
            batch = {name: self.data[name].flatten(0, 1).index_select(0, rows) for name in names}
        if shape != tuple(rows.shape):
            batch = {name: v.view(*shape, *v.shape[1:]) for name, v in batch.items()}
        return self._out(batch)

    # -- n-step returns ---------------------------------------------------------------------------
    def nstep_rows(self, rows: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The windows of ``n`` consecutive steps of one env that start at ``rows`` (from
        ``indices``): their rows [M, n] in the [T * N] view, and which of them hold data written
        after the start ([M, n] bool: a window never reaches past the newest step). Computed on the
        host, where the write position is: a recorded CUDA graph gets both as inputs."""
        newest = (self.pos - 1) % self.rows
        t, e = rows // self.num_envs, rows % self.num_envs
        ahead = (newest - t) % self.rows  # steps of this env stored after the start
        j = torch.arange(n)
        window = ((t[:, None] + j) % self.rows) * self.num_envs + e[:, None]
        return window, j[None, :] <= ahead[:, None]

    def gather_nstep(
        self,
        window: torch.Tensor,
        stored: torch.Tensor,
        gamma: float,
        fields: tuple[str, ...] | None = None,
        shape: tuple[int, ...] | None = None,
    ) -> dict[str, torch.Tensor]:
        """n-step transitions for the windows of ``nstep_rows``: obs and actions of each window's
        first step; ``rewards`` the discounted sum of the rewards up to the window's end, its first
        termination or truncation, or the newest stored step, whichever comes first (k steps);
        ``next_obs`` and ``terminated`` those of that last step; ``discount`` gamma ** k, the
        factor of the bootstrapped value. A truncation inside the window ends the sum there and
        bootstraps from its stored final observation, so an episode's cut is never read as its end."""
        names = tuple(self.data) if fields is None else tuple(fields)
        window, stored = window.to(self.device, non_blocking=True), stored.to(self.device, non_blocking=True)
        m, n = window.shape
        flat = {name: self.data[name].flatten(0, 1) for name in ("rewards", "terminated", "truncated")}
        rewards = flat["rewards"][window]  # [M, n]
        ended = flat["terminated"][window] | flat["truncated"][window]
        before = torch.cumsum(ended.to(torch.int32), 1) - ended.to(torch.int32)  # ends before step j
        used = stored & (before == 0)  # [M, n]; the first step always
        k = used.sum(1)  # [M], 1..n
        powers = gamma ** torch.arange(n, device=self.device, dtype=torch.float32)
        last = window.gather(1, (k - 1)[:, None])[:, 0]  # the row of each window's last step
        first = window[:, 0]
        batch = {}
        for name in names:
            if name == "rewards":
                batch[name] = (rewards * used * powers).sum(1)
            elif name in ("next_obs", "terminated", "truncated"):
                batch[name] = self.data[name].flatten(0, 1).index_select(0, last)
            else:
                batch[name] = self.data[name].flatten(0, 1).index_select(0, first)
        batch["discount"] = gamma ** k.to(torch.float32)
        shape = (m,) if shape is None else tuple(shape)
        if shape != (m,):
            batch = {name: v.view(*shape, *v.shape[1:]) for name, v in batch.items()}
        return self._out(batch)

    def _out(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self.out_device == self.device:
            return batch
        return {name: v.to(self.out_device) for name, v in batch.items()}

    # -- checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        filled = self.rows if self.full else self.pos
        return {  # clone: torch.save writes a view's whole storage, the empty rows included
            "data": {k: v[:filled].to("cpu", copy=True) for k, v in self.data.items()},
            "pos": self.pos,
            "full": self.full,
            "rows": self.rows,
            "num_envs": self.num_envs,
            "generator": self.generator.get_state(),
            **({} if self.invalid is None else {"invalid": self.invalid[:filled].clone()}),
        }

    def load_state_dict(self, state: dict) -> None:
        if state["rows"] != self.rows or state["num_envs"] != self.num_envs:
            raise HeronError("checkpoint's replay buffer has a different size or number of envs")
        for k, v in state["data"].items():
            self.data[k][: len(v)].copy_(v)
        self.pos, self.full = int(state["pos"]), bool(state["full"])
        self.generator.set_state(state["generator"])
        self.invalid = None
        if "invalid" in state:
            self.invalid = torch.zeros((self.rows, self.num_envs), dtype=torch.bool)
            self.invalid[: len(state["invalid"])] = torch.as_tensor(state["invalid"])


class RolloutBuffer:
    """The newest ``rollouts`` rollouts of ``steps`` x ``num_envs``: fields ``[K, T, N, ...]`` plus
    per-rollout, per-env fields ``[K, N, ...]`` (the recurrent state at the rollout's start).

    On-policy PPO keeps one rollout (K = 1) and needs nothing of it in a checkpoint; off-policy PPO
    keeps K, overwriting the oldest, and checkpoints them (``state_dict``).
    """

    def __init__(
        self,
        rollouts: int,
        steps: int,
        num_envs: int,
        fields: dict[str, tuple[tuple, torch.dtype]],
        per_env: dict[str, tuple[tuple, torch.dtype]],
        device: str | torch.device = "cpu",
    ):
        self.rollouts, self.steps, self.num_envs = rollouts, steps, num_envs
        self.data = {
            name: torch.zeros((rollouts, steps, num_envs, *shape), dtype=dt, device=device)
            for name, (shape, dt) in fields.items()
        }
        self.data.update(
            {
                name: torch.zeros((rollouts, num_envs, *shape), dtype=dt, device=device)
                for name, (shape, dt) in per_env.items()
            }
        )
        self.slot, self.count = 0, 0  # the slot being written; rollouts stored
        self.in_progress = False  # the slot is being written (its old rollout is no longer whole)

    def writing(self) -> dict[str, torch.Tensor]:
        """Views of the slot being written: [T, N, ...] and [N, ...]."""
        self.in_progress = True
        return {name: t[self.slot] for name, t in self.data.items()}

    def commit(self) -> None:
        """The written slot is complete: count it, and move on to the oldest."""
        self.count = min(self.count + 1, self.rollouts)
        self.slot = (self.slot + 1) % self.rollouts
        self.in_progress = False

    def stored(self) -> dict[str, torch.Tensor]:
        """The complete rollouts, [k, T, N, ...] / [k, N, ...] with k = min(count, K)."""
        return {name: t[: self.count] for name, t in self.data.items()}

    def state_dict(self) -> dict | None:
        if self.rollouts == 1:
            return None  # on-policy: consumed by the update that preceded the checkpoint
        if self.in_progress and self.slot < self.count:
            # mid-rollout (an env crashed): the slot's old rollout is half overwritten; keep the
            # others, oldest first, so that the next write goes after the newest
            order = [(self.slot + i) % self.rollouts for i in range(1, self.count)]
            return {"data": {k: v[order].cpu() for k, v in self.data.items()}, "slot": len(order), "count": len(order)}
        return {
            "data": {k: v[: self.count].to("cpu", copy=True) for k, v in self.data.items()},
            "slot": self.slot,
            "count": self.count,
        }

    def load_state_dict(self, state: dict) -> None:
        self.slot, self.count = int(state["slot"]), int(state["count"])
        for k, v in state["data"].items():
            if k not in self.data or v.shape[1:] != self.data[k].shape[1:] or len(v) > self.rollouts:
                raise HeronError(f"checkpointed rollout field {k!r} does not fit this run's settings")
            self.data[k][: len(v)] = v.to(self.data[k].device)


class EpisodeBuffer:
    """Whole episodes for sequence models (DreamerV2's replay).

    Each env's running episode is staged; when it ends it is copied, contiguous, into circular
    per-key storage of ``capacity`` steps (numpy arrays, or ``np.memmap`` files under
    ``memmap_dir`` so that the data lives on disk and the resident set stays small). An episode that
    does not fit before the end of the storage starts again at 0; episodes it overwrites are
    evicted whole. Sequences of ``length`` steps are drawn inside single episodes, as in
    danijar/dreamerv2 and sheeprl: an episode uniformly, then a start uniform over its windows, or,
    with ``prioritize_ends``, a start uniform over [0, len - length + 1 + length) clamped to
    len - length (the last window gets the extra mass, so episode ends are not undersampled).
    Episodes shorter than ``length`` are stored but never sampled (``short_episodes`` counts them).

    ``cross_episodes`` (sheeprl's "sequential" buffer) lets a sequence run on into the episodes
    stored right after it: windows are drawn uniformly over all windows of the runs of adjacent
    episodes, and the model resets its state at each ``is_first`` inside. Tasks with episodes
    shorter than a sequence need it.

    ``fields``: key -> (shape, numpy dtype); uint8 images stay uint8 until the batch is on the
    training device.
    """

    def __init__(
        self,
        capacity: int,
        num_envs: int,
        fields: dict[str, tuple[tuple, Any]],
        length: int,
        prioritize_ends: bool = False,
        memmap_dir: str | None = None,
        seed: int = 0,
        cross_episodes: bool = False,
    ):
        if capacity < length:
            raise HeronError(f"--buffer-size {capacity} is smaller than the sequence length {length}")
        self.capacity, self.length, self.prioritize_ends = capacity, length, prioritize_ends
        self.cross_episodes = cross_episodes
        self._segments_cache: tuple[np.ndarray, np.ndarray] | None = None
        self.fields = {k: (tuple(shape), np.dtype(dt)) for k, (shape, dt) in fields.items()}
        if memmap_dir is not None:
            from pathlib import Path

            Path(memmap_dir).mkdir(parents=True, exist_ok=True)
            self.data = {
                k: np.lib.format.open_memmap(
                    str(Path(memmap_dir) / f"{k}.npy"), mode="w+", dtype=dt, shape=(capacity, *shape)
                )
                for k, (shape, dt) in self.fields.items()
            }
        else:
            self.data = {k: np.zeros((capacity, *shape), dt) for k, (shape, dt) in self.fields.items()}  # type: ignore[misc]  # the memmap's interface
        self.episodes: list[tuple[int, int]] = []  # (start, length) of stored episodes, oldest first
        self.pos = 0
        self.short_episodes = 0
        self.staging: list[dict[str, list]] = [{k: [] for k in self.fields} for _ in range(num_envs)]
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return sum(n for _, n in self.episodes)

    def add(self, step: dict[str, np.ndarray], ended: np.ndarray, mask: np.ndarray | None = None) -> None:
        """One vector step: ``step[key]`` is [N, *shape]; envs where ``ended`` closes their episode
        with this step (terminated or truncated) move it into storage. Only envs where ``mask`` is
        true (all when None) get the step."""
        for i, stage in enumerate(self.staging):
            if mask is not None and not mask[i]:
                continue
            for k in self.fields:
                stage[k].append(np.asarray(step[k][i], self.fields[k][1]))
            if ended[i]:
                self._store(i)

    def _store(self, env: int) -> None:
        stage = self.staging[env]
        n = len(stage[next(iter(self.fields))])
        if n:
            episode = {k: np.stack(v)[-self.capacity :] for k, v in stage.items()}
            self.store_episode(episode)
        self.staging[env] = {k: [] for k in self.fields}

    def store_episode(self, episode: dict[str, np.ndarray]) -> None:
        """Store one whole episode (its last ``capacity`` steps if longer), evicting what it
        overwrites; storage stays first-in first-out."""
        episode = {k: v[-self.capacity :] for k, v in episode.items()}
        n = len(next(iter(episode.values())))
        if n < self.length:
            self.short_episodes += 1
        if self.pos + n > self.capacity:
            # wrap: the unused tail [pos, capacity) holds the oldest episodes, which the next lap
            # might never overwrite (lengths need not add up to the capacity): evict them now
            self.episodes = [(s, m) for s, m in self.episodes if s < self.pos]
            self.pos = 0
        lo, hi = self.pos, self.pos + n
        self.episodes = [(s, m) for s, m in self.episodes if s + m <= lo or s >= hi]  # evict overlaps
        for k, arr in episode.items():
            self.data[k][lo:hi] = arr
        self.episodes.append((lo, n))
        self._segments_cache = None
        self.pos = hi

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """``batch_size`` sequences, dict of [B, length, *shape] arrays."""
        starts, lens = self._segments()
        if not len(starts):
            raise HeronError(f"no stored episode is as long as the sequence length {self.length} yet")
        windows = lens - self.length + 1  # window starts per run
        if self.cross_episodes:  # every window of the stored runs equally likely
            ep = self.rng.choice(len(starts), size=batch_size, p=windows / windows.sum())
        else:  # an episode uniformly, as danijar/dreamerv2 and sheeprl do
            ep = self.rng.integers(0, len(starts), size=batch_size)
        upper = windows[ep]
        if self.prioritize_ends:  # starts past the last window count as the last one (danijar's replay)
            upper = upper + self.length
        offset = np.minimum(self.rng.integers(0, upper), lens[ep] - self.length)
        idx = (starts[ep] + offset)[:, None] + np.arange(self.length)  # [B, L]
        return {k: v[idx] for k, v in self.data.items()}

    def sampleable(self) -> bool:
        """Whether some stored episode is as long as a sequence."""
        return len(self._segments()[0]) > 0

    def _segments(self) -> tuple[np.ndarray, np.ndarray]:
        """(starts, lengths) of the stretches sequences are drawn from: episodes, or with
        ``cross_episodes`` runs of episodes adjacent in storage; only those at least ``length`` long."""
        if self._segments_cache is None:
            segs = sorted(self.episodes) if self.cross_episodes else list(self.episodes)
            if self.cross_episodes:
                merged: list[list[int]] = []
                for s, m in segs:
                    if merged and merged[-1][0] + merged[-1][1] == s:
                        merged[-1][1] += m
                    else:
                        merged.append([s, m])
                segs = [(s, m) for s, m in merged]
            kept = np.array([(s, m) for s, m in segs if m >= self.length], np.int64).reshape(-1, 2)
            self._segments_cache = (kept[:, 0], kept[:, 1])
        return self._segments_cache

    def state_dict(self) -> dict:
        """Views (no copies) of the used storage, the episode index, staged episodes and the RNG."""
        used = max((s + m for s, m in self.episodes), default=0)
        return {
            "data": {k: torch.from_numpy(np.asarray(v[:used])) for k, v in self.data.items()},
            "episodes": torch.tensor(self.episodes, dtype=torch.int64).reshape(-1, 2),
            "pos": self.pos,
            "short_episodes": self.short_episodes,
            "staging": [
                {k: torch.from_numpy(np.stack(v)) if v else None for k, v in st.items()} for st in self.staging
            ],
            "rng": generator_state(self.rng),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore in place (chunked copies, so a memory-mapped load never doubles memory). Staged
        episodes were in flight at the checkpoint and are cut there: they are stored as ended
        (not terminal), since resumed envs start new episodes."""
        chunk = 4096
        for k, t in state["data"].items():
            for i in range(0, t.shape[0], chunk):
                piece = t[i : i + chunk].numpy()
                self.data[k][i : i + len(piece)] = piece
        self.episodes = [(int(start), int(length)) for start, length in state["episodes"].tolist()]
        self._segments_cache = None
        self.pos, self.short_episodes = int(state["pos"]), int(state["short_episodes"])
        self.rng.bit_generator.state = state["rng"]
        for stage in state["staging"]:  # None: nothing staged worth keeping
            if stage is not None and stage[next(iter(self.fields))] is not None:
                self.store_episode({k: t.numpy() for k, t in stage.items()})
        self.staging = [{k: [] for k in self.fields} for _ in self.staging]


# what SAC's and TD3's feed-forward gradient steps read of a sampled batch (no truncation flags:
# those only mark where recurrent sequences start)
STEP_FIELDS = ("obs", "next_obs", "actions", "rewards", "terminated")


def discount(batch: dict[str, torch.Tensor], gamma: float) -> torch.Tensor | float:
    """The factor of a target's bootstrapped value: gamma, or with n-step returns each
    transition's own gamma ** k (``ReplayBuffer.gather_nstep``)."""
    return batch["discount"] if "discount" in batch else gamma
