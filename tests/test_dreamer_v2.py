"""DreamerV2's pure functions on hand-computed numbers: lambda returns, the reconstruction loss
with KL balancing and free nats, actor and critic losses."""

import math

import pytest
import torch

from heron.algos.dreamer import losses as shared
from heron.algos.dreamer_v2 import losses
from heron.rl.returns import lambda_return


def loop_lambda_return(r, v, d, boot, lam):
    H, B = r.shape
    out = torch.zeros(H, B)
    for b in range(B):
        nxt = float(boot[b])
        for t in reversed(range(H)):
            v_next = float(v[t + 1, b]) if t + 1 < H else float(boot[b])
            nxt = float(r[t, b]) + float(d[t, b]) * ((1 - lam) * v_next + lam * nxt)
            out[t, b] = nxt
    return out


def test_lambda_return_matches_plain_loop():
    g = torch.Generator().manual_seed(0)
    r, v, d = (torch.randn(15, 4, generator=g) for _ in range(3))
    d = d.sigmoid() * 0.99
    boot = torch.randn(4, generator=g)
    for lam in (0.0, 0.5, 0.95, 1.0):
        torch.testing.assert_close(lambda_return(r, v, d, boot, lam), loop_lambda_return(r, v, d, boot, lam))


def test_lambda_return_hand_numbers():
    # H = 2, gamma*cont = 0.5, lambda = 0.5, v = [10, 20], bootstrap 40, r = [1, 2]:
    # V1 = 2 + 0.5 * 40 = 22 (last step: both branches bootstrap at 40)
    # V0 = 1 + 0.5 * (0.5 * 20 + 0.5 * 22) = 11.5
    out = lambda_return(
        torch.tensor([[1.0], [2.0]]), torch.tensor([[10.0], [20.0]]), torch.full((2, 1), 0.5), torch.tensor([40.0]), 0.5
    )
    torch.testing.assert_close(out, torch.tensor([[11.5], [22.0]]))
    # lambda = 0: one-step targets r_t + d_t v_{t+1}
    out0 = lambda_return(
        torch.tensor([[1.0], [2.0]]), torch.tensor([[10.0], [20.0]]), torch.full((2, 1), 0.5), torch.tensor([40.0]), 0.0
    )
    torch.testing.assert_close(out0, torch.tensor([[11.0], [22.0]]))


def test_categorical_kl_hand_numbers():
    # one variable, two classes: p = (0.5, 0.5), q = (0.25, 0.75) given as log-probabilities
    p, q = torch.log(torch.tensor([[0.5, 0.5]])), torch.log(torch.tensor([[0.25, 0.75]]))
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert shared.categorical_kl(p, q).item() == pytest.approx(expected, rel=1e-6)
    # two independent variables: the KL adds up
    assert shared.categorical_kl(torch.stack([p[0], p[0]]), torch.stack([q[0], q[0]])).item() == pytest.approx(
        2 * expected, rel=1e-6
    )


def test_kl_balancing_gradients_and_free_nats():
    post = torch.log(torch.tensor([[[[0.5, 0.5]]]])).requires_grad_()  # [B=1, T=1, S=1, K=2]
    prior = torch.log(torch.tensor([[[[0.25, 0.75]]]])).requires_grad_()
    kl = 0.5 * math.log(2.0) + 0.5 * math.log(2.0 / 3.0)  # = 0.1438
    out = losses.kl_balanced(post, prior, alpha=0.8, free_nats=0.0, free_avg=True)
    assert out.item() == pytest.approx(kl, rel=1e-6)  # both terms have the same value
    # balancing splits the gradient: the prior gets alpha of it, the posterior 1 - alpha
    g_post, g_prior = torch.autograd.grad(out, (post, prior))
    full_post, full_prior = torch.autograd.grad(shared.categorical_kl(post, prior).sum(), (post, prior))
    torch.testing.assert_close(g_prior, 0.8 * full_prior)
    torch.testing.assert_close(g_post, 0.2 * full_post)
    # free nats above the KL: the loss is the constant and no gradient flows
    clamped = losses.kl_balanced(post, prior, alpha=0.8, free_nats=1.0, free_avg=True)
    assert clamped.item() == pytest.approx(1.0)
    assert all(g.abs().sum() == 0 for g in torch.autograd.grad(clamped, (post, prior)))


