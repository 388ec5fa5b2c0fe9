"""DreamerV3: symlog and two-hot on hand-computed numbers, unimix, the percentile normaliser against
numpy's quantiles, each loss on a tiny batch, the networks' initial state and zero-predicting
heads, and the CLI end to end (exact resume is in test_determinism.py)."""

import importlib.util
import math

import numpy as np
import pytest
import torch
import toy_envs  # noqa: F401 (registers the heron-test/ envs)

from heron.algos.dreamer.policy import DreamerPolicy
from heron.algos.dreamer_v3 import losses
from heron.algos.dreamer_v3.config import PRESETS, Config
from heron.algos.dreamer_v3.distributions import clip_actions
from heron.algos.dreamer_v3.networks import Agent, Player
from heron.cli import main
from heron.runtime import checkpoint as ckpt

DEBUG = dict(PRESETS["debug"], progress="none")


def test_symlog_and_symexp_hand_numbers_and_round_trip():
    x = torch.tensor([0.0, math.e - 1, -(math.e**2 - 1), 1e6])
    torch.testing.assert_close(losses.symlog(x), torch.tensor([0.0, 1.0, -2.0, math.log(1e6 + 1)]))
    torch.testing.assert_close(losses.symexp(torch.tensor([1.0, -2.0])), torch.tensor([math.e - 1, -(math.e**2 - 1)]))
    y = torch.tensor([-1e4, -3.5, -1e-3, 0.0, 2e-3, 7.0, 5e5], dtype=torch.float64)
    torch.testing.assert_close(losses.symexp(losses.symlog(y)), y)


def test_twohot_bins_are_symexp_spaced_and_symmetric():
    bins = losses.twohot_bins(255).double()
    assert bins.shape == (255,) and bins[127] == 0
    torch.testing.assert_close(bins, -bins.flip(0))
    torch.testing.assert_close(bins[-1], torch.tensor(math.expm1(20.0), dtype=torch.float64), rtol=1e-6, atol=0)
    torch.testing.assert_close(bins[128], torch.tensor(math.expm1(20.0 / 127), dtype=torch.float64), rtol=1e-6, atol=0)
    assert (bins[1:] > bins[:-1]).all()


def test_twohot_encoding_hand_numbers():
    bins = torch.tensor([-2.0, -1.0, 0.0, 1.0, 3.0])
    enc = losses.twohot(torch.tensor([0.25, -1.0, 2.5, 10.0, -7.0]), bins)
    expected = torch.tensor(
        [
            [0, 0, 0.75, 0.25, 0],  # between 0 and 1: 3/4 to the nearer
            [0, 1.0, 0, 0, 0],  # on a bin
            [0, 0, 0, 0.25, 0.75],  # between 1 and 3
            [0, 0, 0, 0, 1.0],  # above the last bin: the last bin
            [1.0, 0, 0, 0, 0],
        ]
    )  # below the first
    torch.testing.assert_close(enc, expected)
    inside = enc[:3]
    torch.testing.assert_close((inside * bins).sum(-1), torch.tensor([0.25, -1.0, 2.5]))  # the mean is x


def test_twohot_in_symlog_space_interpolates_between_the_bins_symlogs():
    """--twohot-space symlog (sheeprl's heads): five bins at symexp(-20, -10, 0, 10, 20); a target
    symexp(12) lies a fifth of the way from the symlog 10 to 20, where the raw values put it next to
    symexp(10)."""
    bins = losses.twohot_bins(5).double()
    x = torch.tensor([math.expm1(12.0), -math.expm1(15.0), 0.0], dtype=torch.float64)
    torch.testing.assert_close(
        losses.twohot(x, bins, "symlog"),
        torch.tensor([[0, 0, 0, 0.8, 0.2], [0.5, 0.5, 0, 0, 0], [0, 0, 1.0, 0, 0]], dtype=torch.float64),
    )
    raw = losses.twohot(x[:1], bins)[0]  # the same target by value: (e^20 - e^12) / (e^20 - e^10) on symexp(10)
    torch.testing.assert_close(
        raw[3], torch.tensor((math.exp(20) - math.exp(12)) / (math.exp(20) - math.exp(10)), dtype=torch.float64)
    )
    # the prediction is symexp of the mean position: it decodes the encoding, and uniform is exactly 0
    logits = losses.twohot(x, bins, "symlog").clamp_min(1e-300).log()
    torch.testing.assert_close(losses.twohot_mean(logits, bins, "symlog"), x, rtol=1e-6, atol=0)
    assert losses.twohot_mean(torch.zeros(2, 255), losses.twohot_bins(255), "symlog").abs().max() == 0
    # a bimodal head: the raw mean is the mean of the values, the symlog one symexp of their symlogs' mean
    probs = torch.tensor([[0, 0, 0, 0.5, 0.5]], dtype=torch.float64)
    torch.testing.assert_close(
        losses.twohot_mean(probs.clamp_min(1e-300).log(), bins, "symlog"),
        torch.tensor([math.expm1(15.0)], dtype=torch.float64),
    )
    torch.testing.assert_close(
        losses.twohot_mean(probs.clamp_min(1e-300).log(), bins),
        torch.tensor([(math.expm1(10.0) + math.expm1(20.0)) / 2], dtype=torch.float64),
    )


