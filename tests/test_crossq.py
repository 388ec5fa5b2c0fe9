"""CrossQ: batch renormalisation against hand computations (warm-up, the r/d clipping, evaluation,
gradients), the joint critic forward's statistics, and the option's wiring into SAC."""

import math

import pytest
import torch

import heron
from heron.algos.sac import crossq
from heron.algos.sac.agent import Nets
from heron.algos.sac.config import Config
from heron.errors import HeronError
from heron.rl.batch_renorm import BatchRenorm, RenormMLP


def _x(*values):
    return torch.tensor([[v] for v in values], dtype=torch.float32)  # [B, 1]


def test_warm_up_is_batch_normalisation_and_moves_the_running_statistics():
    brn = BatchRenorm(1, momentum=0.1, eps=0.0, warmup=2)
    y = brn(_x(1.0, 3.0), train=True)  # mean 2, biased variance 1
    assert y.flatten().tolist() == pytest.approx([-1.0, 1.0])
    # running mean 0 + 0.1 (2 - 0); running variance 1 + 0.1 (2 - 1), the batch's unbiased variance
    assert brn.mean.item() == pytest.approx(0.2) and brn.var.item() == pytest.approx(1.1)
    assert brn.steps.item() == 1
    y = brn(_x(1.0, 3.0), train=True)  # still warming up: r = 1, d = 0 whatever the running statistics
    assert y.flatten().tolist() == pytest.approx([-1.0, 1.0])


def test_after_warm_up_r_and_d_correct_towards_the_running_statistics_within_their_clips():
    brn = BatchRenorm(1, momentum=0.1, eps=0.0, warmup=0, r_max=3.0, d_max=5.0)
    # batch mean 2, std 1; running mean 0, std 1: r = 1, d = 2 -> y = (x - 2) + 2 = x
    assert brn(_x(1.0, 3.0), train=True).flatten().tolist() == pytest.approx([1.0, 3.0])
    brn = BatchRenorm(1, eps=0.0, warmup=0, d_max=1.0)
    # d = 2 clipped to 1: y = (x - 2) + 1
    assert brn(_x(1.0, 3.0), train=True).flatten().tolist() == pytest.approx([0.0, 2.0])
    brn = BatchRenorm(1, eps=0.0, warmup=0, r_max=3.0, d_max=5.0)
    # mean 5, std 5: r = 5 clipped to 3, d = 5: y = (x - 5) / 5 * 3 + 5
    assert brn(_x(0.0, 10.0), train=True).flatten().tolist() == pytest.approx([2.0, 8.0])
    brn = BatchRenorm(1, eps=0.0, warmup=0, r_max=3.0)
    with torch.no_grad():
        brn.var.fill_(100.0)  # running std 10: r = 1 / 10 clipped to 1 / 3
    # mean 2, std 1, d = 2 / 10: y = (x - 2) / 3 + 0.2
    assert brn(_x(1.0, 3.0), train=True).flatten().tolist() == pytest.approx([-1 / 3 + 0.2, 1 / 3 + 0.2])


def test_evaluation_uses_the_running_statistics_and_changes_nothing():
    brn = BatchRenorm(1, eps=1e-3)
    with torch.no_grad():
        brn.mean.fill_(1.0)
        brn.var.fill_(4.0)
        brn.weight.fill_(2.0)
        brn.bias.fill_(0.5)
    y = brn(_x(3.0, -1.0), train=False)
    assert y.flatten().tolist() == pytest.approx([2 * 2 / math.sqrt(4.001) + 0.5, 2 * -2 / math.sqrt(4.001) + 0.5])
    assert brn.mean.item() == 1.0 and brn.var.item() == 4.0 and brn.steps.item() == 0


