"""SAC's gradient step written out by hand, for the runs most SAC users make: feed-forward ReLU
actor and twin critics on vector observations, in float32 or bf16-mixed (``--fused-update``, on by
default where it applies; ``supported`` says where).

At batch 256 and 256-wide layers a SAC step is 16 matrix products and, through autograd, about 250
small operations, the engine's graph and a fresh gradient tensor per parameter around them: on this
project's CPU about half of a step's time besides the products. Here:

* the actor runs once on ``[next_obs; obs]`` (the target's actions and the actor loss's use the
  same actor weights: the actor moves after the critics) and the tanh-Gaussian sample and its
  log-density are one set of element-wise operations over both halves;
* the critics' and the actor's backward are the chain rule written out (``heron.core.fused.backprop``
  for the layers), with their gradients written into one flat buffer per optimizer that the
  parameters' ``.grad`` are views of (clipping: one norm, one scale);
* the actor loss asks the (updated) critics for dQ/da only.

The losses are ``heron.algos.sac.losses``' exactly, with the same random draws in the same order
(the target's noise, then the actor's), so a run takes the same path as the autograd step up to
float rounding; ``tests/test_sac_lean.py`` checks losses, gradients and whole steps against it.
Tensor operations only, no host sync. Under ``--precision bf16-mixed`` the networks' products run in
bfloat16 as the autograd path's fused nodes run them (``heron.core.lean``; the last layers in
float32); the Gaussian, the tanh, log-probs, targets, losses and every gradient outside the
layers stay float32.

The derivatives of the tanh-Gaussian, with u = mean + std * eps, a = tanh(u) * scale + bias and
log pi = sum_i [log N(u_i; mean_i, std_i) - log(scale_i (1 - tanh(u_i)^2))]: d log pi / du_i =
2 tanh(u_i), d log pi / d log_std_i = -1 + 2 tanh(u_i) std_i eps_i (the Gaussian term depends on
mean and log_std only through eps, which the reparameterization holds fixed), and
d a_i / d u_i = scale_i (1 - tanh(u_i)^2).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from heron.core.fused import _forward, backprop
from heron.core.lean import FlatGrads, LayerViews, LeanCritics
from heron.core.nets import LOG_STD_MAX, LOG_STD_MIN, Adam
from heron.core.precision import Precision

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def supported(actor, prec: Precision, compiled: bool) -> str | None:
    """None when the hand-written step applies, else why not (the autograd step runs)."""
    if compiled:
        return "--compile wraps the autograd step"
    if prec.scaler is not None:
        return f"--precision {prec.mode} scales its losses through autograd (GradScaler)"
    if actor.encoder.state_size:
        return "recurrent networks"
    return None


class LeanUpdate:
    """``update(batch, update_actor) -> metrics``, the contract and results of ``train``'s autograd step."""

    def __init__(self, cfg, nets, dtype: torch.dtype | None = None):
        """``nets``: ``heron.algos.sac.train.Nets`` (networks, optimizers, the entropy coefficient);
        ``dtype``: the products' type (None: float32; ``torch.bfloat16`` under bf16-mixed)."""
        self.dtype = dtype
        self.cfg, self.actor, self.critic, self.target = cfg, nets.actor, nets.critic, nets.critic_target
        self.actor_opt, self.q_opt, self.alpha_opt = nets.actor_opt, nets.q_opt, nets.alpha_opt
        self.log_alpha, self.alpha_fn, self.target_entropy = nets.log_alpha, nets.current_alpha, nets.target_entropy
        self.a_linear = [m for m in self.actor.net if isinstance(m, nn.Linear)]
        self.a_params = [t for m in self.a_linear for t in (m.weight, m.bias)]
        self.a_grads = FlatGrads(self.actor_opt)
        assert {id(p) for p in self.a_grads.params} == {id(p) for p in self.a_params}, "the actor optimizer holds the actor"
        self.a_dws = [self.a_grads.of(m.weight) for m in self.a_linear]
        self.a_dbs = [self.a_grads.of(m.bias) for m in self.a_linear]
        self.critics = LeanCritics(self.critic.q, self.target.q, self.q_opt, dtype)
        self.a_views = LayerViews(self.a_params, dtype)
        self.log_scale = torch.log(self.actor.scale)

    # -- pieces ---------------------------------------------------------------------------------------
    def _actor_forward(self, feats: torch.Tensor):
        """The actor on ``feats`` [N, D]: the Gaussian's mean and log-std (and std, and tanh of the raw
        log-std output, for the backward) [N, A] in float32, and what the backward keeps: the
        (cast) weights as [in, out] and every layer's input."""
        layers, ws = self.a_views(None)
        out, inputs = _forward(feats, layers, "relu", False)  # float32: the last layer runs in float32
        mean, raw = out.chunk(2, -1)
        t_raw = torch.tanh(raw)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (t_raw + 1)
        std = log_std.exp()
        return mean, log_std, std, t_raw, (ws, inputs)

    def _sample(self, mean, log_std, std, eps):
        """``heron.core.nets.tanh_normal_sample`` with the noise given: actions, log-probs, tanh(u)."""
        u = mean + std * eps
        log_normal = -0.5 * ((u - mean) / std).pow(2) - log_std - HALF_LOG_2PI
        log_det = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u)) + self.log_scale
        t = torch.tanh(u)
        return t * self.actor.scale + self.actor.bias, (log_normal - log_det).sum(-1), t

    # -- the step -------------------------------------------------------------------------------------
    @torch.no_grad()
    def __call__(self, batch: dict[str, torch.Tensor], update_actor: bool) -> dict[str, torch.Tensor]:
        cfg, actor = self.cfg, self.actor
        norm = actor.encoder.norm
        obs = norm(batch["obs"][:, 0])  # [B, D] (the feed-forward batch is [B, 1, ...])
        next_obs = norm(batch["next_obs"][:, 0])
        B = obs.shape[0]
        alpha = self.alpha_fn()

        # the actor on [next_obs; obs] when its loss comes this step (the same weights for both)
        feats = torch.cat([next_obs, obs]) if update_actor else next_obs
        mean, log_std, std, t_raw, a_inputs = self._actor_forward(feats)
        eps = torch.empty_like(mean)
        eps[:B].normal_()  # the target's noise, then (below, or in place here) the actor loss's
        first_actor = update_actor
        if update_actor:
            eps[B:].normal_()
        actions, log_prob, t_u = self._sample(mean, log_std, std, eps)

        # -- critics: y = r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s'))
        next_q, _ = self.critics.forward(torch.cat([next_obs, actions[:B]], -1), target=True)
        rewards, terminated = batch["rewards"][:, 0], batch["terminated"][:, 0]
        target = rewards + cfg.gamma * (~terminated).float() * (next_q.min(0).values - alpha * log_prob[:B])
        q, qf_losses = self.critics.step(torch.cat([obs, batch["actions"][:, 0]], -1), target, cfg.max_grad_norm)
        metrics = {"losses/qf1_values": q[0].mean(), "losses/qf2_values": q[1].mean(),
                   "losses/qf1_loss": qf_losses[0], "losses/qf2_loss": qf_losses[1], "losses/qf_loss": qf_losses.mean()}

        if update_actor:
            for _ in range(cfg.policy_frequency):
                if first_actor:  # the obs half of the forward above
                    rows = slice(B, None)
                    m, ls, sd, tr, u_t, a, lp, ep = (mean[rows], log_std[rows], std[rows], t_raw[rows], t_u[rows],
                                                     actions[rows], log_prob[rows], eps[rows])
                    inputs = (a_inputs[0], [h[rows] for h in a_inputs[1]])
                    first_actor = False
                else:  # CleanRL's further actor steps: the updated actor, new noise
                    m, ls, sd, tr, inputs = self._actor_forward(obs)
                    ep = torch.randn_like(m)
                    a, lp, u_t = self._sample(m, ls, sd, ep)
                metrics.update(self._actor_step(obs, m, ls, sd, tr, u_t, a, lp, ep, inputs))
            metrics["losses/alpha"] = self.alpha_fn()
        return metrics

    def _actor_step(self, obs, mean, log_std, std, t_raw, t_u, actions, log_prob, eps, inputs):
        """J_pi = mean(alpha log pi(a|s) - min_i Q_i(s, a)) and its step, then alpha's (autotune)."""
        cfg, B, alpha = self.cfg, obs.shape[0], self.alpha_fn()  # alpha as of this actor step
        critics = self.critics
        q, kept = critics.forward(torch.cat([obs, actions], -1))
        min_q, which = q.min(0)
        actor_loss = (alpha * log_prob - min_q).mean()
        # dJ/da through the member that gave each minimum: the critics' input gradients, action columns
        g_a = critics.min_input_grad(kept, which, -1.0 / B, obs.shape[1])
        g_logp = alpha / B
        g_u = t_u * (2.0 * g_logp) + g_a * self.actor.scale * (1 - t_u * t_u)
        g_log_std = g_u * std * eps - g_logp
        g_raw = g_log_std * (0.5 * (LOG_STD_MAX - LOG_STD_MIN)) * (1 - t_raw * t_raw)
        self.a_grads.attach()
        ws, held = inputs
        backprop(torch.cat([g_u, g_raw], -1), ws, held, self.a_dws, self.a_dbs, "relu", False, linear_layout=True)
        self.a_grads.step(cfg.max_grad_norm)
        metrics = {"losses/actor_loss": actor_loss}
        if cfg.autotune:  # J(alpha) = mean(-log_alpha (log pi + H_target)), log pi held fixed
            shifted = log_prob + self.target_entropy
            metrics["losses/alpha_loss"] = -(self.log_alpha.detach() * shifted).mean()
            if self.log_alpha.grad is None:  # one gradient tensor kept (a recorded step writes into it)
                self.log_alpha.grad = torch.zeros_like(self.log_alpha)
            torch.neg(shifted.mean(), out=self.log_alpha.grad)
            self.alpha_opt.lean_step() if isinstance(self.alpha_opt, Adam) else self.alpha_opt.step()
        return metrics
