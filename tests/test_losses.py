"""Every loss on hand-computed numbers, and the tanh-normal log-density against a numeric change
of variables."""

import math

import numpy as np
import pytest
import torch

from heron.algos.sac import losses as sac
from heron.algos.ppo import losses as ppo
from heron.algos.td3 import losses as td3
from heron.core.nets import (LOG_STD_MAX, LOG_STD_MIN, squash, squash_grad, squash_log_std, squash_log_std_grad,
                            tanh_normal, tanh_normal_grad, tanh_normal_sample)


def test_soft_q_target_hand_numbers():
    rewards = torch.tensor([1.0, -0.5])
    terminated = torch.tensor([False, True])
    next_q = torch.tensor([[2.0, 3.0], [1.5, 4.0]])  # min -> [1.5, 3.0]
    next_log_prob = torch.tensor([-1.0, 0.5])
    y = sac.soft_q_target(rewards, terminated, next_q, next_log_prob, torch.tensor(0.2), gamma=0.9)
    # env 0: 1 + 0.9 * (1.5 - 0.2 * -1.0) = 1 + 0.9 * 1.7 = 2.53; env 1 terminated: -0.5
    assert torch.allclose(y, torch.tensor([2.53, -0.5]))


def test_critic_losses_hand_numbers():
    q = torch.tensor([[1.0, 2.0], [0.0, 4.0]])
    y = torch.tensor([2.0, 2.0])
    # critic 1: ((1-2)^2 + 0) / 2 = 0.5; critic 2: (4 + 4) / 2 = 4
    assert torch.allclose(sac.critic_losses(q, y), torch.tensor([0.5, 4.0]))
    assert torch.allclose(td3.critic_losses(q, y), torch.tensor([0.5, 4.0]))


def test_sac_actor_loss_hand_numbers():
    log_prob = torch.tensor([-1.0, 2.0])
    q = torch.tensor([[3.0, 1.0], [2.0, 5.0]])  # min -> [2, 1]
    # mean(0.5 * [-1, 2] - [2, 1]) = mean([-2.5, 0]) = -1.25
    assert torch.isclose(sac.actor_loss(log_prob, q, torch.tensor(0.5)), torch.tensor(-1.25))


def test_alpha_loss_hand_numbers_and_gradient_sign():
    log_alpha = torch.tensor(math.log(0.5), requires_grad=True)
    log_prob = torch.tensor([-1.0, -3.0])
    target_entropy = -1.0
    loss = sac.alpha_loss(log_alpha, log_prob, target_entropy)
    # -(log 0.5) * mean([-2, -4]) = -(-0.6931) * -3 = -2.0794
    assert torch.isclose(loss, torch.tensor(-3 * math.log(2.0)), atol=1e-5)
    loss.backward()
    # entropy (-log_prob = 2) above target (1): alpha must decrease -> positive gradient
    assert log_alpha.grad > 0


def test_td3_target_and_smoothing_hand_numbers():
    next_actions = torch.tensor([[0.9, -0.2]])
    noise = torch.tensor([[0.8, -0.1]])  # first clipped to 0.5
    scale = torch.tensor([1.0, 2.0])
    a = td3.smoothed_target_actions(next_actions, noise, 0.5, scale, torch.tensor([-1.0, -2.0]), torch.tensor([1.0, 2.0]))
    # [0.9 + 0.5 -> clipped to 1.0, -0.2 + (-0.1 * 2) = -0.4]
    assert torch.allclose(a, torch.tensor([[1.0, -0.4]]))
    y = td3.td_target(torch.tensor([1.0, 1.0]), torch.tensor([False, True]),
                      torch.tensor([[5.0, 7.0], [4.0, 9.0]]), gamma=0.5)
    assert torch.allclose(y, torch.tensor([3.0, 1.0]))
    assert torch.isclose(td3.actor_loss(torch.tensor([1.0, 3.0])), torch.tensor(-2.0))


def test_log_std_squashing_bounds():
    raw = torch.tensor([-100.0, 0.0, 100.0])
    out = squash_log_std(raw)
    assert torch.allclose(out, torch.tensor([LOG_STD_MIN, (LOG_STD_MIN + LOG_STD_MAX) / 2, LOG_STD_MAX]))


