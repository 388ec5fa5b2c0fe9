"""``heron tune``: a tiny study of SAC's debug preset on Pendulum in SQLite, first with two worker
processes, then continued by the same command with more trials, where the median pruner ends the
trials that evaluate below the earlier ones; the best config trains with ``heron train --config``."""

import sqlite3

import pytest
import yaml
from cli_helpers import cli_error

from heron import api
from heron.cli import main

pytest.importorskip("optuna")

FLAGS = [
    "--env-id",
    "Pendulum-v1",
    "--preset",
    "debug",
    "--total-steps",
    "800",
    "--learning-starts",
    "200",
    "--eval-every",
    "400",
    "--eval-episodes",
    "2",
    "--threads",
    "1",
]


def _space(tmp_path):
    path = tmp_path / "space.yaml"
    # the learning rates, gamma and the seed (the others at the preset's): the trials differ at step 400
    path.write_text(
        "learning_starts: null\nhidden_sizes: null\nbatch_size: null\ntau: null\n"
        "gamma: {choices: [0.9, 0.99]}\nseed: {int: [1, 1000]}\n"
    )
    return path


def _states(out):
    with sqlite3.connect(out / "study.db") as db:
        return dict(db.execute("select state, count(*) from trials group by state").fetchall())


def test_study_in_two_jobs_then_continued_with_pruning(tmp_path, capsys):
    out, space = tmp_path / "study", _space(tmp_path)
    argv = ["tune", "sac", *FLAGS, "--space", str(space), "--out", str(out), "--startup-trials", "2"]
    assert main([*argv, "--trials", "2", "--jobs", "2", "--pruner", "none"]) == 0
    text = capsys.readouterr().out
    assert "0/2 trials done; 2 job(s)" in text
    first = _states(out)
    assert first == {"COMPLETE": 2}
    trials = sorted(p.name for p in (out / "trials").iterdir())
    assert trials[:2] == ["trial_0000", "trial_0001"]

    # the same command with more trials continues the study: the finished trials stay, new ones are
    # pruned at step 400 when they evaluate below the median of the earlier ones there
    assert main([*argv, "--trials", "5"]) == 0
    text = capsys.readouterr().out
    assert "2/5 trials done; 1 job(s)" in text
    states = _states(out)
    assert states.get("COMPLETE", 0) + states.get("PRUNED", 0) == 5
    assert states.get("PRUNED", 0) >= 1, states
    pruned = [line for line in text.splitlines() if " pruned " in line]
    run = out / "trials" / f"trial_{int(pruned[0].split(']')[0].split()[-1]):04d}"
    assert [line.split(",")[0] for line in (run / "eval.csv").read_text().splitlines()[1:]] == ["400"]  # ended there

    best = yaml.safe_load((out / "best.yaml").read_text())
    assert best["algo"] == "sac" and "run_dir" not in best and best["torch_threads"] == 0
    assert "| trial | return | policy_lr | q_lr | gamma |" in (out / "top_trials.md").read_text()
    cfg = api.make_config("sac", config_file=str(out / "best.yaml"))  # what heron train --config reads
    assert cfg.total_steps == 800 and cfg.policy_lr == best["policy_lr"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["tune", "sac", "--trials", "0"], "--trials must be positive"),
        (["tune", "sac", "--trials", "2", "--jobs", "0"], "--jobs must be at least 1"),
        (["tune", "sca", "--trials", "2"], "unknown algorithm"),
        (["tune", "sac", "--trials", "2", "--polcy-lr", "1"], "unknown flag --polcy-lr (did you mean --policy-lr?)"),
    ],
)
def test_bad_input_is_one_line(capsys, argv, message):
    assert message in cli_error(capsys, argv)


def test_bad_search_space_is_one_line(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("policy_lr: {log: [0, 1]}\n")
    assert "log needs [low, high] with low < high and low > 0" in cli_error(
        capsys, ["tune", "sac", "--trials", "2", "--space", str(space), "--out", str(tmp_path / "s")]
    )
    space.write_text("not_an_option: {choices: [1, 2]}\n")
    assert "sac has no option 'not_an_option'" in cli_error(
        capsys, ["tune", "sac", "--trials", "2", "--space", str(space), "--out", str(tmp_path / "s")]
    )
