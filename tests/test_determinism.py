"""Same seed -> bitwise-identical parameters; a run killed right after a checkpoint and resumed
ends bitwise where the uninterrupted run ends (CPU). The thread count is fixed: float results
depend on it, and the automatic count follows the machine's load (heron.runtime.cores)."""

import os
import subprocess
import sys

import pytest
import torch

import heron
from heron.runtime.checkpoint import latest_checkpoint

# Pendulum-v1 episodes last 200 steps; checkpoints every 1000 fall on episode boundaries.
ARGS = [
    "--env-id",
    "Pendulum-v1",
    "--total-steps",
    "2000",
    "--learning-starts",
    "500",
    "--checkpoint-every",
    "1000",
    "--eval-every",
    "1500",
    "--eval-episodes",
    "1",
    "--batch-size",
    "64",
    "--hidden-sizes",
    "32",
    "32",
    "--progress",
    "none",
    "--log-every",
    "500",
    "--torch-threads",
    "1",
    "--eval-async",
    "off",
]  # rows in step order


def _state(run_dir):
    return torch.load(latest_checkpoint(f"{run_dir}/checkpoints"), weights_only=True)


def _assert_same(a, b, keys):
    for key in keys:
        for name, tensor in a[key].items():
            assert torch.equal(tensor, b[key][name]), f"{key}.{name} differs"


def _heron(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "heron", *args], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )


@pytest.mark.parametrize(
    "algo,extra",
    [
        ("sac", []),
        ("td3", ["--precision", "bf16-mixed"]),
        ("td3", ["--n-step", "3"]),
        ("sac", ["--recurrent", "gru", "--sequence-length", "4", "--rnn-hidden-size", "16"]),
        ("sac", ["--env-id", "heron/TorchPendulum-v1", "--vector-mode", "native", "--num-envs", "4", "--n-step", "2"]),
        # CrossQ: batch renormalisation's statistics and warm-up counters (700 forwards: it ends after the resume)
        ("sac", ["--preset", "crossq", "--critic-hidden-sizes", "64", "64", "--bn-warmup", "700"]),
    ],
)
def test_resume_after_kill_equals_uninterrupted(algo, extra, tmp_path):
    full, killed = tmp_path / "full", tmp_path / "killed"
    assert _heron("train", algo, *ARGS, *extra, "--run-dir", str(full)).returncode == 0
    crashed = _heron(
        "train", algo, *ARGS, *extra, "--run-dir", str(killed), env={"HERON_CRASH_AFTER_CHECKPOINT": "1000"}
    )
    assert crashed.returncode == 17  # the process died right after writing the step-1000 checkpoint
    assert _state(killed)["step"] == 1000
    resumed = _heron("train", "--resume", str(killed))
    assert resumed.returncode == 0, resumed.stderr
    a, b = _state(full), _state(killed)
    assert a["step"] == b["step"] == 2000
    keys = ["actor", "critic", "critic_target", "actor_opt", "q_opt"]
    _assert_same(a, b, [k for k in keys if not k.endswith("_opt") and k in a])  # CrossQ has no critic_target
    assert a["n_updates"] == b["n_updates"]
    if algo == "sac":
        assert torch.equal(a["log_alpha"], b["log_alpha"])
    # the logs tell the same story: same losses, returns and evaluations at the same steps, once
    assert _rows(full / "metrics.csv", skip=("charts/SPS",)) == _rows(killed / "metrics.csv", skip=("charts/SPS",))
    assert _rows(full / "eval.csv") == _rows(killed / "eval.csv")


def _rows(path, skip=()):
    import csv

    with open(path) as f:
        rows = list(csv.DictReader(f))
    return [tuple(v for k, v in r.items() if k != "wall_time") for r in rows if r.get("metric") not in skip]


def test_sigint_writes_a_checkpoint_and_resume_continues(tmp_path):
    import signal
    import time

    run = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "heron",
        "train",
        "td3",
        "--env-id",
        "Pendulum-v1",
        "--total-steps",
        "100000",
        "--learning-starts",
        "100000",
        "--eval-every",
        "0",
        "--eval-episodes",
        "1",
        "--progress",
        "none",
        "--log-every",
        "200",
        "--run-dir",
        str(run),
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and "charts/episodic_return" not in _read(run / "metrics.csv"):
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().count("\n") == 0 and "checkpoint saved" in err and "Traceback" not in err
    step = _state(run)["step"]
    assert 0 < step < 100000
    resumed = _heron("train", "--resume", str(run), "--total-steps", str(step + 300))
    assert resumed.returncode == 0, resumed.stderr
    assert _state(run)["step"] == step + 300


def _read(path):
    return path.read_text() if path.exists() else ""


def test_same_seed_is_bitwise_identical_and_other_seed_differs(tmp_path, tiny):
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        heron.train("sac", seed=seed, run_dir=str(tmp_path / name), **{**tiny, "torch_threads": 1})
    a, b, c = (_state(tmp_path / n) for n in "abc")
    _assert_same(a, b, ["actor", "critic"])
    assert not torch.equal(a["actor"]["net.0.weight"], c["actor"]["net.0.weight"])


def test_resume_to_a_new_step_target(tmp_path, tiny):
    heron.train("td3", run_dir=str(tmp_path / "r"), **tiny)
    result = heron.resume(tmp_path / "r", total_steps=900)
    assert result["step"] == 900 and _state(tmp_path / "r")["step"] == 900
    # the metrics file was appended to, not restarted
    text = (tmp_path / "r" / "metrics.csv").read_text()
    assert text.count("step,wall_time,metric,value") == 1


