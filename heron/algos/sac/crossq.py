"""CrossQ (Bhatt et al., ICLR 2024, "CrossQ: Batch Normalization in Deep Reinforcement Learning for
Greater Sample Efficiency and Simplicity"): SAC with batch renormalisation in the critics and the
actor, no target networks, and one critic forward on the joint batch of (s, a) and (s', a') so
that both halves are normalised with the same statistics.

``--crossq`` swaps SAC's networks for these and its gradient step for ``make_update``; the loop,
replay, acting, checkpoints and evaluation are SAC's (``train.py``). ``--preset crossq`` sets the
paper's hyperparameters. Every forward names its mode (``train``): batch statistics where the
paper trains, running statistics everywhere else (targets' next actions, the actor loss's
critics, acting, evaluation, export)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from heron.algos.sac import losses
from heron.algos.sac.networks import Actor, Critic
from heron.rl.batch_renorm import RenormMLP
from heron.rl.buffers import discount
from heron.rl.distributions import TanhGaussian
from heron.rl.losses import critic_metrics
from heron.rl.nets import Encoder, RunningNorm, requires_grad

if TYPE_CHECKING:
    from heron.accel.precision import Precision
    from heron.algos.sac.agent import Nets
    from heron.algos.sac.config import Config


class RenormActor(Actor):
    """SAC's tanh-Gaussian actor on a batch-renormalised MLP; the mode defaults to evaluation."""

    def __init__(self, encoder: Encoder, hidden: tuple[int, ...], low: torch.Tensor, high: torch.Tensor, cfg: Any):
        net = RenormMLP(1, encoder.out_dim, hidden, 2 * low.numel(), cfg.bn_momentum, cfg.bn_warmup)
        super().__init__(encoder, hidden, low, high, net)

    def head(self, feats: torch.Tensor, train: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        return TanhGaussian.params(self.net(feats, train)[0])

    def sample(self, feats: torch.Tensor, train: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.head(feats, train)
        return TanhGaussian.sample(mean, log_std, self.scale, self.bias)


class RenormCritic(Critic):
    """SAC's twin soft Q critics on batch-renormalised MLPs; the mode defaults to evaluation."""

    def __init__(self, encoders: list[Encoder], hidden: tuple[int, ...], action_dim: int, cfg: Any):
        in_dim = encoders[0].out_dim + action_dim
        q = RenormMLP(len(encoders), in_dim, hidden, 1, cfg.bn_momentum, cfg.bn_warmup)
        super().__init__(encoders, hidden, action_dim, q)

    def values(self, feats: torch.Tensor, actions: torch.Tensor, train: bool = False) -> torch.Tensor:
        x = torch.cat([feats, actions.unsqueeze(0).expand(feats.shape[0], *actions.shape)], -1)
        return self.q(x, train).squeeze(-1)


def build(obs_dim: int, low: torch.Tensor, high: torch.Tensor, cfg: Any) -> tuple[RenormActor, RenormCritic]:
    norm = RunningNorm((obs_dim,), enabled=cfg.obs_norm)
    actor = RenormActor(Encoder(obs_dim, norm), tuple(cfg.hidden_sizes), low, high, cfg)
    critic_hidden = tuple(cfg.critic_hidden_sizes or cfg.hidden_sizes)
    critic = RenormCritic([Encoder(obs_dim, norm) for _ in range(2)], critic_hidden, low.numel(), cfg)
    return actor, critic


def make_update(
    cfg: Config, nets: Nets, prec: Precision
) -> Callable[[dict[str, torch.Tensor], bool], dict[str, torch.Tensor]]:
    """CrossQ's gradient step, through autograd: ``update(batch, update_actor) -> metrics``.

    The critics' targets come from the critics themselves, in the same forward as their
    predictions: (s, a) and (s', a') go through the critics as one batch of 2B in training mode, so
    that the batch statistics are those of both halves, and the (s', a') half, detached, gives the
    targets. The actor takes one step every ``--policy-frequency`` updates (the paper's policy delay;
    SAC's compensating repeats are CleanRL's), on the critics in evaluation mode."""
    actor, critic, alpha = nets.actor, nets.critic, nets.current_alpha
    assert isinstance(actor, RenormActor) and isinstance(critic, RenormCritic), "--crossq networks"
    actor_params, critic_params = list(actor.parameters()), list(critic.parameters())

    def update(batch: dict[str, torch.Tensor], update_actor: bool) -> dict[str, torch.Tensor]:
        obs, next_obs, actions = batch["obs"], batch["next_obs"], batch["actions"]  # [B, D], [B, D], [B, A]
        B = obs.shape[0]
        with torch.no_grad():
            next_actions, next_log_prob = actor.sample(actor.features(next_obs))  # running statistics
        # one forward of the critics on [(s, a); (s', a')], batch statistics over both halves
        q_both = critic.values(
            critic.features(torch.cat([obs, next_obs])), torch.cat([actions, next_actions]), train=True
        )  # [E, 2B]
        q, next_q = q_both[:, :B], q_both[:, B:].detach()
        target = losses.soft_q_target(
            batch["rewards"], batch["terminated"], next_q, next_log_prob, alpha(), discount(batch, cfg.gamma)
        )
        qf_losses = losses.critic_losses(q, target)  # [E]
        prec.optimize(nets.q_opt, qf_losses.sum(), critic_params, cfg.max_grad_norm)
        metrics = critic_metrics(q, qf_losses)
        if update_actor:
            pi_actions, log_prob = actor.sample(actor.features(obs), train=True)
            requires_grad(critic_params, False)  # the actor loss needs dQ/da only, not critic weight grads
            actor_loss = losses.actor_loss(log_prob, critic.values(critic.features(obs), pi_actions), alpha())
            prec.optimize(nets.actor_opt, actor_loss, actor_params, cfg.max_grad_norm)
            requires_grad(critic_params, True)
            metrics["losses/actor_loss"] = actor_loss.detach()
            if cfg.autotune:
                alpha_loss = losses.alpha_loss(nets.log_alpha, log_prob, nets.target_entropy)
                prec.optimize(nets.alpha_opt, alpha_loss, [nets.log_alpha])
                metrics["losses/alpha_loss"] = alpha_loss.detach()
            metrics["losses/alpha"] = alpha()
        prec.update()
        return metrics

    return update
