"""Soft Actor-Critic, read top to bottom (Haarnoja et al. 2018; CleanRL's sac_continuous_action.py,
with skrl's options: gradient clipping, learning-rate schedules).

The feed-forward algorithm: networks and optimizers (``agent.py``), one gradient step ``update`` on
a batch of transitions [B, ...], and the loop. The step is a pure tensor function ``batch ->
metrics``: no ``.item()``, no env access, so ``--compile`` and ``--cuda-graphs`` can wrap it. With
recurrent networks (``--recurrent lstm|gru``) the run is ``heron.algos.sac.recurrent``'s: the same
losses and networks over sequences.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from heron.accel.acting import Policy, as_like
from heron.accel.step import Learn, build_step
from heron.algos import offpolicy
from heron.algos.sac import crossq, losses, recurrent
from heron.algos.sac.agent import Nets, check, load_policy, make_nets
from heron.algos.sac.config import Config
from heron.algos.sac.networks import make_acting
from heron.envs.native import vector_env
from heron.rl.buffers import discount
from heron.rl.losses import critic_metrics
from heron.rl.nets import Polyak, requires_grad
from heron.rl.schedules import lr_lambda, set_lr
from heron.runtime.run import Run

if TYPE_CHECKING:
    from heron.accel.precision import Precision

__all__ = ["check", "load_policy", "make_update", "train"]


def make_update(
    cfg: Config, nets: Nets, prec: Precision
) -> Callable[[dict[str, torch.Tensor], bool], dict[str, torch.Tensor]]:
    """The readable gradient step, through autograd: ``update(batch, update_actor) -> metrics``
    (``heron.accel.handwritten.sac`` is the same step written out; the step builder checks the two
    agree before a run takes it)."""
    actor, critic, critic_target, alpha = nets.actor, nets.critic, nets.critic_target, nets.current_alpha
    assert critic_target is not None, "SAC's target critics"
    actor_params, critic_params = list(actor.parameters()), list(critic.parameters())

    def update(batch: dict[str, torch.Tensor], update_actor: bool) -> dict[str, torch.Tensor]:
        obs, next_obs, actions = batch["obs"], batch["next_obs"], batch["actions"]  # [B, D], [B, D], [B, A]
        # y = r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s')),  a' ~ pi(.|s')
        with torch.no_grad():
            next_actions, next_log_prob = actor.sample(actor.features(next_obs))
            next_q = critic_target.values(critic_target.features(next_obs), next_actions)  # [E, B]
            target = losses.soft_q_target(
                batch["rewards"], batch["terminated"], next_q, next_log_prob, alpha(), discount(batch, cfg.gamma)
            )
        q = critic.values(critic.features(obs), actions)  # [E, B]
        qf_losses = losses.critic_losses(q, target)  # [E]
        prec.optimize(nets.q_opt, qf_losses.sum(), critic_params, cfg.max_grad_norm)
        metrics = critic_metrics(q, qf_losses)
        if update_actor:
            # CleanRL: every policy_frequency steps, policy_frequency actor steps (compensating delay)
            with torch.no_grad():
                q_in = critic.features(obs)  # [E, B, F] (the updated critics')
            requires_grad(critic_params, False)  # the actor loss needs dQ/da only, not critic weight grads
            for _ in range(cfg.policy_frequency):
                pi_actions, log_prob = actor.sample(actor.features(obs))
                actor_loss = losses.actor_loss(log_prob, critic.values(q_in, pi_actions), alpha())
                prec.optimize(nets.actor_opt, actor_loss, actor_params, cfg.max_grad_norm)
                metrics["losses/actor_loss"] = actor_loss.detach()
                if cfg.autotune:
                    alpha_loss = losses.alpha_loss(nets.log_alpha, log_prob, nets.target_entropy)
                    prec.optimize(nets.alpha_opt, alpha_loss, [nets.log_alpha])
                    metrics["losses/alpha_loss"] = alpha_loss.detach()
            requires_grad(critic_params, True)
            metrics["losses/alpha"] = alpha()
        prec.update()
        return metrics

    return update


def train(cfg: Config, run: Run) -> dict:
    if cfg.recurrent != "none":
        return recurrent.train(cfg, run)
    device = run.device
    N = run.local(cfg.num_envs)  # this process's envs (all of them without torchrun)
    envs = run.own(vector_env(cfg, N, run.env_seed(N), device))
    spaces = offpolicy.spaces_of(envs.single_observation_space, envs.single_action_space)
    nets = make_nets(cfg, run, spaces)
    actor = nets.actor
    total_updates = max(1, (cfg.total_steps - cfg.learning_starts) // cfg.num_envs * cfg.gradient_steps)
    lr_factor = lr_lambda(cfg.lr_schedule, total_updates)  # of the update count (skrl's schedulers)
    rb = offpolicy.replay_buffer(cfg, run, envs, device)
    np_rng = np.random.default_rng(run.rank_seed())  # uniform actions before learning starts

    # -- one gradient step: sample, update, average the targets -------------------------------------
    prec = run.precision
    readable = (crossq.make_update if cfg.crossq else make_update)(cfg, nets, prec)
    update = build_step(cfg, readable, "sac", nets, prec, record=False, log=run.logger.print)
    polyak = Polyak((nets.critic_target, nets.critic)) if nets.critic_target is not None else Polyak()  # CrossQ: none
    optimizers = (nets.actor_opt, nets.q_opt, nets.alpha_opt)
    learn = Learn(cfg, update, rb, (run.local(cfg.batch_size),), polyak, optimizers)  # this process's share

    def policy_state() -> dict:
        return {"actor": actor.state_dict(), "spaces": spaces}

    def checkpoint_state() -> tuple[dict, dict]:
        return {**policy_state(), **offpolicy.snapshot(nets.saved(), n_updates, np_rng, envs)}, rb.state_dict()

    # -- start or resume ----------------------------------------------------------------------------
    global_step, n_updates = 0, 0
    obs = envs.reset()
    if run.resume_state is not None:
        obs, global_step, n_updates = offpolicy.restore(run, {"actor": actor, **nets.saved()}, rb, envs, np_rng)
    policy = Policy(actor, tuple(spaces["obs_shape"]), 0, device)
    acting = make_acting(actor, N, device, cfg, envs.tensors)
    metrics: dict[str, torch.Tensor] = {}
    low, high = envs.single_action_space.low, envs.single_action_space.high

    # -- the loop -----------------------------------------------------------------------------------
    while global_step < cfg.total_steps:
        if global_step < cfg.learning_starts:
            actions = as_like(np_rng.uniform(low, high, size=(N, actor.action_dim)).astype(np.float32), obs)
        else:
            actions = acting.act(obs)
        step = envs.step(actions)
        prev_step, global_step = global_step, global_step + cfg.num_envs  # every rank's envs
        offpolicy.store(rb, actor.encoder.norm, obs, actions, step)
        obs = step.obs
        for _, ret, length in step.episodes:
            run.logger.episode(global_step, ret, length)

        if global_step > cfg.learning_starts:
            actor_moves = any((n_updates + k) % cfg.policy_frequency == 0 for k in range(1, cfg.gradient_steps + 1))
            acting.before_updates(obs, actor_moves, last=global_step >= cfg.total_steps)
            for _ in range(cfg.gradient_steps):
                if cfg.lr_schedule != "constant":  # (under --cuda-graphs each set_lr is a kernel launch)
                    set_lr(nets.actor_opt, cfg.policy_lr * lr_factor(n_updates))
                    set_lr(nets.q_opt, cfg.q_lr * lr_factor(n_updates))
                n_updates += 1
                trains_actor = n_updates % cfg.policy_frequency == 0
                averages = n_updates % cfg.target_network_frequency == 0
                metrics.update(run.watch(learn(trains_actor, averages), global_step))

        lr = cfg.policy_lr * lr_factor(max(n_updates - 1, 0))  # the latest update's
        run.after_step(
            global_step, prev_step, metrics, {"charts/learning_rate": lr}, policy, policy_state, checkpoint_state
        )

    return run.finish(global_step, policy, policy_state, checkpoint_state)