def test_twohot_mean_decodes_the_encoding_and_starts_at_exactly_zero():
    bins = losses.twohot_bins(255)
    x = torch.tensor([-2000.0, -3.3, -0.01, 0.0, 0.5, 42.0, 1e5])
    logits = losses.twohot(x, bins).clamp_min(1e-30).log()
    torch.testing.assert_close(losses.twohot_mean(logits, bins), x, rtol=1e-5, atol=1e-5)
    assert losses.twohot_mean(torch.zeros(3, 255), bins).abs().max() == 0  # uniform: exactly 0
    # the cross-entropy: -sum(target * log softmax(logits)), at uniform logits ln(255)
    torch.testing.assert_close(
        losses.twohot_nll(torch.zeros(2, 255), torch.tensor([0.0, 7.0]), bins), torch.full((2,), math.log(255.0))
    )


def test_unimix_mixes_one_percent_uniform():
    logits = torch.tensor([[0.0, -1e9, -1e9, -1e9], [1.0, 2.0, 3.0, 4.0]])
    probs = losses.unimix_logits(logits, 0.01).softmax(-1)
    torch.testing.assert_close(probs[0], torch.tensor([0.9925, 0.0025, 0.0025, 0.0025]))
    torch.testing.assert_close(probs[1], 0.99 * logits[1].softmax(-1) + 0.0025)
    assert torch.equal(losses.unimix_logits(logits, 0.0), logits)


def test_percentile_scale_against_numpys_quantiles():
    rng = np.random.default_rng(0)
    low, high = torch.zeros(()), torch.zeros(())
    lows, highs = 0.0, 0.0
    for i in range(5):
        x = rng.normal(10.0 * i, 30.0, size=(15, 64)).astype(np.float32)
        low, high, scale = losses.percentile_scale(torch.from_numpy(x), low, high, 0.99, 1.0, (0.05, 0.95))
        lows = 0.99 * lows + 0.01 * np.quantile(x, 0.05)  # numpy's default (linear) interpolation
        highs = 0.99 * highs + 0.01 * np.quantile(x, 0.95)
        assert low.item() == pytest.approx(lows, rel=1e-5) and high.item() == pytest.approx(highs, rel=1e-5)
        assert scale.item() == pytest.approx(max(1.0, highs - lows), rel=1e-5)
    # a narrow spread is never scaled up: the scale stays at the floor
    _, _, scale = losses.percentile_scale(torch.full((10,), 3.0), torch.zeros(()), torch.zeros(()), 0.5, 1.0)
    assert scale.item() == 1.0


def test_world_model_loss_hand_numbers_and_where_each_kl_term_sends_its_gradient():
    # one categorical of two classes per step; step 0: KL(post || prior) = 0.98 ln 99 (above 1 nat);
    # step 1: 0.5 ln(0.5 / 0.9) + 0.5 ln(0.5 / 0.1) = 0.5108 (free bits: counts as 1)
    post = torch.tensor(
        [[[[math.log(0.99), math.log(0.01)]], [[math.log(0.5), math.log(0.5)]]]], requires_grad=True
    )  # [B=1, T=2, S=1, K=2]
    prior = torch.tensor([[[[math.log(0.01), math.log(0.99)]], [[math.log(0.9), math.log(0.1)]]]], requires_grad=True)
    obs, rew, cont = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, 0.5]]), torch.tensor([[0.2, 0.4]])
    out = losses.world_model_loss(obs, rew, cont, post, prior, 0.5, 0.1, 1.0, 1.0, 2.0)
    kl0 = 0.98 * math.log(99.0)
    expected = ((0.6 * kl0 + 1.0 + 0.5 + 2 * 0.2) + (0.6 * 1.0 + 2.0 + 0.5 + 2 * 0.4)) / 2
    assert out["loss"].item() == pytest.approx(expected, rel=1e-5)
    assert out["kl"].item() == pytest.approx((kl0 + 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(5.0)) / 2, rel=1e-5)
    out["loss"].backward()
    assert post.grad[0, 1].abs().max() == 0 and prior.grad[0, 1].abs().max() == 0  # clipped: no gradient
    # step 0: the prior learns with weight 0.5, the posterior with 0.1 (each term stops the other's gradient)
    p, q = torch.tensor([0.99, 0.01]), torch.tensor([0.01, 0.99])
    d_prior = 0.5 * (q - p) / 2  # d KL(p || softmax(l)) / dl = q - p, mean over 2 steps
    torch.testing.assert_close(prior.grad[0, 0, 0], d_prior, rtol=1e-4, atol=1e-6)
    assert post.grad[0, 0].abs().max() > 0


