"""SAC's and TD3's hand-written gradient steps (heron/accel/handwritten/{sac,td3}.py) against the autograd
steps of their train.py: the same metrics, gradients and parameters, step after step, over the
options they cover; and where they apply."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch

from heron.accel.handwritten import sac as lean
from heron.accel.handwritten import td3 as td3_lean
from heron.accel.precision import Precision
from heron.algos.sac.agent import Nets
from heron.algos.sac.config import Config
from heron.algos.sac.networks import build
from heron.algos.sac.train import make_update
from heron.algos.td3.config import Config as TD3Config
from heron.algos.td3.networks import build as td3_build
from heron.algos.td3.train import Nets as TD3Nets
from heron.algos.td3.train import make_update as td3_make_update
from heron.ops.adam import adam

CPU = torch.device("cpu")
D, A, B = 5, 3, 32


LOW, HIGH = torch.tensor([-1.0, -2.0, 0.0]), torch.tensor([1.0, 2.0, 3.0])


def _perturbed_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A target network that differs from its source, as after some Polyak steps."""
    target = copy.deepcopy(module).requires_grad_(False)
    with torch.no_grad():
        for p in target.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return target


def make_nets(cfg: Config, seed: int = 0) -> Nets:
    torch.manual_seed(seed)
    low, high = LOW, HIGH
    actor, critic = build(D, low, high, tuple(cfg.hidden_sizes), cfg.obs_norm, "none", 8)
    if cfg.obs_norm:
        actor.encoder.norm.update(torch.randn(50, D) * 3 + 1)
    target = _perturbed_copy(critic)
    for enc in target.encoders:
        enc.norm = actor.encoder.norm
    log_alpha = torch.tensor(math.log(cfg.alpha) if cfg.autotune else 0.0, requires_grad=cfg.autotune)
    fixed = torch.tensor(cfg.alpha)
    return Nets(
        actor,
        critic,
        target,
        adam(list(actor.parameters()), cfg.policy_lr),
        adam(list(critic.parameters()), cfg.q_lr),
        adam([log_alpha], cfg.q_lr),
        log_alpha,
        (lambda: log_alpha.detach().exp()) if cfg.autotune else (lambda: fixed),
        -float(A),
    )


def make_batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    low, high = LOW, HIGH
    return {
        "obs": torch.randn(B, D, generator=g) * 2,
        "next_obs": torch.randn(B, D, generator=g) * 2,
        "actions": low + (high - low) * torch.rand(B, A, generator=g),
        "rewards": torch.randn(B, generator=g),
        "terminated": torch.rand(B, generator=g) < 0.2,
        "truncated": torch.rand(B, generator=g) < 0.1,
    }


def all_params(nets) -> list[torch.Tensor]:
    return [
        *nets.actor.parameters(),
        *nets.critic.parameters(),
        *([nets.log_alpha] if hasattr(nets, "log_alpha") else []),
    ]


def assert_same_steps(reference, written, ref, mine, batches, actor_steps, tol: float = 1e-4) -> None:
    """Both steps on the same batches with the same noise: metrics, latest gradients, parameters
    (relative tolerance ``tol``)."""
    for step, (batch, update_actor) in enumerate(zip(batches, actor_steps)):
        torch.manual_seed(100 + step)  # the same noise for both: drawn in the same order
        expected = reference(batch, update_actor)
        torch.manual_seed(100 + step)
        got = written(batch, update_actor)
        assert expected.keys() == got.keys()
        for key in expected:
            torch.testing.assert_close(got[key], expected[key], rtol=tol, atol=1e-5, msg=f"step {step}: {key}")
        for p, q in zip(all_params(ref), all_params(mine)):
            if p.grad is not None or q.grad is not None:  # the latest gradients, still attached
                assert q.grad.dtype == torch.float32
                torch.testing.assert_close(q.grad, p.grad, rtol=tol, atol=1e-6, msg=f"step {step}: gradient")
            torch.testing.assert_close(q, p, rtol=tol, atol=1e-6, msg=f"step {step}: parameters")
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in mine.actor.parameters())


