"""Recurrent SAC (``--recurrent lstm|gru``; skrl's SAC_RNN): SAC's losses and networks over
sequences [B, L, ...] of ``--sequence-length`` steps, unrolled from the recurrent states stored at
collection time (``--burn-in`` steps only warm them), with a loop that carries the actor's and the
critics' states from env step to env step and zeroes them where episodes start.

The feed-forward algorithm is ``heron.algos.sac.train``; this module shares its losses
(``losses.py``), networks (``networks.py``) and optimizers (``agent.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from heron.accel.acting import Policy, as_like
from heron.accel.step import Learn, build_step
from heron.algos import offpolicy
from heron.algos.sac import losses
from heron.algos.sac.agent import Nets, make_nets
from heron.algos.sac.config import Config
from heron.envs.native import vector_env
from heron.errors import HeronError
from heron.rl.buffers import discount
from heron.rl.losses import critic_metrics
from heron.rl.nets import Polyak, requires_grad
from heron.rl.schedules import lr_lambda, set_lr
from heron.runtime.run import Run

if TYPE_CHECKING:
    from heron.accel.precision import Precision


def _flat(x: torch.Tensor | float) -> torch.Tensor | float:
    return x.flatten() if isinstance(x, torch.Tensor) else x


def make_update(
    cfg: Config, nets: Nets, prec: Precision
) -> Callable[[dict[str, torch.Tensor], bool], dict[str, torch.Tensor]]:
    """The gradient step on sequences, through autograd: ``update(batch, update_actor) -> metrics``,
    batch fields [B, L, ...] with the recurrent states stored before each sequence's first step."""
    actor, critic, critic_target = nets.actor, nets.critic, nets.critic_target
    assert critic_target is not None, "SAC's target critics"
    log_alpha, current_alpha, target_entropy = nets.log_alpha, nets.current_alpha, nets.target_entropy
    actor_opt, q_opt, alpha_opt = nets.actor_opt, nets.q_opt, nets.alpha_opt
    actor_params, critic_params = list(actor.parameters()), list(critic.parameters())

    def update(batch: dict[str, torch.Tensor], update_actor: bool) -> dict[str, torch.Tensor]:
        obs, next_obs = batch["obs"], batch["next_obs"]  # [B, L, D]
        B, L = obs.shape[:2]
        done = batch["terminated"] | batch["truncated"]  # [B, L]
        starts = torch.cat(
            [torch.zeros_like(done[:, :1]), done[:, :-1]], 1
        )  # obs[t] opens an episode after a done at t-1
        a_state0 = batch["actor_state"][:, 0]  # [B, S]
        c_state0 = batch["critic_state"][:, 0]  # [B, E, S]
        keep = slice(cfg.burn_in, None)  # burn-in steps only warm the recurrent state

        with torch.no_grad():
            _, a_states = actor.encoder(obs, a_state0, starts)  # [B, L, S]
            # next features: one more recurrent step on next_obs from the state after obs[t]
            next_a_feats, _ = actor.encoder.step(next_obs.flatten(0, 1), a_states.flatten(0, 1))
            next_actions, next_log_prob = actor.sample(next_a_feats)  # [B*L, A], [B*L]
            _, tq_states = critic_target.encode(obs, c_state0, starts)  # [B, L, E, S]
            tq_feats, _ = critic_target.encode_step(next_obs.flatten(0, 1), tq_states.flatten(0, 1))
            next_q = critic_target.values(tq_feats, next_actions)  # [E, B*L]
            target = losses.soft_q_target(
                batch["rewards"].flatten(),
                batch["terminated"].flatten(),
                next_q,
                next_log_prob,
                current_alpha(),
                _flat(discount(batch, cfg.gamma)),
            ).view(B, L)

        q_feats, _ = critic.encode(obs, c_state0, starts)  # [E, B, L, F]
        q = critic.values(q_feats[:, :, keep].flatten(1, 2), batch["actions"][:, keep].flatten(0, 1))  # [E, M]
        qf_losses = losses.critic_losses(q, target[:, keep].flatten())  # [E]
        prec.optimize(q_opt, qf_losses.sum(), critic_params, cfg.max_grad_norm)
        metrics = critic_metrics(q, qf_losses)

        if update_actor:
            # CleanRL: every policy_frequency steps, policy_frequency actor steps (compensating delay)
            with torch.no_grad():  # critic features after its update step
                q_in = critic.encode(obs, c_state0, starts)[0][:, :, keep].flatten(1, 2)  # [E, M, F]
            requires_grad(critic_params, False)  # the actor loss needs dQ/da only, not critic weight grads
            for _ in range(cfg.policy_frequency):
                a_feats, _ = actor.encoder(obs, a_state0, starts)  # [B, L, F]
                actions, log_prob = actor.sample(a_feats[:, keep].flatten(0, 1))
                actor_loss = losses.actor_loss(log_prob, critic.values(q_in, actions), current_alpha())
                prec.optimize(actor_opt, actor_loss, actor_params, cfg.max_grad_norm)
                metrics["losses/actor_loss"] = actor_loss.detach()
                if cfg.autotune:
                    alpha_loss = losses.alpha_loss(log_alpha, log_prob, target_entropy)
                    prec.optimize(alpha_opt, alpha_loss, [log_alpha])
                    metrics["losses/alpha_loss"] = alpha_loss.detach()
            requires_grad(critic_params, True)
            metrics["losses/alpha"] = current_alpha()
        prec.update()
        return metrics

    return update


