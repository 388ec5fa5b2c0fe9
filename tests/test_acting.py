"""Acting in numpy (heron/accel/acting.py) against the torch acting it replaces: SAC's and TD3's
actors on fixed observations, their eligibility, and whole short runs from one seed either way;
Policy.predict's deterministic numpy step for SAC, TD3 and PPO. PPO's numpy acting in training has
its tests in test_ppo_lean.py and test_ppo_runs.py."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

import heron
import heron.algos.sac.networks as sac_networks
import heron.algos.td3.networks as td3_networks
from heron.accel import acting
from heron.accel.acting import Policy
from heron.accel.precision import Precision
from heron.accel.step import Learn
from heron.algos.ppo.agent import build as ppo_build
from heron.algos.ppo.config import Config as PPOConfig
from heron.algos.sac.networks import NumpyActor, build
from heron.algos.td3.networks import NumpyActor as TD3NumpyActor
from heron.algos.td3.networks import build as td3_build
from heron.envs.make import VecEnv
from heron.rl.distributions import TanhGaussian
from heron.runtime.checkpoint import latest_checkpoint

LOW, HIGH = torch.tensor([-1.0, -2.0, 0.0]), torch.tensor([1.0, 2.0, 3.0])


def _shaken(module: torch.nn.Module, norm: torch.nn.Module) -> None:
    """Weights away from their initial values; observation statistics away from the identity
    (a no-op for a disabled normalizer)."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.2 * torch.randn_like(p))
    norm.update(torch.randn(64, 5, dtype=torch.float64) * 3 + 1)


def _obs(n: int) -> np.ndarray:
    return (np.random.default_rng(0).standard_normal((n, 5)) * 15).astype(np.float64)  # some beyond the clip


