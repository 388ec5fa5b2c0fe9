"""The hand-written PPO step (heron/accel/handwritten/ppo.py) against the autograd step it replaces: the same
losses, gradients and parameters after several optimizer steps on fixed minibatches, over every
option the lean step covers; and which models fall back to autograd."""

import copy
import importlib

import numpy as np
import pytest
import torch

from heron.accel import acting
from heron.accel.handwritten import ppo as lean
from heron.accel.precision import Precision
from heron.algos.ppo import agent as ppo_agent
from heron.algos.ppo.config import Config
from heron.ops.adam import adam

ppo_train = importlib.import_module("heron.algos.ppo.train")
CPU = torch.device("cpu")


def _spaces(kind: str) -> dict:
    action = (
        {"kind": "discrete", "n": 3}
        if kind == "discrete"
        else {"kind": "box", "low": -torch.ones(2), "high": torch.ones(2)}
    )
    return {"obs_shape": [5], "obs_dtype": "float32", "action": action, "obs_parts": None}


def _minibatch(model, kind: str, B: int, g: torch.Generator) -> dict:
    """A minibatch whose stored log-probs are the current ones perturbed, so that some ratios fall
    outside the clip range on both sides and some inside."""
    obs = torch.randn(B, 1, 5, generator=g) * 2
    with torch.no_grad():
        params, _, _ = model(obs, torch.zeros(B, 0), torch.zeros(B, 1, dtype=torch.bool))
        actions = model.pi_head.sample_logp(params)[0]
        logp = model.pi_head.log_prob(params, actions)
    return {
        "obs": obs,
        "state0": torch.zeros(B, 0),
        "starts": torch.zeros(B, 1, dtype=torch.bool),
        "actions": actions,
        "logp": logp + 0.4 * torch.randn(B, 1, generator=g),
        "adv": torch.randn(B, 1, generator=g) * 3 + 0.5,
        "returns_n": torch.randn(B, 1, generator=g),
        "values_n": 0.3 * torch.randn(B, 1, generator=g),
    }


