"""TD3's gradient step written out by hand, in float32 or bf16-mixed, on the CPU (``--fused-update``,
on by default where it applies; ``supported`` says where). The reasons and the pieces are SAC's
(``heron/accel/handwritten/sac.py``, ``heron.accel.handwritten.common``): no autograd graph or
engine, gradients in one flat buffer per optimizer, the actor loss asking the (updated) first critic
for dQ1/da only.

The step is ``heron/algos/td3/train.py``'s, steps 4-13 of the walkthrough, with the same noise
draw. Every value it computes comes from ``heron.algos.td3.losses`` and ``heron.rl.distributions.squash``, and
every derivative from the ``*_grad`` functions here and in ``heron.accel.handwritten.common``; the
step builder checks it against the readable step before a run uses it, as SAC's.
``tests/test_sac_lean.py`` checks whole steps against the autograd step.
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
    squash_grad,
)
from heron.accel.precision import Precision
from heron.algos.td3 import losses
from heron.algos.td3.networks import Actor
from heron.ops import mlp
from heron.ops.fused import backprop
from heron.rl.buffers import STEP_FIELDS, discount
from heron.rl.distributions import squash


def supported(cfg: Any, nets: Any, prec: Precision) -> str | None:
    """None when the hand-written step applies to the run, else why not (the autograd step runs)."""
    if (why := offpolicy_reason(cfg, prec)) is not None:
        return why
    if prec.device.type == "cuda":  # SAC's pays there; TD3's, with half the products per step, did not
        return "on CUDA it measured no faster than the autograd step (docs/benchmarks/speed.md)"
    return None


def build(cfg: Any, nets: Any, prec: Precision) -> LeanUpdate:
    return LeanUpdate(cfg, nets, prec.dtype)


def probe(cfg: Any, nets: Any) -> tuple:
    """The arguments of one step for the start-up check: a synthetic batch of ``--batch-size``
    transitions [B, ...] shaped as the run's, and an actor step."""
    actor = nets.actor
    return batch_probe(cfg, actor.norm.mean.shape[0], actor.scale, actor.bias, ()), True


def state(nets: Any) -> dict:
    """What a step changes, by name: networks and optimizers."""
    return {
        "critic": nets.critic,
        "actor": nets.actor,
        "critic_target": nets.critic_target,
        "actor_target": nets.actor_target,
        "q_opt": nets.q_opt,
        "actor_opt": nets.actor_opt,
    }


def actor_loss_grad(q1: torch.Tensor) -> torch.Tensor:
    """d ``losses.actor_loss`` / dq1: -1/B for every row, [B]."""
    return torch.full_like(q1, -1.0 / q1.shape[0])


def _linear_params(actor: Actor) -> tuple[list[nn.Linear], list[torch.Tensor]]:
    linear = [m for m in actor.net if isinstance(m, nn.Linear)]
    return linear, [t for m in linear for t in (m.weight, m.bias)]


class LeanUpdate:
    """``update(batch, update_actor) -> metrics``, the contract and results of ``train``'s autograd step."""

    fields = STEP_FIELDS  # what it reads of a batch

    def __init__(self, cfg, nets, dtype: torch.dtype | None = None):
        """``nets``: ``heron.algos.td3.train.Nets`` (networks, targets, optimizers); ``dtype``: the
        products' type (None: float32; ``torch.bfloat16`` under bf16-mixed, as ``heron.accel.handwritten.common``)."""
        self.cfg, self.actor, self.dtype = cfg, nets.actor, dtype
        self.a_linear, self.a_params = _linear_params(nets.actor)
        self.t_params = _linear_params(nets.actor_target)[1]
        self.a_grads = FlatGrads(nets.actor_opt)
        assert {id(p) for p in self.a_grads.params} == {id(p) for p in self.a_params}, (
            "the actor optimizer holds the actor"
        )
        self.a_dws = [self.a_grads.of(m.weight) for m in self.a_linear]
        self.a_dbs = [self.a_grads.of(m.bias) for m in self.a_linear]
        self.critics = LeanCritics(nets.critic.q, nets.critic_target.q, nets.q_opt, dtype)
        self.a_views, self.t_views = LayerViews(self.a_params, dtype), LayerViews(self.t_params, dtype)

    def _actor(self, views: LayerViews, obs: torch.Tensor):
        """The actor's (or its target's) last layer on ``obs`` (before ``squash``), float32, and what
        its backward keeps: the (cast) weights as [in, out] and every layer's input."""
        layers, ws = views(None)
        z, inputs = mlp.forward(obs, layers, "relu")  # float32: the last layer runs in float32
        return z, ws, inputs

    @torch.no_grad()
    def __call__(self, batch: dict[str, torch.Tensor], update_actor: bool) -> dict[str, torch.Tensor]:
        cfg, actor, critics = self.cfg, self.actor, self.critics
        obs, next_obs = actor.norm(batch["obs"]), actor.norm(batch["next_obs"])  # step 4: [B, D]
        D = obs.shape[1]

        # steps 5-9: smoothed target actions, the target critics' minimum, y
        noise = torch.randn_like(batch["actions"]) * cfg.policy_noise
        t_next = squash(self._actor(self.t_views, next_obs)[0], actor.scale, actor.bias)[0]
        next_actions = losses.smoothed_target_actions(t_next, noise, cfg.noise_clip, actor.scale, actor.low, actor.high)
        next_q, _ = critics.forward(torch.cat([next_obs, next_actions], -1), target=True)
        target = losses.td_target(batch["rewards"], batch["terminated"], next_q, discount(batch, cfg.gamma))

        # steps 10-12: both critics on their mean squared errors
        q, qf_losses = critics.step(
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

        if update_actor:  # step 13: J = -mean Q1(s, pi(s)), through the updated first critic
            z, ws, inputs = self._actor(self.a_views, obs)
            a, t = squash(z, actor.scale, actor.bias)
            q1, kept = critics.forward(torch.cat([obs, a], -1), members=(0,))
            metrics["losses/actor_loss"] = losses.actor_loss(q1[0])
            g_a = critics.input_grad(kept, (0,), [actor_loss_grad(q1[0])], D)
            self.a_grads.attach()
            backprop(
                squash_grad(g_a, t, actor.scale), ws, inputs, self.a_dws, self.a_dbs, "relu", False, linear_layout=True
            )
            self.a_grads.step(cfg.max_grad_norm)
        return metrics