def test_symlog_mse_hand_numbers():
    pred, target = torch.tensor([[0.0, 1.0]]), torch.tensor([[math.e - 1, -(math.e - 1)]])
    # symlog(target) = [1, -1]: (0 - 1)^2 + (1 + 1)^2
    assert losses.symlog_mse(pred, target, 1).item() == pytest.approx(5.0)


def test_actor_loss_hand_numbers():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ent = torch.tensor([[0.5, 0.25]])
    ret, base = torch.tensor([[10.0, 4.0]], requires_grad=True), torch.tensor([[6.0, 6.0]])
    w, scale = torch.tensor([[1.0, 0.5]]), torch.tensor(2.0)
    # REINFORCE: -mean(w * (logp * (R - v) / S + eta H))
    loss = losses.actor_loss(logp, ent, ret, base, w, scale, 1.0, 0.1)
    assert loss.item() == pytest.approx(-((-1.0 * 2.0 + 0.05) + 0.5 * (-2.0 * -1.0 + 0.025)) / 2)
    loss.backward()
    assert ret.grad.abs().max() == 0  # the advantage is a constant for REINFORCE
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, 0.25]]))
    # dynamics backpropagation: -mean(w * ((R - v) / S + eta H)); the return's gradient is -w / (2 S)
    ret.grad = None
    loss = losses.actor_loss(logp, ent, ret, base, w, scale, 0.0, 0.1)
    assert loss.item() == pytest.approx(-((2.0 + 0.05) + 0.5 * (-1.0 + 0.025)) / 2)
    loss.backward()
    torch.testing.assert_close(ret.grad, torch.tensor([[-0.25, -0.125]]))


def test_critic_loss_hand_numbers():
    bins = torch.tensor([-1.0, 0.0, 1.0])
    logits = torch.zeros(1, 2, 3)  # uniform: every class ln 3
    returns, slow, w = torch.tensor([[0.5, 1.0]]), torch.tensor([[0.0, -1.0]]), torch.tensor([[1.0, 0.5]])
    # the cross-entropy of any target against a uniform head is ln 3; two terms per step
    expected = (1.0 * 2 * math.log(3) + 0.5 * 2 * math.log(3)) / 2
    assert losses.critic_loss(logits, returns, slow, w, bins, 1.0).item() == pytest.approx(expected)
    logits = torch.tensor([[[0.0, 1.0, 2.0], [2.0, 0.0, -1.0]]])
    logp = torch.log_softmax(logits, -1)
    # step 0: return 0.5 = half bin 1, half bin 2; slow 0 = bin 1. step 1: return 1 = bin 2; slow -1 = bin 0
    ce0 = -(0.5 * logp[0, 0, 1] + 0.5 * logp[0, 0, 2]) - logp[0, 0, 1]
    ce1 = -logp[0, 1, 2] - logp[0, 1, 0]
    assert losses.critic_loss(logits, returns, slow, w, bins, 1.0).item() == pytest.approx(
        ((ce0 + 0.5 * ce1) / 2).item(), rel=1e-6
    )


def test_clip_actions_scales_back_large_actions_only():
    a = torch.tensor([[0.5, -0.2], [3.0, -1.5]])
    torch.testing.assert_close(clip_actions(a, 1.0), torch.tensor([[0.5, -0.2], [1.0, -1.0]]))
    assert torch.equal(clip_actions(a, 0.0), a)


def _agent(discrete=True, **kw):
    cfg = Config(**{**DEBUG, **kw})
    return Agent({"state": (3,)}, (), ("state",), 2, discrete, cfg), cfg


