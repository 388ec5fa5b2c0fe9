"""--eval-async: evaluations played in a worker process give what evaluations in the training
process give (eval.csv, the logs, best.pt, the final state); a checkpoint written with evaluations
unconcluded, or a stop while one is awaited, resumes exactly; a worker that dies or cannot set up
hands its evaluations back (saying why); an env that crashes in the worker ends the run as it would
in process; no worker outlives its run."""

import csv
import os
import subprocess
import sys
import time
import uuid

import pytest
import torch

from heron import registry
from heron.errors import HeronError
from heron.runtime import cores, evalworker
from heron.runtime.checkpoint import latest_checkpoint

# PPO (the algorithm whose evaluations cost most of a GPU run) on Pendulum; an evaluation and a
# checkpoint every 1000 steps, so that each checkpoint is written with its own step's evaluation in flight
ARGS = [
    "ppo",
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
    "1000",
    "--eval-episodes",
    "2",
    "--eval-envs",
    "2",
    "--hidden-sizes",
    "16",
    "--progress",
    "none",
    "--log-every",
    "200",
    "--obs-norm",
    "--torch-threads",
    "1",
]


def _heron(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "heron", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def _rows(path, sort=False):
    """The rows without their wall times; sorted where a row's place in the file may differ (an
    evaluation from the worker lands a few steps after its own)."""
    with open(path) as f:
        rows = [
            tuple(v for k, v in r.items() if k != "wall_time")
            for r in csv.DictReader(f)
            if r.get("metric") != "charts/SPS"
        ]
    return sorted(rows) if sort else rows


def _state(path):
    return torch.load(path, weights_only=False)


def _workers_of(tag):
    """Live processes whose environment carries ``tag`` (a run's evaluation worker inherits it)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if tag.encode() in f.read() and int(pid) != os.getpid():
                    found.append(pid)
        except OSError:
            pass
    return found


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    run = tmp_path_factory.mktemp("eval_in_process") / "run"
    done = _heron("train", *ARGS, "--eval-async", "off", "--run-dir", str(run))
    assert done.returncode == 0, done.stderr
    return run


def test_a_checkpoint_with_its_evaluation_in_flight_resumes_exactly(in_process, tmp_path):
    run, tag = tmp_path / "run", f"HERON_TEST_TAG={uuid.uuid4().hex}"
    crashed = _heron(
        "train",
        *ARGS,
        "--eval-async",
        "on",
        "--run-dir",
        str(run),
        env={"HERON_CRASH_AFTER_CHECKPOINT": "2000", tag.split("=")[0]: tag.split("=")[1]},
    )
    assert crashed.returncode == 17, crashed.stderr  # died right after the step-2000 checkpoint
    assert _state(latest_checkpoint(run / "checkpoints"))["eval_pending"][0]["step"] == 2000
    deadline = time.monotonic() + 10
    while _workers_of(tag) and time.monotonic() < deadline:  # the worker ends with its parent
        time.sleep(0.1)
    assert not _workers_of(tag)
    # as if the evaluation had landed before the end: the resumed run must not log it twice
    with open(run / "eval.csv", "a") as f:
        f.write("2000,-1.0,0.0,2,0.0\n")
    with open(run / "metrics.csv", "a") as f:
        f.write("2000,0.0,eval/mean_return,-1.0\n")
    resumed = _heron("train", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr
    a, b = _state(latest_checkpoint(in_process / "checkpoints")), _state(latest_checkpoint(run / "checkpoints"))
    assert a["step"] == b["step"] == 3000
    for name, tensor in a["actor"].items():
        assert torch.equal(tensor, b["actor"][name]), name
    assert _rows(in_process / "eval.csv") == _rows(run / "eval.csv")
    assert len(_rows(run / "eval.csv")) == 3
    assert _rows(in_process / "metrics.csv", sort=True) == _rows(run / "metrics.csv", sort=True)
    best_a, best_b = _state(in_process / "checkpoints" / "best.pt"), _state(run / "checkpoints" / "best.pt")
    assert best_a["step"] == best_b["step"] and best_a["best_eval"] == best_b["best_eval"]
    for name, tensor in best_a["actor"].items():
        assert torch.equal(tensor, best_b["actor"][name]), name


@pytest.mark.parametrize("held", [2, 3], ids=["mid-run", "last-step"])
def test_a_stop_while_an_evaluation_is_in_flight_keeps_it_for_the_resumed_run(held, in_process, tmp_path):
    """SIGTERM to the whole process group (a preempted job) while the worker plays the evaluation of
    step 2000 (or 3000, the last step) and will not finish it (held): the run stops with a checkpoint
    that keeps that evaluation, its worker goes with it, and the resumed run plays it (at the last
    step: a resume of a run at its step target, which plays them and ends) and ends as the run
    without a stop."""
    import signal

    run, marker, tag = tmp_path / "run", tmp_path / "marker", uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, "-m", "heron", "train", *ARGS, "--eval-async", "on", "--run-dir", str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={
            **os.environ,
            "HERON_FAULT": f"eval_worker@{held}:hold",
            "HERON_FAULT_MARKER": str(marker),
            "HERON_TEST_TAG": tag,
        },
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), f"the worker never reached the evaluation of step {held}000"
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().count("\n") == 0
    assert _state(latest_checkpoint(run / "checkpoints"))["eval_pending"][0]["step"] == held * 1000
    assert not _workers_of(f"HERON_TEST_TAG={tag}")
    resumed = _heron("train", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr
    assert _rows(in_process / "eval.csv") == _rows(run / "eval.csv")
    a, b = _state(latest_checkpoint(in_process / "checkpoints")), _state(latest_checkpoint(run / "checkpoints"))
    for name, tensor in a["actor"].items():
        assert torch.equal(tensor, b["actor"][name]), name


def test_a_worker_that_dies_hands_its_evaluations_back(in_process, tmp_path):
    run = tmp_path / "run"
    done = _heron(
        "train", *ARGS, "--eval-async", "on", "--run-dir", str(run), env={"HERON_FAULT": "eval_worker@2:exit"}
    )
    assert done.returncode == 0, done.stderr
    assert "evaluation worker ended (exit code 17); evaluations run in the training process" in done.stderr
    assert _rows(in_process / "eval.csv") == _rows(run / "eval.csv")


def test_an_env_that_crashes_in_the_worker_ends_the_run_with_a_checkpoint(tmp_path):
    run = tmp_path / "run"
    args = [*ARGS[:2], "fault_envs:Faulty", *ARGS[3:]]
    crashed = _heron(
        "train",
        *args,
        "--eval-async",
        "on",
        "--run-dir",
        str(run),
        env={
            "HERON_TEST_FAULT": "raise@20",
            "HERON_TEST_FAULT_IN": "eval_worker",
            "PYTHONPATH": os.path.dirname(__file__),
        },
    )
    assert crashed.returncode == 1, crashed.stderr
    last = crashed.stderr.strip().splitlines()[-1]
    assert "crashed in step (evaluation): RuntimeError: simulator exploded" in last
    assert "Traceback" not in crashed.stderr
    assert _state(latest_checkpoint(run / "checkpoints"))["step"] >= 1000


@pytest.mark.parametrize(
    "args,why",
    [
        (["dreamer_v2", "--preset", "debug"], "dreamer_v2's evaluation acts on the training device"),
        (["sac", "--precision", "bf16-mixed"], "the worker's policy is float32"),
    ],
)
def test_eval_async_on_is_refused_where_it_cannot_apply(args, why, tmp_path):
    out = _heron("train", *args, "--eval-async", "on", "--total-steps", "10", "--run-dir", str(tmp_path / "run"))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and why in out.stderr and "--eval-async on cannot apply" in out.stderr
    assert not (tmp_path / "run").exists()


def test_auto_takes_a_worker_for_a_gpu_run_with_a_spare_core(monkeypatch):
    from heron.algos.ppo.config import Config

    cfg = Config(eval_async="auto")
    monkeypatch.setattr(cores, "others_now", lambda: None)  # no other load
    for cpus, threads, vector_mode, gpu, expected in (
        (2, 2, "sync", True, False),
        (2, 1, "sync", True, True),
        (16, 4, "sync", True, True),
        (4, 1, "async", True, False),
        (16, 4, "sync", False, False),
    ):
        monkeypatch.setattr(cores, "usable_cpus", lambda n=cpus: list(range(n)))
        cfg.vector_mode, cfg.num_envs = vector_mode, 3
        assert evalworker.wanted(registry.get("ppo"), cfg, False, threads, gpu) is expected, (
            cpus,
            threads,
            vector_mode,
            gpu,
        )
        cfg.eval_async = "on"  # asked for: wherever it applies
        assert evalworker.wanted(registry.get("ppo"), cfg, False, threads, gpu)
        cfg.eval_async = "auto"
    assert not evalworker.wanted(registry.get("ppo"), cfg, True, 1, True)  # torchrun: the ranks share each evaluation
    assert not evalworker.wanted(registry.get("dreamer_v2"), cfg, False, 1, True)
    cfg.eval_every = 0
    assert not evalworker.wanted(registry.get("ppo"), cfg, False, 1, True)
    cfg.eval_every = cfg.total_steps  # only the final evaluation: nothing to overlap
    assert not evalworker.wanted(registry.get("ppo"), cfg, False, 1, True)
    cfg.eval_every, cfg.track = 10_000, True  # W&B: steps in order only
    assert not evalworker.wanted(registry.get("ppo"), cfg, False, 1, True)
    cfg.eval_async = "on"
    with pytest.raises(HeronError, match="W&B takes a run's steps in order"):
        evalworker.check(registry.get("ppo"), cfg, False)


def test_a_worker_that_cannot_make_the_env_says_why_and_the_run_evaluates_itself(tmp_path, capsys):
    """An env registered in this process under an entry point no other process can import (a lambda,
    as in a notebook): the worker cannot set up, says why once, and the run evaluates in process."""
    import gymnasium as gym

    import heron

    gym.register("heron-test/OnlyHere-v0", entry_point=lambda: gym.make("Pendulum-v1").unwrapped, max_episode_steps=50)
    try:
        heron.train(
            "ppo",
            env_id="heron-test/OnlyHere-v0",
            total_steps=600,
            num_envs=1,
            num_steps=200,
            eval_every=200,
            eval_episodes=1,
            eval_async="on",
            torch_threads=1,
            progress="none",
            run_dir=str(tmp_path / "run"),
        )
    finally:
        gym.registry.pop("heron-test/OnlyHere-v0", None)
    err = capsys.readouterr().err
    assert err.count("the evaluation worker failed: setting up:") == 1
    assert "unknown environment id 'heron-test/OnlyHere-v0'" in err
    assert [r[0] for r in _rows(tmp_path / "run" / "eval.csv")] == ["200", "400", "600"]


def test_resume_drops_only_the_rows_of_the_evaluations_it_plays_again(tmp_path):
    from heron.runtime.logger import METRICS_HEADER, write_csv
    from heron.runtime.rundir import EVAL_HEADER, drop_eval_rows

    write_csv(tmp_path / "eval.csv", EVAL_HEADER, [[1000, -5, 1, 2, 0], [2000, -4, 1, 2, 0], [2500, -3, 1, 2, 0]])
    write_csv(
        tmp_path / "metrics.csv",
        METRICS_HEADER,
        [[2000, 0, "losses/value_loss", 1.0], [2000, 0, "eval/mean_return", -4.0], [2500, 0, "eval/mean_return", -3.0]],
    )
    drop_eval_rows(tmp_path, {2000})  # the final evaluation's row (2500) stays: it is in eval.csv only
    assert [r[0] for r in _rows(tmp_path / "eval.csv")] == ["1000", "2500"]
    assert _rows(tmp_path / "metrics.csv") == [
        ("2000", "losses/value_loss", "1.0"),
        ("2500", "eval/mean_return", "-3.0"),
    ]
