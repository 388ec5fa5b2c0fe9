"""The gradient-step builder (heron.accel.step.build_step): which step a run gets, in its one order;
the line that tells the user which and why; and the start-up check that keeps a hand-written step
from outliving an edit to the loss, network or readable step it stands in for."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from test_sac_lean import make_nets

import heron
from heron.accel.graphs import GraphedStep
from heron.accel.handwritten import check
from heron.accel.handwritten import ppo as ppo_lean
from heron.accel.handwritten import sac as sac_lean
from heron.accel.handwritten import td3 as td3_lean
from heron.accel.precision import Precision
from heron.accel.step import build_step
from heron.algos.ppo import losses as ppo_losses
from heron.algos.sac import losses as sac_losses
from heron.algos.sac import networks as sac_networks
from heron.algos.sac.config import Config as SACConfig
from heron.algos.sac.train import make_update as sac_make_update
from heron.algos.td3 import losses as td3_losses

CPU = torch.device("cpu")


def autograd(batch):  # a stand-in for an algorithm's make_update step
    return {"kind": "autograd"}


def _cfg(**kw):
    return SimpleNamespace(**{"fused_update": True, "compile": False, "cuda_graphs": False, "precision": "32", **kw})


def test_an_algorithm_without_a_hand_written_step_gets_its_readable_step():
    said = []
    assert build_step(_cfg(), autograd, log=said.append) is autograd
    assert said == [f"update: autograd step ({__name__}; the algorithm's only step)"]
    step = build_step(_cfg(cuda_graphs=True), autograd, log=said.append)  # recorded here
    assert isinstance(step, GraphedStep) and said[-1].endswith("the algorithm's only step), recorded as CUDA graphs")
    with pytest.raises(ValueError, match="no hand-written step 'dqn'"):
        build_step(_cfg(), autograd, "dqn")


def _sac(**overrides):
    cfg = SACConfig(hidden_sizes=(32, 32), batch_size=64, **overrides)
    nets = make_nets(cfg)
    prec = Precision(cfg.precision, CPU)
    prec.apply(nets.actor, nets.critic, nets.critic_target)  # as the run does
    return cfg, nets, prec, sac_make_update(cfg, nets, prec)


def test_the_hand_written_step_where_it_applies_and_agrees_and_the_reason_where_not():
    said = []
    cfg, nets, prec, readable = _sac()
    step = build_step(cfg, readable, "sac", nets, prec, log=said.append)
    assert isinstance(step, sac_lean.LeanUpdate)
    assert said == ["update: hand-written step (heron.accel.handwritten.sac; precision 32)"]
    cfg, nets, prec, readable = _sac(fused_update=False)
    assert build_step(cfg, readable, "sac", nets, prec, log=said.append) is readable
    assert said[-1] == "update: autograd step (heron.algos.sac.train; --fused-update false)"
    cfg, nets, prec, readable = _sac(precision="bf16-mixed")  # checked at its own tolerance
    assert isinstance(build_step(cfg, readable, "sac", nets, prec, log=said.append), sac_lean.LeanUpdate)
    assert said[-1] == "update: hand-written step (heron.accel.handwritten.sac; precision bf16-mixed)"
    cfg, nets, prec, readable = _sac(cuda_graphs=True)  # SAC records it itself, with the replay gather
    assert isinstance(build_step(cfg, readable, "sac", nets, prec, record=False, log=said.append), sac_lean.LeanUpdate)
    assert said[-1].endswith("precision 32), recorded as CUDA graphs")


def test_the_algorithms_reasons_keep_their_steps_where_they_were_measured():
    cuda, cpu = Precision("32", torch.device("cuda")), Precision("32", CPU)
    assert "no faster" in td3_lean.supported(_cfg(), None, cuda)  # TD3's hand-written step: the CPU's
    assert td3_lean.supported(_cfg(), None, cpu) is None
    # PPO records its autograd step: the graphs' reason comes before the model's
    assert "records the autograd step" in ppo_lean.supported(_cfg(cuda_graphs=True), SimpleNamespace(model=None), cuda)


def test_the_check_leaves_the_run_as_it_found_it():
    """One step of each path, then everything put back: parameters, optimizer states, gradients and
    the global random stream are what they were, so the run's own numbers are those it would have
    made without the check (the seeded runs' weights are bitwise those of a run without it)."""
    cfg, nets, prec, readable = _sac()
    state = sac_lean.state(nets)
    before = check.snapshot(state)
    rng = torch.get_rng_state()
    build_step(cfg, readable, "sac", nets, prec)
    assert torch.equal(torch.get_rng_state(), rng)
    after = check.snapshot(state)
    for name, thing in state.items():
        if isinstance(thing, torch.optim.Optimizer):
            assert after[name]["state"] == {} == before[name]["state"]
        elif isinstance(thing, torch.nn.Module):
            assert all(torch.equal(after[name][k], v) for k, v in before[name].items()), name
        else:
            assert torch.equal(after[name], before[name]), name
    assert [g for _, g in after["grads"]] == [None] * len(after["grads"])


def test_a_check_that_can_fail_reports_the_largest_difference():
    """The comparison itself: a hand-written 'step' whose critic gradient is twice the readable
    one's is caught and named, and one that agrees passes."""
    net = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(8, 3)

    def readable(batch):
        opt.zero_grad()
        loss = net(batch).pow(2).mean()
        loss.backward()
        opt.step()
        return {"loss": loss.detach()}

    def doubled(batch):
        metrics = readable(batch)
        for p in net.parameters():
            p.grad.mul_(2)
        return metrics

    state = {"critic": net, "opt": opt}
    assert check.disagreement(readable, readable, (x,), state, 1e-6) is None
    assert (
        check.disagreement(readable, doubled, (x,), state, 1e-6) == "disagrees with it: critic gradient off by 1.0e+00"
    )


def _huber_critic_losses(q, target):
    return F.smooth_l1_loss(q, target.detach().expand_as(q), reduction="none").mean(1)


def test_an_edited_loss_takes_effect_in_every_run(monkeypatch):
    """A researcher edits SAC's critic loss (a Huber loss in place of the squared error) and not the
    hand-written derivative: the run takes the readable step, which trains with the edit, and says
    why in its first line. The agreeing case is the test above."""
    monkeypatch.setattr(sac_losses, "critic_losses", _huber_critic_losses)
    said = []
    cfg, nets, prec, readable = _sac()
    assert build_step(cfg, readable, "sac", nets, prec, log=said.append) is readable
    assert said[-1].startswith(
        "update: autograd step (heron.algos.sac.train; the hand-written step disagrees with it: critic gradient off by "
    )


def test_an_edited_network_takes_effect(monkeypatch):
    """An edit to SAC's actor (its Gaussian's mean halved) reaches the readable step only; the
    hand-written step, which runs the actor's layers itself, disagrees and steps aside."""
    head = sac_networks.Actor.head
    monkeypatch.setattr(
        sac_networks.Actor, "head", lambda self, feats: (head(self, feats)[0] * 0.5, head(self, feats)[1])
    )
    said = []
    cfg, nets, prec, readable = _sac()
    assert build_step(cfg, readable, "sac", nets, prec, log=said.append) is readable
    assert "the hand-written step disagrees with it: " in said[-1]


@pytest.mark.parametrize(
    "algo, module, name, edit, overrides",
    [
        ("sac", None, None, None, {}),
        ("td3", None, None, None, {}),
        ("ppo", None, None, None, {}),
        ("ppo", None, None, None, {"env_id": "Pendulum-v1"}),
        ("sac", sac_losses, "critic_losses", _huber_critic_losses, {}),
        ("td3", td3_losses, "actor_loss", lambda q1: -2.0 * q1.mean(), {}),
        ("ppo", ppo_losses, "value_loss", lambda *a, **k: 2.0 * ppo_losses.value_terms(*a, **k)[0], {}),
    ],
    ids=["sac", "td3", "ppo", "ppo-box", "sac-huber-critic", "td3-actor-loss", "ppo-value-loss"],
)
def test_runs_take_the_hand_written_step_only_while_it_agrees(
    algo, module, name, edit, overrides, capsys, monkeypatch, tmp_path
):
    """Through a real run, as a user starts one: the first line names the step and why."""
    if edit is not None:
        monkeypatch.setattr(module, name, edit)
    starts = {"sac": dict(learning_starts=10), "td3": dict(learning_starts=10), "ppo": dict(num_steps=16)}[algo]
    heron.train(
        algo,
        run_dir=str(tmp_path / "run"),
        total_steps=64,
        eval_every=0,
        eval_episodes=1,
        progress="log",
        **starts,
        **overrides,
    )
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("update: "))
    if edit is None:
        assert line == f"update: hand-written step (heron.accel.handwritten.{algo}; precision 32)"
    else:
        readable = "learn" if algo == "ppo" else "train"  # the module of the readable step
        assert line.startswith(
            f"update: autograd step (heron.algos.{algo}.{readable}; the hand-written step disagrees with it: "
        )


def test_a_network_the_hand_written_step_cannot_follow_gets_the_readable_step(monkeypatch):
    """A researcher swaps SAC's actor body for one the hand-written step cannot read (its layers
    are not the ReLU MLP it writes out): building or running that step fails, and the run takes the
    readable step, saying why, instead of failing."""
    cfg, nets, prec, readable = _sac()
    nets.actor.net = torch.nn.Sequential(torch.nn.Linear(5, 32), torch.nn.Tanh(), torch.nn.Linear(32, 6))
    readable = sac_make_update(cfg, nets, prec)
    said = []
    assert build_step(cfg, readable, "sac", nets, prec, log=said.append) is readable
    assert "the hand-written step " in said[-1] and (
        "cannot follow" in said[-1] or "fails" in said[-1] or "disagrees" in said[-1]
    ), said[-1]
