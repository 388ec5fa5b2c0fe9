"""Truncation bootstraps, termination does not (Stable-Baselines3's infinite-horizon test idea):
reward 1 forever, cut every 50 steps by a TimeLimit. The learned Q must approach
1 / (1 - gamma) = 10. Treating the cut as termination would pull it to about
1 / (1 - 0.9 * 49/50) = 8.5."""

import csv

import pytest
import toy_envs  # noqa: F401

import heron


def _last(run_dir, metric):
    with open(f"{run_dir}/metrics.csv") as f:
        rows = [float(r["value"]) for r in csv.DictReader(f) if r["metric"] == metric]
    return rows[-1]


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_truncation_bootstraps(algo, tmp_path):
    extra = dict(autotune=False, alpha=0.0) if algo == "sac" else {}
    heron.train(
        algo,
        env_id="heron-test/ConstantReward-v0",
        total_steps=3000,
        learning_starts=200,
        gamma=0.9,
        tau=0.05,
        batch_size=64,
        hidden_sizes=(32, 32),
        eval_every=0,
        eval_episodes=1,
        log_every=100,
        progress="none",
        run_dir=str(tmp_path / algo),
        **extra,
    )
    q = (_last(tmp_path / algo, "losses/qf1_values") + _last(tmp_path / algo, "losses/qf2_values")) / 2
    assert 9.4 < q < 10.6, q


def test_ppo_truncation_bootstraps(tmp_path):
    """PPO's value targets (GAE) must bootstrap from the final observation at the time limit."""
    import torch

    heron.train(
        "ppo",
        env_id="heron-test/ConstantReward-v0",
        total_steps=6000,
        num_envs=2,
        num_steps=100,
        gamma=0.9,
        learning_rate=3e-3,
        anneal_lr=False,
        hidden_sizes=(32,),
        eval_every=0,
        eval_episodes=1,
        progress="none",
        run_dir=str(tmp_path / "ppo"),
    )
    model = heron.load(tmp_path / "ppo").actor
    with torch.no_grad():
        obs = torch.rand(256, 2) * 2 - 1
        _, values, _ = model(obs[:, None], torch.zeros(256, 0), torch.zeros(256, 1, dtype=torch.bool))
    v = model.value_norm.denormalize(values).mean().item()
    assert 9.4 < v < 10.6, v
