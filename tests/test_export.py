"""``heron export``: the ONNX file (through onnxruntime) and the TorchScript file (through
``torch.jit.load``, no heron code) give the actions of ``heron.load(RUN).predict`` on a batch, for
SAC, TD3 and PPO (discrete with observation normalization, continuous, MultiDiscrete, images,
recurrent with its state carried over steps), and DreamerV2's player's actions and states given
the same uniform draws for its latent samples."""

import json

import numpy as np
import pytest
import torch
import toy_envs  # noqa: F401  (registers heron-test/*)
from cli_helpers import cli_error

import heron
from heron.cli import main
from heron.export import run_exported

OFF = dict(
    total_steps=300,
    learning_starts=100,
    batch_size=32,
    buffer_size=1000,
    hidden_sizes=(32, 32),
    eval_every=0,
    eval_episodes=1,
    progress="none",
    torch_threads=1,
)
ON = dict(
    presets=["debug"],
    total_steps=256,
    num_envs=2,
    num_steps=64,
    eval_every=0,
    eval_episodes=1,
    progress="none",
    torch_threads=1,
)
RUNS = {
    "sac": ("sac", dict(OFF, env_id="Pendulum-v1", obs_norm=True)),
    "td3": ("td3", dict(OFF, env_id="Pendulum-v1")),
    "ppo-discrete": ("ppo", dict(ON, env_id="CartPole-v1", obs_norm=True)),
    "ppo-box": ("ppo", dict(ON, env_id="Pendulum-v1", obs_norm=True)),
    "ppo-multidiscrete": ("ppo", dict(ON, env_id="heron-test/MultiDiscrete-v0")),
    "ppo-image": ("ppo", dict(ON, env_id="heron-test/DictImage-v0")),
    "ppo-lstm": ("ppo", dict(ON, env_id="CartPole-v1", recurrent="lstm")),
    "dreamer-discrete": ("dreamer_v2", dict(presets=["debug"], env_id="CartPole-v1", progress="none", torch_threads=1)),
    "dreamer-box": ("dreamer_v2", dict(presets=["debug"], env_id="Pendulum-v1", progress="none", torch_threads=1)),
    "dreamer-v3-discrete": (
        "dreamer_v3",
        dict(presets=["debug"], env_id="CartPole-v1", progress="none", torch_threads=1),
    ),
    "dreamer-v3-box": ("dreamer_v3", dict(presets=["debug"], env_id="Pendulum-v1", progress="none", torch_threads=1)),
}
DREAMER = [name for name in RUNS if name.startswith("dreamer")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    for name, (algo, kwargs) in RUNS.items():
        heron.train(algo, run_dir=str(root / name), **kwargs)
    return root


def _batch(policy, rng, n=32):
    if policy.obs_dtype.is_floating_point:
        return rng.normal(0, 2, (n, *policy.obs_shape)).astype(np.float32)
    return rng.integers(0, 256, (n, *policy.obs_shape), dtype=np.uint8)


def _export(run, fmt, capsys):
    """Export ``run`` as ``fmt`` through the CLI: (file, its sidecar, the run's loaded policy)."""
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    out = run / f"policy_{fmt}"
    assert main(["export", str(run), "--format", fmt, "--out", str(out)]) == 0
    assert "matches the policy on 64 observations" in capsys.readouterr().out
    return out, json.loads((run / f"policy_{fmt}.json").read_text()), heron.load(run)


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("name", [name for name in RUNS if name not in DREAMER])
def test_exported_policy_acts_as_the_loaded_one(runs, name, fmt, capsys):
    out, info, policy = _export(runs / name, fmt, capsys)
    recurrent = policy.state_size > 0
    assert [i["name"] for i in info["inputs"]] == (["obs", "state"] if recurrent else ["obs"])
    assert info["inputs"][0]["shape"] == ["batch", *policy.obs_shape]
    rng = np.random.default_rng(7)
    state = np.zeros((32, policy.state_size), np.float32) if recurrent else None
    for _ in range(3 if recurrent else 1):  # recurrent: the state fed back, as a user's loop would
        obs = _batch(policy, rng)
        want = policy.predict(obs, deterministic=True)
        got = run_exported(out, fmt, obs, state)
        assert got[0].shape == want.shape and got[0].dtype == want.dtype
        if np.issubdtype(want.dtype, np.integer):
            assert np.array_equal(got[0], want)
        else:
            np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)
        if recurrent:
            np.testing.assert_allclose(got[1], policy.state.numpy(), rtol=1e-5, atol=1e-5)
            state = got[1]


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("name", DREAMER)
def test_exported_dreamer_acts_as_its_player_with_the_same_draws(runs, name, fmt, capsys):
    from heron.algos.dreamer.spaces import to_env_actions

    out, info, policy = _export(runs / name, fmt, capsys)
    stoch = policy.actor.rssm.stoch
    assert [i["name"] for i in info["inputs"]] == ["obs_state", "state", "uniform"]
    assert info["inputs"][2]["shape"] == ["batch", stoch]
    rng = np.random.default_rng(3)
    start = torch.tensor(info["initial_state"])  # where episodes start: zeros for DreamerV2
    assert torch.equal(start, policy.actor.initial_state(1, "cpu")[0])
    assert (start.abs().sum() > 0) == (name.startswith("dreamer-v3"))
    state = start.expand(16, -1).clone()
    file_state = state.numpy()
    for _ in range(3):  # the state fed back
        obs = rng.normal(0, 1, (16, *policy.spaces["obs_spec"]["state"][0])).astype(np.float32)
        uniform = rng.random((16, stoch)).astype(np.float32)
        action, state = policy.actor.act({"state": torch.as_tensor(obs)}, state, True, uniform=torch.as_tensor(uniform))
        want = to_env_actions(action, policy.spaces)
        got = run_exported(out, fmt, {"state": obs}, file_state, uniform)
        assert got[0].dtype == want.dtype
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[1], state.numpy(), rtol=1e-5, atol=1e-5)
        file_state = got[1]


def test_bad_input_is_one_line(runs, capsys, tmp_path):
    assert "unknown --format 'tflite'; choose from onnx, torchscript" in cli_error(
        capsys, ["export", str(runs / "sac"), "--format", "tflite"]
    )
    assert "run directory not found" in cli_error(capsys, ["export", str(tmp_path / "missing")])
    assert "unknown flag --formats" in cli_error(capsys, ["export", str(runs / "sac"), "--formats", "onnx"])