CASES = {
    "discrete": ("discrete", {}),
    "discrete, entropy, value clip, dual clip": ("discrete", dict(ent_coef=0.05, clip_vloss=True, dual_clip=3.0)),
    "discrete, raw advantages, no grad clip, one layer": (
        "discrete",
        dict(norm_adv=False, max_grad_norm=0.0, hidden_sizes=(16,)),
    ),
    "box": ("box", dict(clip_vloss=False)),
    "box, obs norm, entropy, value clip": ("box", dict(obs_norm=True, ent_coef=0.01, clip_vloss=True)),
    "box, state-dependent std, dual clip, no hidden layers": (
        "box",
        dict(state_dependent_std=True, dual_clip=2.0, init_log_std=-0.5, hidden_sizes=()),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lean_step_equals_the_autograd_step(case):
    kind, overrides = CASES[case]
    cfg = Config(**{"hidden_sizes": (32, 32), "clip_coef": 0.2, **overrides})
    torch.manual_seed(0)
    model = ppo_agent.build(cfg, _spaces(kind))
    if cfg.obs_norm:  # statistics away from the identity
        model.norm.update(torch.randn(100, 5) * 3 + 1)
    twin = copy.deepcopy(model)
    plain = ppo_train.make_update(cfg, model, adam(model.parameters(), 1e-3, eps=1e-5), Precision("32", CPU))
    assert lean.supported(_cfg(), _nets(twin), Precision("32", CPU)) is None
    fused = lean.LeanUpdate(cfg, twin, adam(twin.parameters(), 1e-3, eps=1e-5))
    g = torch.Generator().manual_seed(1)
    clipped = 0.0
    for step in range(4):
        mb = _minibatch(model, kind, 64, g)
        expected, got = plain(mb), fused(mb)
        assert expected.keys() == got.keys()
        for key in expected:
            torch.testing.assert_close(got[key], expected[key], rtol=1e-4, atol=1e-5, msg=f"{key} at step {step}")
        clipped += float(expected["losses/clipfrac"])
        for (name, p), q in zip(model.named_parameters(), twin.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=f"grad of {name} at step {step}")
            torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-6, msg=f"{name} after step {step}")
    assert clipped > 0  # the clipped branch was exercised


def test_lean_step_applies_only_where_it_is_exact():
    f32, bf16 = Precision("32", CPU), Precision("bf16-mixed", CPU)
    box = ppo_agent.build(Config(), _spaces("box"))
    assert lean.supported(_cfg(), _nets(box), f32) is None
    assert "compile" in lean.supported(_cfg(compile=True), _nets(box), f32)
    assert "records the autograd step" in lean.supported(_cfg(cuda_graphs=True), _nets(box), f32)
    assert "bf16-mixed" in lean.supported(_cfg(), _nets(box), bf16)
    assert "recurrent" in lean.supported(_cfg(), _nets(ppo_agent.build(Config(recurrent="gru"), _spaces("box"))), f32)
    assert "shared" in lean.supported(_cfg(), _nets(ppo_agent.build(Config(shared_network=True), _spaces("box"))), f32)
    multi = {**_spaces("box"), "action": {"kind": "multidiscrete", "nvec": [2, 3]}}
    assert "MultiDiscrete" in lean.supported(_cfg(), _nets(ppo_agent.build(Config(), multi)), f32)
    image = {"obs_shape": [4, 84, 84], "obs_dtype": "uint8", "action": {"kind": "discrete", "n": 3}, "obs_parts": None}
    assert "image" in lean.supported(_cfg(), _nets(ppo_agent.build(Config(hidden_sizes=()), image)), f32)


def _cfg(**kw):
    return Config(**kw)


def _nets(model):
    return ppo_agent.Nets(model, adam(model.parameters(), 1e-3, eps=1e-5))


@pytest.mark.parametrize(
    "kind,overrides",
    [("discrete", {}), ("box", dict(obs_norm=True)), ("box", dict(state_dependent_std=True, hidden_sizes=()))],
)
def test_acting_fast_path_gives_the_layers_numbers_exactly(kind, overrides):
    """ActorCritic.step calls the layers' operations directly for feed-forward MLPs: bit for bit what
    the modules compute (the sequence forward), and off under mixed precision."""
    torch.manual_seed(0)
    model = ppo_agent.build(Config(**overrides), _spaces(kind))
    model.norm.update(torch.randn(50, 5) * 2 + 1)  # (a no-op unless obs_norm)
    obs = torch.randn(7, 5) * 3
    with torch.no_grad():
        params, values, _ = model.step(obs, torch.zeros(7, 0))
        ref_params, ref_values, _ = model(obs[:, None], torch.zeros(7, 0), torch.zeros(7, 1, dtype=torch.bool))
    assert model._direct is not None
    assert torch.equal(params, ref_params[:, 0]) and torch.equal(values, ref_values[:, 0])
    with torch.no_grad():  # the critic alone, on sequences [B, L] (re-valuing a rollout)
        seq_obs = torch.randn(3, 4, 5) * 3
        v_only, _ = model.values(seq_obs, torch.zeros(3, 0), torch.zeros(3, 4, dtype=torch.bool))
        assert torch.equal(v_only, model(seq_obs, torch.zeros(3, 0), torch.zeros(3, 4, dtype=torch.bool))[1])
    Precision("bf16-mixed", CPU).apply(model)
    with torch.no_grad():
        params16, _, _ = model.step(obs, torch.zeros(7, 0))
        ref16, _, _ = model(obs[:, None], torch.zeros(7, 0), torch.zeros(7, 1, dtype=torch.bool))
    assert torch.equal(params16, ref16[:, 0]) and not torch.equal(params16, params)


@pytest.mark.parametrize("kind", ["discrete", "box"])
def test_acting_fast_path_in_act_gives_the_layers_actions(kind):
    """ActorCritic.act (evaluation, heron.load, export) takes the same fast path: the same actions
    as the sequence forward's head, deterministic and sampled from the same generator state."""
    torch.manual_seed(0)
    model = ppo_agent.build(Config(obs_norm=True), _spaces(kind))
    model.norm.update(torch.randn(50, 5) * 2 + 1)
    obs = torch.randn(6, 5) * 3
    with torch.no_grad():
        params, _, _ = model(obs[:, None], torch.zeros(6, 0), torch.zeros(6, 1, dtype=torch.bool))
        head = model.pi_head
        assert torch.equal(model.act(obs, torch.zeros(6, 0), True)[0], head.to_env(head.mode(params[:, 0])))
        torch.manual_seed(3)
        sampled = model.act(obs, torch.zeros(6, 0), False)[0]
        torch.manual_seed(3)
        assert torch.equal(sampled, head.to_env(head.sample(params[:, 0])))


def _multidiscrete_spaces() -> dict:
    return {
        "obs_shape": [5],
        "obs_dtype": "float32",
        "action": {"kind": "multidiscrete", "nvec": [3, 2, 4]},
        "obs_parts": None,
    }


@pytest.mark.parametrize(
    "kind,overrides",
    [
        ("discrete", {}),
        ("multidiscrete", dict(obs_norm=True)),
        ("box", dict(obs_norm=True)),
        ("box", dict(state_dependent_std=True)),
        ("box", dict(hidden_sizes=(), init_log_std=-25.0)),
    ],
)
def test_numpy_acting_samples_what_the_torch_step_samples(kind, overrides):
    """The numpy acting step (feed-forward MLPs on the CPU) against ActorCritic.step and
    ActionHead.sample_logp fed the same noise: the same discrete actions, and box actions,
    log-probs and values within float32 rounding of the products."""
    torch.manual_seed(0)
    spaces = _multidiscrete_spaces() if kind == "multidiscrete" else _spaces(kind)
    model = ppo_agent.build(Config(**overrides), spaces)
    model.norm.update(torch.randn(50, 5) * 2 + 1)  # (a no-op unless obs_norm)
    with torch.no_grad():
        for p in model.parameters():  # weights and log-std away from their initial values
            p.add_(0.3 * torch.randn_like(p))
    fast = model.numpy_acting(7)
    assert fast is not None
    head = model.pi_head
    obs = (torch.randn(7, 5, dtype=torch.float64) * 20).numpy()  # some entries beyond the norm's clip
    noise = head.noise((7,), "cpu")
    to_env, actions, logp, values = fast(obs, noise.numpy())
    with torch.no_grad():
        params, ref_values, _ = model.step(torch.as_tensor(obs), torch.zeros(7, 0))
        ref_actions, ref_logp = head.sample_logp(params, noise)
    assert actions.shape == tuple(ref_actions.shape) and logp.dtype == values.dtype == np.float32
    if kind == "box":
        torch.testing.assert_close(torch.from_numpy(actions), ref_actions, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(torch.from_numpy(to_env), head.to_env(ref_actions), rtol=1e-5, atol=1e-5)
        assert (np.abs(to_env) == 1).any() and (np.abs(to_env) < 1).any()  # clipped and unclipped entries
    else:
        assert np.array_equal(actions, ref_actions.numpy()) and to_env is actions
    torch.testing.assert_close(torch.from_numpy(logp), ref_logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.from_numpy(values), ref_values, rtol=1e-5, atol=1e-5)


def test_a_cpu_twin_acts_as_the_model_after_each_refresh():
    """A model on a GPU acts through a CPU twin refreshed once per rollout (heron.accel.acting.CpuTwin):
    after a refresh the twin's numpy acting is the model's, weights, free log-std and observation
    statistics moved since included; before it, the twin keeps the previous rollout's."""
    torch.manual_seed(0)
    model = ppo_agent.build(Config(obs_norm=True), _spaces("box"))
    twin = acting.CpuTwin(model)
    obs, noise = (torch.randn(4, 5, dtype=torch.float64) * 3).numpy(), model.pi_head.noise((4,), "cpu").numpy()
    for _ in range(2):  # two rollouts' worth of learning between refreshes
        stale = twin.twin.numpy_acting(4)(obs, noise)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.2 * torch.randn_like(p))
        model.norm.update(torch.randn(40, 5) * 2 - 1)
        fresh, ref = twin.refresh().numpy_acting(4)(obs, noise), model.numpy_acting(4)(obs, noise)
        for got, want, old in zip(fresh, ref, stale):
            np.testing.assert_array_equal(got, want)
            assert not np.allclose(old, want)
    assert all(t.device.type == "cpu" for t in twin.twin.state_dict().values())


def test_numpy_acting_only_where_it_is_eligible():
    """Torch keeps acting for recurrent bodies, mixed precision, and products big enough for numpy's
    BLAS to go multi-threaded."""
    assert ppo_agent.build(Config(recurrent="gru"), _spaces("box")).numpy_acting(1) is None
    assert ppo_agent.build(Config(hidden_sizes=(256, 256)), _spaces("box")).numpy_acting(4) is None
    assert ppo_agent.build(Config(hidden_sizes=(256, 256)), _spaces("box")).numpy_acting(2) is not None
    model = ppo_agent.build(Config(), _spaces("box"))
    Precision("bf16-mixed", CPU).apply(model)
    assert model.numpy_acting(1) is None