# PPO: one env, 200-step rollouts; Pendulum's 200-step episodes end exactly at every iteration, so
# checkpoints every 1000 steps fall on episode boundaries.
PPO_ARGS = [
    "--env-id",
    "Pendulum-v1",
    "--total-steps",
    "3000",
    "--num-envs",
    "1",
    "--num-steps",
    "200",
    "--num-minibatches",
    "4",
    "--update-epochs",
    "2",
    "--checkpoint-every",
    "1000",
    "--eval-every",
    "1500",
    "--eval-episodes",
    "1",
    "--hidden-sizes",
    "16",
    "--progress",
    "none",
    "--log-every",
    "200",
    "--obs-norm",
    "--reward-scale",
    "--value-norm",
    "--torch-threads",
    "1",
    "--eval-async",
    "off",
]


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--mode", "off-policy", "--replay-rollouts", "3"],
        ["--recurrent", "lstm", "--rnn-hidden-size", "8", "--num-minibatches", "1"],
    ],
)
def test_ppo_resume_after_kill_equals_uninterrupted(extra, tmp_path):
    full, killed = tmp_path / "full", tmp_path / "killed"
    assert _heron("train", "ppo", *PPO_ARGS, *extra, "--run-dir", str(full)).returncode == 0
    crashed = _heron(
        "train", "ppo", *PPO_ARGS, *extra, "--run-dir", str(killed), env={"HERON_CRASH_AFTER_CHECKPOINT": "2000"}
    )
    assert crashed.returncode == 17
    resumed = _heron("train", "--resume", str(killed))
    assert resumed.returncode == 0, resumed.stderr
    a, b = _state(full), _state(killed)
    assert a["step"] == b["step"] == 3000 and a["n_updates"] == b["n_updates"] == 15
    _assert_same(a, b, ["actor"])  # weights and the observation / value normalizer statistics
    for k in ("ret", "mean", "var", "count"):
        assert torch.equal(a["scaler"][k], b["scaler"][k])  # the reward scale continues exactly
    assert _rows(full / "metrics.csv", skip=("charts/SPS",)) == _rows(killed / "metrics.csv", skip=("charts/SPS",))
    assert _rows(full / "eval.csv") == _rows(killed / "eval.csv")


# DreamerV2: the debug model on Pendulum (continuous actions); 200-step episodes end on the
# checkpoints. The replay buffer (episodes, staging), the RSSM/actor/critic, the target critic, the
# three optimizers and the random streams all come back, so the resumed run ends bitwise equal.
DREAMER_ARGS = [
    "--preset",
    "debug",
    "--env-id",
    "Pendulum-v1",
    "--total-steps",
    "600",
    "--learning-starts",
    "100",
    "--train-every",
    "10",
    "--checkpoint-every",
    "200",
    "--eval-every",
    "300",
    "--log-every",
    "50",
    "--critic-target-update-freq",
    "3",
    "--progress",
    "none",
    "--torch-threads",
    "1",
]


# DreamerV3 adds the return normalisation's moving percentiles and the slow critic's moving average
# (in "agent") and its replay-ratio schedule (n_updates)
DREAMER_V3_ARGS = DREAMER_ARGS[:8] + ["--replay-ratio", "0.1", *DREAMER_ARGS[10:16], *DREAMER_ARGS[18:]]


@pytest.mark.parametrize(
    "algo, extra",
    [
        ("dreamer_v2", ["--buffer-type", "episode"]),
        ("dreamer_v2", ["--buffer-type", "sequential", "--prioritize-ends"]),
        ("dreamer_v3", ["--buffer-type", "sequential"]),
    ],
)
def test_dreamer_resume_after_kill_equals_uninterrupted(algo, extra, tmp_path):
    full, killed = tmp_path / "full", tmp_path / "killed"
    args = DREAMER_ARGS if algo == "dreamer_v2" else DREAMER_V3_ARGS
    done = _heron("train", algo, *args, *extra, "--run-dir", str(full))
    assert done.returncode == 0, done.stderr
    crashed = _heron(
        "train", algo, *args, *extra, "--run-dir", str(killed), env={"HERON_CRASH_AFTER_CHECKPOINT": "400"}
    )
    assert crashed.returncode == 17, crashed.stderr
    resumed = _heron("train", "--resume", str(killed))
    assert resumed.returncode == 0, resumed.stderr
    a, b = _state(full), _state(killed)
    assert a["step"] == b["step"] == 600 and a["n_updates"] == b["n_updates"] > 0
    _assert_same(a, b, ["agent", "actor"])  # world model, actor, critic and target critic (V3: and moments)
    assert _rows(full / "metrics.csv", skip=("charts/SPS",)) == _rows(killed / "metrics.csv", skip=("charts/SPS",))
    assert _rows(full / "eval.csv") == _rows(killed / "eval.csv")


def test_evaluations_do_not_perturb_training(tmp_path):
    """DreamerV2's greedy policy still samples its latents; evaluating every 100 steps must leave
    the run's weights as they are without evaluations (the eval runs on a forked torch RNG)."""
    for name, every in (("with", 100), ("without", 0)):
        heron.train(
            "dreamer_v2",
            presets=["debug"],
            env_id="CartPole-v1",
            eval_every=every,
            eval_episodes=1,
            torch_threads=1,
            progress="none",
            run_dir=str(tmp_path / name),
        )
    a, b = _state(tmp_path / "with"), _state(tmp_path / "without")
    assert (tmp_path / "with" / "eval.csv").read_text().count("\n") >= 4  # header, 100, 200, 300
    _assert_same(a, b, ["agent"])
