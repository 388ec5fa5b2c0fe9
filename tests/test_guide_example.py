"""The contributor guide's worked change (CONTRIBUTING.md, "Example: a new PPO loss term") is the
whole change: its diff applies to a copy of the tree as it stands, touches the files the guide
names and no others, and the copy trains with the new term (the hand-written step stepping aside,
as the guide says) and passes the term's hand-computed test."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = re.compile(r"<!-- guide-example ppo-kl-penalty -->\n```diff\n(?P<diff>.*?)```\n<!-- /guide-example -->", re.S)
TOUCHED = ["heron/algos/ppo/config.py", "heron/algos/ppo/learn.py", "heron/algos/ppo/losses.py", "tests/test_ppo.py"]


def _diff() -> str:
    found = EXAMPLE.search((ROOT / "CONTRIBUTING.md").read_text())
    assert found, "CONTRIBUTING.md has no guide-example block for the PPO loss term"
    return found.group("diff")


def test_the_guide_example_is_small_and_names_its_files():
    diff = _diff()
    files = re.findall(r"^\+\+\+ b/(\S+)$", diff, re.M)
    assert sorted(files) == TOUCHED
    added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    removed = [line for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert len(added) <= 20 and len(removed) <= 3, (len(added), len(removed))


def test_the_guide_example_applies_and_trains(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git applies the guide's diff")
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "heron", tree / "heron", ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "test_ppo.py", tree / "tests" / "test_ppo.py")
    (tmp_path / "example.diff").write_text(_diff())
    applied = subprocess.run(
        ["git", "apply", "--verbose", str(tmp_path / "example.diff")], cwd=tree, capture_output=True, text=True
    )
    assert applied.returncode == 0, (
        "the guide's example no longer applies to the code: update the diff in CONTRIBUTING.md\n" + applied.stderr
    )

    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    test = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "tests/test_ppo.py",
            "-k",
            "kl_penalty",
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert test.returncode == 0 and "1 passed" in test.stdout, test.stdout + test.stderr

    run_dir = tmp_path / "run"
    argv = ["train", "ppo", "--env-id", "CartPole-v1", "--total-steps", "256", "--num-steps", "64"]
    argv += ["--num-envs", "2", "--kl-coef", "0.5", "--log-every", "128", "--run-dir", str(run_dir), "--seed", "1"]
    train = subprocess.run(
        [sys.executable, "-m", "heron", *argv], cwd=tree, env=env, capture_output=True, text=True, timeout=300
    )
    assert train.returncode == 0, train.stdout + train.stderr
    first = train.stdout.splitlines()[0]
    assert "autograd step" in first and "no losses/kl_penalty" in first, first  # the copy, with the guide's edit
    with open(run_dir / "metrics.csv") as f:
        kl = [float(row["value"]) for row in csv.DictReader(f) if row["metric"] == "losses/kl_penalty"]
    assert kl and all(v >= 0 for v in kl) and any(v > 0 for v in kl)