@pytest.mark.parametrize("obs_norm", [False, True])
def test_td3_numpy_actor_gives_the_actors_greedy_actions(obs_norm):
    actor, _ = td3_build(5, LOW, HIGH, (32, 32), obs_norm)
    _shaken(actor, actor.norm)
    fast = TD3NumpyActor.of(actor, 3)
    assert fast is not None
    obs = _obs(3)
    with torch.no_grad():
        ref = actor(torch.as_tensor(obs))
    out = fast(obs)
    assert out.dtype == np.float32
    torch.testing.assert_close(torch.from_numpy(out), ref, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # the views follow in-place optimizer steps
        for p in actor.parameters():
            p.mul_(0.5)
        torch.testing.assert_close(torch.from_numpy(fast(obs)), actor(torch.as_tensor(obs)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("obs_norm", [False, True])
def test_sac_numpy_actor_samples_what_act_samples(obs_norm):
    """Given the normals ``actor.act`` would draw from the generator, the same actions."""
    actor, _ = build(5, LOW, HIGH, (32, 32), obs_norm, "none", 8)
    _shaken(actor, actor.encoder.norm)
    fast = NumpyActor.of(actor, 4)
    assert fast is not None
    obs = _obs(4)
    torch.manual_seed(7)
    ref, _ = actor.act(torch.as_tensor(obs).float(), torch.zeros(4, 0), deterministic=False)
    torch.manual_seed(7)
    out = fast(obs, torch.randn(4, 3).numpy())
    assert out.dtype == np.float32
    torch.testing.assert_close(torch.from_numpy(out), ref, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(torch.from_numpy(fast(obs, torch.randn(4, 3).numpy())), ref)  # the noise matters
    # training's two halves where numpy does not act (and on a GPU): torch's Gaussian, the host's draw
    gaussian = actor.gaussian(torch.as_tensor(obs).float()).numpy()
    np.testing.assert_allclose(gaussian, fast.gaussian(obs), rtol=1e-5, atol=1e-6)
    torch.manual_seed(7)
    drawn = TanhGaussian.draw(gaussian, torch.randn(4, 3).numpy(), actor.scale.numpy(), actor.bias.numpy())
    torch.testing.assert_close(torch.from_numpy(drawn), ref, rtol=1e-5, atol=1e-5)


def test_numpy_acting_only_where_it_applies():
    """Torch keeps acting for recurrent encoders and products large enough for numpy's BLAS to use
    more threads than the run's. Under bf16-mixed SAC's and TD3's training loops act in float32
    numpy (``mixed``; their actions enter no loss): the float32 forward's actions, as a saved
    policy's; evaluations (``of`` without it) keep the run's precision."""
    actor, _ = td3_build(11, -torch.ones(3), torch.ones(3), (256, 256), False)
    assert TD3NumpyActor.of(actor, 3) is not None and TD3NumpyActor.of(actor, 4) is None  # 4 x 256 x 256 = 2^18
    obs = np.random.default_rng(0).normal(size=(2, 11)).astype(np.float32)
    with torch.no_grad():
        float32 = actor(torch.from_numpy(obs)).numpy()
    Precision("bf16-mixed", torch.device("cpu")).apply(actor)
    assert TD3NumpyActor.of(actor, 2) is None
    fast = TD3NumpyActor.of(actor, 2, mixed=True)
    np.testing.assert_allclose(fast(obs), float32, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        assert not np.allclose(actor(torch.from_numpy(obs)).numpy(), float32, rtol=1e-5, atol=1e-6)  # torch: bf16
    sac_mixed, _ = build(5, LOW, HIGH, (32,), False, "none", 8)
    Precision("bf16-mixed", torch.device("cpu")).apply(sac_mixed)
    assert NumpyActor.of(sac_mixed, 1) is None and NumpyActor.of(sac_mixed, 1, mixed=True) is not None
    sac_actor, _ = build(5, LOW, HIGH, (32,), False, "gru", 8)
    assert NumpyActor.of(sac_actor, 1) is None
    assert acting.PRODUCT_MAX == 2**18 - 1


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_numpy_acting_runs_like_torch_acting(algo, tmp_path, monkeypatch):
    """A short Pendulum run from one seed with numpy acting and with torch acting: the same
    episode returns and final weights to float32 rounding (the actions differ by rounding only)."""
    flags = dict(
        env_id="Pendulum-v1",
        total_steps=1000,
        learning_starts=400,
        batch_size=32,
        hidden_sizes=(32, 32),
        obs_norm=True,
        eval_every=0,
        eval_episodes=1,
        checkpoint_every=0,
        log_every=200,
        progress="none",
    )
    heron.train(algo, run_dir=str(tmp_path / "numpy"), **flags)
    for module in (sac_networks, td3_networks):
        monkeypatch.setattr(module.NumpyActor, "of", staticmethod(lambda actor, num_envs, mixed=False: None))
    heron.train(algo, run_dir=str(tmp_path / "torch"), **flags)

    def returns(run):
        with open(tmp_path / run / "metrics.csv") as f:
            return [float(r["value"]) for r in csv.DictReader(f) if r["metric"] == "charts/episodic_return"]

    assert len(returns("numpy")) == 5
    torch.testing.assert_close(torch.tensor(returns("numpy")), torch.tensor(returns("torch")), rtol=1e-4, atol=1e-2)
    a, b = (
        torch.load(latest_checkpoint(tmp_path / run / "checkpoints"), weights_only=True)["actor"]
        for run in ("numpy", "torch")
    )
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-3, atol=1e-4, msg=name)


def _ppo_model(kind: str, **overrides):
    action = {
        "discrete": {"kind": "discrete", "n": 4},
        "multidiscrete": {"kind": "multidiscrete", "nvec": [3, 2, 4]},
        "box": {"kind": "box", "low": [-1.0, -2.0, 0.0], "high": [1.0, 2.0, 3.0]},
    }[kind]
    return ppo_build(
        PPOConfig(obs_norm=True, **overrides),
        {"obs_shape": [5], "obs_dtype": "float32", "action": action, "obs_parts": None},
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: build(5, LOW, HIGH, (32, 32), True, "none", 8)[0],
        lambda: td3_build(5, LOW, HIGH, (32, 32), True)[0],
        lambda: _ppo_model("box"),
        lambda: _ppo_model("box", state_dependent_std=True),
        lambda: _ppo_model("discrete"),
        lambda: _ppo_model("multidiscrete"),
    ],
    ids=["sac", "td3", "ppo-box", "ppo-box-state-std", "ppo-discrete", "ppo-multidiscrete"],
)
def test_policy_predicts_in_numpy_what_the_actor_acts(make):
    """Policy.predict (evaluations, heron.load) takes the actor's deterministic numpy step: the
    deterministic actions of ``act`` to float32 rounding, for a batch and for one observation, with
    no torch call (``act`` is not reached); sampled actions stay in torch."""
    actor = make()
    _shaken(actor, actor.encoder.norm if hasattr(actor, "encoder") else actor.norm)
    policy = Policy(actor, (5,))
    obs = _obs(3)
    with torch.no_grad():
        ref = actor.act(torch.as_tensor(obs).float(), torch.zeros(3, 0), True)[0].numpy()
    called = []
    real_act = actor.act
    actor.act = lambda *args: called.append(args) or real_act(*args)
    batch, single = policy.predict(obs), policy.predict(obs[1])
    assert not called
    single = np.asarray(single)  # a discrete action is a numpy scalar, as through torch
    assert batch.dtype == ref.dtype and single.shape == ref[1].shape
    torch.testing.assert_close(torch.from_numpy(batch), torch.from_numpy(ref), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.from_numpy(single), torch.from_numpy(np.asarray(ref[1])), rtol=1e-5, atol=1e-5)
    policy.predict(obs, deterministic=False)
    assert len(called) == 1
    with torch.no_grad():  # an optimizer's in-place step shows through the kept numpy step
        for p in actor.parameters():
            p.mul_(0.5)
        moved = real_act(torch.as_tensor(obs).float(), torch.zeros(3, 0), True)[0].numpy()
    torch.testing.assert_close(torch.from_numpy(policy.predict(obs)), torch.from_numpy(moved), rtol=1e-5, atol=1e-5)
    assert len(called) == 1
    host = policy.host_copy()  # what an evaluation on a GPU plays: its own numpy step, on the copy
    assert host._numpy is not policy._numpy
    torch.testing.assert_close(torch.from_numpy(host.predict(obs)), torch.from_numpy(moved), rtol=1e-5, atol=1e-5)


def test_policy_keeps_torch_where_numpy_does_not_apply():
    """A recurrent actor and a mixed-precision one act through torch in Policy.predict (evaluations
    run in the run's precision)."""
    recurrent, _ = build(5, LOW, HIGH, (32,), False, "gru", 8)
    assert recurrent.numpy_mode(3) is None
    mixed, _ = td3_build(5, LOW, HIGH, (32, 32), False)
    Precision("bf16-mixed", torch.device("cpu")).apply(mixed)
    for actor, state in ((recurrent, 8), (mixed, 0)):
        policy = Policy(actor, (5,), state)
        assert policy._numpy_mode(3) is None
        assert policy.predict(_obs(3)).shape == (3, 3)


def record_loop(monkeypatch, acting_call: tuple) -> list:
    """The training loop's events, in order, as it runs: each gradient step (its ``update_actor``),
    each env step ("env") and each call of ``acting_call`` ((class, method name): "act")."""
    events: list = []

    def record(cls, name, event):
        method = getattr(cls, name)
        monkeypatch.setattr(cls, name, lambda self, *args: (events.append(event(*args)), method(self, *args))[1])

    record(Learn, "__call__", lambda update_actor, average: update_actor)
    record(VecEnv, "step", lambda actions: "env")
    record(*acting_call, lambda obs: "act")
    return events


def acted_ahead(events: list) -> list:
    """The gradient steps (their ``update_actor``) that acting came right before, with no env step
    between: the ones the loop acted ahead of."""
    return [e for a, e in zip(events, events[1:]) if a == "act" and e not in ("act", "env")]


DELAY_3 = {"policy_frequency": 3, "gradient_steps": 2, "num_envs": 2}


# SAC with two envs: with one env and Pendulum's one action dimension every other draw of torch's
# normals comes from a cached value, and a draw moved to the ahead point went unseen
@pytest.mark.parametrize(
    "algo,extra,numpy_acting",
    [
        ("td3", {}, True),
        ("td3", DELAY_3, True),
        ("td3", {"num_envs": 2}, False),
        ("sac", {"num_envs": 2}, True),
        ("sac", DELAY_3, False),
    ],
    ids=[
        "td3",
        "td3-delay-3-two-steps-two-envs",
        "td3-two-envs-torch-acting",
        "sac-two-envs",
        "sac-delay-3-two-steps-two-envs-torch-acting",
    ],
)
def test_acting_ahead_of_critic_steps_changes_no_number(algo, extra, numpy_acting, tmp_path, monkeypatch):
    """--act-ahead (SAC's and TD3's default): before gradient steps that train the critics alone,
    the next env step's greedy actions (TD3) or Gaussian (SAC, whose draw stays where it was) are
    taken at once; on a GPU that env step then runs while the critics train. The run is the same
    run: weights, losses, returns and evaluations bit for bit, with observation normalization moving
    every step; and it does act ahead, and only before critic steps."""
    flags = dict(
        env_id="Pendulum-v1",
        total_steps=1200,
        learning_starts=400,
        batch_size=32,
        hidden_sizes=(32, 32),
        obs_norm=True,
        eval_every=600,
        eval_episodes=1,
        checkpoint_every=0,
        log_every=100,
        progress="none",
        torch_threads=1,
        eval_async="off",
        **extra,
    )
    if not numpy_acting:
        for module in (sac_networks, td3_networks):
            monkeypatch.setattr(module.NumpyActor, "of", staticmethod(lambda actor, num_envs, mixed=False: None))
    acting_call = {
        ("td3", True): (TD3NumpyActor, "__call__"),
        ("td3", False): (td3_networks.Actor, "forward"),
        ("sac", True): (sac_networks.NumpyActor, "gaussian"),
        ("sac", False): (sac_networks.Actor, "gaussian"),
    }[algo, numpy_acting]
    events = record_loop(monkeypatch, acting_call)
    order = {}
    for ahead in (True, False):
        events.clear()
        heron.train(algo, run_dir=str(tmp_path / str(ahead)), act_ahead=ahead, **flags)
        order[ahead] = list(events)
    # acting right before a gradient step (no env step between) happens exactly when acting ahead,
    # and only before critic steps
    before = {ahead: acted_ahead(evts) for ahead, evts in order.items()}
    assert before[False] == [] and len(before[True]) > 50 and set(before[True]) == {False}
    assert sorted(map(str, order[True])) == sorted(map(str, order[False]))  # as many of each
    a, b = (
        torch.load(latest_checkpoint(tmp_path / str(ahead) / "checkpoints"), weights_only=True)
        for ahead in (True, False)
    )
    for key in ("actor", "critic", "critic_target") + (("actor_target",) if algo == "td3" else ("log_alpha",)):
        for name, tensor in a[key].items() if isinstance(a[key], dict) else [("", a[key])]:
            assert torch.equal(tensor, b[key][name] if name else b[key]), f"{key}.{name}"

    def rows(run, name):
        with open(tmp_path / run / name) as f:
            return [
                {k: v for k, v in r.items() if k != "wall_time"}
                for r in csv.DictReader(f)
                if r.get("metric") != "charts/SPS"
            ]

    for name in ("metrics.csv", "eval.csv"):
        assert rows("True", name) == rows("False", name) and len(rows("True", name)) >= 2, name


class _EagerGraph:
    """heron.accel.acting.GraphedActor's contract without a GPU: ``fn`` on the inputs as tensors."""

    def __init__(self, fn, device):
        self.fn = fn

    def __call__(self, *inputs):
        with torch.no_grad():
            return self.fn(*(torch.as_tensor(x) for x in inputs)).numpy()


@pytest.mark.parametrize("body,action", [("cnn", "discrete"), ("shared", "box"), ("shared", "multidiscrete")])
def test_ppo_recorded_acting_unpacks_what_the_step_acts(monkeypatch, body, action):
    """PPO's recorded acting step (--cuda-graphs, ``RecordedActing``) packs actions, log-probs and
    values into one float32 output for one copy back to the host: unpacked, they are the eager
    step's, integer actions as int64 and Gaussian samples clipped for the env alone. (The graph
    itself against the eager step: tests/test_cuda.py.)"""
    import heron.accel.acting as acting_module
    from heron.algos.ppo.acting import RecordedActing

    monkeypatch.setattr(acting_module, "GraphedActor", _EagerGraph)
    space = {
        "discrete": {"kind": "discrete", "n": 6},
        "multidiscrete": {"kind": "multidiscrete", "nvec": [3, 4]},
        "box": {"kind": "box", "low": torch.tensor([-1.0, -0.5]), "high": torch.tensor([1.0, 0.5])},
    }[action]
    image = body == "cnn"
    spaces = {
        "obs_shape": [4, 84, 84] if image else [5],
        "obs_dtype": "uint8" if image else "float32",
        "action": space,
        "obs_parts": None,
    }
    cfg = PPOConfig(hidden_sizes=() if image else (16,), shared_network=True, init_log_std=0.5)
    torch.manual_seed(0)
    model = ppo_build(cfg, spaces)
    rng = np.random.default_rng(1)
    obs = rng.integers(0, 256, (3, 4, 84, 84), dtype=np.uint8) if image else _obs(3)
    noise = model.pi_head.noise((3,), "cpu")
    got = RecordedActing(model, "cpu")(obs, noise.numpy())
    with torch.no_grad():
        params, values, _ = model.step(torch.as_tensor(obs), torch.zeros(3, 0))
        actions, logp = model.pi_head.sample_logp(params, noise)
        to_env = model.pi_head.to_env(actions)
    for name, a, b in zip(("to_env", "actions", "logp", "values"), got, (to_env, actions, logp, values)):
        assert a.shape == tuple(b.shape) and a.dtype == b.numpy().dtype, name
        np.testing.assert_array_equal(a, b.numpy(), err_msg=name)
    if action == "box":
        assert (got[1] != got[0]).any()  # some samples beyond the bounds: clipped for the env alone
    # the rollout passes tensors: the observations it keeps (on a GPU: uploaded once), its noise
    for a, b in zip(RecordedActing(model, "cpu")(torch.as_tensor(obs), noise), got):
        np.testing.assert_array_equal(a, b)
