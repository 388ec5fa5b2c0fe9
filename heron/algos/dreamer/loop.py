"""The loop both Dreamers train in: it collects experience with the player, stores whole episodes in
the replay and calls the algorithm's gradient step when it is due.

Data (danijar's layout): replay entry t of an episode holds observation t, the action that led to
it (zeros at the first), the reward received on arriving there, ``is_first`` and ``is_terminal``.
An episode of K env steps is K + 1 entries. A time-limit cut leaves ``is_terminal`` 0 on the last
entry, so a continue model never learns that truncation ends the world.

Each algorithm brings a ``Learner``: its agent (everything a checkpoint's ``agent`` holds), the
player that acts in the real envs, its optimizers, its gradient step ``update(batch [T, B, ...])
-> metrics``, how many gradient steps are due, and what follows each step (the target critic).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from heron.accel.step import build_step
from heron.algos.dreamer.config import DreamerConfig
from heron.algos.dreamer.policy import DreamerPolicy
from heron.algos.dreamer.spaces import env_fn, spaces_of, to_env_actions
from heron.envs import dreamer as denvs
from heron.envs.make import VecEnv
from heron.errors import HeronError
from heron.ops import dist
from heron.ops.rng import rng_state, set_rng_state
from heron.rl.buffers import EpisodeBuffer
from heron.runtime.run import Run


def replay(cfg: DreamerConfig, run: Run, spaces: dict) -> EpisodeBuffer:
    fields = {
        k: (tuple(shape), np.dtype(dt))
        for k, (shape, dt) in spaces["obs_spec"].items()
        if k in spaces["cnn_keys"] or k in spaces["mlp_keys"]
    }
    fields.update(
        action=((spaces["action_dim"],), np.float32),
        reward=((), np.float32),
        is_first=((), np.bool_),
        is_terminal=((), np.bool_),
    )
    folder = "buffer" if run.world.is_main else f"buffer/rank{run.world.rank}"  # each rank its own files
    memmap_dir = str(run.run_dir / folder) if cfg.memmap_buffer else None
    # this process's share of --buffer-size, for its envs, sampled with its own stream
    return EpisodeBuffer(
        run.local(cfg.buffer_size),
        run.local(cfg.num_envs),
        fields,
        cfg.sequence_length,
        cfg.prioritize_ends,
        memmap_dir=memmap_dir,
        seed=run.rank_seed(),
        cross_episodes=cfg.buffer_type == "sequential",
    )


# -- the loop -----------------------------------------------------------------------------------------
@dataclass
class Learner:
    """An algorithm's part of the loop (module doc)."""

    agent: torch.nn.Module
    player: Any  # the algorithm's Player (act, initial_state, state_size)
    optimizers: dict[str, torch.optim.Optimizer]
    update: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]
    due: Callable[[int, int, int], int]  # (global step, previous step, gradient steps so far) -> steps due now
    after_update: Callable[[int], None]  # called with the count of gradient steps after each one
    warn_terminations: bool = False  # DreamerV2 without a continue model: say once that terminations go unseen


def start(
    cfg: DreamerConfig,
    run: Run,
    spaces: dict,
    build: Callable[[Any, dict], Any],
    make_optimizers: Callable[[Any, Any], dict[str, torch.optim.Optimizer]],
    make_update: Callable[..., Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]],
) -> tuple[Any, dict[str, torch.optim.Optimizer], Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]]:
    """A Dreamer's agent on the run's device (the same weights on every rank), its optimizers
    (``world_opt``, ``actor_opt``, ``critic_opt``) and its gradient step ``make_update(cfg, agent,
    spaces, world_opt, actor_opt, critic_opt, precision)`` as the run takes it (``build_step``)."""
    agent = build(cfg, spaces).to(run.device)
    run.sync_start(agent=agent)
    optimizers = make_optimizers(cfg, agent)
    run.precision.apply(agent)  # --precision: autocast around its layers (the player shares them)
    update = make_update(
        cfg, agent, spaces, optimizers["world_opt"], optimizers["actor_opt"], optimizers["critic_opt"], run.precision
    )
    return agent, optimizers, build_step(cfg, update, log=run.logger.print)


