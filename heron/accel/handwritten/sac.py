"""SAC's gradient step written out by hand, for the runs most SAC users make: feed-forward ReLU
actor and twin critics on vector observations, in float32 or bf16-mixed (``--fused-update``, on by
default where it applies; ``supported`` says where).

At batch 256 and 256-wide layers a SAC step is 16 matrix products and, through autograd, about 250
small operations, the engine's graph and a fresh gradient tensor per parameter around them: on a
CPU about as much time again as the products take. Here:

* the actor runs once on ``[next_obs; obs]`` (the target's actions and the actor loss's use the
  same actor weights: the actor moves after the critics) and the tanh-Gaussian sample and its
  log-density are one set of element-wise operations over both halves;
* the critics' and the actor's backward are the chain rule written out (``heron.ops.fused.backprop``
  for the layers), with their gradients written into one flat buffer per optimizer that the
  parameters' ``.grad`` are views of (clipping: one norm, one scale);
* the actor loss asks the (updated) critics for dQ/da only.

Every value the step computes comes from ``heron.algos.sac.losses`` and
``heron.rl.distributions.TanhGaussian`` (``rsample``, ``log_std``), and every derivative from the
``*_grad`` functions here and in ``heron.accel.handwritten.common``, with the same random draws in
the same order (the target's noise, then the actor's), so a run takes the same path as the autograd
step up to float rounding.
Before a run uses it, ``heron.accel.step.build_step`` checks one step of it against the readable
step (``heron.algos.sac.train.make_update``) on a synthetic batch (``probe``), and takes the
readable step where they disagree: an edit to a loss without its derivative here costs speed, never
correctness. ``tests/test_sac_lean.py`` checks gradients and whole steps against it. Tensor
operations only, no host sync. Under ``--precision bf16-mixed`` the networks' products run in
bfloat16 as the autograd path's fused nodes run them (``heron.accel.handwritten.common``; the last
layers in float32); the Gaussian, the tanh, log-probs, targets, losses and every gradient outside
the layers stay float32.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from heron.accel.handwritten.common import (
    FlatGrads,
    LayerViews,
    LeanCritics,
    batch_probe,
    critic_losses_grad,
    offpolicy_reason,
    tanh_gaussian_log_std_grad,
    tanh_gaussian_rsample_grad,
)
from heron.accel.precision import Precision
from heron.algos.sac import losses
from heron.ops import dist, mlp
from heron.ops.adam import Adam
from heron.ops.fused import backprop
from heron.rl.buffers import STEP_FIELDS, discount
from heron.rl.distributions import TanhGaussian


def supported(cfg: Any, nets: Any, prec: Precision) -> str | None:
    """None when the hand-written step applies to the run, else why not (the autograd step runs)."""
    if (why := offpolicy_reason(cfg, prec)) is not None:
        return why
    if getattr(cfg, "crossq", False):
        return "--crossq: batch renormalisation and the joint critic forward are autograd's"
    return "recurrent networks" if nets.actor.encoder.state_size else None


def build(cfg: Any, nets: Any, prec: Precision) -> LeanUpdate:
    return LeanUpdate(cfg, nets, prec.dtype)


def probe(cfg: Any, nets: Any) -> tuple:
    """The arguments of one step for the start-up check: a synthetic batch of ``--batch-size``
    transitions [B, ...] shaped as the run's, and an actor step."""
    actor = nets.actor
    return batch_probe(cfg, actor.encoder.norm.mean.shape[0], actor.scale, actor.bias, ()), True


def state(nets: Any) -> dict:
    """What a step changes, by name: networks, optimizers, the entropy coefficient."""
    return {
        "critic": nets.critic,
        "actor": nets.actor,
        "log_alpha": nets.log_alpha,
        "critic_target": nets.critic_target,
        "q_opt": nets.q_opt,
        "actor_opt": nets.actor_opt,
        "alpha_opt": nets.alpha_opt,
    }


