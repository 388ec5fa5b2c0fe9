"""TD3, read top to bottom, following the 15-step walkthrough of Fujimoto et al. (2018):

  1 replay buffer   2 actor   3 twin critics   4 sample a batch   5 target actor   6 smoothing noise
  7 target critics  8 min of the two   9 y = r + gamma * (1 - terminated) * min   10 current Qs
  11 critic loss    12 critic step   13 every d steps: actor loss through Q1   14-15 Polyak targets

The update is a pure tensor function ``batch -> metrics`` (no ``.item()``), so ``--compile`` can wrap it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from heron.accel.acting import Acting, Policy, as_like
from heron.accel.step import Learn, build_step
from heron.algos import offpolicy
from heron.algos.td3 import losses
from heron.algos.td3.config import Config
from heron.algos.td3.networks import Actor, Critic, NumpyActor, build
from heron.envs.make import probe_spaces, require_box_actions, require_vector_obs
from heron.envs.native import require_vector_entry_point, vector_env
from heron.ops.adam import adam
from heron.rl.buffers import STEP_FIELDS, discount
from heron.rl.losses import critic_metrics
from heron.rl.nets import Polyak, requires_grad
from heron.runtime.run import Run

if TYPE_CHECKING:
    from heron.accel.precision import Precision


def check(cfg: Config) -> dict:
    """Reject an env whose spaces TD3 cannot handle, before a run directory exists; returns the
    spaces a checkpoint saves (resume and eval compare them)."""
    obs_space, act_space = probe_spaces(cfg.env_id)
    require_box_actions(act_space, "td3", cfg.env_id)
    require_vector_obs(obs_space, "td3", cfg.env_id)
    if cfg.vector_mode == "native":
        require_vector_entry_point(cfg.env_id)
    return offpolicy.spaces_of(obs_space, act_space)


def _build(cfg: Config, spaces: dict) -> tuple[Actor, Critic]:
    return build(
        spaces["obs_shape"][0], spaces["action_low"], spaces["action_high"], tuple(cfg.hidden_sizes), cfg.obs_norm
    )


def load_policy(cfg: Config, state: dict, device: str | torch.device = "cpu") -> Policy:
    actor, _ = _build(cfg, state["spaces"])
    actor.load_state_dict(state["actor"])
    return Policy(actor, tuple(state["spaces"]["obs_shape"]), 0, device)


@dataclass
class Nets:
    """What a gradient step works on."""

    actor: Actor
    critic: Critic
    actor_target: Actor
    critic_target: Critic
    actor_opt: torch.optim.Optimizer
    q_opt: torch.optim.Optimizer


def make_update(
    cfg: Config, nets: Nets, prec: Precision
) -> Callable[[dict[str, torch.Tensor], bool], dict[str, torch.Tensor]]:
    """The readable gradient step, through autograd: ``update(batch, update_actor) -> metrics``
    (``heron.accel.handwritten.td3`` is the same step written out; the step builder checks the two
    agree before a run takes it)."""
    actor, critic, actor_target, critic_target = nets.actor, nets.critic, nets.actor_target, nets.critic_target
    actor_opt, q_opt = nets.actor_opt, nets.q_opt
    actor_params, critic_params = list(actor.parameters()), list(critic.parameters())
    scale, low, high = actor.scale, actor.low, actor.high

    def update(batch: dict[str, torch.Tensor], update_actor: bool) -> dict[str, torch.Tensor]:
        obs, next_obs = batch["obs"], batch["next_obs"]  # step 4: [B, D]
        with torch.no_grad():
            noise = torch.randn_like(batch["actions"]) * cfg.policy_noise  # step 6
            next_actions = losses.smoothed_target_actions(
                actor_target(next_obs), noise, cfg.noise_clip, scale, low, high
            )  # steps 5-6
            next_q = critic_target(next_obs, next_actions)  # step 7: [2, B]
            target = losses.td_target(
                batch["rewards"], batch["terminated"], next_q, discount(batch, cfg.gamma)
            )  # steps 8-9
        q = critic(obs, batch["actions"])  # step 10: [2, B]
        qf_losses = losses.critic_losses(q, target)  # step 11
        prec.optimize(q_opt, qf_losses.sum(), critic_params, cfg.max_grad_norm)  # step 12
        metrics = critic_metrics(q, qf_losses)
        if update_actor:  # step 13: delayed policy update through Q1
            requires_grad(critic_params, False)  # the actor loss needs dQ1/da only, not critic weight grads
            actor_loss = losses.actor_loss(critic.q1(obs, actor(obs)))
            requires_grad(critic_params, True)
            prec.optimize(actor_opt, actor_loss, actor_params, cfg.max_grad_norm)
            metrics["losses/actor_loss"] = actor_loss.detach()
        prec.update()
        return metrics

    update.fields = STEP_FIELDS  # type: ignore[attr-defined]  # what it reads of a batch (Learn)
    return update


def train(cfg: Config, run: Run) -> dict:
    device = run.device
    N = run.local(cfg.num_envs)  # this process's envs (all of them without torchrun)
    envs = run.own(vector_env(cfg, N, run.env_seed(N), device))
    spaces = offpolicy.spaces_of(envs.single_observation_space, envs.single_action_space)
    A = len(spaces["action_low"])

    # -- steps 1-3: buffer, actor and twin critics with their targets ---------------------------------
    actor, critic = _build(cfg, spaces)
    actor, critic = actor.to(device), critic.to(device)
    norm = actor.norm  # shared; targets normalize with the live statistics
    actor_target = copy.deepcopy(actor)
    actor_target.requires_grad_(False)
    critic_target = copy.deepcopy(critic)
    critic_target.requires_grad_(False)
    actor_target.norm = critic_target.norm = norm
    run.sync_start(actor=actor, critic=critic)
    prec = run.precision
    prec.apply(actor, critic, actor_target, critic_target)  # --precision: autocast around their layers
    actor_params, critic_params = list(actor.parameters()), list(critic.parameters())
    actor_opt = adam(actor_params, cfg.policy_lr)
    q_opt = adam(critic_params, cfg.q_lr)
    rb = offpolicy.replay_buffer(cfg, run, envs, device)
    np_rng = np.random.default_rng(run.rank_seed())  # random actions before learning starts, exploration noise

    nets = Nets(actor, critic, actor_target, critic_target, actor_opt, q_opt)
    update = build_step(cfg, make_update(cfg, nets, prec), "td3", nets, prec, record=False, log=run.logger.print)
    polyak = Polyak((actor_target, actor), (critic_target, critic))
    # steps 4-15: sample, update, and after a delayed actor step average the targets
    learn = Learn(cfg, update, rb, (run.local(cfg.batch_size),), polyak, (actor_opt, q_opt))

    def policy_state() -> dict:
        return {"actor": actor.state_dict(), "spaces": spaces}

    saved = {
        "critic": critic,
        "actor_target": actor_target,
        "critic_target": critic_target,
        "actor_opt": actor_opt,
        "q_opt": q_opt,
    }

    def full_state() -> dict:
        return {**policy_state(), **offpolicy.snapshot(saved, n_updates, np_rng, envs)}

    def checkpoint_state() -> tuple[dict, dict]:
        return full_state(), rb.state_dict()

    global_step, n_updates = 0, 0
    obs = envs.reset()
    if run.resume_state is not None:
        obs, global_step, n_updates = offpolicy.restore(run, {"actor": actor, **saved}, rb, envs, np_rng)
    policy = Policy(actor, tuple(spaces["obs_shape"]), 0, device)
    metrics: dict[str, torch.Tensor] = {}
    low_np, high_np = spaces["action_low"].numpy(), spaces["action_high"].numpy()
    low, high = spaces["action_low"].to(device), spaces["action_high"].to(device)
    noise_std = cfg.exploration_noise * (high_np - low_np) / 2
    acting = Acting(actor, NumpyActor.of(actor, N, mixed=True), device, cfg)  # the greedy actions, as numpy arrays
    while global_step < cfg.total_steps:
        if global_step < cfg.learning_starts:
            actions = as_like(np_rng.uniform(low_np, high_np, size=(N, A)).astype(np.float32), obs)
        else:
            greedy = acting.act(obs)
            noise = np_rng.normal(0.0, 1.0, size=greedy.shape) * noise_std
            if envs.tensors:  # a tensor env's actions stay tensors, beside the actor's
                greedy_t = cast(torch.Tensor, greedy)
                actions = torch.clamp(greedy_t + as_like(noise.astype(np.float32), greedy_t), low, high)
            else:
                actions = np.clip(greedy + noise, low_np, high_np).astype(np.float32)
        step = envs.step(actions)
        prev_step, global_step = global_step, global_step + cfg.num_envs  # every rank's envs
        offpolicy.store(rb, norm, obs, actions, step)
        obs = step.obs
        for _, ret, length in step.episodes:
            run.logger.episode(global_step, ret, length)

        if global_step > cfg.learning_starts:
            delays = [(n_updates + k) % cfg.policy_frequency == 0 for k in range(1, cfg.gradient_steps + 1)]
            acting.before_updates(obs, actor_moves=any(delays), last=global_step >= cfg.total_steps)
            for delayed in delays:
                n_updates += 1
                metrics.update(run.watch(learn(delayed, delayed), global_step))

        run.after_step(
            global_step,
            prev_step,
            metrics,
            {"charts/learning_rate": cfg.policy_lr},
            policy,
            policy_state,
            checkpoint_state,
        )

    return run.finish(global_step, policy, policy_state, checkpoint_state)
