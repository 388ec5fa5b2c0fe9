"""PPO's pieces on hand-computed numbers: GAE, n-step targets, truncation, the clipped losses,
advantage recomputation, value normalization and recurrent sequence training."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from heron.algos.ppo import losses
from heron.algos.ppo.learn import as_sequences, targets
from heron.algos.ppo.networks import ActorCritic
from heron.algos.ppo.spaces import action_info
from heron.rl import returns
from heron.rl.nets import RunningNorm
from heron.rl.returns import RewardScaler, gae, nstep_returns


def _col(*xs):
    return torch.tensor(xs, dtype=torch.float32)[:, None]  # [T, 1]


def _flags(*xs):
    return torch.tensor(xs, dtype=torch.bool)[:, None]


# -- GAE ---------------------------------------------------------------------------------------------
def _gae_loop(r, v, nv, term, trunc, gamma, lam):
    T, N = r.shape
    adv = np.zeros((T, N))
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            delta = r[t, n] + gamma * (0.0 if term[t, n] else nv[t, n]) - v[t, n]
            if term[t, n] or trunc[t, n]:
                running = 0.0
            running = delta + gamma * lam * running
            adv[t, n] = running
    return adv


def _random_rollout(seed, T, N, p):
    """Rewards, values, next values [T, N]; terminations and truncations (not both) with chance p."""
    g = torch.Generator().manual_seed(seed)
    r, v, nv = (torch.randn(T, N, generator=g) for _ in range(3))
    term = torch.rand(T, N, generator=g) < p
    trunc = (torch.rand(T, N, generator=g) < p) & ~term
    return r, v, nv, term, trunc


def test_gae_matches_a_plain_python_loop():
    r, v, nv, term, trunc = _random_rollout(0, 37, 5, 0.1)
    expected = _gae_loop(r.numpy(), v.numpy(), nv.numpy(), term.numpy(), trunc.numpy(), 0.97, 0.9)
    np.testing.assert_allclose(gae(r, v, nv, term, trunc, 0.97, 0.9).numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block", [64, 4, 1])
def test_gae_in_blocks_matches_the_loop(monkeypatch, block):
    # on a GPU, GAE's recursion runs as discounted_sums: blocks of SUM_BLOCK steps chained from the
    # last, the first padded: 150 steps are 3 blocks of 64 (the first padded), 38 of 4, or the loop (1)
    monkeypatch.setattr(returns, "SUM_BLOCK", block)
    r, v, nv, term, trunc = _random_rollout(2, 150, 4, 0.03)
    term[60:70, 0] = True  # episodes ending at a block's edge and in a run of steps
    trunc[63, 1] = trunc[64, 2] = True
    for gamma, lam in ((0.99, 0.95), (1.0, 1.0), (0.9, 0.0)):
        expected = _gae_loop(r.numpy(), v.numpy(), nv.numpy(), term.numpy(), trunc.numpy(), gamma, lam)
        deltas = r + gamma * nv.masked_fill(term, 0.0) - v
        got = returns.discounted_sums(deltas, term | trunc, gamma * lam)
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=2e-5)


def test_gae_on_the_cpu_keeps_the_torch_loops_bits():
    # on the CPU the recursion runs step by step in numpy: the bits of the torch loop it replaced,
    # which seeded runs (and their learning tests) keep
    T, N = 70, 6
    r, v, nv, term, trunc = _random_rollout(4, T, N, 0.05)
    deltas = r + 0.99 * (1.0 - term.float()) * nv - v
    decay = 0.99 * 0.95 * (1.0 - (term | trunc).float())
    expected, last = torch.empty_like(deltas), torch.zeros(N)
    for t in range(T - 1, -1, -1):
        last = deltas[t] + decay[t] * last
        expected[t] = last
    assert torch.equal(gae(r, v, nv, term, trunc, 0.99, 0.95), expected)


def test_gae_by_hand():
    # gamma 0.9, lambda 0.5: deltas 0.95, 0.95, 1 + 0.9 * 2 - 0.5 = 2.3
    # A2 = 2.3; A1 = 0.95 + 0.45 * 2.3 = 1.985; A0 = 0.95 + 0.45 * 1.985 = 1.84325
    adv = gae(_col(1, 1, 1), _col(0.5, 0.5, 0.5), _col(0.5, 0.5, 2.0), _flags(0, 0, 0), _flags(0, 0, 0), 0.9, 0.5)
    torch.testing.assert_close(adv, _col(1.84325, 1.985, 2.3))


def test_truncation_bootstraps_from_the_final_observation_and_termination_does_not():
    r, v, nv = _col(1, 1, 1), _col(0.5, 0.5, 0.5), _col(0.5, 10.0, 2.0)  # V(final obs at t=1) = 10
    # truncated at t=1: delta1 = 1 + 0.9 * 10 - 0.5 = 9.5, the recursion stops: A1 = 9.5, A0 = 0.95 + 0.45 * 9.5
    adv = gae(r, v, nv, _flags(0, 0, 0), _flags(0, 1, 0), 0.9, 0.5)
    torch.testing.assert_close(adv, _col(0.95 + 0.45 * 9.5, 9.5, 2.3))
    # terminated at t=1: delta1 = 1 - 0.5 = 0.5, no bootstrap
    adv = gae(r, v, nv, _flags(0, 1, 0), _flags(0, 0, 0), 0.9, 0.5)
    torch.testing.assert_close(adv, _col(0.95 + 0.45 * 0.5, 0.5, 2.3))


def test_nstep_returns_by_hand_and_limits():
    r, nv = _col(1, 2, 3, 4), _col(10, 20, 30, 40)
    none = _flags(0, 0, 0, 0)
    # n = 2, gamma 0.5: G0 = 1 + 0.5*2 + 0.25*20 = 7; G1 = 2 + 1.5 + 0.25*30 = 11; G2 = 3 + 2 + 10 = 15;
    # G3 = 4 + 0.5*40 = 24 (the rollout ends)
    torch.testing.assert_close(nstep_returns(r, nv, none, none, 0.5, 2), _col(7, 11, 15, 24))
    # terminated at t=1: G0 = 1 + 0.5*2 = 2 (no bootstrap), G1 = 2
    term = _flags(0, 1, 0, 0)
    torch.testing.assert_close(nstep_returns(r, nv, term, none, 0.5, 2)[:2], _col(2, 2))
    # truncated at t=1: G0 = 1 + 0.5*2 + 0.25*20 = 7 (bootstrap from the final obs), G1 = 2 + 0.5*20 = 12
    trunc = _flags(0, 1, 0, 0)
    torch.testing.assert_close(nstep_returns(r, nv, none, trunc, 0.5, 2)[:2], _col(7, 12))
    # n = 1 is the TD(0) target; n >= T is GAE(lambda = 1) + V
    g = torch.Generator().manual_seed(1)
    R, V, NV = (torch.randn(9, 3, generator=g) for _ in range(3))
    TE, TR = torch.rand(9, 3, generator=g) < 0.2, torch.rand(9, 3, generator=g) < 0.2
    torch.testing.assert_close(nstep_returns(R, NV, TE, TR, 0.9, 1), R + 0.9 * (~TE) * NV)
    V = torch.cat([V[:1], NV[:-1]])  # consistent values: V(obs_{t+1}) = V(next_obs_t) (telescoping)
    torch.testing.assert_close(nstep_returns(R, NV, TE, TR, 0.9, 50), gae(R, V, NV, TE, TR, 0.9, 1.0) + V)


# -- losses ------------------------------------------------------------------------------------------
def test_clipped_surrogate_and_dual_clip_by_hand():
    logp_old = torch.zeros(4)
    ratio = torch.tensor([1.5, 0.5, 5.0, 1.1])
    adv = torch.tensor([2.0, -1.0, -1.0, 1.0])
    # eps 0.2: -min(r A, clip(r) A) = [-min(3, 2.4), -min(-0.5, -0.8), -min(-5, -1.2), -min(1.1, 1.1)]
    #                                = [-2.4, 0.8, 5.0, -1.1]
    loss, kl, clipfrac = losses.policy_loss(ratio.log(), logp_old, adv, 0.2)
    assert loss.item() == pytest.approx((-2.4 + 0.8 + 5.0 - 1.1) / 4)
    assert clipfrac.item() == pytest.approx(3 / 4)  # 1.5, 0.5 and 5.0 lie outside [0.8, 1.2]
    r = ratio
    assert kl.item() == pytest.approx(((r - 1) - r.log()).mean().item())
    # dual clip c = 3: for A < 0 the loss is at most -c A = 3: the third term 5.0 becomes 3.0
    loss, _, _ = losses.policy_loss(ratio.log(), logp_old, adv, 0.2, dual_clip=3.0)
    assert loss.item() == pytest.approx((-2.4 + 0.8 + 3.0 - 1.1) / 4)


def test_value_clipping_by_hand():
    values, old, returns = torch.tensor([2.0, 0.0]), torch.tensor([1.0, 0.5]), torch.tensor([1.5, 1.0])
    # unclipped errors: (0.5)^2, (1.0)^2; clipped values (eps 0.2): 1.2, 0.3 -> errors 0.09, 0.49
    # max: 0.25, 1.0 -> 0.5 * mean = 0.3125 (the first element keeps the unclipped error 0.25 > 0.09)
    assert losses.value_loss(values, old, returns, 0.2, clip=True).item() == pytest.approx(0.3125)
    values = torch.tensor([1.1, 0.0])  # first: unclipped 0.16 vs clipped (1.1 - 1.5)^2 = 0.16
    old = torch.tensor([3.0, 0.5])  # clipped to 2.8: (2.8 - 1.5)^2 = 1.69 > 0.16: the pessimistic one wins
    assert losses.value_loss(values, old, returns, 0.2, clip=True).item() == pytest.approx(0.5 * (1.69 + 1.0) / 2)
    assert losses.value_loss(values, old, returns, 0.2, clip=False).item() == pytest.approx(0.5 * (0.16 + 1.0) / 2)


def test_explained_variance():
    r = torch.tensor([1.0, 2.0, 3.0])
    assert losses.explained_variance(r, r).item() == pytest.approx(1.0)
    assert losses.explained_variance(torch.full((3,), 2.0), r).item() == pytest.approx(0.0)


# -- networks, recomputation, normalization ----------------------------------------------------------
def _model(recurrent="none", shared=False, action=None, value_norm=False, obs_dim=3):
    torch.manual_seed(0)
    spaces = {"obs_shape": [obs_dim], "obs_dtype": "float32", "action": action or {"kind": "discrete", "n": 3}}
    return ActorCritic(spaces, (16,), shared, recurrent, 8, False, value_norm, False, 0.0)


def _rollout(T=6, N=2, obs_dim=3, S=0):
    g = torch.Generator().manual_seed(3)
    return {
        "obs": torch.randn(1, T, N, obs_dim, generator=g),
        "next_obs": torch.randn(1, T, N, obs_dim, generator=g),
        "rewards": torch.randn(1, T, N, generator=g),
        "terminated": torch.zeros(1, T, N, dtype=torch.bool),
        "truncated": torch.zeros(1, T, N, dtype=torch.bool).index_fill_(1, torch.tensor([2]), True),
        "starts": torch.zeros(1, T, N, dtype=torch.bool).index_fill_(1, torch.tensor([0, 3]), True),
        "state0": torch.zeros(1, N, S),
    }


def test_recomputation_uses_the_current_critic():
    model = _model()
    seq = as_sequences(_rollout())
    adv0, _ = targets(seq, *model.sequence_values(seq), 0.9, 0.8)
    with torch.no_grad():
        model.v_head.bias += 1.0  # every value + 1
    adv1, _ = targets(seq, *model.sequence_values(seq), 0.9, 0.8)
    # each delta changes by gamma * 1 - 1 = -0.1 (nothing terminates): GAE of constant deltas
    zeros = torch.zeros_like(seq["rewards"]).T
    shift = gae(zeros - 0.1, zeros, zeros, zeros.bool(), seq["truncated"].T, 0.9, 0.8).T
    torch.testing.assert_close(adv1 - adv0, shift)
    assert (adv1 - adv0).abs().min() > 0.09


@pytest.mark.parametrize("shared", [False, True])  # separate MLPs: one forward over obs and next obs; shared: gathered
def test_sequence_values_value_the_final_observation_at_truncation(shared):
    model = _model(shared=shared)
    data = _rollout()
    seq = as_sequences(data)
    values, next_values = model.sequence_values(seq)
    no_starts = torch.zeros(2, 1, dtype=torch.bool)
    with torch.no_grad():
        _, v_final, _ = model(seq["next_obs"][:, 2:3], seq["state0"], no_starts)
        _, v_next, _ = model(seq["obs"][:, 3:4], seq["state0"], no_starts)
        _, v_last, _ = model(seq["next_obs"][:, -1:], seq["state0"], no_starts)
    torch.testing.assert_close(next_values[:, 2], v_final[:, 0])  # truncated at t=2: V(final obs), not V(obs_3)
    torch.testing.assert_close(next_values[:, 3], values[:, 4])
    torch.testing.assert_close(next_values[:, -1], v_last[:, 0])  # the sequence's end: V(its next obs)
    assert not torch.allclose(v_final, v_next)


def test_value_normalization_round_trip():
    norm = RunningNorm((), clip=math.inf)
    returns = torch.randn(1000) * 50 + 200
    norm.update(returns)
    z = norm(returns)
    assert z.mean().abs() < 1e-3 and (z.std() - 1).abs() < 1e-2
    torch.testing.assert_close(norm.denormalize(z), returns, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(norm(norm.denormalize(torch.tensor([0.3, -2.0]))), torch.tensor([0.3, -2.0]))


def test_value_norm_targets_are_denormalized_before_gae():
    model = _model(value_norm=True)
    model.value_norm.update(torch.tensor([100.0, 300.0]))  # mean 200, std 100
    seq = as_sequences(_rollout())
    values, _ = model.sequence_values(seq)
    with torch.no_grad():
        _, raw, _ = model(seq["obs"], seq["state0"], seq["starts"])
    torch.testing.assert_close(values, raw * 100.0 + 200.0, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("recurrent,shared", [("lstm", False), ("gru", True), ("lstm", True)])
def test_sequence_training_reproduces_the_step_by_step_pass(recurrent, shared):
    model = _model(recurrent, shared)
    B, L = 3, 9
    g = torch.Generator().manual_seed(5)
    obs = torch.randn(B, L, 3, generator=g)
    starts = torch.rand(B, L, generator=g) < 0.25
    state0 = torch.randn(B, model.state_size, generator=g)
    params, values, states = model(obs, state0, starts)
    state, p_steps, v_steps = state0, [], []
    for t in range(L):
        state = state * (~starts[:, t]).unsqueeze(-1).float()
        p, v, state = model.step(obs[:, t], state)
        p_steps.append(p)
        v_steps.append(v)
    torch.testing.assert_close(params, torch.stack(p_steps, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(values, torch.stack(v_steps, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(states[:, -1], state, rtol=1e-5, atol=1e-5)


def test_action_heads_log_probs_and_entropies():
    torch.manual_seed(0)
    # Box: Gaussian log-density and entropy against torch.distributions; samples are unclipped,
    # the env receives clipped actions
    box = {"kind": "box", "low": torch.tensor([-1.0, -2.0]), "high": torch.tensor([1.0, 2.0])}
    model = _model(action=box)
    params = model.pi_head(torch.randn(5, 16))
    mean, log_std = params.split(2, -1)
    dist = torch.distributions.Normal(mean, log_std.exp())
    a = model.pi_head.sample(params) * 10
    torch.testing.assert_close(model.pi_head.log_prob(params, a), dist.log_prob(a).sum(-1))
    torch.testing.assert_close(model.pi_head.entropy(params), dist.entropy().sum(-1))
    clipped = model.pi_head.to_env(a)
    assert (clipped.abs() <= torch.tensor([1.0, 2.0])).all()
    # MultiDiscrete: sum of per-dimension categoricals
    md = _model(action={"kind": "multidiscrete", "nvec": [2, 3]})
    params = md.pi_head(torch.randn(4, 16)) * 50
    a = md.pi_head.sample(params)
    assert a.shape == (4, 2) and (a[:, 0] < 2).all() and (a[:, 1] < 3).all()
    d0, d1 = (torch.distributions.Categorical(logits=p) for p in params.split([2, 3], -1))
    torch.testing.assert_close(md.pi_head.log_prob(params, a), d0.log_prob(a[:, 0]) + d1.log_prob(a[:, 1]))
    torch.testing.assert_close(md.pi_head.entropy(params), d0.entropy() + d1.entropy())
    # Discrete: Gumbel-max sampling follows the probabilities
    dm = _model()
    logits = torch.tensor([[0.0, math.log(3.0), -1e9]]).expand(20000, 3)
    counts = torch.bincount(dm.pi_head.sample(logits), minlength=3).float() / 20000
    torch.testing.assert_close(counts, torch.tensor([0.25, 0.75, 0.0]), atol=0.015, rtol=0)


def test_action_spaces_supported_and_rejected():
    assert action_info(gym.spaces.MultiBinary(3), "x") == {"kind": "multidiscrete", "nvec": [2, 2, 2]}
    from heron.errors import HeronError

    with pytest.raises(HeronError, match="ppo supports"):
        action_info(gym.spaces.Tuple([gym.spaces.Discrete(2)]), "x")


def test_reward_scaler_divides_by_the_return_std_and_round_trips_its_state():
    scaler = RewardScaler(2, gamma=0.0)  # gamma 0: the "return" is the reward itself
    rng = np.random.default_rng(0)
    for _ in range(2000):
        out = scaler(rng.normal(5.0, 3.0, 2).astype(np.float32), np.zeros(2, bool))
    assert math.sqrt(scaler.var) == pytest.approx(3.0, rel=0.05)
    assert out.dtype == np.float32 and out.shape == (2,)
    other = RewardScaler(2, gamma=0.0)
    other.load_state_dict(scaler.state_dict())
    x = np.array([6.0, -3.0], np.float32)
    np.testing.assert_array_equal(other(x, np.ones(2, bool)), scaler(x, np.ones(2, bool)))
    # a reward of 6 divided by the return std 3 (gamma 0: the return is the reward)
    assert scaler(np.array([6.0, 6.0], np.float32), np.ones(2, bool))[0] == pytest.approx(2.0, rel=0.05)


def test_reward_scaler_statistics_are_numpys_mean_and_var_exactly():
    """The scaler's written-out moments and clip against np.mean, np.var and np.clip, bit for bit,
    with episode ends resetting some envs' returns."""
    scaler, rng = RewardScaler(5, gamma=0.99, clip=2.0), np.random.default_rng(1)
    ret, mean, var, count, clipped = np.zeros(5), 0.0, 1.0, 1e-4, 0
    for _ in range(50):
        rewards, done = rng.normal(1.0, 4.0, 5), rng.random(5) < 0.2
        out = scaler(rewards, done)
        ret = ret * 0.99 + rewards
        b_mean, b_var = float(ret.mean()), float(ret.var())
        delta, total = b_mean - mean, count + 5
        mean += delta * 5 / total
        var = (var * count + b_var * 5 + delta * delta * count * 5 / total) / total
        count = total
        ret[done] = 0.0
        np.testing.assert_array_equal(out, np.clip(rewards / np.sqrt(var + 1e-8), -2.0, 2.0).astype(np.float32))
        assert (scaler.mean, scaler.var) == (mean, var)
        clipped += int((np.abs(out) == 2.0).sum())
    assert clipped > 0  # the clip was exercised


