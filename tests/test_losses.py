"""Every loss on hand-computed numbers, and the tanh-normal log-density against a numeric change
of variables."""

import math

import numpy as np
import torch

from heron.algos.sac import losses as sac
from heron.algos.td3 import losses as td3
from heron.rl.distributions import LOG_STD_MAX, LOG_STD_MIN, TanhGaussian


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
    a = td3.smoothed_target_actions(
        next_actions, noise, 0.5, scale, torch.tensor([-1.0, -2.0]), torch.tensor([1.0, 2.0])
    )
    # [0.9 + 0.5 -> clipped to 1.0, -0.2 + (-0.1 * 2) = -0.4]
    assert torch.allclose(a, torch.tensor([[1.0, -0.4]]))
    y = td3.td_target(
        torch.tensor([1.0, 1.0]), torch.tensor([False, True]), torch.tensor([[5.0, 7.0], [4.0, 9.0]]), gamma=0.5
    )
    assert torch.allclose(y, torch.tensor([3.0, 1.0]))
    assert torch.isclose(td3.actor_loss(torch.tensor([1.0, 3.0])), torch.tensor(-2.0))


def test_log_std_squashing_bounds():
    raw = torch.tensor([-100.0, 0.0, 100.0])
    out = TanhGaussian.log_std(raw)
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
    action, log_prob = TanhGaussian.sample(mean, log_std, scale, bias)
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
    act, lp = TanhGaussian.sample(mean.expand(5, 1), log_std.expand(5, 1), scale, bias)
    u = torch.atanh((act[:, 0] - bias) / scale)
    ref = torch.distributions.Normal(mean[0, 0], log_std.exp()[0, 0]).log_prob(u) - torch.log(
        scale * (1 - torch.tanh(u) ** 2)
    )
    assert torch.allclose(lp, ref, atol=1e-8)