MIXES = [
    dict(),  # CleanRL's defaults: policy frequency 2, autotune
    dict(policy_frequency=1, obs_norm=True),
    dict(autotune=False, alpha=0.3, max_grad_norm=0.5),
    dict(hidden_sizes=(16,), policy_frequency=3, max_grad_norm=100.0),
    dict(hidden_sizes=(16, 16, 16), obs_norm=True, gamma=0.9),
]


@pytest.mark.parametrize("mix", MIXES, ids=[",".join(m) or "defaults" for m in MIXES])
def test_lean_step_equals_the_autograd_step(mix):
    cfg = Config(**{"hidden_sizes": (32, 32), **mix})
    ref, mine = make_nets(cfg), make_nets(cfg)
    reference, written = make_update(cfg, ref, Precision("32", CPU)), lean.LeanUpdate(cfg, mine)
    actor_steps = [step % cfg.policy_frequency == 0 or step == 4 for step in range(5)]
    assert_same_steps(reference, written, ref, mine, [make_batch(step) for step in range(5)], actor_steps)


TD3_MIXES = [
    dict(),
    dict(obs_norm=True, max_grad_norm=0.5, hidden_sizes=(16, 16, 16)),
    dict(policy_noise=0.5, noise_clip=0.3, gamma=0.9, hidden_sizes=(16,)),
]


def make_td3_nets(cfg: TD3Config, seed: int = 0) -> TD3Nets:
    torch.manual_seed(seed)
    actor, critic = td3_build(D, LOW, HIGH, tuple(cfg.hidden_sizes), cfg.obs_norm)
    if cfg.obs_norm:
        actor.norm.update(torch.randn(50, D) * 3 + 1)
    actor_target, critic_target = _perturbed_copy(actor), _perturbed_copy(critic)
    actor_target.norm = critic_target.norm = actor.norm
    return TD3Nets(
        actor,
        critic,
        actor_target,
        critic_target,
        adam(list(actor.parameters()), cfg.policy_lr),
        adam(list(critic.parameters()), cfg.q_lr),
    )


def td3_batches(n: int) -> list[dict[str, torch.Tensor]]:
    return [make_batch(step) for step in range(n)]  # SAC's and TD3's batches are alike: [B, ...]


@pytest.mark.parametrize("mix", TD3_MIXES, ids=[",".join(m) or "defaults" for m in TD3_MIXES])
def test_td3_lean_step_equals_the_autograd_step(mix):
    cfg = TD3Config(**{"hidden_sizes": (32, 32), **mix})
    ref, mine = make_td3_nets(cfg), make_td3_nets(cfg)
    reference = td3_make_update(cfg, ref, Precision("32", CPU))
    written = td3_lean.LeanUpdate(cfg, mine)
    assert_same_steps(reference, written, ref, mine, td3_batches(5), [step % 2 == 1 for step in range(5)])


