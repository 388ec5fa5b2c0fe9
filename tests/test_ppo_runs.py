"""PPO through the real code paths: every flag at least once, every space kind, Atari, resume."""

import csv

import numpy as np
import pytest
import torch
import toy_envs  # noqa: F401

import heron

PPO_METRICS = {
    "charts/episodic_return",
    "charts/SPS",
    "charts/learning_rate",
    "losses/policy_loss",
    "losses/value_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
}
TINY = dict(
    total_steps=512,
    num_envs=2,
    num_steps=64,
    update_epochs=2,
    num_minibatches=2,
    hidden_sizes=(16,),
    rnn_hidden_size=8,
    eval_every=0,
    eval_episodes=1,
    log_every=128,
    progress="none",
)


def _metrics(run_dir):
    with open(f"{run_dir}/metrics.csv") as f:
        return {r["metric"] for r in csv.DictReader(f)}


@pytest.mark.parametrize(
    "env_id,flags",
    [
        (
            "CartPole-v1",
            dict(
                dual_clip=3.0,
                clip_vloss=False,
                target_kl=0.01,
                norm_adv=False,
                anneal_lr=False,
                shared_network=True,
                vector_mode="async",
                torch_threads=1,
            ),
        ),
        (
            "CartPole-v1",
            dict(
                recompute_adv=False,
                value_norm=True,
                obs_norm=True,
                reward_scale=True,
                max_grad_norm=0.0,
                gamma=0.98,
                gae_lambda=0.9,
                clip_coef=0.3,
                ent_coef=0.0,
                vf_coef=1.0,
                learning_rate=1e-3,
            ),
        ),
        ("CartPole-v1", dict(mode="off-policy", replay_rollouts=3, nstep=3, recurrent="gru")),
        (
            "Pendulum-v1",
            dict(state_dependent_std=True, init_log_std=-0.5, value_norm=True, mode="off-policy", fused_update=False),
        ),
        (
            "Pendulum-v1",
            dict(recurrent="lstm", obs_norm=True, reward_scale=True, checkpoint_every=256, keep_checkpoints=1),
        ),
        ("heron-test/MultiDiscrete-v0", dict(env_backend="gymnasium")),
        ("heron-test/DictObs-v0", dict(progress="log")),
        ("heron-test/ByteVector-v0", dict()),  # uint8 vectors into the MLP without normalization
    ],
)
def test_flags(env_id, flags, tmp_path):
    result = heron.train("ppo", env_id=env_id, run_dir=str(tmp_path / "r"), **{**TINY, **flags})
    assert result["step"] == 512
    names = _metrics(tmp_path / "r")
    assert PPO_METRICS - {"charts/episodic_return"} <= names, PPO_METRICS - names
    policy = heron.load(tmp_path / "r", device="cpu")
    action = policy.predict(toy_obs(env_id))
    assert (
        action.shape
        == {
            "CartPole-v1": (),
            "Pendulum-v1": (1,),
            "heron-test/MultiDiscrete-v0": (2,),
            "heron-test/DictObs-v0": (1,),
            "heron-test/ByteVector-v0": (),
        }[env_id]
    )
    if flags.get("keep_checkpoints") == 1:
        assert len(list((tmp_path / "r" / "checkpoints").glob("step_*[0-9].pt"))) == 1


def toy_obs(env_id):
    import gymnasium as gym

    from heron.envs.make import make_env

    env = make_env(env_id)
    obs, _ = env.reset(seed=0)
    env.close()
    assert isinstance(env.observation_space, gym.spaces.Box)
    return obs


def test_multidiscrete_learns_the_target(tmp_path):
    r = heron.train(
        "ppo",
        env_id="heron-test/MultiDiscrete-v0",
        total_steps=16384,
        num_envs=4,
        num_steps=64,
        gamma=0.0,
        learning_rate=3e-3,
        ent_coef=0.0,
        eval_every=0,
        eval_episodes=5,
        progress="none",
        run_dir=str(tmp_path / "m"),
    )
    assert r["mean_return"] >= 18, r  # 2 per step when both dimensions match, 10 steps; random scores 8.3