def test_reward_and_value_heads_start_at_exactly_zero_and_the_initial_state_is_learned():
    torch.manual_seed(0)
    agent, cfg = _agent()
    bins = losses.twohot_bins(cfg.bins)
    feat = torch.randn(7, agent.world.rssm.feat_dim)
    assert losses.twohot_mean(agent.world.reward(feat), bins).abs().max() == 0
    assert losses.twohot_mean(agent.critic(feat), bins).abs().max() == 0
    rssm = agent.world.rssm
    T, B = 5, 3
    is_first = torch.zeros(T, B, dtype=torch.bool)
    is_first[0] = True
    is_first[3, 1] = True
    embed = agent.world.encoder({"state": torch.randn(T, B, 3)})
    h, z, post, prior = rssm.observe(embed, torch.randn(T, B, 2), is_first)
    assert h.shape == (T, B, rssm.deter) and z.shape == (T, B, rssm.z_dim) and post.shape == (T, B, 4, 4)
    # each episode start takes the initial state: the same h after one step from it as a fresh start
    h_fresh, _, _, _ = rssm.observe(embed[3:4, 1:2], torch.zeros(1, 1, 2), torch.ones(1, 1, dtype=torch.bool))
    torch.testing.assert_close(h[3, 1], h_fresh[0, 0])
    h.sum().backward()
    assert rssm.initial_h.grad is not None and rssm.initial_h.grad.abs().sum() > 0
    # the latents carry 1% uniform: no class below 0.01 / K
    assert post.softmax(-1).min() >= 0.01 / 4 - 1e-7 and prior.softmax(-1).min() >= 0.01 / 4 - 1e-7


def test_the_policy_starts_episodes_from_the_learned_state():
    torch.manual_seed(0)
    agent, _ = _agent()
    with torch.no_grad():
        agent.world.rssm.initial_h.normal_()
    player = Player(agent)
    policy = DreamerPolicy(
        player,
        {
            "obs_spec": {"state": [[3], "float32"]},
            "cnn_keys": [],
            "mlp_keys": ["state"],
            "discrete": True,
            "action_dim": 2,
        },
    )
    policy.reset(2)
    h0 = torch.tanh(agent.world.rssm.initial_h)
    torch.testing.assert_close(policy.state[:, : agent.world.rssm.deter], h0.expand(2, -1))
    assert policy.predict({"state": np.zeros((2, 3), np.float32)}).shape == (2,)
    # is_first in the loop does what reset does
    state, u = torch.randn(2, player.state_size), torch.rand(2, 4)  # u: the posterior's draws
    a1, s1 = player.act({"state": torch.ones(2, 3)}, state, True, torch.tensor([True, False]), uniform=u)
    a2, s2 = player.act({"state": torch.ones(2, 3)}, player.initial_state(2, "cpu"), True, uniform=u)
    torch.testing.assert_close(s1[0], s2[0])
    assert not torch.allclose(s1[1], s2[1])


@pytest.mark.parametrize(
    "env_id, extra",
    [("CartPole-v1", []), ("Pendulum-v1", ["--twohot-space", "symlog"]), ("CartPole-v1", ["--observation", "pixels"])],
)
def test_cli_debug_train_then_eval(tmp_path, capsys, env_id, extra):
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "dreamer_v3",
                "--preset",
                "debug",
                "--env-id",
                env_id,
                *extra,
                "--total-steps",
                "200",
                "--progress",
                "none",
                "--run-dir",
                str(run),
            ]
        )
        == 0
    )
    state = ckpt.load(ckpt.latest_checkpoint(run / "checkpoints"))
    assert state["step"] == 200 and state["n_updates"] == int(0.1 * (200 - 100 + 1))  # --replay-ratio 0.1
    assert {"moments.low", "moments.high", "target_critic.0.weight"} <= set(state["agent"])
    assert main(["eval", str(run), "--episodes", "1"]) == 0
    assert "dreamer_v3 on " in capsys.readouterr().out
    if not extra and importlib.util.find_spec("pygame"):  # and a video of the saved policy (CartPole draws with pygame)
        assert main(["eval", str(run), "--episodes", "1", "--video"]) == 0
        video = run / "videos" / "eval_dreamer_v3_step_200.mp4"
        assert video.stat().st_size > 1000 and str(video) in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--replay-ratio", "-1"], "--replay-ratio must be >= 0"),
        (["--moments-low", "0.9", "--moments-high", "0.1"], "must be below --moments-high"),
        (["--unimix", "2"], "--unimix must be in [0, 1]"),
        (["--twohot-space", "log"], "--twohot-space must be one of raw, symlog"),
        (["--env-id", "heron-test/MultiDiscrete-v0"], "supports Discrete and bounded 1-D Box actions"),
    ],
)
def test_bad_input_one_line_errors(tmp_path, capsys, argv, needle):
    assert main(["train", "dreamer_v3", "--preset", "debug", *argv, "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_model_flags_reach_the_model():
    torch.manual_seed(0)
    agent, _ = _agent(learnable_initial_state=False, unimix=0.0, bins=7)
    rssm = agent.world.rssm
    assert not rssm.initial_h.requires_grad  # --learnable-initial-state false: tanh(0) = 0, fixed
    assert agent.world.reward[-1].out_features == agent.critic[-1].out_features == 7  # --bins
    logits = torch.tensor([[[0.0, -30.0, -30.0, -30.0]] * 4])
    assert torch.equal(rssm._logits(logits.flatten(-2)), logits)  # --unimix 0: the logits as they are