def test_r_and_d_are_constants_of_the_backward_pass():
    """After warm-up the gradient is batch normalisation's scaled by r: r and d pass no gradient."""
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2 + 1
    w = torch.randn(16, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    brn = BatchRenorm(3, eps=1e-3, warmup=0).double()
    with torch.no_grad():
        brn.var.fill_(9.0)
        brn.mean.fill_(0.5)
    xr = x.clone().requires_grad_(True)
    (brn(xr, train=True) * w).sum().backward()
    xb = x.clone().requires_grad_(True)
    mu, var = xb.mean(0), xb.var(0, unbiased=False)
    ((xb - mu) / (var + 1e-3).sqrt() * w).sum().backward()
    r = ((x.var(0, unbiased=False) + 1e-3).sqrt() / math.sqrt(9.0 + 1e-3)).clamp(1 / 3, 3)
    assert xr.grad is not None and xb.grad is not None
    assert torch.allclose(xr.grad, xb.grad * r)


def test_ensemble_members_keep_statistics_of_their_own():
    net = RenormMLP(2, 3, (4,), 1, momentum=1.0, warmup=0)
    x = torch.stack([torch.zeros(5, 3), torch.ones(5, 3) * torch.arange(5.0)[:, None]])  # [E, B, in]
    out = net(x, train=True)
    assert out.shape == (2, 5, 1)
    first = net.norms[0]
    assert isinstance(first, BatchRenorm)
    assert first.mean[0].abs().max() == 0 and first.mean[1].flatten().tolist() == pytest.approx([2.0] * 3)
    assert net(torch.zeros(5, 3), train=False).shape == (2, 5, 1)  # one input shared by the members


def _nets(cfg, obs_dim=3, action_dim=1):
    low, high = -torch.ones(action_dim), torch.ones(action_dim)
    actor, critic = crossq.build(obs_dim, low, high, cfg)
    log_alpha = torch.zeros((), requires_grad=True)
    opt = torch.optim.SGD
    return Nets(
        actor,
        critic,
        None,
        opt(actor.parameters(), lr=1e-3),
        opt(critic.parameters(), lr=1e-3),
        opt([log_alpha], lr=1e-3),
        log_alpha,
        lambda: log_alpha.detach().exp(),
        -1.0,
    )


class _Precision:
    def optimize(self, opt, loss, params, max_norm=0.0):
        opt.zero_grad()
        loss.backward()
        opt.step()

    def update(self):
        pass


def test_the_joint_forward_normalises_both_halves_with_one_set_of_statistics():
    """One critic update: the first layer's running mean moves towards the mean of (s, a) and
    (s', a') together (momentum 1: it becomes that mean), the actor's layers do not move (its
    next actions are drawn in evaluation mode), and the critics' 2B rows were one batch."""
    cfg = Config(hidden_sizes=(8,), critic_hidden_sizes=(8,), bn_momentum=1.0, bn_warmup=0)
    nets = _nets(cfg)
    g = torch.Generator().manual_seed(0)
    B = 6
    batch = {
        "obs": torch.randn(B, 3, generator=g),
        "next_obs": torch.randn(B, 3, generator=g) + 4.0,
        "actions": torch.rand(B, 1, generator=g) * 2 - 1,
        "rewards": torch.randn(B, generator=g),
        "terminated": torch.zeros(B, dtype=torch.bool),
    }
    actor_first = nets.actor.net.norms[0]
    update = crossq.make_update(cfg, nets, _Precision())
    update(batch, False)
    first = nets.critic.q.norms[0]
    joint_obs = torch.cat([batch["obs"], batch["next_obs"]])
    assert first.mean[0, 0, :3].tolist() == pytest.approx(joint_obs.mean(0).tolist(), abs=1e-5)
    assert first.steps.item() == 1
    assert actor_first.steps.item() == 0  # the next actions came from the running statistics
    update(batch, True)
    assert actor_first.steps.item() == 1  # the actor's own step trains its layers


def test_crossq_rejects_recurrent_networks_and_bad_values():
    for bad in (
        dict(crossq=True, recurrent="gru"),
        dict(bn_momentum=0.0),
        dict(bn_warmup=-1),
        dict(adam_beta1=1.0),
        dict(critic_hidden_sizes=(0,)),
    ):
        with pytest.raises(HeronError):
            Config(**bad).validate()


def test_crossq_learns_pendulum_and_its_evaluation_repeats(tmp_path, capsys):
    """CrossQ with 256-wide critics and a short warm-up on Pendulum-v1: within 3,000 steps (SAC needs
    about 10,000) the deterministic evaluation passes -400; the evaluation runs the running
    statistics, so ``heron eval`` repeats it."""
    run = tmp_path / "run"
    result = heron.train(
        "sac",
        presets=["crossq"],
        env_id="Pendulum-v1",
        critic_hidden_sizes=(256, 256),
        bn_warmup=500,
        total_steps=3000,
        learning_starts=500,
        eval_every=3000,
        eval_episodes=5,
        progress="none",
        torch_threads=1,
        run_dir=str(run),
    )
    assert result["mean_return"] > -400, result
    state = torch.load(sorted((run / "checkpoints").glob("step_*[0-9].pt"))[-1], weights_only=True)
    assert "critic_target" not in state
    assert any(k.endswith("steps") for k in state["critic"]) and any(k.endswith("steps") for k in state["actor"])
    policy = heron.load(str(run))
    obs = torch.zeros(3).numpy()
    assert (policy.predict(obs) == policy.predict(obs)).all()
    assert heron.evaluate(str(run))["mean_return"] == pytest.approx(result["mean_return"], rel=1e-6)


@pytest.mark.parametrize("crossq_on", [False, True])
def test_critic_widths_and_adams_beta1_reach_the_networks_and_optimizers(crossq_on, tmp_path):
    """--critic-hidden-sizes and --adam-beta1 for plain SAC and for CrossQ, the latter under
    --precision bf16-mixed (its batch-renormalised layers cast their products themselves)."""
    run = tmp_path / "run"
    heron.train(
        "sac",
        env_id="Pendulum-v1",
        crossq=crossq_on,
        hidden_sizes=(16,),
        critic_hidden_sizes=(24, 8),
        adam_beta1=0.5,
        precision="bf16-mixed" if crossq_on else "32",
        total_steps=400,
        learning_starts=300,
        batch_size=32,
        eval_every=0,
        eval_episodes=1,
        progress="none",
        torch_threads=1,
        run_dir=str(run),
    )
    state = torch.load(sorted((run / "checkpoints").glob("step_*[0-9].pt"))[-1], weights_only=True)
    weights = [v for k, v in state["critic"].items() if k.startswith("q.layers.") and k.endswith("weight")]
    assert [tuple(w.shape) for w in weights] == [(2, 4, 24), (2, 24, 8), (2, 8, 1)]  # [E, in, out]
    assert all(torch.isfinite(w).all() for w in weights)
    for opt in ("actor_opt", "q_opt", "alpha_opt"):
        assert tuple(state[opt]["param_groups"][0]["betas"]) == (0.5, 0.999)