def test_tanh_normal_log_prob_matches_numeric_change_of_variables():
    """log pi(a) = log N(u) - log|da/du| with da/du computed by finite differences of
    a(u) = tanh(u) * scale + bias, for each dimension independently."""
    torch.manual_seed(0)
    mean = torch.tensor([[0.3, -1.2, 2.0]], dtype=torch.float64)
    log_std = torch.tensor([[-0.5, 0.1, -1.0]], dtype=torch.float64)
    scale = torch.tensor([2.0, 0.5, 1.0], dtype=torch.float64)
    bias = torch.tensor([0.0, 1.0, -0.5], dtype=torch.float64)
    torch.manual_seed(3)
    action, log_prob = tanh_normal_sample(mean, log_std, scale, bias)
    u = torch.atanh((action - bias) / scale)  # invert the squashing
    h = 1e-6
    derivative = ((torch.tanh(u + h) - torch.tanh(u - h)) / (2 * h)) * scale
    normal = torch.distributions.Normal(mean, log_std.exp())
    expected = (normal.log_prob(u) - torch.log(derivative)).sum(-1)
    assert torch.allclose(log_prob, expected, atol=1e-6)


def test_tanh_normal_density_integrates_to_one():
    """The 1-D density exp(log pi(a)) integrates to ~1 over the action interval."""
    mean, log_std = torch.tensor([[0.4]], dtype=torch.float64), torch.tensor([[-0.3]], dtype=torch.float64)
    scale, bias = torch.tensor([2.0], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64)
    a = torch.linspace(-1 + 1e-6, 3 - 1e-6, 200001, dtype=torch.float64)
    u = torch.atanh((a - bias) / scale)
    log_normal = torch.distributions.Normal(mean[0, 0], log_std.exp()[0, 0]).log_prob(u)
    density = torch.exp(log_normal - torch.log(scale * (1 - torch.tanh(u) ** 2)))
    assert abs(float(np.trapezoid(density.numpy(), a.numpy())) - 1.0) < 1e-3
    # and our sampler's log-prob agrees with that density at sampled points
    torch.manual_seed(1)
    act, lp = tanh_normal_sample(mean.expand(5, 1), log_std.expand(5, 1), scale, bias)
    u = torch.atanh((act[:, 0] - bias) / scale)
    ref = torch.distributions.Normal(mean[0, 0], log_std.exp()[0, 0]).log_prob(u) - torch.log(scale * (1 - torch.tanh(u) ** 2))
    assert torch.allclose(lp, ref, atol=1e-8)


# -- each hand-written derivative against torch.autograd.grad of the value beside it ---------------
# float64, random inputs with a made-up upstream gradient: a derivative that does not match its
# value's expression (a changed loss whose *_grad was not changed with it) fails here.

def _leaf(*shape, low=-1.0, high=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=torch.float64) * (high - low) + low).requires_grad_(True)


def test_critic_losses_grad_is_autograds():
    for mod in (sac, td3):
        q, target = _leaf(2, 7), _leaf(7, seed=1).detach()
        (want,) = torch.autograd.grad(mod.critic_losses(q, target).sum(), q)
        assert torch.allclose(mod.critic_losses_grad(q.detach(), target), want, rtol=1e-12, atol=1e-12)


def test_td3_actor_loss_grad_is_autograds():
    q1 = _leaf(9)
    (want,) = torch.autograd.grad(td3.actor_loss(q1), q1)
    assert torch.allclose(td3.actor_loss_grad(q1.detach()), want, rtol=1e-12, atol=1e-12)


def test_sac_actor_loss_grad_is_autograds():
    log_prob, q, alpha = _leaf(8), _leaf(2, 8, seed=1), torch.tensor(0.3, dtype=torch.float64)
    want_logp, want_q = torch.autograd.grad(sac.actor_loss(log_prob, q, alpha), (log_prob, q))
    g_logp, g_min_q, which = sac.actor_loss_grad(log_prob.detach(), q.detach(), alpha)
    assert torch.allclose(torch.full_like(want_logp, float(g_logp)), want_logp, rtol=1e-12, atol=1e-12)
    dense = torch.zeros_like(want_q)
    dense[which, torch.arange(8)] = g_min_q
    assert torch.allclose(dense, want_q, rtol=1e-12, atol=1e-12)


