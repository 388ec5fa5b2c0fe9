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
policy head (``networks.HeadTerms``: log-probs, the entropy bonus), and every derivative from the
``*_grad`` functions here. Where the autograd path has a tie (``torch.min`` of equal surrogates
inside the clip range, ``torch.max`` of equal value errors) its gradient is split between the
branches; the two branches' gradients are equal there (for the value errors, but for the
measure-zero case of a clipped value as far from the return as the unclipped one), so writing
either is the same. Tensor operations only, no host sync. The step builder checks it against the
readable step before a run uses it (``heron.accel.step``); ``tests/test_ppo_lean.py`` checks losses,
gradients and whole optimizer steps against the autograd path.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from heron.accel.handwritten.common import FlatGrads
from heron.accel.precision import Precision
from heron.algos.ppo import losses
from heron.algos.ppo.distributions import LOG_STD_BOUNDS, HeadTerms
from heron.algos.ppo.networks import ActorCritic
from heron.ops import mlp
from heron.ops import torch_private as private


def supported(cfg: Any, nets: Any, prec: Precision) -> str | None:
    """None when the hand-written step applies to this run's model, else why not (the autograd step runs)."""
    model = nets.model
    if cfg.compile:
        return "--compile wraps the autograd step"
    if cfg.cuda_graphs:
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


def build(cfg: Any, nets: Any, prec: Precision) -> LeanUpdate:
    return LeanUpdate(cfg, nets.model, nets.opt)


def probe(cfg: Any, nets: Any) -> tuple:
    """The arguments of one step for the start-up check: a synthetic minibatch of 256 steps, the
    fields and layout of the run's ([B, 1, ...]), with actions from the head's space."""
    model = nets.model
    head = model.pi_head
    g = torch.Generator().manual_seed(0)
    B, device = 256, model.pi_head.linear.weight.device
    obs_dim = model.vec_idx.numel()  # vector observations (``supported``)
    if head.kind == "discrete":
        actions = torch.randint(0, head.sizes[0], (B, 1), generator=g)
    else:
        actions = torch.randn(B, 1, head.dim, generator=g)
    mb = {
        "obs": torch.randn(B, 1, obs_dim, generator=g),
        "actions": actions,
        "logp": torch.randn(B, 1, generator=g) * 0.1 - 1.0,
        "adv": torch.randn(B, 1, generator=g),
        "values_n": torch.randn(B, 1, generator=g),
        "returns_n": torch.randn(B, 1, generator=g),
        "state0": torch.zeros(B, 0),
        "starts": torch.zeros(B, 1, dtype=torch.bool),
    }
    return ({k: v.to(device) for k, v in mb.items()},)


def state(nets: Any) -> dict:
    """What a step changes, by name: the actor-critic and its optimizer."""
    return {"model": nets.model, "opt": nets.opt}


# -- derivatives of heron.algos.ppo.losses and of the policy head ----------------------------------
def policy_loss_and_grad(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    adv: torch.Tensor,
    clip_coef: float,
    dual_clip: float = 0.0,
    scale: float = 1.0,
) -> tuple[torch.Tensor, ...]:
    """``policy_loss``'s values and d(scale * loss)/dlogp, from one pass: -A r / n where the
    unclipped term is the minimum (and the dual clip does not bound it), 0 where the clipped term
    or the bound is taken (n: the elements). Where the two terms tie (r within the clip range),
    both give this same derivative."""
    loss, approx_kl, clipfrac, ratio, surr1, surr2 = losses.policy_terms(logp, logp_old, adv, clip_coef, dual_clip)
    through = surr1 <= surr2  # where min() takes the unclipped term
    if dual_clip:
        through &= ~((adv < 0) & (-torch.minimum(surr1, surr2) > -dual_clip * adv))
    return loss, approx_kl, clipfrac, torch.where(through, adv * ratio, 0.0).mul_(-scale / logp.numel())