@pytest.mark.parametrize("mode", ["32", "bf16-mixed"])
def test_td3_lean_step_follows_weights_loaded_or_moved_between_steps(mode):
    """The hand-written step keeps its layer views (under bf16-mixed, its cast weights) between
    steps (``heron.accel.handwritten.common.LayerViews``): weights loaded in place (a checkpoint) and a parameter
    whose storage was replaced must both reach the next step, as the autograd step sees them."""
    cfg = TD3Config(hidden_sizes=(32, 32))
    ref, mine = make_td3_nets(cfg), make_td3_nets(cfg)
    prec = Precision(mode, CPU)
    prec.apply(ref.actor, ref.critic, ref.actor_target, ref.critic_target)
    reference, written = td3_make_update(cfg, ref, prec), td3_lean.LeanUpdate(cfg, mine, prec.dtype)
    tol = 1e-4 if prec.dtype is None else 2e-3
    batches = td3_batches(4)
    assert_same_steps(reference, written, ref, mine, batches[:2], [False, True], tol)
    other = make_td3_nets(cfg, seed=1)
    for nets in (ref, mine):
        nets.critic.load_state_dict(other.critic.state_dict())  # in place
    new_target = other.critic_target.q.layers[1].weight.detach()
    with torch.no_grad():
        ref.critic_target.q.layers[1].weight.copy_(new_target)
    mine.critic_target.q.layers[1].weight.data = new_target.clone()  # a new storage
    mine.actor_target.net[0].weight.data = other.actor_target.net[0].weight.detach().clone()
    with torch.no_grad():
        ref.actor_target.net[0].weight.copy_(other.actor_target.net[0].weight)
    assert_same_steps(reference, written, ref, mine, batches[2:], [False, True], tol)


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_bf16_lean_step_equals_the_autograd_bf16_step(algo):
    """Under bf16-mixed the hand-written step runs the products in bfloat16 as the autograd step's
    fused nodes do: the same metrics, float32 gradients and parameters up to rounding; and it
    really runs them in bfloat16 (the float32 step lands measurably elsewhere)."""
    prec = Precision("bf16-mixed", CPU)
    if algo == "sac":
        cfg = Config(hidden_sizes=(64, 64), policy_frequency=1, obs_norm=True)
        ref, mine, f32 = make_nets(cfg), make_nets(cfg), make_nets(cfg)
        prec.apply(ref.actor, ref.critic, ref.critic_target)
        reference, written = make_update(cfg, ref, prec), lean.LeanUpdate(cfg, mine, torch.bfloat16)
        float32 = lean.LeanUpdate(cfg, f32)
        batches, actor_steps = [make_batch(step) for step in range(4)], [True] * 4
    else:
        cfg = TD3Config(hidden_sizes=(64, 64), obs_norm=True)
        ref, mine, f32 = make_td3_nets(cfg), make_td3_nets(cfg), make_td3_nets(cfg)
        prec.apply(ref.actor, ref.critic, ref.actor_target, ref.critic_target)
        reference, written = td3_make_update(cfg, ref, prec), td3_lean.LeanUpdate(cfg, mine, torch.bfloat16)
        float32 = td3_lean.LeanUpdate(cfg, f32)
        batches, actor_steps = td3_batches(4), [step % 2 == 1 for step in range(4)]
    assert_same_steps(reference, written, ref, mine, batches, actor_steps, tol=2e-3)
    for step, (batch, update_actor) in enumerate(zip(batches, actor_steps)):
        torch.manual_seed(100 + step)
        float32(batch, update_actor)
    apart = max((p - q).abs().max().item() for p, q in zip(all_params(mine), all_params(f32)))
    assert apart > 1e-4, "bf16-mixed trained the float32 numbers"


def test_where_the_lean_step_applies():
    cfg = Config(hidden_sizes=(16,))
    nets = make_nets(cfg)
    compiled = Config(hidden_sizes=(16,), compile=True)
    assert lean.supported(cfg, nets, Precision("32", CPU)) is None
    assert "compile" in lean.supported(compiled, nets, Precision("32", CPU))
    assert lean.supported(cfg, nets, Precision("bf16-mixed", CPU)) is None
    actor, _ = build(D, -torch.ones(A), torch.ones(A), (16,), False, "gru", 8)
    assert "recurrent" in lean.supported(cfg, SimpleNamespace(actor=actor), Precision("32", CPU))
    assert td3_lean.supported(cfg, None, Precision("32", CPU)) is None
    assert "compile" in td3_lean.supported(compiled, None, Precision("32", CPU))
    assert td3_lean.supported(cfg, None, Precision("bf16-mixed", CPU)) is None
    if torch.cuda.is_available():  # loss scaling goes through autograd's GradScaler
        assert "16-mixed" in td3_lean.supported(cfg, None, Precision("16-mixed", torch.device("cuda")))