def train(cfg: DreamerConfig, run: Run, make_learner: Callable[[Run, dict], Learner]) -> dict:
    """Collect experience with the player, store whole episodes, and take the gradient steps the
    learner says are due once ``--learning-starts`` agent steps of random actions are stored."""
    device = run.device
    N = run.local(cfg.num_envs)  # this process's envs (all of them without torchrun)
    envs = run.own(
        denvs.NativeStates(cfg.env_id, N, run.env_seed(N))
        if cfg.vector_mode == "native"
        else VecEnv(cfg.env_id, N, run.env_seed(N), cfg.vector_mode, env_fn=functools.partial(env_fn, cfg))
    )
    spaces = spaces_of(cfg, envs.single_observation_space, envs.single_action_space)
    keys = list(spaces["cnn_keys"]) + list(spaces["mlp_keys"])
    A, discrete = spaces["action_dim"], spaces["discrete"]
    np_rng = np.random.default_rng(run.rank_seed())  # random actions before learning starts
    rb = replay(cfg, run, spaces)
    learner = make_learner(run, spaces)
    agent, player, optimizers = learner.agent, learner.player, learner.optimizers

    def sample_batch() -> dict[str, torch.Tensor]:
        """[T, B, ...] tensors on the device; images stay uint8 until there."""
        data = rb.sample(cfg.per_rank_batch_size)
        return {
            k: torch.from_numpy(np.ascontiguousarray(np.swapaxes(v, 0, 1))).to(device, non_blocking=True)
            for k, v in data.items()
        }

    def policy_state() -> dict:
        return {"actor": player.state_dict(), "spaces": spaces}

    def full_state() -> dict:
        return {
            **policy_state(),
            "agent": agent.state_dict(),
            **{k: o.state_dict() for k, o in optimizers.items()},
            "n_updates": n_updates,
            "rng": rng_state(np_rng),
            "envs": envs.state_dict(),
        }

    def buffer_state() -> dict:
        state = rb.state_dict()
        # an env whose episode has just started holds only its first entry: resume replays that reset
        fresh = envs.episode_lengths == 0
        state["staging"] = [None if fresh[i] else s for i, s in enumerate(state["staging"])]
        return state

    def checkpoint_state() -> tuple[dict, dict]:
        return full_state(), buffer_state()

    # -- start or resume ------------------------------------------------------------------------------
    global_step, n_updates = 0, 0
    obs = envs.reset()
    if run.resume_state is not None:
        s = run.resume_state
        agent.load_state_dict(s["agent"])
        for k, o in optimizers.items():
            o.load_state_dict(s[k])
        if run.resume_buffer is None:
            raise HeronError(f"{run.run_dir}: the latest checkpoint has no replay buffer file")
        rb.load_state_dict(run.resume_buffer)
        set_rng_state(s["rng"], np_rng)
        obs = envs.load_state_dict(s["envs"])
        global_step, n_updates = int(s["step"]), int(s["n_updates"])
        run.resume_buffer = None  # the mapped file is in place now

    def first_entries(o: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {
            **{k: o[k] for k in keys},
            "action": np.zeros((N, A), np.float32),
            "reward": np.zeros(N, np.float32),
            "is_first": np.ones(N, bool),
            "is_terminal": np.zeros(N, bool),
        }

    rb.add(first_entries(obs), np.zeros(N, bool))
    is_first = torch.ones(N, dtype=torch.bool, device=device)
    p_state = torch.zeros(N, player.state_size, device=device)  # is_first: the player starts it afresh
    policy = DreamerPolicy(player, spaces, device)
    metrics: dict[str, torch.Tensor] = {}
    warned_terminal = not learner.warn_terminations
    warned_short = cfg.buffer_type == "sequential"

    # -- the loop -------------------------------------------------------------------------------------
    while global_step < cfg.total_steps:
        if global_step < cfg.learning_starts:
            # uniform random actions from the run's seeded generator (saved in checkpoints)
            if discrete:
                env_actions = np_rng.integers(0, A, size=N)
                actions = np.eye(A, dtype=np.float32)[env_actions]
            else:
                actions = np_rng.uniform(-1.0, 1.0, size=(N, A)).astype(np.float32)
                env_actions = to_env_actions(torch.from_numpy(actions), spaces)
        else:
            obs_t = {k: torch.as_tensor(obs[k], device=device) for k in keys}
            actions_t, p_state = player.act(obs_t, p_state, False, is_first)
            actions = actions_t.cpu().numpy().astype(np.float32)
            env_actions = to_env_actions(actions_t, spaces)
        step = envs.step(env_actions)
        done = step.terminated | step.truncated
        # a native env's reset rows are no transition (step.valid), and its episodes begin there (step.started)
        rb.add(
            {
                **{k: step.next_obs[k] for k in keys},
                "action": actions,
                "reward": step.rewards,
                "is_first": np.zeros(N, bool),
                "is_terminal": step.terminated,
            },
            done,
            mask=step.valid,
        )
        started = done if step.started is None else step.started
        if started.any():
            rb.add(first_entries(step.obs), np.zeros(N, bool), mask=started)
        is_first = torch.as_tensor(started, device=device)
        if not warned_terminal and step.terminated.any():
            warned_terminal = True
            run.logger.warn(
                f"{cfg.env_id} ends episodes by termination but --use-continues is off: imagined "
                "returns will not see those ends (pass --use-continues)"
            )
        if not warned_short and rb.short_episodes:
            warned_short = True
            run.logger.warn(
                f"{cfg.env_id} ended an episode shorter than --sequence-length {cfg.sequence_length}: "
                "the episode buffer never samples such episodes (--buffer-type sequential does)"
            )
        obs = step.obs
        prev_step, global_step = global_step, global_step + cfg.num_envs  # every rank's envs
        for _, ret, length in step.episodes:
            run.logger.episode(global_step, ret, length)

        # -- training (under torchrun every rank must be able to sample, or none trains: one collective
        # per step)
        if global_step >= cfg.learning_starts and dist.all_ranks(rb.sampleable()):
            for _ in range(learner.due(global_step, prev_step, n_updates)):
                metrics = run.watch(learner.update(sample_batch()), global_step)
                n_updates += 1
                learner.after_update(n_updates)

        run.after_step(
            global_step,
            prev_step,
            metrics,
            {"charts/gradient_steps": n_updates, "charts/buffer_steps": len(rb)},
            policy,
            policy_state,
            checkpoint_state,
        )

    return run.finish(global_step, policy, policy_state, checkpoint_state)
