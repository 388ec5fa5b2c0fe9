"""``heron eval RUN`` with its defaults repeats the evaluation the run made at its latest checkpoint
(the last row of ``eval.csv``), at every call, for every algorithm: the episodes start from the
same states, and a policy that samples while acting deterministically (a Dreamer's latent state)
draws from generators seeded by the episodes, not from torch's global stream."""

import csv
import json

import pytest

import heron
from heron.cli import main

RUNS = {
    "sac": dict(env_id="Pendulum-v1", total_steps=600, learning_starts=300, hidden_sizes=(32, 32)),
    "td3": dict(env_id="Pendulum-v1", total_steps=600, learning_starts=300, hidden_sizes=(32, 32)),
    "ppo": dict(env_id="CartPole-v1", total_steps=512),
    "dreamer_v2": dict(env_id="CartPole-v1", total_steps=200),
    "dreamer_v3": dict(env_id="Pendulum-v1", total_steps=200, max_episode_steps=60),
}


def _last_row(run):
    with open(run / "eval.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return rows[-1]


def _eval(capsys, run, *flags):
    capsys.readouterr()
    assert main(["eval", str(run), "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("algo", sorted(RUNS))
def test_heron_eval_repeats_the_runs_last_evaluation(algo, tmp_path, capsys):
    run = tmp_path / algo
    options = RUNS[algo]
    heron.train(
        algo,
        presets=["debug"],
        run_dir=str(run),
        eval_every=options["total_steps"],
        checkpoint_every=options["total_steps"],
        eval_episodes=3,
        eval_envs=2,  # episodes 0 and 1 together, then 2 alone
        eval_async="off",
        progress="none",
        torch_threads=1,
        **options,
    )
    row = _last_row(run)
    first = _eval(capsys, run)
    assert first["steps"] == int(row["step"]) and first["episodes"] == 3
    assert first["mean_return"] == float(row["mean_return"])
    assert first["std_return"] == float(row["std_return"])
    again = _eval(capsys, run)
    assert again["returns"] == first["returns"]
    # the episodes' draws do not depend on how the episodes are grouped
    alone = _eval(capsys, run, "--envs", "1")
    assert alone["returns"] == pytest.approx(first["returns"], rel=1e-5)
