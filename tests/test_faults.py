"""Faults a run survives (docs/guide/runs.md, "Faults and what heron does"): each one injected for real
(a diverging update, a second process, kill -9 inside a write, a full disk, a crashing env, a
foreign checkpoint, Ctrl-C in a video write, SIGTERM in an evaluation, SIGKILL at a random moment)."""

import csv
import hashlib
import os
import pickle
import random
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch
import toy_envs  # registers the heron-test/ ids at import, as the suite's other modules do

from heron.cli import main
from heron.runtime import faults
from heron.runtime.checkpoint import latest_checkpoint, step_checkpoints

TESTS = Path(__file__).parent
TINY = [
    "--total-steps",
    "1200",
    "--learning-starts",
    "200",
    "--batch-size",
    "32",
    "--buffer-size",
    "2000",
    "--hidden-sizes",
    "32",
    "32",
    "--eval-every",
    "0",
    "--eval-episodes",
    "1",
    "--log-every",
    "100",
    "--progress",
    "none",
    "--checkpoint-every",
    "400",
]


@pytest.fixture(autouse=True)
def _fresh_fault_counts(monkeypatch):
    monkeypatch.setattr(faults, "_counts", {})
    for var in ("HERON_FAULT", "HERON_FAULT_MARKER", "HERON_TEST_FAULT", "HERON_TEST_FAULT_ONCE", "HERON_TEST_OBS_DIM"):
        monkeypatch.delenv(var, raising=False)


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


_STARTED: list = []


