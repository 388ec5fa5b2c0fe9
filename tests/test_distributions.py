"""The policies' distributions in numpy (what acting on a CPU runs) against their torch versions
(what the gradient steps differentiate): SAC's tanh-Gaussian and PPO's action heads, given the
same outputs and the same noise, give the same actions, log-probabilities and modes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from heron.algos.ppo.distributions import ActionHead
from heron.rl.distributions import LOG_STD_MAX, LOG_STD_MIN, TanhGaussian


def _tensor(*shape: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def test_tanh_gaussian_numpy_twins_match_torch():
    out = _tensor(6, 8, seed=0, scale=3.0)  # raw log-stds far enough out that the squashing bites
    scale, bias = torch.tensor([1.0, 2.0, 0.5, 3.0]), torch.tensor([0.0, 1.0, -0.5, 2.0])
    eps = _tensor(6, 4, seed=1)
    mean, log_std = TanhGaussian.params(out)
    assert log_std.min() >= LOG_STD_MIN and log_std.max() <= LOG_STD_MAX
    actions, log_prob, _ = TanhGaussian.rsample(mean, log_std, eps, scale, bias)
    assert log_prob.shape == (6,)

    gaussian = TanhGaussian.numpy_gaussian(out.numpy().copy())
    np.testing.assert_allclose(gaussian[:, :4], mean.numpy())
    np.testing.assert_allclose(gaussian[:, 4:], log_std.exp().numpy(), rtol=1e-6)
    drawn = TanhGaussian.draw(gaussian, eps.numpy(), scale.numpy(), bias.numpy())
    np.testing.assert_allclose(drawn, actions.numpy(), rtol=1e-6, atol=1e-6)
    # a tensor env's draw stays in torch
    torch.testing.assert_close(TanhGaussian.draw(torch.from_numpy(gaussian), eps, scale, bias), actions)

    mode = TanhGaussian.mode(mean, scale, bias)
    np.testing.assert_allclose(
        TanhGaussian.numpy_mode(out.numpy(), scale.numpy(), bias.numpy()), mode.numpy(), rtol=1e-6, atol=1e-6
    )
    assert torch.all(mode <= bias + scale) and torch.all(mode >= bias - scale)


def test_tanh_gaussian_sample_draws_its_normals_from_torch():
    mean, log_std = _tensor(3, 2, seed=2), _tensor(3, 2, seed=3).clamp(LOG_STD_MIN, LOG_STD_MAX)
    scale, bias = torch.ones(2), torch.zeros(2)
    torch.manual_seed(5)
    got = TanhGaussian.sample(mean, log_std, scale, bias)
    torch.manual_seed(5)
    want = TanhGaussian.rsample(mean, log_std, torch.randn(3, 2), scale, bias)[:2]
    torch.testing.assert_close(got, want, rtol=0, atol=0)


HEADS = {
    "discrete": ({"kind": "discrete", "n": 5}, False),
    "multidiscrete": ({"kind": "multidiscrete", "nvec": [3, 2, 4]}, False),
    "box_free_std": ({"kind": "box", "low": [-1.0, -2.0, 0.0], "high": [1.0, 2.0, 0.5]}, False),
    "box_state_std": ({"kind": "box", "low": [-1.0, -2.0, 0.0], "high": [1.0, 2.0, 0.5]}, True),
}


@pytest.mark.parametrize("name", list(HEADS))
def test_action_head_numpy_twins_match_torch(name):
    action, state_dependent = HEADS[name]
    torch.manual_seed(0)
    head = ActionHead(16, action, state_dependent, init_log_std=-0.5)
    with torch.no_grad():
        head.linear.weight.normal_()  # away from the near-uniform initial policy
        if head.kind == "box" and not state_dependent:
            head.log_std.copy_(torch.tensor([-0.5, 3.0, -1.0]))  # one above the clamp
    feats = _tensor(7, 16, seed=1)
    noise = head.noise((7,), "cpu")
    with torch.no_grad():
        out = head.linear(feats)
        params = head.params_of(out)
        actions, logp = head.sample_logp(params, noise)
        mode = head.mode(params)
        env_actions = head.to_env(actions)

    np_actions, np_logp = head.numpy_sample_logp(out.numpy(), noise.numpy(), head.numpy_log_std())
    np.testing.assert_allclose(np_actions, actions.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np_logp, logp.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(head.numpy_mode(out.numpy()), mode.numpy())
    # the sampled actions' log-probs, as the loss reads them back
    torch.testing.assert_close(head.log_prob(params, actions), logp, rtol=1e-5, atol=1e-5)
    if head.kind == "box":
        clipped = head.numpy_to_env(np_actions, head.low.numpy(), head.high.numpy())
        np.testing.assert_allclose(clipped, env_actions.numpy(), rtol=1e-6, atol=1e-6)
        assert np.any(clipped != np_actions)  # some actions fell outside the bounds
    else:
        assert np_actions.dtype.kind == "i" and (np_actions != np.asarray(mode)).any()  # sampled, not greedy
