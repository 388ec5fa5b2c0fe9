"""Each derivative the hand-written steps use (``heron.accel.handwritten``) against
``torch.autograd.grad`` of the value it differentiates, in float64 on random inputs with a made-up
upstream gradient. A derivative that does not match its value's expression fails here (at a run's
start, ``heron.accel.step`` would then take the readable step: ``tests/test_update.py``)."""

import pytest
import torch

from heron.accel.handwritten import ppo as ppo_grads
from heron.accel.handwritten import sac as sac_grads
from heron.accel.handwritten import td3 as td3_grads
from heron.accel.handwritten.common import (
    critic_losses_grad,
    squash_grad,
    tanh_gaussian_log_std_grad,
    tanh_gaussian_rsample_grad,
)
from heron.algos.ppo import losses as ppo
from heron.algos.sac import losses as sac
from heron.algos.td3 import losses as td3
from heron.rl.distributions import TanhGaussian, squash


def _leaf(*shape, low=-1.0, high=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=torch.float64) * (high - low) + low).requires_grad_(True)


def test_critic_losses_grad_is_autograds():
    for mod in (sac, td3):
        q, target = _leaf(2, 7), _leaf(7, seed=1).detach()
        (want,) = torch.autograd.grad(mod.critic_losses(q, target).sum(), q)
        assert torch.allclose(critic_losses_grad(q.detach(), target), want, rtol=1e-12, atol=1e-12)


def test_td3_actor_loss_grad_is_autograds():
    q1 = _leaf(9)
    (want,) = torch.autograd.grad(td3.actor_loss(q1), q1)
    assert torch.allclose(td3_grads.actor_loss_grad(q1.detach()), want, rtol=1e-12, atol=1e-12)


def test_sac_actor_loss_grad_is_autograds():
    log_prob, q, alpha = _leaf(8), _leaf(2, 8, seed=1), torch.tensor(0.3, dtype=torch.float64)
    want_logp, want_q = torch.autograd.grad(sac.actor_loss(log_prob, q, alpha), (log_prob, q))
    g_logp, g_min_q, which = sac_grads.actor_loss_grad(log_prob.detach(), q.detach(), alpha)
    assert torch.allclose(torch.full_like(want_logp, float(g_logp)), want_logp, rtol=1e-12, atol=1e-12)
    dense = torch.zeros_like(want_q)
    dense[which, torch.arange(8)] = g_min_q
    assert torch.allclose(dense, want_q, rtol=1e-12, atol=1e-12)


def test_alpha_loss_grad_is_autograds():
    log_alpha, log_prob = _leaf(1, seed=2)[0], _leaf(6, low=-3, high=1, seed=3).detach()
    (want,) = torch.autograd.grad(sac.alpha_loss(log_alpha, log_prob, -2.0), log_alpha)
    assert torch.allclose(sac_grads.alpha_loss_grad(log_alpha.detach(), log_prob, -2.0), want, rtol=1e-12, atol=1e-12)


def test_squash_grads_are_autograds():
    z, scale, bias, g = (
        _leaf(5, 3),
        torch.tensor([2.0, 0.5, 1.0], dtype=torch.float64),
        _leaf(3, seed=4).detach(),
        _leaf(5, 3, seed=5).detach(),
    )
    a, t = squash(z, scale, bias)
    (want,) = torch.autograd.grad(a, z, g)
    assert torch.allclose(squash_grad(g, t.detach(), scale), want, rtol=1e-12, atol=1e-12)
    raw = _leaf(5, 3, low=-3, high=3, seed=6)
    (want,) = torch.autograd.grad(TanhGaussian.log_std(raw), raw, g)
    assert torch.allclose(tanh_gaussian_log_std_grad(g, raw.detach()), want, rtol=1e-12, atol=1e-12)