def train(cfg: Config, run: Run) -> dict:
    device = run.device
    N = run.local(cfg.num_envs)  # this process's envs (all of them without torchrun)
    envs = run.own(vector_env(cfg, N, run.env_seed(N), device))
    if getattr(envs, "mode", None) == AutoresetMode.NEXT_STEP:
        raise HeronError(
            f"{cfg.env_id}'s vector env resets in next-step mode, whose reset rows would sit inside "
            "the recurrent variant's sequences: use --vector-mode sync"
        )
    act_space = envs.single_action_space
    spaces = offpolicy.spaces_of(envs.single_observation_space, envs.single_action_space)
    A = act_space.shape[0]
    nets = make_nets(cfg, run, spaces)
    actor, critic = nets.actor, nets.critic
    total_updates = max(1, (cfg.total_steps - cfg.learning_starts) // cfg.num_envs * cfg.gradient_steps)
    lr_factor = lr_lambda(cfg.lr_schedule, total_updates)  # of the update count (skrl's schedulers)
    S = actor.encoder.state_size  # recurrent state size
    E = len(critic.encoders)

    rb = offpolicy.replay_buffer(cfg, run, envs, device, {"actor_state": (S,), "critic_state": (E, S)})
    np_rng = np.random.default_rng(run.rank_seed())  # uniform actions before learning starts

    # -- one gradient step: sample sequences, update, average the targets ---------------------------
    prec = run.precision
    update = build_step(cfg, make_update(cfg, nets, prec), "sac", nets, prec, record=False, log=run.logger.print)
    # --batch-size counts transitions: batch_size / sequence_length windows [B, L] (this process's share)
    shape = (max(1, run.local(cfg.batch_size) // cfg.sequence_length), cfg.sequence_length)
    assert nets.critic_target is not None, "SAC's target critics"
    polyak = Polyak((nets.critic_target, critic))
    optimizers = (nets.actor_opt, nets.q_opt, nets.alpha_opt)
    learn = Learn(cfg, update, rb, shape, polyak, optimizers, sequences=True)

    def policy_state() -> dict:
        return {"actor": actor.state_dict(), "spaces": spaces}

    def checkpoint_state() -> tuple[dict, dict]:
        return {**policy_state(), **offpolicy.snapshot(nets.saved(), n_updates, np_rng, envs)}, rb.state_dict()

    # -- start or resume ----------------------------------------------------------------------------
    global_step, n_updates = 0, 0
    obs = envs.reset()
    if run.resume_state is not None:
        obs, global_step, n_updates = offpolicy.restore(run, {"actor": actor, **nets.saved()}, rb, envs, np_rng)
    a_state = torch.zeros(N, S, device=device)  # recurrent states before obs (zero at episode starts)
    c_state = torch.zeros(N, E, S, device=device)
    policy = Policy(actor, tuple(spaces["obs_shape"]), S, device)
    metrics: dict[str, torch.Tensor] = {}
    low, high = act_space.low, act_space.high

    # -- the loop: the states before obs ride along with each stored transition ----------------------
    while global_step < cfg.total_steps:
        obs_t = torch.as_tensor(obs, device=device).float()
        with torch.no_grad():
            _, next_c_state = critic.encode_step(obs_t, c_state)
        actions_t, next_a_state = actor.act(obs_t, a_state, deterministic=False)
        if global_step < cfg.learning_starts:  # random actions; the actor's state still follows the episode
            actions = as_like(np_rng.uniform(low, high, size=(N, A)).astype(np.float32), obs)
        else:
            actions = as_like(actions_t, obs)
        step = envs.step(actions)
        prev_step, global_step = global_step, global_step + cfg.num_envs  # every rank's envs
        offpolicy.store(rb, actor.encoder.norm, obs, actions, step, actor_state=a_state, critic_state=c_state)
        fresh = torch.as_tensor(step.terminated | step.truncated, device=device)
        a_state = next_a_state.masked_fill(fresh[:, None], 0.0)
        c_state = next_c_state.masked_fill(fresh[:, None, None], 0.0)
        obs = step.obs
        for _, ret, length in step.episodes:
            run.logger.episode(global_step, ret, length)

        if global_step > cfg.learning_starts:
            for _ in range(cfg.gradient_steps):
                if cfg.lr_schedule != "constant":
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
