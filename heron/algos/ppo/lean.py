"""PPO's gradient step written out by hand, for the policies most PPO runs train: feed-forward tanh
MLPs on vector observations, separate actor and critic, a categorical or diagonal-Gaussian head, in
float32 (``--fused-update``, on by default where it applies; ``supported`` says where).

Why: on PPO's small networks a gradient step is overhead, not arithmetic. Through autograd, a
CartPole step (batch 256, 64-64 bodies) was about 120 small operations and the engine's
bookkeeping around them, several times the time of its matrix products on a CPU thread. Here the
forward pass keeps what the backward needs, the backward is the chain rule written out (a dozen
products, the activations' derivatives from their outputs), and the gradients land in one flat
buffer that the parameters' ``.grad`` are views of: clipping is one norm and one scale, the
torchrun all-reduce and Adam's fused step see the usual ``.grad``.

Every value it computes comes from ``heron.algos.ppo.losses`` (the clipped surrogate with the
dual clip, the (optionally clipped) value loss, advantages normalized over the minibatch) and the
policy head (``networks.ActionHead``: log-probs, the entropy bonus), and every derivative from the
``*_grad`` beside each. Where the autograd path has a tie (``torch.min`` of equal surrogates inside
the clip range, ``torch.max`` of equal value errors) its gradient is split between the branches;
the two branches' gradients are equal there (for the value errors, but for the measure-zero case
of a clipped value as far from the return as the unclipped one), so writing either is the same.
Tensor operations only, no host sync. ``tests/test_ppo_lean.py``
checks losses, gradients and whole optimizer steps against the autograd path.
"""

from __future__ import annotations

import torch
from torch import nn

from heron.algos.ppo import losses
from heron.algos.ppo.networks import ActorCritic, HeadTerms
from heron.core import torch_private as private
from heron.core.lean import FlatGrads
from heron.core.precision import Precision


def supported(model: ActorCritic, prec: Precision, compiled: bool, graphs: bool = False) -> str | None:
    """None when the hand-written step applies to this model, else why not (the autograd step runs)."""
    if compiled:
        return "--compile wraps the autograd step"
    if graphs:
        return "--cuda-graphs records the autograd step"
    if prec.mixed:
        return f"--precision {prec.mode} runs under autocast"
    if model.state_size or model.v_body is None:
        return "recurrent or shared bodies"
    if model.pi_body.cnns or model.flat:
        return "image observations"
    if model.pi_head.kind not in ("discrete", "box"):
        return "MultiDiscrete actions"
    return None


def _forward(x: torch.Tensor, layers: list[nn.Linear]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """tanh layers, then the linear head: (output [B, out], the input of every layer). The products
    are ``TanhMLP``'s (``heron.core.fused``) and ``nn.Linear``'s; tanh goes through sigmoid (within
    2e-7 of torch.tanh, and faster on a CPU)."""
    inputs, h = [], x
    for k, layer in enumerate(layers):
        inputs.append(h)
        if k < len(layers) - 1:  # tanh(z) = 2 sigmoid(2z) - 1: torch's CPU sigmoid is faster than its tanh
            h = torch.addmm(layer.bias, h, layer.weight.t(), beta=2, alpha=2).sigmoid_().mul_(2).sub_(1)
        else:
            h = torch.addmm(layer.bias, h, layer.weight.t())
    return h, inputs


def _backward(g: torch.Tensor, layers: list[nn.Linear], inputs: list[torch.Tensor],
              grads: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """From the gradient of the output [B, out]: every layer's weight and bias gradient written into
    ``grads`` [(dW [out, in], db [out])] (no gradient for the observations)."""
    for k in reversed(range(len(layers))):
        dw, db = grads[k]
        torch.mm(g.t(), inputs[k], out=dw)
        torch.sum(g, 0, out=db)
        if k > 0:
            g = private.tanh_backward(torch.mm(g, layers[k].weight), inputs[k])


class LeanUpdate:
    """``update(minibatch) -> metrics``, the same contract and results as ``train.make_update``'s."""

    def __init__(self, cfg, model: ActorCritic, opt: torch.optim.Optimizer):
        self.cfg, self.model, self.opt = cfg, model, opt
        self.head = model.pi_head
        self.pi, self.v = model._direct  # each body's linear layers, then its head
        self.grads = grads = FlatGrads(opt)
        self.pi_grads = [(grads.of(m.weight), grads.of(m.bias)) for m in self.pi]
        self.v_grads = [(grads.of(m.weight), grads.of(m.bias)) for m in self.v]
        self.free_std = self.head.kind == "box" and not self.head.state_dependent
        self.log_std_grad = grads.of(self.head.log_std) if self.free_std else None
        covered = [v for pair in self.pi_grads + self.v_grads for v in pair] + [self.log_std_grad] * self.free_std
        assert sorted(v.data_ptr() for v in covered) == sorted(v.data_ptr() for v in grads.views), \
            "every parameter's gradient is written at every step"

    def __call__(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg, model, head = self.cfg, self.model, self.head
        obs = mb["obs"]
        B = obs.shape[0] * obs.shape[1]
        with torch.no_grad():
            x = model._in(obs.reshape(B, *obs.shape[2:]))  # [B, D] normalized
            out, pi_inputs = _forward(x, self.pi)
            v_out, v_inputs = _forward(x, self.v)
            values = v_out.squeeze(1)  # [B] normalized
            actions = mb["actions"].reshape(B, *mb["actions"].shape[2:])
            pi = HeadTerms(head, out, head.log_std if self.free_std else None)  # (a free log-std: not joined to out)
            logp, entropy = pi.log_prob(actions), pi.entropy().mean()

            # -- the losses and their derivatives (losses.py), the head's (networks.HeadTerms)
            adv = losses.advantages(mb, cfg.norm_adv).reshape(B)
            pg_loss, approx_kl, clipfrac, g_logp = losses.policy_loss_and_grad(logp, mb["logp"].reshape(B), adv,
                                                                               cfg.clip_coef, cfg.dual_clip)
            v_loss, g_v = losses.value_loss_and_grad(values, mb["values_n"].reshape(B), mb["returns_n"].reshape(B),
                                                     cfg.clip_coef, cfg.clip_vloss, scale=cfg.vf_coef)
            g_v = g_v.unsqueeze(1)
            if self.free_std:
                g_out, g_log_std = pi.box_grads(actions, g_logp, -cfg.ent_coef / B)
            else:
                g_out = pi.log_prob_entropy_grad(actions, g_logp, -cfg.ent_coef / B)

            # -- backward into the flat gradient buffer
            self.grads.attach()
            if self.free_std:  # one parameter shared by the rows
                torch.sum(g_log_std, 0, out=self.log_std_grad)
            _backward(g_out, self.pi, pi_inputs, self.pi_grads)
            _backward(g_v, self.v, v_inputs, self.v_grads)
            self.grads.step(cfg.max_grad_norm)  # torchrun all-reduce, clipping, the optimizer step
        return {"losses/policy_loss": pg_loss, "losses/value_loss": v_loss, "losses/entropy": entropy,
                "losses/approx_kl": approx_kl, "losses/clipfrac": clipfrac}