def test_dict_observations_with_an_image_and_a_vector(tmp_path):
    """The image entry goes through a CNN, the vector entry (normalized) beside it; it learns the
    vector rule (random play scores 5 of 10)."""
    r = heron.train(
        "ppo",
        env_id="heron-test/DictImage-v0",
        total_steps=4096,
        num_envs=4,
        num_steps=64,
        gamma=0.0,
        learning_rate=1e-3,
        obs_norm=True,
        hidden_sizes=(32,),
        eval_every=0,
        eval_episodes=5,
        progress="none",
        run_dir=str(tmp_path / "d"),
    )
    state = torch.load(tmp_path / "d" / "checkpoints" / "step_000004096.pt", weights_only=True)
    assert [p[0] for p in state["spaces"]["obs_parts"]] == ["pixels", "vec"]
    assert state["actor"]["pi_body.cnns.0.convs.0.weight"].shape[1] == 3  # channel-last frames as (C, H, W)
    assert state["actor"]["norm.mean"].shape == (2,)  # statistics of the vector entries only
    assert r["mean_return"] >= 8, r


def test_compile_update_step(tmp_path):
    r = heron.train("ppo", compile=True, run_dir=str(tmp_path / "c"), **TINY)
    assert r["step"] == 512


def test_atari_pong_with_the_standard_wrappers(tmp_path):
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    r = heron.train(
        "ppo",
        presets=["atari"],
        env_id="PongNoFrameskip-v4",
        env_backend="gymnasium",
        total_steps=256,
        num_envs=2,
        num_steps=64,
        num_minibatches=2,
        update_epochs=1,
        eval_every=0,
        eval_episodes=1,
        progress="none",
        run_dir=str(tmp_path / "a"),
        capture_video=False,
    )
    assert r["step"] == 256 and -21 <= r["mean_return"] <= 21
    state = torch.load(tmp_path / "a" / "checkpoints" / "step_000000256.pt", weights_only=True)
    assert state["spaces"]["obs_shape"] == [4, 84, 84] and state["spaces"]["obs_dtype"] == "uint8"
    assert "pi_body.cnns.0.convs.0.weight" in state["actor"] and "v_body.cnns.0.convs.0.weight" not in state["actor"]


def test_envpool_backend(tmp_path, monkeypatch):
    from heron.envs.atari import envpool_available

    if not envpool_available():  # (not importorskip: EnvPool's import sets matplotlib's variables for the process)
        pytest.skip("envpool is not installed (pip install -e '.[envpool]')")
    # the final evaluation is not what this test is about: an untrained deterministic Breakout player
    # that never presses FIRE after a lost life plays to the 27,000-step limit (minutes)
    monkeypatch.setattr(
        "heron.runtime.evaluation.run_episodes", lambda policy, env_id, mine, *a, **k: np.zeros(len(mine))
    )
    # 512 steps per env: a random Breakout player loses lives (EnvPool's resets) and whole games
    r = heron.train(
        "ppo",
        presets=["atari"],
        env_id="ALE/Breakout-v5",
        env_backend="envpool",
        total_steps=1024,
        num_envs=2,
        num_steps=128,
        num_minibatches=2,
        update_epochs=1,
        eval_every=0,
        eval_episodes=1,
        progress="none",
        run_dir=str(tmp_path / "e"),
    )
    assert r["step"] == 1024
    with open(tmp_path / "e" / "metrics.csv") as f:
        games = [float(row["value"]) for row in csv.DictReader(f) if row["metric"] == "charts/episodic_return"]
    assert games and all(g >= 0 for g in games)


