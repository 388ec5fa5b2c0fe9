"""DreamerV3, read top to bottom (Hafner et al. 2023; the official code, danijar/dreamerv3, and
sheeprl 0.8.4's ``dreamer_v3``).

Data and the experience loop: ``heron.algos.dreamer.loop`` (shared with DreamerV2).

One gradient step (``update``) is a pure tensor function ``batch -> metrics`` (no ``.item()``):

1. World model on a batch of sequences [T, B]: encode (symlog of vectors), filter through the RSSM
   (each window starts as an episode does, from the learned initial state), decode; loss (paper
   eq. 5) = symlog squared error of vectors and squared error of images + two-hot cross-entropy
   of the rewards + the continue model's Bernoulli loss (target 1 - is_terminal) + the dynamics
   (0.5) and representation (0.1) KL terms, each clipped below at 1 nat per step.
2. Behaviour: from every posterior state (detached), imagine ``--horizon`` steps with the actor
   through the prior. Rewards (two-hot), continues (the continue model's mode) and the critic's
   values on the imagined states give lambda-returns (the reward of each move predicted where it
   arrives: ``heron.algos.dreamer.losses.imagination_targets`` with ``current=False``). The
   returns' 5th-95th percentile range, a moving average, scales the advantages (never up). The
   actor maximizes them (REINFORCE for discrete actions, backpropagation through the dynamics for
   continuous ones, entropy 3e-4); the critic learns the returns and, as a regulariser, its slow
   copy's predictions. The slow critic moves 2% of the way to the critic after every gradient step.

Training frequency: ``--replay-ratio`` gradient steps per agent step, from ``--learning-starts`` on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch

from heron.accel.acting import Policy
from heron.algos.dreamer import loop
from heron.algos.dreamer.losses import actor_steps, imagination_targets
from heron.algos.dreamer.networks import image_to_float
from heron.algos.dreamer.policy import load_player
from heron.algos.dreamer.spaces import check, eval_env, model_spec  # noqa: F401 (check, eval_env: the algorithm's API)
from heron.algos.dreamer_v3 import losses
from heron.algos.dreamer_v3.config import Config
from heron.algos.dreamer_v3.distributions import clip_actions
from heron.algos.dreamer_v3.networks import Agent, Player
from heron.ops import dist
from heron.runtime.run import Run

if TYPE_CHECKING:
    from heron.accel.precision import Precision


def build(cfg: Config, spaces: dict) -> Agent:
    return Agent(*model_spec(spaces), cfg)


def load_policy(cfg: Config, state: dict, device: str | torch.device = "cpu") -> Policy:
    return load_player(Player(build(cfg, state["spaces"])), state, device)


def make_optimizers(cfg: Config, agent: Agent) -> dict[str, torch.optim.Optimizer]:
    """Adam for the world model, the actor and the critic, each with its own epsilon (checkpoint keys
    ``world_opt``, ``actor_opt``, ``critic_opt``); on CUDA the fused kernel, with ``--cuda-graphs``
    device-side step counters."""
    cuda = next(agent.parameters()).is_cuda

    def adam(module: torch.nn.Module, lr: float, eps: float) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            module.parameters(), lr=lr, eps=eps, fused=True if cuda else None, capturable=cfg.cuda_graphs
        )

    return {
        "world_opt": adam(agent.world, cfg.world_lr, cfg.world_eps),
        "actor_opt": adam(agent.actor, cfg.actor_lr, cfg.actor_eps),
        "critic_opt": adam(agent.critic, cfg.critic_lr, cfg.critic_eps),
    }


def make_update(
    cfg: Config,
    agent: Agent,
    spaces: dict,
    world_opt: torch.optim.Optimizer,
    actor_opt: torch.optim.Optimizer,
    critic_opt: torch.optim.Optimizer,
    prec: Precision,
):
    """The gradient step ``update(batch [T, B, ...]) -> metrics`` (module doc), a closure over the
    agent and its optimizers (the benchmark times it alone)."""
    world, actor, critic, target_critic, moments = (
        agent.world,
        agent.actor,
        agent.critic,
        agent.target_critic,
        agent.moments,
    )
    rssm = world.rssm
    keys = list(spaces["cnn_keys"]) + list(spaces["mlp_keys"])
    rho = cfg.objective_mix if cfg.objective_mix >= 0 else (1.0 if spaces["discrete"] else 0.0)
    clip = 0.0 if spaces["discrete"] else cfg.action_clip
    bins = losses.twohot_bins(cfg.bins).to(next(agent.parameters()).device)
    space = cfg.twohot_space

    def update(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One gradient step on sequences [T, B, ...] (module doc)."""
        # 1. world model
        obs = {k: batch[k] for k in keys}
        embed = world.encoder(obs)
        # a sampled window starts as an episode does: the learned initial state, a zero previous action
        is_first = torch.cat([torch.ones_like(batch["is_first"][:1]), batch["is_first"][1:]])
        h, z, post, prior = rssm.observe(embed, batch["action"], is_first)
        feat = torch.cat([z, h], -1)
        recon = world.decoder(feat)
        obs_loss = sum(losses.mse(recon[k].float(), image_to_float(obs[k]), 3) for k in spaces["cnn_keys"]) + sum(
            losses.symlog_mse(recon[k], obs[k].float(), 1) for k in spaces["mlp_keys"]
        )
        obs_loss = cast(torch.Tensor, obs_loss)  # at least one key (``check``)
        reward_loss = losses.twohot_nll(world.reward(feat), batch["reward"], bins, space)
        terminal = batch["is_terminal"].float()
        continue_loss = torch.nn.functional.binary_cross_entropy_with_logits(
            world.continue_model(feat).squeeze(-1), 1.0 - terminal, reduction="none"
        )
        wm = losses.world_model_loss(
            obs_loss,
            reward_loss,
            continue_loss,
            post,
            prior,
            cfg.kl_dynamic,
            cfg.kl_representation,
            cfg.kl_free_nats,
            cfg.kl_regularizer,
            cfg.continue_scale_factor,
        )
        # each step: backward, the torchrun all-reduce, clipping (the norm is a metric), the update
        world_grad = prec.optimize(world_opt, wm["loss"], world.parameters(), cfg.world_clip_gradients, norm=True)

        # 2. behaviour in imagination, from every posterior state. The policy that picks each imagined
        # action is the one the actor loss scores (one actor pass per step). With REINFORCE alone
        # (rho = 1) nothing backpropagates through the imagined dynamics or values: the dynamics step
        # without gradients, and the critic's logits on the trajectories serve its own loss too (its
        # weights do not move before that)
        reuse = rho == 1
        world.requires_grad_(False)
        critic.requires_grad_(reuse)
        feat_im, log_probs, entropies = rssm.imagine(  # [H + 1, M, F] s_0 .. s_H; [H, M]: a_t at s_t
            actor, h, z, cfg.horizon, lambda action: clip_actions(action, clip), dynamics_grad=not reuse
        )
        rewards_im = losses.twohot_mean(world.reward(feat_im), bins, space)  # [H + 1, M]
        continues = (world.continue_model(feat_im).squeeze(-1) > 0).float()  # the Bernoulli's mode
        critic_logits = critic(feat_im.detach() if reuse else feat_im)  # [H + 1, M, bins]
        values = losses.twohot_mean(critic_logits.detach() if reuse else critic_logits, bins, space)  # [H + 1, M]
        alive = 1.0 - terminal.flatten()  # [M]
        returns, weights = imagination_targets(
            rewards_im, cfg.gamma * continues, values, alive, cfg.gamma, cfg.lmbda, current=False
        )  # [H, M] each
        low, high, scale = losses.percentile_scale(
            dist.all_gather_cat(returns.detach().flatten()),
            moments.low,
            moments.high,
            cfg.moments_decay,
            cfg.moments_limit,
            (cfg.moments_low, cfg.moments_high),
        )
        moments.low.copy_(low)
        moments.high.copy_(high)
        lp, ent, ret, base, w = actor_steps(log_probs, entropies, returns, values, weights, current=False)  # [H, M]
        actor_loss = losses.actor_loss(lp, ent, ret, base, w, scale, rho, cfg.actor_ent_coef)
        actor_grad = prec.optimize(actor_opt, actor_loss, actor.parameters(), cfg.actor_clip_gradients, norm=True)
        world.requires_grad_(True)
        critic.requires_grad_(True)

        states = feat_im[:-1].detach()
        with torch.no_grad():
            slow = losses.twohot_mean(target_critic(states), bins, space)
        critic_loss = losses.critic_loss(
            critic_logits[:-1] if reuse else critic(states),
            returns,
            slow,
            weights,
            bins,
            cfg.critic_slow_regularizer,
            space,
        )
        critic_grad = prec.optimize(critic_opt, critic_loss, critic.parameters(), cfg.critic_clip_gradients, norm=True)
        prec.update()
        return {
            "losses/world_model_loss": wm["loss"].detach(),
            "losses/kl": wm["kl"],
            "losses/kl_loss": wm["kl_loss"],
            "losses/observation_loss": wm["observation"],
            "losses/reward_loss": wm["reward"],
            "losses/continue_loss": wm["continue"],
            "losses/actor_loss": actor_loss.detach(),
            "losses/critic_loss": critic_loss.detach(),
            "losses/policy_entropy": entropies.mean().detach(),
            "losses/lambda_return": returns.mean().detach(),
            "losses/return_scale": scale.detach(),
            "grads/world_model": world_grad,
            "grads/actor": actor_grad,
            "grads/critic": critic_grad,
        }

    return update


# -- training -----------------------------------------------------------------------------------------
def learner(cfg: Config, run: Run, spaces: dict) -> loop.Learner:
    """DreamerV3's part of the loop: ``--replay-ratio`` gradient steps per agent step (this process's
    share), counted from ``--learning-starts`` (plus ``--pretrain-steps`` at once); the slow critic
    a moving average of the critic."""
    agent, optimizers, update = loop.start(cfg, run, spaces, build, make_optimizers, make_update)

    def due(global_step: int, prev_step: int, n_updates: int) -> int:
        owed = cfg.pretrain_steps + int(
            cfg.replay_ratio * (global_step - cfg.learning_starts + cfg.num_envs) / run.world.size
        )
        return max(0, owed - n_updates)

    def after_update(n_updates: int) -> None:
        if n_updates % cfg.critic_target_update_freq == 0:
            with torch.no_grad():
                for slow, fast in zip(agent.target_critic.parameters(), agent.critic.parameters()):
                    slow.lerp_(fast, cfg.critic_tau)

    return loop.Learner(agent, Player(agent), optimizers, update, due, after_update)


def train(cfg: Config, run: Run) -> dict:
    return loop.train(cfg, run, lambda run, spaces: learner(cfg, run, spaces))
