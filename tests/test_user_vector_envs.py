"""A user's own vector env, handed over in Python (``heron.train(algo, env=...)``) as an instance or
as a factory with ``num_envs``, or named on the command line as ``module:factory``: the run steps
it natively, evaluates on single envs of it, leaves an instance open for its owner and resumes."""

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from gymnasium.vector import AutoresetMode

import heron
from heron.envs.ids import callable_env_id, forget_callable, instance_env_id
from heron.envs.native import NativeVecEnv
from heron.envs.torch_pendulum import TorchPendulum
from heron.envs.user_vector import OneOfVector
from heron.errors import HeronError

DEBUG = dict(presets=["debug"], total_steps=600, learning_starts=200, eval_every=300, checkpoint_every=300)


def _latest(run_dir) -> dict:
    from heron.runtime.checkpoint import latest_checkpoint

    return torch.load(latest_checkpoint(run_dir / "checkpoints"), weights_only=False)


def _config(run_dir) -> dict:
    return yaml.safe_load((run_dir / "config.yaml").read_text())


@pytest.fixture
def forget():
    ids = []
    yield ids.append
    for env_id in ids:
        forget_callable(env_id)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_one_env_of_a_vector_env_plays_whole_episodes_to_their_final_observation(mode):
    pendulum = TorchPendulum(1, dtype=torch.float64, autoreset_mode=mode)
    single, envs = gym.make("Pendulum-v1"), OneOfVector(pendulum, "TorchPendulum")
    single.reset(seed=3)
    envs.reset(seed=3)
    pendulum.theta, pendulum.theta_dot = (torch.tensor(single.unwrapped.state[i : i + 1]) for i in (0, 1))
    actions = np.sin(np.arange(200, dtype=np.float32))[:, None] * 2
    for k, action in enumerate(actions):
        expected, r1, _, trunc1, _ = single.step(action)
        obs, r2, term, trunc2, info = envs.step(action)
        assert isinstance(obs, np.ndarray) and isinstance(r2, float) and info == {}
        assert (term, trunc2) == (False, trunc1) == (False, k == 199)
        np.testing.assert_allclose(obs, expected, atol=1e-4)  # at the end too: the final observation
        assert r2 == pytest.approx(r1, abs=1e-4)
    single.close()
    envs.close()


def test_a_vector_env_instance_trains_natively_and_stays_open_for_its_owner(tmp_path, forget):
    envs = gym.make_vec("heron/TorchPendulum-v1", num_envs=4, vectorization_mode="vector_entry_point")
    forget(instance_env_id(envs))
    out = heron.train("sac", env=envs, run_dir=str(tmp_path / "run"), **DEBUG)
    cfg = _config(tmp_path / "run")
    assert (cfg["env_id"], cfg["vector_mode"], cfg["num_envs"]) == (instance_env_id(envs), "native", 4)
    assert out["step"] == 600 and out["episodes"] == 2  # evaluated on single envs of the id it was made from
    obs, *_ = envs.step(np.zeros((4, 1), np.float32))  # not closed
    assert obs.shape == (4, 3)
    envs.close()


def test_a_vector_env_factory_trains_natively_and_evaluates_on_one_env_of_it(tmp_path, forget):
    def make(num_envs: int):
        return TorchPendulum(num_envs, autoreset_mode=AutoresetMode.SAME_STEP)

    out = heron.train("td3", env=make, num_envs=3, run_dir=str(tmp_path / "run"), **DEBUG)
    cfg = _config(tmp_path / "run")
    forget(cfg["env_id"])
    assert cfg["vector_mode"] == "native" and cfg["num_envs"] == 3 and cfg["env_id"].startswith("<callable ")
    assert out["step"] == 600 and -2000 < out["mean_return"] < 0


def test_a_run_on_an_instance_resumes_with_the_instance_given_again(tmp_path, forget, capsys):
    """heron's tensor Pendulum saves its state: the resume continues its episodes."""
    envs = TorchPendulum(2)
    forget(instance_env_id(envs))

    one = dict(eval_env=lambda: gym.make("Pendulum-v1"))
    heron.train("sac", env=envs, run_dir=str(tmp_path / "run"), **one, **{**DEBUG, "total_steps": 300})
    out = heron.resume(tmp_path / "run", total_steps=600, env=envs, **one)
    assert out["step"] == 600
    assert "every env starts a new episode" not in capsys.readouterr().err
    assert _latest(tmp_path / "run")["envs"]["restarts"] == 0