def test_alpha_loss_grad_is_autograds():
    log_alpha, log_prob = _leaf(1, seed=2)[0], _leaf(6, low=-3, high=1, seed=3).detach()
    (want,) = torch.autograd.grad(sac.alpha_loss(log_alpha, log_prob, -2.0), log_alpha)
    assert torch.allclose(sac.alpha_loss_grad(log_alpha.detach(), log_prob, -2.0), want, rtol=1e-12, atol=1e-12)


def test_squash_grads_are_autograds():
    z, scale, bias, g = _leaf(5, 3), torch.tensor([2.0, 0.5, 1.0], dtype=torch.float64), _leaf(3, seed=4).detach(), \
        _leaf(5, 3, seed=5).detach()
    a, t = squash(z, scale, bias)
    (want,) = torch.autograd.grad(a, z, g)
    assert torch.allclose(squash_grad(g, t.detach(), scale), want, rtol=1e-12, atol=1e-12)
    raw = _leaf(5, 3, low=-3, high=3, seed=6)
    (want,) = torch.autograd.grad(squash_log_std(raw), raw, g)
    assert torch.allclose(squash_log_std_grad(g, raw.detach()), want, rtol=1e-12, atol=1e-12)


def test_tanh_normal_grad_is_autograds():
    mean, log_std = _leaf(6, 2, seed=7), _leaf(6, 2, low=-2, high=0.5, seed=8)
    eps = torch.randn(6, 2, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    scale, bias = torch.tensor([2.0, 0.5], dtype=torch.float64), torch.tensor([0.5, -1.0], dtype=torch.float64)
    g_a = _leaf(6, 2, seed=10).detach()
    for g_logp in (torch.tensor(0.7, dtype=torch.float64), _leaf(6, seed=11).detach()):  # one number, or per row
        action, log_prob, saved = tanh_normal(mean, log_std, eps, scale, bias)
        want = torch.autograd.grad((action * g_a).sum() + (log_prob * g_logp).sum(), (mean, log_std))
        got = tanh_normal_grad(g_a, g_logp, tuple(x.detach() for x in saved), eps, scale)
        for a, b in zip(got, want):
            assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dual_clip", [0.0, 2.0])
def test_ppo_policy_loss_and_grad_is_autograds(dual_clip):
    logp_old = _leaf(64, low=-2, high=0, seed=12).detach()
    logp = (logp_old + _leaf(64, low=-0.6, high=0.6, seed=13).detach()).requires_grad_(True)  # ratios either side
    adv = _leaf(64, low=-3, high=3, seed=14).detach()
    (want,) = torch.autograd.grad(ppo.policy_loss(logp, logp_old, adv, 0.2, dual_clip)[0] * 0.7, logp)
    *values, got = ppo.policy_loss_and_grad(logp.detach(), logp_old, adv, 0.2, dual_clip, scale=0.7)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(values, ppo.policy_loss(logp.detach(), logp_old, adv, 0.2, dual_clip)):
        assert torch.equal(a, b)  # the values it gives are policy_loss's


@pytest.mark.parametrize("clip", [False, True])
def test_ppo_value_loss_and_grad_is_autograds(clip):
    values, values_old, returns = _leaf(64, low=-2, high=2, seed=15), _leaf(64, seed=16).detach(), \
        _leaf(64, low=-2, high=2, seed=17).detach()
    (want,) = torch.autograd.grad(ppo.value_loss(values, values_old, returns, 0.2, clip) * 0.5, values)
    loss, got = ppo.value_loss_and_grad(values.detach(), values_old, returns, 0.2, clip, scale=0.5)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(loss, ppo.value_loss(values.detach(), values_old, returns, 0.2, clip))


@pytest.mark.parametrize("kind", ["discrete", "box", "box, state-dependent std"])
def test_ppo_head_log_prob_entropy_grad_is_autograds(kind):
    from heron.algos.ppo.networks import ActionHead

    action = {"kind": "discrete", "n": 4} if kind == "discrete" else {"kind": "box", "low": [-1.0] * 3,
                                                                       "high": [1.0] * 3}
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
    got = head.log_prob_entropy_grad(params.detach(), actions, g_logp, g_ent)
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)
    terms = head.terms(params.detach())  # as the hand-written step takes them: values first, then reused
    terms.log_prob(actions), terms.entropy()
    assert torch.equal(terms.log_prob_entropy_grad(actions, g_logp, g_ent), got)