def test_tanh_gaussian_rsample_grad_is_autograds():
    mean, log_std = _leaf(6, 2, seed=7), _leaf(6, 2, low=-2, high=0.5, seed=8)
    eps = torch.randn(6, 2, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    scale, bias = torch.tensor([2.0, 0.5], dtype=torch.float64), torch.tensor([0.5, -1.0], dtype=torch.float64)
    g_a = _leaf(6, 2, seed=10).detach()
    for g_logp in (torch.tensor(0.7, dtype=torch.float64), _leaf(6, seed=11).detach()):  # one number, or per row
        action, log_prob, saved = TanhGaussian.rsample(mean, log_std, eps, scale, bias)
        want = torch.autograd.grad((action * g_a).sum() + (log_prob * g_logp).sum(), (mean, log_std))
        got = tanh_gaussian_rsample_grad(g_a, g_logp, tuple(x.detach() for x in saved), eps, scale)
        for a, b in zip(got, want):
            assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dual_clip", [0.0, 2.0])
def test_ppo_policy_loss_and_grad_is_autograds(dual_clip):
    logp_old = _leaf(64, low=-2, high=0, seed=12).detach()
    logp = (logp_old + _leaf(64, low=-0.6, high=0.6, seed=13).detach()).requires_grad_(True)  # ratios either side
    adv = _leaf(64, low=-3, high=3, seed=14).detach()
    (want,) = torch.autograd.grad(ppo.policy_loss(logp, logp_old, adv, 0.2, dual_clip)[0] * 0.7, logp)
    *values, got = ppo_grads.policy_loss_and_grad(logp.detach(), logp_old, adv, 0.2, dual_clip, scale=0.7)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(values, ppo.policy_loss(logp.detach(), logp_old, adv, 0.2, dual_clip)):
        assert torch.equal(a, b)  # the values it gives are policy_loss's


@pytest.mark.parametrize("clip", [False, True])
def test_ppo_value_loss_and_grad_is_autograds(clip):
    values, values_old, returns = (
        _leaf(64, low=-2, high=2, seed=15),
        _leaf(64, seed=16).detach(),
        _leaf(64, low=-2, high=2, seed=17).detach(),
    )
    (want,) = torch.autograd.grad(ppo.value_loss(values, values_old, returns, 0.2, clip) * 0.5, values)
    loss, got = ppo_grads.value_loss_and_grad(values.detach(), values_old, returns, 0.2, clip, scale=0.5)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(loss, ppo.value_loss(values.detach(), values_old, returns, 0.2, clip))


@pytest.mark.parametrize("kind", ["discrete", "box", "box, state-dependent std"])
def test_ppo_head_grad_is_autograds(kind):
    from heron.algos.ppo.distributions import ActionHead

    action = (
        {"kind": "discrete", "n": 4} if kind == "discrete" else {"kind": "box", "low": [-1.0] * 3, "high": [1.0] * 3}
    )
    head = ActionHead(8, action, state_dependent_std=kind.endswith("std"), init_log_std=0.0).double()
    with torch.no_grad():
        if kind == "box":
            head.log_std.copy_(torch.tensor([-0.5, 0.3, 2.5]))  # the last outside the clamp: no gradient there
    feats = _leaf(16, 8, seed=18).detach()
    params = head(feats).detach().requires_grad_(True)
    with torch.no_grad():
        actions = head.sample_logp(params)[0]
    g_logp, g_ent = _leaf(16, seed=19).detach(), -0.01 / 16
    value = (head.log_prob(params, actions) * g_logp).sum() + g_ent * head.entropy(params).sum()
    (want,) = torch.autograd.grad(value, params)
    got = ppo_grads.head_grad(head.terms(params.detach()), actions, g_logp, g_ent)
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)
    terms = head.terms(params.detach())  # as the hand-written step takes them: values first, then reused
    terms.log_prob(actions), terms.entropy()
    assert torch.equal(ppo_grads.head_grad(terms, actions, g_logp, g_ent), got)