def test_free_nats_average_versus_per_sample():
    # two samples with KL 0 and KL k: averaged first -> max(k/2, f); per sample -> (f + max(k, f))/2
    p = torch.log(torch.tensor([[0.5, 0.5]]))
    q = torch.log(torch.tensor([[0.25, 0.75]]))
    post = torch.stack([p, p])[None]  # [1, 2, 1, 2]
    prior = torch.stack([p, q])[None]
    k = shared.categorical_kl(p, q).item()
    f = 0.1
    avg = losses.kl_balanced(post, prior, 0.8, f, free_avg=True).item()
    per = losses.kl_balanced(post, prior, 0.8, f, free_avg=False).item()
    assert avg == pytest.approx(max(k / 2, f), rel=1e-6)
    assert per == pytest.approx((f + max(k, f)) / 2, rel=1e-6)


def test_reconstruction_loss_hand_numbers():
    # obs: 2 pixels, mean 0, target (1, 1): nll = 2 * (0.5 + 0.5 log 2pi)
    obs_nll = losses.gaussian_nll(torch.zeros(1, 1, 2), torch.ones(1, 1, 2), event_dims=1)
    assert obs_nll.item() == pytest.approx(1.0 + math.log(2 * math.pi), rel=1e-6)
    reward_nll = losses.gaussian_nll(torch.tensor([[0.5]]), torch.tensor([[1.5]]), event_dims=0)  # 0.5 + 0.919
    cont_nll = losses.bernoulli_nll(torch.tensor([[0.0]]), torch.tensor([[1.0]]))  # log 2
    p = torch.log(torch.tensor([[[[0.5, 0.5]]]]))
    q = torch.log(torch.tensor([[[[0.25, 0.75]]]]))
    kl = 0.5 * math.log(2.0) + 0.5 * math.log(2.0 / 3.0)
    out = losses.reconstruction_loss(
        obs_nll,
        reward_nll,
        p,
        q,
        kl_balancing_alpha=0.8,
        kl_free_nats=0.0,
        kl_regularizer=0.1,
        continue_nll=cont_nll,
        continue_scale_factor=5.0,
    )
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    expected = 0.1 * kl + (1 + 2 * half_log_2pi) + (0.5 + half_log_2pi) + 5 * math.log(2)
    assert out["loss"].item() == pytest.approx(expected, rel=1e-6)
    assert out["continue"].item() == pytest.approx(5 * math.log(2), rel=1e-6)
    no_cont = losses.reconstruction_loss(obs_nll, reward_nll, p, q, kl_regularizer=0.1)
    assert no_cont["continue"].item() == 0.0
    assert no_cont["loss"].item() == pytest.approx(expected - 5 * math.log(2), rel=1e-6)


def test_actor_loss_mixes_reinforce_dynamics_and_entropy():
    logp = torch.tensor([[-1.0], [-2.0]], requires_grad=True)
    ent = torch.tensor([[0.5], [0.7]])
    lam_v = torch.tensor([[3.0], [1.0]], requires_grad=True)
    base = torch.tensor([[2.0], [2.0]])
    w = torch.tensor([[1.0], [0.5]])
    rho, eta = 0.3, 0.01
    # step 0: 0.3*(-1)*(1) + 0.7*3 + 0.01*0.5 = 1.805;  step 1: 0.3*(-2)*(-1) + 0.7*1 + 0.007 = 1.307
    expected = -(1.0 * 1.805 + 0.5 * 1.307) / 2
    loss = losses.actor_loss(logp, ent, lam_v, base, w, rho, eta)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    g_logp, g_lam = torch.autograd.grad(loss, (logp, lam_v))
    # the advantage is a constant for REINFORCE; dynamics backprop flows through V^lambda only
    torch.testing.assert_close(g_logp, torch.tensor([[-0.3 * 1.0 * 1.0 / 2], [-0.3 * -1.0 * 0.5 / 2]]))
    torch.testing.assert_close(g_lam, torch.tensor([[-0.7 * 1.0 / 2], [-0.7 * 0.5 / 2]]))


def test_critic_loss_hand_numbers():
    v = torch.tensor([[1.0], [2.0]], requires_grad=True)
    target = torch.tensor([[2.0], [2.0]], requires_grad=True)
    w = torch.tensor([[1.0], [0.5]])
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    expected = (1.0 * (0.5 + half_log_2pi) + 0.5 * half_log_2pi) / 2
    loss = losses.critic_loss(v, target, w)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    torch.testing.assert_close(v.grad, torch.tensor([[-0.5], [0.0]]))
    assert target.grad is None  # the lambda targets are constants of the critic loss