def test_bad_vector_envs_are_refused_in_one_line(forget):
    envs = TorchPendulum(2)
    forget(instance_env_id(envs))
    with pytest.raises(HeronError, match="cannot make one of the TorchPendulum given"):
        heron.train("sac", env=envs, presets=["debug"])
    with pytest.raises(HeronError, match="num_envs=3, but the vector env given has 2 envs"):
        heron.train("sac", env=envs, eval_env=lambda: gym.make("Pendulum-v1"), num_envs=3, presets=["debug"])
    with pytest.raises(HeronError, match="a vector env trains with vector_mode='native', not 'async'"):
        heron.train("sac", env=envs, eval_env=lambda: gym.make("Pendulum-v1"), vector_mode="async")
    with pytest.raises(HeronError, match="eval_env goes with env= a vector env instance"):
        heron.train("sac", env_id="Pendulum-v1", eval_env=lambda: gym.make("Pendulum-v1"))
    with pytest.raises(HeronError, match="made 2 envs where one was asked for"):
        OneOfVector(envs, "TorchPendulum")


def test_a_module_factory_of_vector_envs_on_the_command_line(tmp_path):
    (tmp_path / "mysim.py").write_text(
        "from heron.envs.torch_pendulum import TorchPendulum\n\n\n"
        "def make(num_envs):\n    return TorchPendulum(num_envs)\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "heron",
            "train",
            "sac",
            "--env-id",
            "mysim:make",
            "--vector-mode",
            "native",
            "--num-envs",
            "2",
            "--preset",
            "debug",
            "--total-steps",
            "400",
            "--learning-starts",
            "200",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "final evaluation" in done.stdout


class NoNumpy(torch.Tensor):
    """A tensor that refuses to become a numpy array: what a tensor env returns here, and all that
    torch computes from it."""

    def __array__(self, *args, **kwargs):
        raise AssertionError("a tensor env's output became a numpy array")

    def numpy(self, *args, **kwargs):
        raise AssertionError("a tensor env's output became a numpy array")


class GuardedPendulum(TorchPendulum):
    """heron's tensor Pendulum, its outputs NoNumpy tensors; it takes its actions as tensors only."""

    def reset(self, **kwargs):
        obs, info = super().reset(**kwargs)
        return obs.as_subclass(NoNumpy), info

    def step(self, actions):
        assert isinstance(actions, torch.Tensor), f"actions reached the env as {type(actions).__name__}"
        obs, reward, terminated, truncated, info = super().step(actions)
        return (*(x.as_subclass(NoNumpy) for x in (obs, reward, terminated, truncated)), info)


@pytest.mark.parametrize("algo", ["sac", "td3", "ppo"])
def test_a_tensor_env_s_outputs_never_become_numpy_arrays(algo, tmp_path, forget):
    def make(num_envs: int):  # evaluation plays one env at a time, read as numpy: a plain one there
        return GuardedPendulum(num_envs) if num_envs > 1 else TorchPendulum(1)

    forget(callable_env_id(make))
    with pytest.raises(AssertionError, match="became a numpy array"):  # the guard itself
        np.asarray(make(2).reset()[0])
    # pendulums end at 200 steps: reset rows on the way; PPO with its reward scaling and observation
    # normalization, which see every step
    settings = (
        dict(n_step=2, **{**DEBUG, "total_steps": 1000})
        if algo != "ppo"
        else dict(presets=["debug"], total_steps=1024, reward_scale=True, obs_norm=True)
    )
    out = heron.train(algo, env=make, num_envs=4, run_dir=str(tmp_path / "run"), **settings)
    assert out["step"] in (1000, 1024)


class BrokenContract(TorchPendulum):
    """A tensor env whose step breaks the contract as ``how`` says."""

    def __init__(self, num_envs: int, how: str):
        super().__init__(num_envs)
        self.how = how

    def reset(self, **kwargs):
        obs, info = super().reset(**kwargs)
        return (obs.to("meta") if self.how == "meta" else obs), info

    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        if self.how == "numpy rewards":
            reward = reward.numpy()
        elif self.how == "float flags":
            terminated = terminated.float()
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize(
    "how, message",
    [
        ("numpy rewards", "returns rewards as ndarray, not a torch tensor"),
        ("float flags", "returns terminated as torch.float32, not bool"),
        ("meta", "returns tensors on meta and the run trains on cpu: pass --device meta"),
    ],
)
def test_a_tensor_env_that_breaks_the_contract_is_refused_in_one_line(how, message):
    envs = NativeVecEnv("Pendulum-v1", 2, 0, envs=BrokenContract(2, how), keep_tensors=True)
    with pytest.raises(HeronError, match=message):
        envs.reset()
        envs.step(torch.zeros(2, 1))
