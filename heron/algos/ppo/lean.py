"""PPO's gradient step written out by hand, for the policies most PPO runs train: feed-forward tanh
MLPs on vector observations, separate actor and critic, a categorical or diagonal-Gaussian head, in
float32 (``--fused-update``, on by default where it applies; ``supported`` says where).

Why: on PPO's small networks a gradient step is overhead, not arithmetic. Through autograd, a
CartPole step (batch 256, 64-64 bodies) was about 120 small operations and the engine's
bookkeeping around them, 2.3 ms on this project's CPU with one thread, against about 0.3 ms of
matrix products. Here the forward pass keeps what the backward needs, the backward is the chain
rule written out (a dozen products, the activations' derivatives from their outputs), and the
gradients land in one flat buffer that the parameters' ``.grad`` are views of: clipping is one
norm and one scale, the torchrun all-reduce and Adam's fused step see the usual ``.grad``.

The loss is ``heron.algos.ppo.losses``' exactly: the clipped surrogate (with the dual clip), the
entropy bonus, the (optionally clipped) value loss, advantages normalized over the minibatch.
Where the autograd path has a tie (``torch.min`` of equal surrogates inside the clip range,
``torch.max`` of equal value errors) its gradient is split between the branches; the two
branches' gradients are equal there (for the value errors, but for the measure-zero case of a
clipped value as far from the return as the unclipped one), so writing either is the same.
Tensor operations only, no host sync. ``tests/test_ppo_lean.py``
checks losses, gradients and whole optimizer steps against the autograd path.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from heron.algos.ppo.networks import LOG_STD_BOUNDS, ActorCritic
from heron.core.lean import FlatGrads
from heron.core.precision import Precision

LOG_2PI = math.log(2 * math.pi)


def supported(model: ActorCritic, prec: Precision, compiled: bool) -> str | None:
    """None when the hand-written step applies to this model, else why not (the autograd step runs)."""
    if compiled:
        return "--compile wraps the autograd step"
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
    2e-7 of torch.tanh, about 25 us faster per 256 x 64 layer on this project's CPU)."""
    inputs, h = [], x
    for k, layer in enumerate(layers):
        inputs.append(h)
        if k < len(layers) - 1:  # tanh(z) = 2 sigmoid(2z) - 1: torch's CPU sigmoid is 2-3x faster than its tanh
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
            g = torch.ops.aten.tanh_backward(torch.mm(g, layers[k].weight), inputs[k])


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

    def _head(self, out: torch.Tensor, actions: torch.Tensor):
        """Log-probs [B], mean entropy, and ``backward(g_logp [B], g_ent) -> g_out``, where ``g_ent``
        is the loss's derivative with respect to each sample's entropy (-ent_coef / B)."""
        head = self.head
        if head.kind == "discrete":
            lp = torch.log_softmax(out, -1)  # [B, n]
            a = actions.reshape(-1, 1).long()
            logp = lp.gather(1, a).squeeze(1)
            p = lp.exp()
            ent = -(p * lp).sum(1)  # [B]

            def backward(g_logp: torch.Tensor, g_ent: float) -> torch.Tensor:
                # d log p_a / d logits = onehot(a) - p;  d H / d logits = -p (log p + H)
                g = p * (-g_logp).unsqueeze(1)
                if g_ent:
                    g.sub_(p * (lp + ent.unsqueeze(1)), alpha=g_ent)
                return g.scatter_add_(1, a, g_logp.unsqueeze(1))

            return logp, ent.mean(), backward
        A = head.dim
        mean = out[:, :A]
        raw_std = out[:, A:] if head.state_dependent else head.log_std.expand_as(mean)
        lo, hi = LOG_STD_BOUNDS
        log_std = raw_std.clamp(lo, hi)
        inside = (raw_std >= lo) & (raw_std <= hi)  # clamp passes gradients at its bounds too
        z = (actions.reshape(mean.shape) - mean) / log_std.exp()
        logp = (-0.5 * z.pow(2) - log_std - 0.5 * LOG_2PI).sum(1)
        ent = (0.5 + 0.5 * LOG_2PI + log_std).sum(1)

        def backward(g_logp: torch.Tensor, g_ent: float) -> torch.Tensor:
            g = g_logp.unsqueeze(1)
            g_mean = g * z / log_std.exp()  # d logp / d mean = z / std
            g_std = (g * (z.pow(2) - 1) + g_ent) * inside  # d logp / d log std = z^2 - 1; d H / d log std = 1
            if head.state_dependent:
                return torch.cat([g_mean, g_std], 1)
            torch.sum(g_std, 0, out=self.log_std_grad)
            return g_mean

        return logp, ent.mean(), backward

    def __call__(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg, model = self.cfg, self.model
        obs = mb["obs"]
        B = obs.shape[0] * obs.shape[1]
        with torch.no_grad():
            x = model._in(obs.reshape(B, *obs.shape[2:]))  # [B, D] normalized
            out, pi_inputs = _forward(x, self.pi)
            v_out, v_inputs = _forward(x, self.v)
            values = v_out.squeeze(1)  # [B] normalized
            logp, entropy, head_backward = self._head(out, mb["actions"].reshape(B, *mb["actions"].shape[2:]))

            # -- the clipped surrogate (losses.policy_loss) and its gradient with respect to logp
            adv = mb["adv"].reshape(B)
            if cfg.norm_adv:
                adv_mean, adv_std = (mb["adv_mean"], mb["adv_std"]) if "adv_mean" in mb else (adv.mean(), adv.std())
                adv = (adv - adv_mean) / (adv_std + 1e-8)
            log_ratio = logp - mb["logp"].reshape(B)
            ratio = log_ratio.exp()
            surr1, surr2 = ratio * adv, ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef) * adv
            through = surr1 <= surr2  # where min() takes the unclipped term (ties: equal gradients)
            clipped = -torch.minimum(surr1, surr2)
            if cfg.dual_clip:
                floor = -cfg.dual_clip * adv
                capped = (adv < 0) & (clipped > floor)
                clipped = torch.where(capped, floor, clipped)
                through &= ~capped
            pg_loss = clipped.mean()
            # d pg / d logp = -A * ratio / B where the unclipped term is taken, else 0
            g_logp = torch.where(through, adv * ratio, 0.0).mul_(-1.0 / B)

            # -- the value loss (losses.value_loss) and its gradient with respect to the values
            returns, values_old = mb["returns_n"].reshape(B), mb["values_n"].reshape(B)
            diff = values - returns
            err = diff.pow(2)
            if cfg.clip_vloss:
                delta = values - values_old
                diff_c = values_old + delta.clamp(-cfg.clip_coef, cfg.clip_coef) - returns
                err_c = diff_c.pow(2)
                use_c = err_c > err
                g_v = torch.where(use_c, diff_c * (delta.abs() <= cfg.clip_coef), diff)
                err = torch.maximum(err, err_c)
            else:
                g_v = diff
            v_loss = 0.5 * err.mean()
            g_v = g_v.mul_(cfg.vf_coef / B).unsqueeze(1)  # d (vf_coef * 0.5 mean err) / d v

            # -- backward into the flat gradient buffer
            self.grads.attach()
            _backward(head_backward(g_logp, -cfg.ent_coef / B), self.pi, pi_inputs, self.pi_grads)
            _backward(g_v, self.v, v_inputs, self.v_grads)
            self.grads.step(cfg.max_grad_norm)  # torchrun all-reduce, clipping, the optimizer step

            approx_kl = ((ratio - 1) - log_ratio).mean()
            clipfrac = ((ratio - 1).abs() > cfg.clip_coef).float().mean()
        return {"losses/policy_loss": pg_loss, "losses/value_loss": v_loss, "losses/entropy": entropy,
                "losses/approx_kl": approx_kl, "losses/clipfrac": clipfrac}
