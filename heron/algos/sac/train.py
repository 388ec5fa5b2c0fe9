"""Soft Actor-Critic, read top to bottom (CleanRL's sac_continuous_action.py, with skrl's options:
gradient clipping, learning-rate schedules, recurrent networks).

One update step (``update``) is a pure tensor function ``batch -> metrics``: no ``.item()``, no
env access, so ``--compile`` can wrap it. Batches are sequences ``[B, L, ...]``; the feed-forward
variant uses L = 1 and the recurrent one (``--recurrent lstm|gru``) L = ``--sequence-length``,
unrolled from the hidden states stored at collection time.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from heron.accel.acting import Acting, Policy, as_like
from heron.accel.step import Learn, build_step
from heron.algos import offpolicy
from heron.algos.sac import losses
from heron.algos.sac.config import Config
from heron.algos.sac.networks import Actor, Critic, NumpyActor, build, draw
from heron.envs.make import probe_spaces, require_box_actions, require_vector_obs
from heron.envs.native import require_vector_entry_point, vector_env
from heron.errors import HeronError
from heron.ops import dist
from heron.ops.adam import adam
from heron.rl.buffers import discount
from heron.rl.nets import Polyak, requires_grad
from heron.rl.schedules import lr_lambda, set_lr
from heron.runtime.run import Run

if TYPE_CHECKING:
    from heron.accel.precision import Precision


def check(cfg: Config) -> dict:
    """Reject an env whose spaces SAC cannot handle, before a run directory exists; returns the
    spaces a checkpoint saves (resume and eval compare them)."""
    obs_space, act_space = probe_spaces(cfg.env_id)
    require_box_actions(act_space, "sac", cfg.env_id)
    require_vector_obs(obs_space, "sac", cfg.env_id)
    if cfg.vector_mode == "native":
        require_vector_entry_point(cfg.env_id)
    return offpolicy.spaces_of(obs_space, act_space)


def _build(cfg: Config, spaces: dict) -> tuple[Actor, Critic]:
    return build(
        spaces["obs_shape"][0],
        spaces["action_low"],
        spaces["action_high"],
        tuple(cfg.hidden_sizes),
        cfg.obs_norm,
        cfg.recurrent,
        cfg.rnn_hidden_size,
    )


@dataclass
class Nets:
    """What a gradient step works on."""

    actor: Actor
    critic: Critic
    critic_target: Critic
    actor_opt: torch.optim.Optimizer
    q_opt: torch.optim.Optimizer
    alpha_opt: torch.optim.Optimizer
    log_alpha: torch.Tensor
    current_alpha: Callable[[], torch.Tensor]
    target_entropy: float


def load_policy(cfg: Config, state: dict, device: str | torch.device = "cpu") -> Policy:
    actor, _ = _build(cfg, state["spaces"])
    actor.load_state_dict(state["actor"])
    return Policy(actor, tuple(state["spaces"]["obs_shape"]), actor.encoder.state_size, device)


def _flat(x: torch.Tensor | float) -> torch.Tensor | float:
    return x.flatten() if isinstance(x, torch.Tensor) else x


def make_update(
    cfg: Config, nets: Nets, prec: Precision
) -> Callable[[dict[str, torch.Tensor], bool], dict[str, torch.Tensor]]:
    """The readable gradient step, through autograd: ``update(batch, update_actor) -> metrics``
    (``heron.accel.handwritten.sac`` is the same step written out, for feed-forward networks; the
    step builder checks the two agree before a run takes it)."""
    actor, critic, critic_target = nets.actor, nets.critic, nets.critic_target
    log_alpha, current_alpha, target_entropy = nets.log_alpha, nets.current_alpha, nets.target_entropy
    actor_opt, q_opt, alpha_opt = nets.actor_opt, nets.q_opt, nets.alpha_opt
    S, E = actor.encoder.state_size, len(critic.encoders)
    actor_params, critic_params = list(actor.parameters()), list(critic.parameters())

    def update(batch: dict[str, torch.Tensor], update_actor: bool) -> dict[str, torch.Tensor]:
        obs, next_obs = batch["obs"], batch["next_obs"]  # [B, L, D]
        B, L = obs.shape[:2]
        done = batch["terminated"] | batch["truncated"]  # [B, L]
        starts = torch.cat(
            [torch.zeros_like(done[:, :1]), done[:, :-1]], 1
        )  # obs[t] opens an episode after a done at t-1
        zeros = obs.new_zeros(B, 0)
        a_state0 = batch["actor_state"][:, 0] if S else zeros  # [B, S]
        c_state0 = batch["critic_state"][:, 0] if S else zeros.new_zeros(B, E, 0)  # [B, E, S]
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
        metrics = {
            "losses/qf1_values": q[0].mean().detach(),
            "losses/qf2_values": q[1].mean().detach(),
            "losses/qf1_loss": qf_losses[0].detach(),
            "losses/qf2_loss": qf_losses[1].detach(),
            "losses/qf_loss": qf_losses.detach().mean(),
        }

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
    if cfg.recurrent != "none" and getattr(envs, "mode", None) == AutoresetMode.NEXT_STEP:
        raise HeronError(
            f"{cfg.env_id}'s vector env resets in next-step mode, whose reset rows would sit inside "
            "the recurrent variant's sequences: use --vector-mode sync"
        )
    act_space = envs.single_action_space
    spaces = offpolicy.spaces_of(envs.single_observation_space, envs.single_action_space)
    A = act_space.shape[0]

    # -- networks and optimizers (CleanRL's: separate policy and Q learning rates) -----------------
    actor, critic = _build(cfg, spaces)
    actor, critic = actor.to(device), critic.to(device)
    norm = actor.encoder.norm  # shared by actor and critics; statistics saved in their state_dicts
    critic_target = copy.deepcopy(critic)
    critic_target.requires_grad_(False)
    for enc in critic_target.encoders:
        enc.norm = norm  # targets normalize with the live statistics
    run.sync_start(actor=actor, critic=critic)
    prec = run.precision
    prec.apply(actor, critic, critic_target)  # --precision: autocast around their layers
    actor_params, critic_params = list(actor.parameters()), list(critic.parameters())
    actor_opt = adam(actor_params, cfg.policy_lr)
    q_opt = adam(critic_params, cfg.q_lr)
    target_entropy = -cfg.target_entropy_scale * A  # -|A| (SAC v2)
    log_alpha = torch.tensor(math.log(cfg.alpha) if cfg.autotune else 0.0, device=device, requires_grad=cfg.autotune)
    fixed_alpha = torch.tensor(cfg.alpha, device=device)

    def current_alpha() -> torch.Tensor:
        return log_alpha.detach().exp() if cfg.autotune else fixed_alpha

    alpha_opt = adam([log_alpha], cfg.q_lr)  # CleanRL: alpha shares the Q lr
    total_updates = max(1, (cfg.total_steps - cfg.learning_starts) // cfg.num_envs * cfg.gradient_steps)
    lr_factor = lr_lambda(cfg.lr_schedule, total_updates)  # of the update count (skrl's schedulers)
    S = actor.encoder.state_size  # recurrent state size (0 for the feed-forward variant)
    E = len(critic.encoders)

    rb = offpolicy.replay_buffer(cfg, run, envs, device, {"actor_state": (S,), "critic_state": (E, S)} if S else None)
    np_rng = np.random.default_rng(run.rank_seed())  # uniform actions before learning starts

    # -- one gradient step --------------------------------------------------------------------------
    nets = Nets(actor, critic, critic_target, actor_opt, q_opt, alpha_opt, log_alpha, current_alpha, target_entropy)
    update = build_step(cfg, make_update(cfg, nets, prec), "sac", nets, prec, record=False, log=run.logger.print)
    batch_size = run.local(cfg.batch_size)  # this process's share of every batch
    # --batch-size counts transitions: batch_size / sequence_length windows [B, L], or [B, 1]
    shape = (max(1, batch_size // cfg.sequence_length), cfg.sequence_length) if S else (batch_size, 1)
    polyak = Polyak((critic_target, critic))
    # sample, update, average the targets
    learn = Learn(cfg, update, rb, shape, polyak, (actor_opt, q_opt, alpha_opt), sequences=bool(S))

    def policy_state() -> dict:
        return {"actor": actor.state_dict(), "spaces": spaces}

    saved = {
        "critic": critic,
        "critic_target": critic_target,
        "log_alpha": log_alpha,
        "actor_opt": actor_opt,
        "q_opt": q_opt,
        "alpha_opt": alpha_opt,
    }

    def full_state() -> dict:
        return {**policy_state(), **offpolicy.snapshot(saved, n_updates, np_rng, envs)}

    def checkpoint_state() -> tuple[dict, dict]:
        return full_state(), rb.state_dict()

    # -- start or resume ----------------------------------------------------------------------------
    global_step, n_updates = 0, 0
    obs = envs.reset()
    if run.resume_state is not None:
        obs, global_step, n_updates = offpolicy.restore(run, {"actor": actor, **saved}, rb, envs, np_rng)
    a_state = torch.zeros(N, S, device=device)  # recurrent states before obs (zero at episode starts)
    c_state = torch.zeros(N, E, S, device=device)
    policy = Policy(actor, tuple(spaces["obs_shape"]), S, device)
    metrics: dict[str, torch.Tensor] = {}
    low, high = act_space.low, act_space.high

    # -- the loop -----------------------------------------------------------------------------------
    # A feed-forward actor acts in two halves: its Gaussian on the observations (``acting``), and the
    # draw of the actions from it on the host, with the normals actor.act would draw on the CPU.
    numpy_actor = NumpyActor.of(actor, N, mixed=True)
    acting = Acting(
        lambda o: actor.gaussian(o.float()), numpy_actor.gaussian if numpy_actor else None, device, cfg, used=not S
    )
    # a tensor env's actions are drawn in torch, beside the actor's output on the training device
    scale, bias = (actor.scale, actor.bias) if envs.tensors else (actor.scale.cpu().numpy(), actor.bias.cpu().numpy())
    while global_step < cfg.total_steps:
        if S:
            obs_t = torch.as_tensor(obs, device=device).float()
            with torch.no_grad():
                _, next_c_state = critic.encode_step(obs_t, c_state)
        if global_step < cfg.learning_starts:
            actions = as_like(np_rng.uniform(low, high, size=(N, A)).astype(np.float32), obs)
            if S:
                _, next_a_state = actor.act(obs_t, a_state, deterministic=False)
        elif S:
            actions_t, next_a_state = actor.act(obs_t, a_state, deterministic=False)
            actions = as_like(actions_t, obs)
        else:
            gaussian = acting.act(obs)
            actions = draw(gaussian, as_like(torch.randn(N, A), gaussian), scale, bias)
        step = envs.step(actions)
        prev_step, global_step = global_step, global_step + cfg.num_envs  # every rank's envs
        dist.update_norm(norm, torch.as_tensor(step.next_obs if step.valid is None else step.next_obs[step.valid]))
        row = dict(
            obs=obs,
            next_obs=step.next_obs,
            actions=actions,
            rewards=step.rewards,
            terminated=step.terminated,
            truncated=step.truncated,
        )
        if S:
            row.update(actor_state=a_state, critic_state=c_state)
            fresh = torch.as_tensor(step.terminated | step.truncated, device=device)
            a_state = next_a_state.masked_fill(fresh[:, None], 0.0)
            c_state = next_c_state.masked_fill(fresh[:, None, None], 0.0)
        rb.add(step.valid, **row)
        obs = step.obs
        for _, ret, length in step.episodes:
            run.logger.episode(global_step, ret, length)

        if global_step > cfg.learning_starts:
            actor_moves = any((n_updates + k) % cfg.policy_frequency == 0 for k in range(1, cfg.gradient_steps + 1))
            acting.before_updates(obs, actor_moves, last=global_step >= cfg.total_steps)
            for _ in range(cfg.gradient_steps):
                if cfg.lr_schedule != "constant":  # (under --cuda-graphs each set_lr is a kernel launch)
                    set_lr(actor_opt, cfg.policy_lr * lr_factor(n_updates))
                    set_lr(q_opt, cfg.q_lr * lr_factor(n_updates))
                n_updates += 1
                trains_actor = n_updates % cfg.policy_frequency == 0
                metrics.update(
                    run.watch(learn(trains_actor, n_updates % cfg.target_network_frequency == 0), global_step)
                )

        lr = cfg.policy_lr * lr_factor(max(n_updates - 1, 0))  # the latest update's
        run.after_step(
            global_step, prev_step, metrics, {"charts/learning_rate": lr}, policy, policy_state, checkpoint_state
        )

    return run.finish(global_step, policy, policy_state, checkpoint_state)
