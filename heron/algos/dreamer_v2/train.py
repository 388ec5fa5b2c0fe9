"""DreamerV2, read top to bottom (Hafner et al. 2021; sheeprl's DreamerV2).

Data: ``heron.algos.dreamer.loop`` (the replay layout and the loop that this module's gradient
step serves, shared with DreamerV3).

One gradient step (``update``) is a pure tensor function ``batch -> metrics`` (no ``.item()``):

1. World model on a batch of sequences [T, B]: encode, filter through the RSSM (posterior states;
   each window starts as an episode does, from a zero state and a zero previous action), decode;
   reconstruction loss = KL (balanced, free nats) + observation, reward and continue NLLs (the
   continue model learns the discount gamma * (1 - is_terminal), as the references' does).
2. Behaviour: from every posterior state (detached), imagine ``--horizon`` steps with the actor
   through the prior; rewards, discounts and target-critic values on the imagined states give
   lambda-returns; the actor maximizes them (REINFORCE share rho, dynamics backpropagation 1 - rho,
   entropy bonus eta; each action against the first return that holds its reward,
   ``heron.algos.dreamer.losses.actor_steps``), the critic regresses them. The target critic is a copy every
   ``--critic-target-update-freq`` gradient steps.

Imagined time line: s_0 (a posterior state) -a_0-> s_1 -a_1-> ... s_H. The lambda-return of step t
takes the reward and continue predicted at s_t, as the paper's eq. 4 and its code do
(``--lambda-rewards current``), or at s_{t+1} (``next``, DreamerV3's correction): see
``heron.algos.dreamer.losses.imagination_targets``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch

from heron.accel.acting import Policy
from heron.algos.dreamer import loop
from heron.algos.dreamer.losses import actor_steps, imagination_targets
from heron.algos.dreamer.networks import image_to_float
from heron.algos.dreamer.policy import Player, load_player
from heron.algos.dreamer.spaces import check, eval_env, model_spec  # noqa: F401 (check, eval_env: the algorithm's API)
from heron.algos.dreamer_v2 import losses
from heron.algos.dreamer_v2.config import Config
from heron.algos.dreamer_v2.networks import Agent
from heron.runtime.run import Run

if TYPE_CHECKING:
    from heron.accel.precision import Precision


def build(cfg: Config, spaces: dict) -> Agent:
    return Agent(*model_spec(spaces), cfg)


def load_policy(cfg: Config, state: dict, device: str | torch.device = "cpu") -> Policy:
    return load_player(Player(build(cfg, state["spaces"])), state, device)


def make_optimizers(cfg: Config, agent: Agent) -> dict[str, torch.optim.Optimizer]:
    """Adam for the world model, the actor and the critic (checkpoint keys ``world_opt``, ``actor_opt``,
    ``critic_opt``). DreamerV2's weight decay scales every weight by ``1 - wd`` before each step; decoupled
    decay scales by ``1 - lr * weight_decay``, so it gets ``wd / lr``. On CUDA the fused kernel (one launch
    per optimizer); with ``--cuda-graphs`` device-side step counters."""
    cuda = next(agent.parameters()).is_cuda

    def adam(module: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            module.parameters(),
            lr=lr,
            eps=cfg.adam_eps,
            weight_decay=cfg.weight_decay / lr,
            decoupled_weight_decay=True,
            fused=True if cuda else None,
            capturable=cfg.cuda_graphs,
        )

    return {
        "world_opt": adam(agent.world, cfg.world_lr),
        "actor_opt": adam(agent.actor, cfg.actor_lr),
        "critic_opt": adam(agent.critic, cfg.critic_lr),
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
    world, actor, critic, target_critic = agent.world, agent.actor, agent.critic, agent.target_critic
    rssm = world.rssm
    keys = list(spaces["cnn_keys"]) + list(spaces["mlp_keys"])
    rho = cfg.objective_mix if cfg.objective_mix >= 0 else (1.0 if spaces["discrete"] else 0.0)
    current = cfg.lambda_rewards == "current"

    def update(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One gradient step on sequences [T, B, ...] (module doc)."""
        # 1. world model
        obs = {k: batch[k] for k in keys}
        embed = world.encoder(obs)
        # a sampled window starts as an episode does (the references): zero state, zero previous action
        is_first = torch.cat([torch.ones_like(batch["is_first"][:1]), batch["is_first"][1:]])
        h, z, post, prior = rssm.observe(embed, batch["action"], is_first)
        feat = torch.cat([z, h], -1)
        recon = world.decoder(feat)
        obs_nll = sum(losses.gaussian_nll(recon[k], image_to_float(obs[k]), 3) for k in spaces["cnn_keys"]) + sum(
            losses.gaussian_nll(recon[k], obs[k], 1) for k in spaces["mlp_keys"]
        )
        obs_nll = cast(torch.Tensor, obs_nll)  # at least one key (``check``)
        rewards = torch.tanh(batch["reward"]) if cfg.clip_rewards else batch["reward"]
        reward_nll = losses.gaussian_nll(world.reward(feat).squeeze(-1), rewards, 0)
        continue_nll = None
        if world.continue_model is not None:  # the discount: gamma * (1 - terminal), as the references learn it
            continue_nll = losses.bernoulli_nll(
                world.continue_model(feat).squeeze(-1), cfg.gamma * (1.0 - batch["is_terminal"].float())
            )
        wm = losses.reconstruction_loss(
            obs_nll,
            reward_nll,
            post,
            prior,
            cfg.kl_balancing_alpha,
            cfg.kl_free_nats,
            cfg.kl_free_avg,
            cfg.kl_regularizer,
            continue_nll,
            cfg.continue_scale_factor,
        )
        # each step: backward, the torchrun all-reduce, clipping (the norm is a metric), the update
        world_grad = prec.optimize(world_opt, wm["loss"], world.parameters(), cfg.clip_gradients, norm=True)

        # 2. behaviour in imagination, from every posterior state
        world.requires_grad_(False)
        # with pure REINFORCE (rho = 1) nothing backpropagates through the imagined dynamics
        feat_im, log_probs, entropies = rssm.imagine(  # [H + 1, M, F]: s_0 (a posterior state) .. s_H
            actor, h, z, cfg.horizon, (lambda action: action) if rho < 1 else (lambda action: action.detach())
        )
        rewards_im = world.reward(feat_im).squeeze(-1)  # [H + 1, M]
        discounts_im = None
        if world.continue_model is not None:
            discounts_im = torch.sigmoid(world.continue_model(feat_im).squeeze(-1))
        values = target_critic(feat_im).squeeze(-1)  # [H + 1, M]
        alive = 1.0 - batch["is_terminal"].float().flatten()  # [M]
        lam, weights = imagination_targets(
            rewards_im, discounts_im, values, alive, cfg.gamma, cfg.lmbda, current=current
        )  # [H, M] each
        steps = actor_steps(
            log_probs, entropies, lam, values.detach(), weights, current
        )  # [H - 1, M] each (current) or [H, M]
        actor_loss = losses.actor_loss(*steps, rho, cfg.actor_ent_coef)
        actor_grad = prec.optimize(actor_opt, actor_loss, actor.parameters(), cfg.clip_gradients, norm=True)
        world.requires_grad_(True)

        critic_loss = losses.critic_loss(critic(feat_im[:-1].detach()).squeeze(-1), lam.detach(), weights)
        critic_grad = prec.optimize(critic_opt, critic_loss, critic.parameters(), cfg.clip_gradients, norm=True)
        prec.update()
        return {
            "losses/world_model_loss": wm["loss"].detach(),
            "losses/kl": wm["kl"].detach(),
            "losses/observation_loss": wm["observation"].detach(),
            "losses/reward_loss": wm["reward"].detach(),
            "losses/continue_loss": wm["continue"].detach(),
            "losses/actor_loss": actor_loss.detach(),
            "losses/critic_loss": critic_loss.detach(),
            "losses/policy_entropy": entropies.mean().detach(),
            "losses/lambda_return": lam.mean().detach(),
            "grads/world_model": world_grad,
            "grads/actor": actor_grad,
            "grads/critic": critic_grad,
        }

    return update


# -- training -----------------------------------------------------------------------------------------
def learner(cfg: Config, run: Run, spaces: dict) -> loop.Learner:
    """DreamerV2's part of the loop: ``--pretrain-steps`` gradient steps when training starts, then
    ``--gradient-steps`` every ``--train-every`` agent steps; the target critic a copy of the critic
    every ``--critic-target-update-freq`` gradient steps."""
    agent, optimizers, update = loop.start(cfg, run, spaces, build, make_optimizers, make_update)

    def due(global_step: int, prev_step: int, n_updates: int) -> int:
        if n_updates == 0:
            return cfg.pretrain_steps or cfg.gradient_steps
        return cfg.gradient_steps if run.due(global_step, prev_step, cfg.train_every) else 0

    def after_update(n_updates: int) -> None:
        if n_updates % cfg.critic_target_update_freq == 0:
            agent.target_critic.load_state_dict(agent.critic.state_dict())

    return loop.Learner(
        agent, Player(agent), optimizers, update, due, after_update, warn_terminations=not cfg.use_continues
    )


def train(cfg: Config, run: Run) -> dict:
    return loop.train(cfg, run, lambda run, spaces: learner(cfg, run, spaces))