def value_loss_and_grad(
    values: torch.Tensor,
    values_old: torch.Tensor,
    returns: torch.Tensor,
    clip_coef: float,
    clip: bool = True,
    scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``value_loss`` and d(scale * loss)/dvalues, from one pass: (V - R) / n, or with ``clip``
    where the clipped error is the larger, (V_clipped - R) / n inside the clip range and 0 outside
    it (n: the elements)."""
    loss, diff, err, diff_c, err_c, delta = losses.value_terms(values, values_old, returns, clip_coef, clip)
    if diff_c is None or err_c is None or delta is None:  # no clipping
        return loss, diff.mul(scale / values.numel())
    g = torch.where(err_c > err, diff_c * (delta.abs() <= clip_coef), diff)
    return loss, g.mul(scale / values.numel())


def head_grad(pi: HeadTerms, actions: torch.Tensor, g_logp: torch.Tensor, g_ent: float) -> torch.Tensor:
    """d(sum_b g_logp[b] log_prob[b] + g_ent sum_b entropy[b]) / dparams [B, P] of the head's
    distribution ``pi``, for the discrete and box heads (what this step covers): actions [B, ...],
    g_logp [B], g_ent the loss's weight of each entropy. Reuses what ``pi.log_prob`` and
    ``pi.entropy`` computed.

    discrete: dlog p_a/dlogits = onehot(a) - p, dH/dlogits = -p (log p + H).
    box: dlog p/dmean = z / std, dlog p/dlog std = z^2 - 1, dH/dlog std = 1 (z = (a - mean) / std),
    through the clamp of the log-std only inside its bounds."""
    kind = pi.head.kind
    if kind == "discrete":
        if pi.probs is None:
            pi.entropy()
        assert pi.probs is not None and pi.entropies is not None  # (entropy() made them)
        lp, p, ent = pi.logps[0], pi.probs[0], pi.entropies[0]
        g = p * (-g_logp).unsqueeze(1)
        if g_ent:
            g.sub_(p * (lp + ent.unsqueeze(1)), alpha=g_ent)
        return g.scatter_add_(1, actions.reshape(-1, 1).long(), g_logp.unsqueeze(1))
    if kind != "box":
        raise NotImplementedError(f"the {kind} head's derivative (the autograd step covers it)")
    return torch.cat(box_grads(pi, actions, g_logp, g_ent), 1)


def box_grads(
    pi: HeadTerms, actions: torch.Tensor, g_logp: torch.Tensor, g_ent: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``head_grad`` of a Gaussian head as (d/dmean, d/dlog-std), each [B, A]."""
    if pi.z is None:
        pi.log_prob(actions.reshape(pi.mean.shape))
    assert pi.z is not None and pi.std is not None  # (log_prob() made them)
    lo, hi = LOG_STD_BOUNDS
    g = g_logp.unsqueeze(1)
    inside = (pi.raw_log_std >= lo) & (pi.raw_log_std <= hi)  # clamp passes gradients at its bounds
    g_std = (g * (pi.z.pow(2) - 1) + g_ent) * inside
    return g * pi.z / pi.std, g_std


def _backward(
    g: torch.Tensor, layers: list[nn.Linear], inputs: list[torch.Tensor], grads: list[tuple[torch.Tensor, torch.Tensor]]
) -> None:
    """From the gradient of the output [B, out]: every layer's weight and bias gradient written into
    ``grads`` [(dW [out, in], db [out])] (no gradient for the observations)."""
    for k in reversed(range(len(layers))):
        dw, db = grads[k]
        torch.mm(g.t(), inputs[k], out=dw)
        torch.sum(g, 0, out=db)
        if k > 0:
            g = private.tanh_backward(torch.mm(g, layers[k].weight), inputs[k])


class LeanUpdate:
    """``update(minibatch) -> metrics``, the same contract and results as ``heron.algos.ppo.learn.make_update``'s."""

    def __init__(self, cfg, model: ActorCritic, opt: torch.optim.Optimizer):
        self.cfg, self.model, self.opt = cfg, model, opt
        self.head = model.pi_head
        assert model._direct is not None, "feed-forward separate bodies (supported)"
        self.pi, self.v = model._direct  # each body's linear layers, then its head
        self.grads = grads = FlatGrads(opt)
        self.pi_grads = [(grads.of(m.weight), grads.of(m.bias)) for m in self.pi]
        self.v_grads = [(grads.of(m.weight), grads.of(m.bias)) for m in self.v]
        self.free_std = self.head.kind == "box" and not self.head.state_dependent
        self.log_std_grad = grads.of(self.head.log_std) if self.free_std else None
        covered = [v for pair in self.pi_grads + self.v_grads for v in pair]
        if self.log_std_grad is not None:
            covered.append(self.log_std_grad)
        assert sorted(v.data_ptr() for v in covered) == sorted(v.data_ptr() for v in grads.views), (
            "every parameter's gradient is written at every step"
        )

    def __call__(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg, model, head = self.cfg, self.model, self.head
        obs = mb["obs"]
        B = obs.shape[0] * obs.shape[1]
        with torch.no_grad():
            x = model._in(obs.reshape(B, *obs.shape[2:]))  # [B, D] normalized
            # tanh bodies through sigmoid (heron.ops.mlp: faster on a CPU), then the linear heads
            out, pi_inputs = mlp.forward(x, mlp.of_linears(self.pi), "sigmoid_tanh")
            v_out, v_inputs = mlp.forward(x, mlp.of_linears(self.v), "sigmoid_tanh")
            values = v_out.squeeze(1)  # [B] normalized
            actions = mb["actions"].reshape(B, *mb["actions"].shape[2:])
            pi = HeadTerms(head, out, head.log_std if self.free_std else None)  # (a free log-std: not joined to out)
            logp, entropy = pi.log_prob(actions), pi.entropy().mean()

            # -- the losses (losses.py) and their derivatives, the head's (networks.HeadTerms)
            adv = losses.advantages(mb, cfg.norm_adv).reshape(B)
            pg_loss, approx_kl, clipfrac, g_logp = policy_loss_and_grad(
                logp, mb["logp"].reshape(B), adv, cfg.clip_coef, cfg.dual_clip
            )
            v_loss, g_v = value_loss_and_grad(
                values,
                mb["values_n"].reshape(B),
                mb["returns_n"].reshape(B),
                cfg.clip_coef,
                cfg.clip_vloss,
                scale=cfg.vf_coef,
            )
            g_v = g_v.unsqueeze(1)
            if self.free_std:
                g_out, g_log_std = box_grads(pi, actions, g_logp, -cfg.ent_coef / B)
            else:
                g_out = head_grad(pi, actions, g_logp, -cfg.ent_coef / B)

            # -- backward into the flat gradient buffer
            self.grads.attach()
            if self.free_std:  # one parameter shared by the rows
                torch.sum(g_log_std, 0, out=self.log_std_grad)
            _backward(g_out, self.pi, pi_inputs, self.pi_grads)
            _backward(g_v, self.v, v_inputs, self.v_grads)
            self.grads.step(cfg.max_grad_norm)  # torchrun all-reduce, clipping, the optimizer step
        return {
            "losses/policy_loss": pg_loss,
            "losses/value_loss": v_loss,
            "losses/entropy": entropy,
            "losses/approx_kl": approx_kl,
            "losses/clipfrac": clipfrac,
        }
