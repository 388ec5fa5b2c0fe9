"""What SAC and TD3 share around their update steps: spaces, the replay buffer, the gradient step
as the loop takes it (``Learn``), snapshots for checkpoints and resume (the per-step cadences are
``Run.after_step``)."""

from __future__ import annotations

import math
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch

from heron.core import checkpoint as ckpt
from heron.core.buffers import ReplayBuffer
from heron.core.envs import VecEnv
from heron.core.graphs import GraphedSteps
from heron.core.nets import Polyak
from heron.core.run import Run
from heron.errors import HeronError

# what SAC's and TD3's feed-forward gradient steps read of a sampled batch (no truncation flags:
# those only mark where recurrent sequences start)
STEP_FIELDS = ("obs", "next_obs", "actions", "rewards", "terminated")


def discount(batch: dict[str, torch.Tensor], gamma: float) -> torch.Tensor | float:
    """The factor of a target's bootstrapped value: gamma, or with n-step returns each
    transition's own gamma ** k (``ReplayBuffer.gather_nstep``)."""
    return batch["discount"] if "discount" in batch else gamma


def spaces_of(obs_space: gym.Space, act_space: gym.Space) -> dict:
    """What a saved policy needs to rebuild its networks without making an env."""
    return {"obs_shape": list(obs_space.shape),
            "action_low": torch.as_tensor(act_space.low, dtype=torch.float32),
            "action_high": torch.as_tensor(act_space.high, dtype=torch.float32)}


def replay_buffer(cfg: Any, run: Run, envs: VecEnv, device: torch.device, extra: dict | None = None) -> ReplayBuffer:
    """This process's replay buffer: its share of --buffer-size, for its envs, sampled with its own stream."""
    return ReplayBuffer(run.local(cfg.buffer_size), envs.num_envs, envs.single_observation_space.shape,
                        envs.obs_dtype, envs.single_action_space.shape,
                        device=device if cfg.buffer_device == "auto" else cfg.buffer_device,
                        extra=extra, seed=run.rank_seed(), out_device=device)


class Learn:
    """One gradient step as SAC's and TD3's loops take it: ``learn(update_actor, average)`` draws a
    batch from the replay buffer (with ``cfg.n_step`` > 1, n-step transitions), runs
    ``update(batch, update_actor)`` and then, when ``average``, the targets' Polyak step
    (``cfg.tau``); it returns the update's metrics.

    ``shape``: the batch's leading shape, [B] (TD3), [B, 1] (SAC) or [B, L] with ``sequences``
    (recurrent SAC: windows of L steps). The batch holds the fields the update names in its
    ``fields`` attribute (the hand-written steps: ``STEP_FIELDS``), else every stored field.

    Under --cuda-graphs the three are recorded together, one graph per (update_actor, average)
    (``GraphedSteps``), and ``optimizers`` become ``capturable`` at the first call. With the replay
    on the training device the graph's one input is the batch's rows, drawn on the host from the
    buffer's generator as in the eager path (the same rows, and a checkpoint holds the stream).
    The gather, the update and the averaging then replay with one launch and one small copy, where
    the eager gather and averaging around a recorded update were about a dozen launches and copies
    per step: a gather per field, a copy of each into the graph's inputs, the Polyak step. With the
    replay in host memory (--buffer-device cpu) the gathered batch is the graph's input."""

    def __init__(self, cfg: Any, update: Callable[[dict[str, torch.Tensor], bool], dict[str, torch.Tensor]],
                 rb: ReplayBuffer, shape: tuple[int, ...], polyak: Polyak,
                 optimizers: tuple[torch.optim.Optimizer, ...] = (), sequences: bool = False):
        self.rb, self.shape, self.sequences = rb, tuple(shape), sequences
        self.fields: tuple[str, ...] | None = getattr(update, "fields", None)
        tau = cfg.tau

        def step(batch: dict[str, torch.Tensor], variant: tuple[bool, bool]) -> dict[str, torch.Tensor]:
            update_actor, average = variant
            metrics = update(batch, update_actor)
            if average:
                polyak(tau)
            return metrics

        graphs = cfg.cuda_graphs
        self.n_step, self.gamma = cfg.n_step, cfg.gamma
        self.rows_in = graphs and rb.out_device == rb.device  # the gather is recorded too
        if self.rows_in:
            self.step = GraphedSteps(lambda rows, variant: step(self.read(rows), variant), device=rb.device,
                                     optimizers=optimizers)
        else:
            self.step = GraphedSteps(step, optimizers=optimizers) if graphs else step

    def rows(self) -> dict[str, torch.Tensor]:
        """The batch's rows, drawn on the host: ``{"rows"}``, or with n-step returns the windows
        and which of their steps are stored (``ReplayBuffer.nstep_rows``)."""
        if self.sequences:
            return {"rows": self.rb.sequence_indices(*self.shape)}
        rows = self.rb.indices(math.prod(self.shape))
        if self.n_step > 1:
            window, stored = self.rb.nstep_rows(rows, self.n_step)
            return {"rows": window, "stored": stored}
        return {"rows": rows}

    def read(self, rows: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self.n_step > 1:
            return self.rb.gather_nstep(rows["rows"], rows["stored"], self.gamma, self.fields, self.shape)
        return self.rb.gather(rows["rows"], self.fields, self.shape)

    def __call__(self, update_actor: bool, average: bool) -> dict[str, torch.Tensor]:
        if self.rows_in:
            return self.step(self.rows(), (update_actor, average))
        return self.step(self.read(self.rows()), (update_actor, average))


def snapshot(modules: dict[str, Any], n_updates: int, np_rng: np.random.Generator, envs: VecEnv) -> dict:
    """state_dicts of networks/optimizers/tensors plus counters and every RNG state."""
    out = {k: (m.detach().clone() if isinstance(m, torch.Tensor) else m.state_dict()) for k, m in modules.items()}
    return {**out, "n_updates": n_updates, "rng": ckpt.rng_state(np_rng), "envs": envs.state_dict()}


def restore(run: Run, modules: dict[str, Any], rb: ReplayBuffer, envs: VecEnv,
            np_rng: np.random.Generator) -> tuple[np.ndarray, int, int]:
    """Load the run's latest checkpoint into ``modules``, the buffer, RNGs and envs; returns
    (obs to act on, env step, update count)."""
    s = run.resume_state
    for k, m in modules.items():
        if isinstance(m, torch.Tensor):
            with torch.no_grad():
                m.copy_(s[k])
        else:
            m.load_state_dict(s[k])
    if run.resume_buffer is None:
        raise HeronError(f"{run.run_dir}: the latest checkpoint has no replay buffer file")
    rb.load_state_dict(run.resume_buffer)
    # Episodes in flight at the checkpoint are cut here: their last stored step becomes a
    # truncation, so sequence sampling never joins them to the episodes that start on resume.
    rb.mark_truncated(~np.asarray(s["envs"]["fresh"], bool))
    ckpt.set_rng_state(s["rng"], np_rng)
    obs = envs.load_state_dict(s["envs"])
    return obs, int(s["step"]), int(s["n_updates"])