def test_imagination_targets_index_conventions_on_hand_numbers():
    """States s_0 s_1 s_2 (H = 2) with rewards 1 2 3, values 10 20 30, continue probabilities 0.9 0.5
    0.2, gamma 0.5, lambda 1 (Monte Carlo to the bootstrap v(s_2) = 30). Column 0 starts from a live
    state, column 1 from a real terminal one. The continue model learns gamma * (1 - terminal), as
    the references' does, so its prediction is the discount itself: gamma * probability."""

    col = lambda *v: torch.tensor(v).unsqueeze(1).repeat(1, 2)  # noqa: E731  [3, 2]
    rewards, values, continues = col(1.0, 2.0, 3.0), col(10.0, 20.0, 30.0), 0.5 * col(0.9, 0.5, 0.2)
    alive = torch.tensor([1.0, 0.0])
    # no continue model: discount gamma everywhere
    v, w = shared.imagination_targets(rewards, None, values, alive, 0.5, 1.0, current=True)
    assert torch.allclose(v[:, 0], torch.tensor([1 + 0.5 * (2 + 0.5 * 30), 2 + 0.5 * 30]))  # 9.5, 17
    assert torch.allclose(w[:, 0], torch.tensor([1.0, 0.5]))
    v, w = shared.imagination_targets(rewards, None, values, alive, 0.5, 1.0, current=False)
    assert torch.allclose(v[:, 0], torch.tensor([2 + 0.5 * (3 + 0.5 * 30), 3 + 0.5 * 30]))  # 11, 18
    assert torch.allclose(w, torch.tensor([[1.0, 0.0], [0.5, 0.0]]))
    # paper (current): d_0 = gamma * alive is the real discount, d_1 = gamma * c(s_1) = 0.25
    v, w = shared.imagination_targets(rewards, continues, values, alive, 0.5, 1.0, current=True)
    assert torch.allclose(v, torch.tensor([[1 + 0.5 * (2 + 0.25 * 30), 1.0], [2 + 0.25 * 30, 9.5]]))  # 5.75
    assert torch.allclose(w, torch.tensor([[1.0, 1.0], [0.5, 0.0]]))
    # next: d_t = gamma * c(s_{t+1}) = 0.25, 0.1 and the rewards of s_1, s_2; terminal starts weigh 0
    v, w = shared.imagination_targets(rewards, continues, values, alive, 0.5, 1.0, current=False)
    assert torch.allclose(v, torch.tensor([[2 + 0.25 * (3 + 0.1 * 30)] * 2, [3 + 0.1 * 30] * 2]))  # 3.5, 6
    assert torch.allclose(w, torch.tensor([[1.0, 0.0], [0.25, 0.0]]))


def test_actor_scores_each_action_against_the_target_that_starts_with_its_reward():
    """H = 3, one trajectory. With the paper's alignment (current) the official code and sheeprl score
    a_t at s_t by V_{t+1} - v(s_t), weight w_t, for t = 0 .. H-2; with DreamerV3's (next) by V_t - v(s_t)
    for t = 0 .. H-1."""
    logp = torch.tensor([[-1.0], [-2.0], [-3.0]])
    ent = torch.tensor([[0.1], [0.2], [0.3]])
    targets = torch.tensor([[5.0], [6.0], [7.0]])
    values = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    weights = torch.tensor([[1.0], [0.9], [0.8]])
    lp, en, tg, base, w = shared.actor_steps(logp, ent, targets, values, weights, current=True)
    assert lp.flatten().tolist() == [-1.0, -2.0] and en.flatten().tolist() == pytest.approx([0.1, 0.2])
    assert tg.flatten().tolist() == [6.0, 7.0] and base.flatten().tolist() == [1.0, 2.0]
    assert w.flatten().tolist() == pytest.approx([1.0, 0.9])
    # REINFORCE only: -(1 * (-1) * (6 - 1) + 0.9 * (-2) * (7 - 2)) / 2 = 7.0
    assert losses.actor_loss(lp, en, tg, base, w, 1.0, 0.0).item() == pytest.approx(7.0)
    lp, en, tg, base, w = shared.actor_steps(logp, ent, targets, values, weights, current=False)
    assert tg.flatten().tolist() == [5.0, 6.0, 7.0] and base.flatten().tolist() == [1.0, 2.0, 3.0]
    assert lp.shape == en.shape == w.shape == (3, 1)