# -- derivatives of heron.algos.sac.losses ---------------------------------------------------------
def actor_loss_grad(
    log_prob: torch.Tensor, q: torch.Tensor, alpha: torch.Tensor
) -> tuple[torch.Tensor, float, torch.Tensor]:
    """The derivatives of ``losses.actor_loss``, in three parts: dJ/dlog pi, the same for every row
    (alpha / B); dJ/dq, which is -1 / B at the member that gives each row's minimum and 0 at the
    others; and that member for each row [B]."""
    B = log_prob.shape[0]
    return alpha / B, -1.0 / B, q.min(0).indices


def alpha_loss_grad(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """d ``losses.alpha_loss`` / dlog_alpha: -mean(log pi(a|s) + H_target)."""
    return torch.neg((log_prob.detach() + target_entropy).mean())


class LeanUpdate:
    """``update(batch, update_actor) -> metrics``, the contract and results of ``train``'s autograd step."""

    fields = STEP_FIELDS  # what it reads of a batch

    def __init__(self, cfg, nets, dtype: torch.dtype | None = None):
        """``nets``: ``heron.algos.sac.agent.Nets`` (networks, optimizers, the entropy coefficient);
        ``dtype``: the products' type (None: float32; ``torch.bfloat16`` under bf16-mixed)."""
        self.dtype = dtype
        self.cfg, self.actor, self.critic, self.target = cfg, nets.actor, nets.critic, nets.critic_target
        self.actor_opt, self.q_opt, self.alpha_opt = nets.actor_opt, nets.q_opt, nets.alpha_opt
        self.log_alpha, self.alpha_fn, self.target_entropy = nets.log_alpha, nets.current_alpha, nets.target_entropy
        self.a_linear = [m for m in self.actor.net if isinstance(m, nn.Linear)]
        self.a_params = [t for m in self.a_linear for t in (m.weight, m.bias)]
        self.a_grads = FlatGrads(self.actor_opt)
        assert {id(p) for p in self.a_grads.params} == {id(p) for p in self.a_params}, (
            "the actor optimizer holds the actor"
        )
        self.a_dws = [self.a_grads.of(m.weight) for m in self.a_linear]
        self.a_dbs = [self.a_grads.of(m.bias) for m in self.a_linear]
        self.critics = LeanCritics(self.critic.q, self.target.q, self.q_opt, dtype)
        self.a_views = LayerViews(self.a_params, dtype)

    # -- pieces ---------------------------------------------------------------------------------------
    def _actor_forward(self, feats: torch.Tensor):
        """The actor on ``feats`` [N, D]: the Gaussian's mean, log-std and the raw log-std output
        [N, A] in float32, and what the backward keeps: the (cast) weights as [in, out] and every
        layer's input."""
        layers, ws = self.a_views(None)
        out, inputs = mlp.forward(feats, layers, "relu")  # float32: the last layer runs in float32
        mean, raw = out.chunk(2, -1)
        return mean, TanhGaussian.log_std(raw), raw, (ws, inputs)

    # -- the step -------------------------------------------------------------------------------------
    @torch.no_grad()
    def __call__(self, batch: dict[str, torch.Tensor], update_actor: bool) -> dict[str, torch.Tensor]:
        cfg, actor = self.cfg, self.actor
        norm = actor.encoder.norm
        obs = norm(batch["obs"])  # [B, D]
        next_obs = norm(batch["next_obs"])
        B = obs.shape[0]
        alpha = self.alpha_fn()

        # the actor on [next_obs; obs] when its loss comes this step (the same weights for both)
        feats = torch.cat([next_obs, obs]) if update_actor else next_obs
        mean, log_std, raw, a_inputs = self._actor_forward(feats)
        eps = torch.empty_like(mean)
        eps[:B].normal_()  # the target's noise, then (below, or in place here) the actor loss's
        first_actor = update_actor
        if update_actor:
            eps[B:].normal_()
        actions, log_prob, saved = TanhGaussian.rsample(mean, log_std, eps, actor.scale, actor.bias)

        # -- critics: y = r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s'))
        next_q, _ = self.critics.forward(torch.cat([next_obs, actions[:B]], -1), target=True)
        gamma = discount(batch, cfg.gamma)  # with n-step returns, each transition's own
        target = losses.soft_q_target(
            batch["rewards"],
            batch["terminated"],
            next_q,
            log_prob[:B],
            alpha,
            gamma,
        )
        q, qf_losses = self.critics.step(
            torch.cat([obs, batch["actions"]], -1),
            lambda q: (losses.critic_losses(q, target), critic_losses_grad(q, target)),
            cfg.max_grad_norm,
        )
        metrics = {
            "losses/qf1_values": q[0].mean(),
            "losses/qf2_values": q[1].mean(),
            "losses/qf1_loss": qf_losses[0],
            "losses/qf2_loss": qf_losses[1],
            "losses/qf_loss": qf_losses.mean(),
        }

        if update_actor:
            for _ in range(cfg.policy_frequency):
                if first_actor:  # the obs half of the forward above
                    rows = slice(B, None)
                    m, ls, r, a, lp, ep = mean[rows], log_std[rows], raw[rows], actions[rows], log_prob[rows], eps[rows]
                    sv = (saved[0][rows], saved[1][rows])
                    inputs = (a_inputs[0], [h[rows] for h in a_inputs[1]])
                    first_actor = False
                else:  # CleanRL's further actor steps: the updated actor, new noise
                    m, ls, r, inputs = self._actor_forward(obs)
                    ep = torch.randn_like(m)
                    a, lp, sv = TanhGaussian.rsample(m, ls, ep, actor.scale, actor.bias)
                metrics.update(self._actor_step(obs, r, sv, a, lp, ep, inputs))
            metrics["losses/alpha"] = self.alpha_fn()
        return metrics

    def _actor_step(self, obs, raw, saved, actions, log_prob, eps, inputs):
        """J_pi = mean(alpha log pi(a|s) - min_i Q_i(s, a)) and its step, then alpha's (autotune)."""
        cfg, alpha = self.cfg, self.alpha_fn()  # alpha as of this actor step
        critics = self.critics
        q, kept = critics.forward(torch.cat([obs, actions], -1))
        actor_loss = losses.actor_loss(log_prob, q, alpha)
        g_logp, g_min_q, which = actor_loss_grad(log_prob, q, alpha)
        # dJ/da through the member that gave each minimum: the critics' input gradients, action columns
        g_a = critics.min_input_grad(kept, which, g_min_q, obs.shape[1])
        g_mean, g_log_std = tanh_gaussian_rsample_grad(g_a, g_logp, saved, eps, self.actor.scale)
        self.a_grads.attach()
        ws, held = inputs
        backprop(
            torch.cat([g_mean, tanh_gaussian_log_std_grad(g_log_std, raw)], -1),
            ws,
            held,
            self.a_dws,
            self.a_dbs,
            "relu",
            False,
            linear_layout=True,
        )
        self.a_grads.step(cfg.max_grad_norm)
        metrics = {"losses/actor_loss": actor_loss}
        if cfg.autotune:  # J(alpha) = mean(-log_alpha (log pi + H_target)), log pi held fixed
            metrics["losses/alpha_loss"] = losses.alpha_loss(self.log_alpha.detach(), log_prob, self.target_entropy)
            if self.log_alpha.grad is None:  # one gradient tensor kept (a recorded step writes into it)
                self.log_alpha.grad = torch.zeros_like(self.log_alpha)
            self.log_alpha.grad.copy_(alpha_loss_grad(self.log_alpha, log_prob, self.target_entropy))
            dist.all_reduce_grads([self.log_alpha])  # torchrun: the global batch's, as the readable step's
            self.alpha_opt.lean_step() if isinstance(self.alpha_opt, Adam) else self.alpha_opt.step()
        return metrics