def test_reward_scaler_scales_a_tensor_env_s_rewards_as_numpy_s_in_torch():
    arrays, tensors, rng = (
        RewardScaler(5, gamma=0.99, clip=2.0),
        RewardScaler(5, gamma=0.99, clip=2.0),
        np.random.default_rng(2),
    )
    for _ in range(50):
        rewards, done = rng.normal(1.0, 4.0, 5).astype(np.float32), rng.random(5) < 0.2
        expected, got = arrays(rewards, done), tensors(torch.from_numpy(rewards), torch.from_numpy(done))
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)
        assert tensors.var == pytest.approx(arrays.var, rel=1e-12)
    other = RewardScaler(5, gamma=0.99, clip=2.0)  # a checkpoint of the torch one, read back
    other.load_state_dict(tensors.state_dict())
    np.testing.assert_allclose(other.ret, arrays.ret, rtol=1e-12)


def test_sample_logp_matches_sample_then_log_prob():
    for action in (
        {"kind": "box", "low": torch.tensor([-1.0]), "high": torch.tensor([1.0])},
        {"kind": "multidiscrete", "nvec": [2, 3]},
        None,
    ):
        model = _model(action=action)
        params = model.pi_head(torch.randn(6, 16))
        a, logp = model.pi_head.sample_logp(params)
        torch.testing.assert_close(logp, model.pi_head.log_prob(params, a))


def test_nature_cnn_scales_frames_without_touching_its_input():
    """uint8 frames are scaled in the network's own float copy; a float input (the caller's tensor)
    gives the same features and is left as it was."""
    from heron.rl.nets import NatureCNN

    torch.manual_seed(0)
    cnn = NatureCNN(4)
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    as_float = frames.float()
    expected = cnn.fc(cnn.convs(as_float / 255.0))
    assert torch.equal(cnn(frames), expected) and torch.equal(cnn(as_float), expected)
    assert torch.equal(as_float, frames.float())