def test_ale_vector_backend_trains_and_resumes(tmp_path, monkeypatch):
    """PPO on ALE's own vector env (``--env-backend ale``) through a checkpoint and a resume (the games
    restart, as with EnvPool): whole games are logged, not lives."""
    pytest.importorskip("ale_py.vector_env", reason="ALE's vector env needs ale-py 0.11 or later")
    pytest.importorskip("cv2")
    # as in test_envpool_backend: an untrained Breakout player's final evaluation can take minutes
    monkeypatch.setattr(
        "heron.runtime.evaluation.run_episodes", lambda policy, env_id, mine, *a, **k: np.zeros(len(mine))
    )
    flags = dict(
        presets=["atari"],
        env_id="ALE/Breakout-v5",
        num_envs=2,
        num_steps=128,
        num_minibatches=2,
        update_epochs=1,
        eval_every=0,
        eval_episodes=1,
        progress="none",
        torch_threads=1,
        checkpoint_every=512,
        run_dir=str(tmp_path / "a"),
    )
    r = heron.train("ppo", env_backend="ale", total_steps=512, **flags)
    assert r["step"] == 512
    state = torch.load(tmp_path / "a" / "checkpoints" / "step_000000512.pt", weights_only=False)
    assert state["envs"]["backend"] == "ale"
    r = heron.resume(tmp_path / "a", total_steps=1536)
    assert r["step"] == 1536
    with open(tmp_path / "a" / "metrics.csv") as f:
        lengths = [float(row["value"]) for row in csv.DictReader(f) if row["metric"] == "charts/episodic_length"]
    assert lengths and min(lengths) > 80  # five lives of a random player (one life lasts about 20-50 steps)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_numpy_acting_collects_what_torch_acting_collects(env_id, tmp_path, monkeypatch):
    """The numpy acting path against torch acting from the same seed: the same episodes (CartPole's
    discrete actions identical; Pendulum's float32 actions within rounding of the products, on a
    task without chaos over 200 steps) and the same trained weights to float32 rounding."""
    from heron.algos.ppo.networks import ActorCritic

    flags = dict(TINY, env_id=env_id, obs_norm=True, reward_scale=True, log_every=64, checkpoint_every=0)
    heron.train("ppo", run_dir=str(tmp_path / "numpy"), **flags)
    monkeypatch.setattr(ActorCritic, "numpy_acting", lambda self, num_envs: None)
    heron.train("ppo", run_dir=str(tmp_path / "torch"), **flags)

    def returns(run):
        with open(tmp_path / run / "metrics.csv") as f:
            return [float(r["value"]) for r in csv.DictReader(f) if r["metric"] == "charts/episodic_return"]

    fast, plain = returns("numpy"), returns("torch")
    assert len(fast) == len(plain) > 0
    torch.testing.assert_close(torch.tensor(fast), torch.tensor(plain), rtol=1e-4, atol=1e-3)
    from heron.runtime.checkpoint import latest_checkpoint

    a, b = (
        torch.load(latest_checkpoint(tmp_path / run / "checkpoints"), weights_only=True)["actor"]
        for run in ("numpy", "torch")
    )
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-4, msg=name)


@pytest.mark.parametrize(
    "env_id,flags", [("CartPole-v1", {}), ("Pendulum-v1", {"total_steps": 1024}), ("heron-test/DictObs-v0", {})]
)
def test_rollout_next_obs_are_the_envs(env_id, flags, tmp_path, monkeypatch):
    """The rollout stores next_obs as the next step's obs (copied where the rollout already is) except
    at its last step and where an episode ended (terminated: CartPole; truncated at 200 steps:
    Pendulum): every stored next obs must be the one the env returned."""
    import importlib

    from heron.envs.make import VecEnv

    ppo_learn = importlib.import_module("heron.algos.ppo.learn")
    returned, stored = [], []
    step = VecEnv.step

    def recording_step(self, actions):
        out = step(self, actions)
        returned.append((out.next_obs.copy(), out.terminated | out.truncated))
        return out

    as_sequences = ppo_learn.as_sequences
    monkeypatch.setattr(VecEnv, "step", recording_step)
    monkeypatch.setattr(
        ppo_learn,
        "as_sequences",
        lambda data: (
            stored.append({k: data[k][-1].clone() for k in ("next_obs", "terminated", "truncated")}),
            as_sequences(data),
        )[1],
    )
    heron.train("ppo", env_id=env_id, run_dir=str(tmp_path / "r"), **{**TINY, **flags})
    T = TINY["num_steps"]
    assert len(returned) == T * len(stored)
    ended = 0
    for i, rollout in enumerate(stored):  # the newest rollout's slot, [T, N, ...]
        envs_next = np.stack([r[0] for r in returned[i * T : (i + 1) * T]]).astype(np.float32)
        np.testing.assert_array_equal(rollout["next_obs"].numpy(), envs_next, err_msg=f"rollout {i}")
        ended += int(np.stack([r[1] for r in returned[i * T : (i + 1) * T]]).sum())
    assert ended >= 2  # episodes ended inside rollouts, where next_obs is not the next obs
    if env_id == "Pendulum-v1":
        assert bool(torch.stack([r["truncated"] for r in stored]).any())