def test_min_input_grad_split_rows_equal_masks_and_autograd():
    """The actor loss's dQ/da through min(Q1, Q2): each member run on its own rows (the CPU path) and
    the masked form (CUDA's) both equal autograd's gradient of sum_b min_e Q_e."""
    torch.manual_seed(3)
    _, critic = build(D, LOW, HIGH, (16, 16), False, "none", 8)
    with torch.no_grad():  # members far enough apart that each gives some of the minima
        for p in critic.parameters():
            p.add_(0.3 * torch.randn_like(p))
    critics = lean.LeanCritics(critic.q, copy.deepcopy(critic.q), adam(list(critic.parameters()), 1e-3))
    x = torch.randn(B, D + A)
    q, kept = critics.forward(x)
    min_q, which = q.min(0)
    assert 0 < int(which.sum()) < B, "both members give some minimum"
    xg = x.clone().requires_grad_(True)
    (-critic.q(xg).squeeze(-1).min(0).values.sum() / B).backward()
    want = xg.grad[:, D:]
    for split in (True, False):
        with torch.no_grad():
            got = critics.min_input_grad(kept, which, -1.0 / B, D, split=split)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_bf16_layer_views_follow_a_parameter_replaced_twice_between_steps():
    """Under bf16-mixed the kept casts are keyed on data pointers and version counters: a parameter
    whose storage is replaced twice between two calls must not come back at a freed address with
    the same version and pass for unchanged (the views hold the cast storage)."""
    from heron.accel.handwritten.common import LayerViews

    torch.manual_seed(0)
    w, b, w2, b2 = (torch.nn.Parameter(torch.randn(*shape)) for shape in ((8, 4), (8,), (1, 8), (1,)))
    views = LayerViews([w, b, w2, b2], torch.bfloat16)
    for _ in range(200):
        views(None)
        w.data = torch.randn(8, 4)
        w.data = torch.randn(8, 4)
        layers, _ = views(None)
        assert torch.equal(layers[0][0], w.detach().t().to(torch.bfloat16))


def _with_discounts(batch: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """An n-step batch: each transition bootstraps with its own gamma ** k (k in 1..3)."""
    k = torch.randint(1, 4, batch["rewards"].shape, generator=torch.Generator().manual_seed(seed))
    return {**batch, "discount": 0.99 ** k.float()}


def test_with_n_step_discounts_the_lean_steps_equal_the_autograd_steps():
    cfg = Config(hidden_sizes=(32, 32), n_step=3)
    ref, mine = make_nets(cfg), make_nets(cfg)
    reference, written = make_update(cfg, ref, Precision("32", CPU)), lean.LeanUpdate(cfg, mine)
    batches = [_with_discounts(make_batch(step), step) for step in range(3)]
    assert_same_steps(reference, written, ref, mine, batches, [True, False, True])
    td3_cfg = TD3Config(hidden_sizes=(32, 32), n_step=3)
    ref3, mine3 = make_td3_nets(td3_cfg), make_td3_nets(td3_cfg)
    batches3 = [_with_discounts(b, i) for i, b in enumerate(td3_batches(3))]
    assert_same_steps(
        td3_make_update(td3_cfg, ref3, Precision("32", CPU)),
        td3_lean.LeanUpdate(td3_cfg, mine3),
        ref3,
        mine3,
        batches3,
        [False, True, True],
    )
    # and the discount is used: the same batch with gamma instead gives another critic loss
    torch.manual_seed(0)
    one = make_update(cfg, make_nets(cfg), Precision("32", CPU))(make_batch(0), False)
    torch.manual_seed(0)
    other = make_update(cfg, make_nets(cfg), Precision("32", CPU))(batches[0], False)
    assert not torch.allclose(one["losses/qf_loss"], other["losses/qf_loss"])