@pytest.fixture(autouse=True)
def _no_process_left():
    """A test that fails (a timeout, an assertion) while its training runs still ends that process."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _popen(args, env=None, cwd=TESTS):
    environ = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    # SIGINT at its default in the child, as from a terminal: a suite started in the background
    # (`bash .ci/run &`) passes SIGINT on ignored, and Python then installs no KeyboardInterrupt.
    proc = subprocess.Popen(
        [sys.executable, "-m", "heron", *args],
        cwd=cwd,
        env=environ,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _STARTED.append(proc)
    return proc


def _wait_for(path: Path, proc, timeout=90.0):
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def _tree(run: Path) -> dict:
    return {
        str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def _all_finite(state) -> bool:
    return faults.nonfinite_tensor(state) is None


def _metric_rows(run: Path) -> list[list[str]]:
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["step", "wall_time", "metric", "value"]
    for row in rows[1:]:
        assert len(row) == 4 and row[0].isdigit(), f"torn row {row}"
        float(row[3])
    return rows[1:]


# -- 1. divergence ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "algo,flags",
    [
        ("sac", ["--q-lr", "1e12", "--policy-lr", "1e12"]),  # absurd learning rates: diverge at the first updates
        ("sac", ["--env-id", "fault_envs:Faulty"]),  # an infinite reward from the env at step 700
        ("ppo", ["--env-id", "fault_envs:Faulty", "--num-envs", "1", "--num-steps", "64", "--num-minibatches", "2"]),
    ],
)
def test_divergence_stops_at_once_with_exit_3_and_writes_nothing_non_finite(algo, flags, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.setenv("HERON_TEST_FAULT", "inf@700")
    base = [
        "--env-id",
        "Pendulum-v1",
        "--total-steps",
        "3000",
        "--checkpoint-every",
        "256",
        "--eval-every",
        "0",
        "--eval-episodes",
        "1",
        "--log-every",
        "64",
        "--progress",
        "none",
        "--hidden-sizes",
        "32",
        "32",
    ]
    if algo == "sac":
        base += ["--learning-starts", "200", "--batch-size", "32"]
    assert main(["train", algo, *base, *flags, "--run-dir", str(run)]) == 3
    err = _error(capsys)
    assert f"{algo} diverged: losses/" in err and "stopped before writing anything non-finite" in err
    first_bad = int(err.split(" at env step ")[1].split()[0])
    steps = [s for s, _ in step_checkpoints(run / "checkpoints")]
    if "--q-lr" in flags:
        assert first_bad == 202 and not steps and "no checkpoint was written" in err
    else:
        assert 700 <= first_bad < 800 and steps == [256, 512] and "the latest checkpoint is step 512" in err
    for _, path in step_checkpoints(run / "checkpoints"):
        assert _all_finite(torch.load(path, weights_only=True)), f"{path} holds NaN/inf"
    losses = [float(r[3]) for r in _metric_rows(run) if r[2].startswith("losses/")]  # (returns may be inf)
    assert all(v == v and abs(v) != float("inf") for v in losses)


# -- 2. one process per run directory ---------------------------------------------------------------
def test_a_live_run_directory_is_refused_and_a_killed_ones_lock_is_not(tmp_path, capsys):
    run = tmp_path / "run"
    first = _popen(
        [
            "train",
            "td3",
            "--env-id",
            "Pendulum-v1",
            "--total-steps",
            "1000000",
            "--learning-starts",
            "1000000",
            "--checkpoint-every",
            "500",
            "--progress",
            "none",
            "--run-dir",
            str(run),
        ]
    )
    try:
        deadline = time.time() + 60
        while not step_checkpoints(run / "checkpoints"):
            assert time.time() < deadline and first.poll() is None
            time.sleep(0.2)
        for argv in (
            ["train", "--resume", str(run)],
            ["train", "td3", "--env-id", "Pendulum-v1", "--run-dir", str(run)],
        ):
            assert main(argv) == 2
            assert f"is in use by process {first.pid}" in _error(capsys)
        assert first.poll() is None  # the live run trains on
    finally:
        first.kill()  # kill -9: its lock goes with it
        first.communicate()
    step = torch.load(latest_checkpoint(run / "checkpoints"), weights_only=True)["step"]
    assert main(["train", "--resume", str(run), "--total-steps", str(step + 100)]) == 0


# -- 3. kill -9 inside a write ----------------------------------------------------------------------
@pytest.mark.parametrize("point", ["checkpoint-state@2", "checkpoint-buffer@2", "csv@9"])
def test_kill_inside_a_write_resumes_from_the_previous_complete_checkpoint(point, tmp_path):
    run, marker = tmp_path / "run", tmp_path / "paused"
    args = ["train", "sac", "--env-id", "Pendulum-v1", *TINY, "--run-dir", str(run)]
    proc = _popen(args, env={"HERON_FAULT": point, "HERON_FAULT_MARKER": str(marker)})
    _wait_for(marker, proc)
    proc.kill()  # SIGKILL, with the write half-way
    proc.communicate()
    before = [s for s, _ in step_checkpoints(run / "checkpoints")]
    if point.startswith("checkpoint"):
        assert before == [400]  # the second checkpoint (800) never landed
    else:
        assert (run / "metrics.csv").read_text().rstrip().endswith("torn")
        # and a kill while the resume rewrites config.yaml leaves the previous one
        config = (run / "config.yaml").read_text()
        proc = _popen(
            ["train", "--resume", str(run)], env={"HERON_FAULT": "config", "HERON_FAULT_MARKER": f"{marker}2"}
        )
        _wait_for(Path(f"{marker}2"), proc)
        proc.kill()
        proc.communicate()
        assert (run / "config.yaml").read_text() == config
    assert main(["train", "--resume", str(run)]) == 0
    names = sorted(p.name for p in (run / "checkpoints").iterdir() if p.name != "best.pt")
    assert names == ["step_000000400.pt", "step_000000800.pt", "step_000001200.buffer.pt", "step_000001200.pt"]
    rows = _metric_rows(run)  # no torn row, and each metric logged once per step
    keys = [(r[0], r[2]) for r in rows if r[2] != "charts/SPS"]
    assert len(keys) == len(set(keys))
    assert sorted(int(s) for s, m in keys if m == "losses/qf_loss") == list(range(300, 1201, 100))


# -- 4. disk full -----------------------------------------------------------------------------------
@pytest.mark.parametrize("point", ["checkpoint-state@2", "checkpoint-buffer@2", "log-flush"])
def test_disk_full_is_one_line_and_keeps_the_previous_checkpoint(point, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.setenv("HERON_FAULT", f"{point}:enospc")
    # checkpoints far apart: each one flushes the log and postpones the timed flush (2 s), and on a fast
    # machine 1,000 of these steps take less than that
    longer = ["--total-steps", "20000", "--checkpoint-every", "10000"] if point == "log-flush" else []
    assert main(["train", "sac", "--env-id", "Pendulum-v1", *TINY, *longer, "--run-dir", str(run)]) == 1
    err = _error(capsys)
    assert "No space left on device" in err and f"heron train --resume {run}" in err
    ckpts = run / "checkpoints"
    latest = latest_checkpoint(ckpts)
    if point == "log-flush":  # the metrics could not be flushed: whichever checkpoints exist are whole
        assert "metrics.csv" in err
        assert all(p.name.startswith("step_") for p in ckpts.iterdir()) if ckpts.exists() else True
        if latest is None:
            return
    else:
        assert sorted(p.name for p in ckpts.iterdir()) == ["step_000000400.buffer.pt", "step_000000400.pt"]
    step = torch.load(latest, weights_only=True)["step"]
    assert f"the latest checkpoint is step {step} " in err


# -- 5. a crashing env ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "algo,kind,mode,last,end",
    [
        ("td3", "raise", "sync", 536, 1200),
        ("td3", "exit", "async", 536, 1200),
        # mid-rollout: the end of the last iteration (512), with the half-overwritten replay slot left out
        ("ppo", "raise", "sync", 512, 1216),
    ],
)
def test_env_crash_checkpoints_the_last_complete_step_and_resume_continues(
    algo, kind, mode, last, end, tmp_path, monkeypatch
):
    run = tmp_path / "run"
    env = {"HERON_TEST_FAULT": f"{kind}@537", "HERON_TEST_FAULT_ONCE": str(tmp_path / "crashed")}
    flags = (
        TINY
        if algo == "td3"
        else [
            *TINY[:2],
            "--num-envs",
            "1",
            "--num-steps",
            "64",
            "--mode",
            "off-policy",
            "--replay-rollouts",
            "3",
            "--hidden-sizes",
            "16",
            "--progress",
            "none",
            "--eval-every",
            "0",
            "--eval-episodes",
            "1",
            "--checkpoint-every",
            "0",
        ]
    )
    args = ["train", algo, "--env-id", "fault_envs:Faulty", *flags, "--vector-mode", mode, "--run-dir", str(run)]
    proc = _popen(args, env=env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("heron: error: env fault_envs:Faulty crashed in step") and "Traceback" not in err
    if kind == "raise":
        assert "RuntimeError: simulator exploded at step 537" in line
    assert f"checkpoint saved at step {last}" in line and f"heron train --resume {run}" in line
    saved = torch.load(latest_checkpoint(run / "checkpoints"), weights_only=True)
    assert saved["step"] == last
    if algo == "ppo":  # the iteration count, scaler and replay of the end of iteration 8, not mid-rollout
        assert saved["n_updates"] == 8
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["train", "--resume", str(run)]) == 0
    assert torch.load(latest_checkpoint(run / "checkpoints"), weights_only=True)["step"] == end


# -- 6. foreign and mismatched checkpoints ----------------------------------------------------------
def test_foreign_mismatched_and_malicious_checkpoints_are_refused_and_nothing_changes(tmp_path, capsys, monkeypatch):
    sac, td3 = tmp_path / "sac", tmp_path / "td3"
    flags = ["--env-id", "fault_envs:Faulty", *TINY[:-2], "--total-steps", "400"]
    assert main(["train", "sac", *flags, "--run-dir", str(sac)]) == 0
    assert main(["train", "td3", *flags, "--run-dir", str(td3)]) == 0
    capsys.readouterr()
    foreign = sac / "checkpoints" / "step_000000500.pt"  # another algorithm's checkpoint, newest in this run
    foreign.write_bytes((td3 / "checkpoints" / "step_000000400.pt").read_bytes())
    tree = _tree(sac)
    assert main(["train", "--resume", str(sac), "--total-steps", "800"]) == 2
    assert "is a td3 checkpoint, not sac's" in _error(capsys)
    assert main(["eval", str(sac), "--episodes", "1"]) == 2
    assert "is a td3 checkpoint, not sac's" in _error(capsys)
    assert _tree(sac) == tree
    foreign.unlink()

    monkeypatch.setenv("HERON_TEST_OBS_DIM", "4")  # the user's env changed since the run was trained
    tree = _tree(sac)
    for argv in (["train", "--resume", str(sac), "--total-steps", "800"], ["eval", str(sac), "--episodes", "1"]):
        assert main(argv) == 2
        assert "was trained on other spaces than the env gives now (obs_shape: [3] saved, [4] now)" in _error(capsys)
    assert _tree(sac) == tree
    monkeypatch.delenv("HERON_TEST_OBS_DIM")

    class Exploit:  # unpickling this would run code
        def __reduce__(self):
            return (open, (str(tmp_path / "pwned"), "w"))

    latest = latest_checkpoint(sac / "checkpoints")
    good = latest.read_bytes()
    for bad in (pickle.dumps({"actor": Exploit(), "step": 400}), good[: len(good) // 3]):
        latest.write_bytes(bad)
        tree = _tree(sac)
        for argv in (["train", "--resume", str(sac), "--total-steps", "800"], ["eval", str(sac), "--episodes", "1"]):
            assert main(argv) == 2
            assert "corrupt or unreadable checkpoint" in _error(capsys)
        assert _tree(sac) == tree and not (tmp_path / "pwned").exists()
    latest.write_bytes(good)
    assert main(["train", "--resume", str(sac), "--total-steps", "600"]) == 0


# -- 7. Ctrl-C while a video is written -------------------------------------------------------------
def test_ctrl_c_during_eval_video_leaves_no_mp4_under_the_final_name(tmp_path, capsys):
    run, marker = tmp_path / "run", tmp_path / "paused"
    assert (
        main(["train", "sac", "--env-id", "Pendulum-v1", *TINY[:-2], "--total-steps", "300", "--run-dir", str(run)])
        == 0
    )
    proc = _popen(
        ["eval", str(run), "--episodes", "1", "--video"],
        env={"HERON_FAULT": "video", "HERON_FAULT_MARKER": str(marker)},
    )
    _wait_for(marker, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert not list((run / "videos").iterdir())  # neither a half-written mp4 nor its temporary file


# -- what a stop request or a SIGKILL leaves -------------------------------------------------------
def test_sigterm_in_the_final_evaluation_exits_within_5_s_with_the_final_checkpoint(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "evaluating"
    proc = _popen(
        [
            "train",
            "sac",
            "--env-id",
            "Pendulum-v1",
            *TINY[:-2],
            "--total-steps",
            "300",
            "--eval-episodes",
            "200",
            "--run-dir",
            str(run),
        ],
        env={"HERON_FAULT": "eval:hold", "HERON_FAULT_MARKER": str(marker)},
    )
    # held at the start of the final evaluation until the signal lands: its 200 episodes can end
    # within any fixed wait on a fast machine
    _wait_for(marker, proc)
    proc.send_signal(signal.SIGTERM)
    t0 = time.time()
    out, err = proc.communicate(timeout=30)
    assert time.time() - t0 < 5.0 and proc.returncode == 130, err
    assert "stopped during the final evaluation; the final checkpoint (step 300) is saved" in err
    assert torch.load(latest_checkpoint(run / "checkpoints"), weights_only=True)["step"] == 300
    assert not (run / "eval.csv").exists()  # a cut evaluation is not reported as one


def test_sigkill_at_a_random_moment_leaves_recent_logs_and_a_checkpoint_to_resume_from(tmp_path):
    run = tmp_path / "run"
    proc = _popen(
        [
            "train",
            "sac",
            "--env-id",
            "Pendulum-v1",
            "--total-steps",
            "1000000",
            "--learning-starts",
            "300",
            "--batch-size",
            "32",
            "--hidden-sizes",
            "32",
            "32",
            "--log-every",
            "50",
            "--progress",
            "none",
            "--checkpoint-minutes",
            "0.02",
            "--run-dir",
            str(run),
        ]
    )  # everything else at its default
    _wait_for(run / "metrics.csv", proc)  # started (importing torch alone can take 5 s on a loaded machine)
    time.sleep(random.uniform(4.0, 8.0))
    killed_at = time.time()
    proc.kill()
    proc.communicate()
    rows = _metric_rows(run)
    assert float(rows[-1][1]) > killed_at - 4.0  # flushed by time: at most a few seconds of logs lost
    step = torch.load(latest_checkpoint(run / "checkpoints"), weights_only=True)["step"]
    assert step > 0
    assert main(["train", "--resume", str(run), "--total-steps", str(step + 100)]) == 0
    assert max(int(r[0]) for r in _metric_rows(run)) == step + 100


def test_closing_envs_that_hang_ends_the_process_within_the_bound():
    code = (
        "import threading, time\n"
        "from heron.runtime.faults import close_bounded\n"
        "close_bounded(threading.Event().wait, 'the stuck envs', timeout=1.0)\n"
        "print('not reached')\n"
    )
    t0 = time.time()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert time.time() - t0 < 10 and p.returncode == 1 and "not reached" not in p.stdout
    assert "closing the stuck envs did not finish within 1 s" in p.stderr


def test_an_evaluation_episode_that_never_ends_is_cut_with_a_warning(monkeypatch, capsys):
    import numpy as np

    from heron.runtime import episodes

    class Zero:
        def reset(self):
            pass

        def predict(self, obs, deterministic=True):
            return np.zeros(1, np.float32)

    monkeypatch.setattr(episodes, "EVAL_EPISODE_CAP", 300)
    returns = episodes.evaluate(
        Zero(),
        "endless",
        2,
        0,  # ConstantReward: reward 1, never ends
        env_fn=lambda render_mode: toy_envs.ConstantReward(),
    )
    assert returns.tolist() == [300.0, 300.0]
    assert "evaluation episode of endless ran 300 steps without ending" in capsys.readouterr().err


def test_divergence_guard_names_the_first_bad_update_and_only_its_metrics():
    guard = faults.DivergenceGuard(torch.device("cpu"))
    guard.watch({"losses/q": torch.tensor(1.0)}, 10)
    guard.watch({"losses/q": torch.tensor(float("inf"))}, 11)
    guard.watch({"losses/q": torch.tensor(float("nan")), "losses/actor": torch.tensor(float("nan"))}, 12)
    assert guard.tripped() and guard.describe() == "losses/q = inf at env step 11"


def test_divergence_guard_finds_the_first_bad_update_across_folds(monkeypatch):
    """Rows are folded into the flag every FOLD updates and read later: as on a GPU (no read at each
    fold), the first bad update is still named, after sets of names of two widths, and the rows of
    folds read as finite are let go (at the latest after KEEP folds)."""
    monkeypatch.setattr(faults.DivergenceGuard, "KEEP", 3)
    guard = faults.DivergenceGuard(torch.device("cpu"))
    guard.device = types.SimpleNamespace(type="cuda")  # no read at each fold
    for i in range(250):
        metrics = {"losses/q": torch.tensor(float("inf") if i == 240 else float(i)), "step": i}
        if i % 2:
            metrics["losses/actor"] = torch.tensor(float("nan") if i == 231 else 1.0)
        guard.watch(metrics, 1000 + i)
        assert len(guard.folded) < 3 and not guard.bad
    assert guard.tripped() and guard.describe() == "losses/actor = nan at env step 1231"
    guard.watch({"losses/q": torch.tensor(float("nan"))}, 2000)  # after a trip nothing more is kept
    assert guard.describe() == "losses/actor = nan at env step 1231"


def test_divergence_guard_leaves_out_ignored_names():
    """Under 16-mixed the GradScaler's skipped steps have infinite gradient norms: not a divergence."""
    guard = faults.DivergenceGuard(torch.device("cpu"), ignore=("grads/",))
    guard.watch({"losses/q": torch.tensor(1.0), "grads/world_model": torch.tensor(float("inf"))}, 10)
    assert not guard.tripped()
    guard.watch({"losses/q": torch.tensor(float("nan")), "grads/world_model": torch.tensor(1.0)}, 11)
    assert guard.tripped() and guard.describe() == "losses/q = nan at env step 11"
