"""Data-parallel training under torchrun with two CPU processes (gloo): every algorithm end to end,
one run directory, ranks identical where they must be and different where they must be; SIGTERM
and resume; a rank that dies; two "nodes" on one machine. (The collectives themselves, and the
equivalence of two half batches with one whole batch, are in test_dist.py.)"""

import csv
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from heron.cli import main
from heron.runtime.checkpoint import latest_checkpoint, step_checkpoints

TESTS = Path(__file__).parent
CLEAN = (
    "HERON_FAULT",
    "HERON_FAULT_MARKER",
    "HERON_TEST_FAULT",
    "HERON_TEST_FAULT_RANK",
    "HERON_CRASH_AFTER_CHECKPOINT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
)


def _launch(heron_args, launcher=("--standalone", "--nproc-per-node", "2"), env=None):
    """torchrun ... -m heron ARGS in its own session (so that nothing it started outlives the test)."""
    environ = {k: v for k, v in os.environ.items() if k not in CLEAN}
    environ.update({"OMP_NUM_THREADS": "1", **(env or {})})
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", *launcher, "-m", "heron", *heron_args],
        cwd=TESTS,
        env=environ,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _finish(proc, timeout=240):
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # workers left behind by a failure
        except ProcessLookupError:
            pass
    return proc.returncode, out + err


def _torchrun(heron_args, **kw):
    rc, output = _finish(_launch(heron_args, **kw))
    assert rc == 0, output[-3000:]
    return output


def _parts(run: Path, step: int | None = None) -> tuple[dict, dict]:
    """Rank 0's and rank 1's state at the latest (or given) checkpoint."""
    path = latest_checkpoint(run / "checkpoints") if step is None else run / "checkpoints" / f"step_{step:09d}.pt"
    return (
        torch.load(path, weights_only=True),
        torch.load(path.with_name(path.name.replace(".pt", ".rank1.pt")), weights_only=True),
    )


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return a == b


def _rows(path: Path, metric: str) -> list[list[str]]:
    with open(path) as f:
        return [r for r in csv.reader(f) if len(r) == 4 and r[2] == metric]


OFF = [
    "--env-id",
    "Pendulum-v1",
    "--total-steps",
    "800",
    "--learning-starts",
    "200",
    "--num-envs",
    "2",
    "--batch-size",
    "32",
    "--buffer-size",
    "1000",
    "--hidden-sizes",
    "32",
    "32",
    "--obs-norm",
    "true",
    "--eval-every",
    "400",
    "--eval-episodes",
    "3",
    "--log-every",
    "100",
    "--checkpoint-every",
    "400",
    "--progress",
    "none",
]
RUNS = {
    "td3": ["td3", *OFF],
    "sac": ["sac", *OFF],
    # batch renormalisation's statistics over both ranks' rows: running statistics identical ("actor", "critic")
    "crossq": ["sac", *OFF, "--preset", "crossq", "--critic-hidden-sizes", "32", "32", "--bn-warmup", "300"],
    # every statistic PPO keeps: observations, values, the reward scale; and the collective KL stop
    "ppo": [
        "ppo",
        "--preset",
        "debug",
        "--env-id",
        "Pendulum-v1",
        "--total-steps",
        "1024",
        "--eval-every",
        "512",
        "--obs-norm",
        "true",
        "--value-norm",
        "true",
        "--reward-scale",
        "true",
        "--target-kl",
        "0.02",
        "--progress",
        "none",
    ],
    "dreamer_v2": [
        "dreamer_v2",
        "--preset",
        "debug",
        "--env-id",
        "CartPole-v1",
        "--num-envs",
        "2",
        "--progress",
        "none",
    ],
    # the return scale's percentiles over both ranks' returns: the moments stay identical ("agent")
    "dreamer_v3": [
        "dreamer_v3",
        "--preset",
        "debug",
        "--env-id",
        "CartPole-v1",
        "--num-envs",
        "2",
        "--progress",
        "none",
    ],
}


def _check_one_run(run: Path, algo: str, output: str) -> None:
    """Both ranks exited 0 (checked by _torchrun); one run directory with one set of logs holding
    both ranks' episodes; at the checkpoint the networks and statistics of the two ranks are
    identical, and their envs, random streams and data are not (each rank its own seeds)."""
    assert output.count("done: ") == 1, output  # rank 0 alone reports
    zero, one = _parts(run)
    assert zero["world_size"] == 2 and zero["step"] == one["step"]
    shared = [k for k in zero if k in ("actor", "critic", "agent", "critic_target", "actor_target", "log_alpha")]
    assert shared and all(_equal(zero[k], one[k]) for k in shared)
    assert not _equal(zero["envs"]["rng"], one["envs"]["rng"])
    assert not _equal(zero["rng"], one["rng"])
    if algo in ("td3", "sac", "crossq"):
        first_obs = [
            torch.load(run / "checkpoints" / f"step_{zero['step']:09d}{part}.buffer.pt", weights_only=True)["data"][
                "obs"
            ][0]
            for part in ("", ".rank1")
        ]
        assert not torch.equal(*first_obs)
        # 800 global steps = 400 per env, 200-step episodes: 2 envs x 2 episodes, all in rank 0's logs
        assert len(_rows(run / "metrics.csv", "charts/episodic_return")) == 4
        # each evaluation's 3 episodes shared between the ranks and gathered
        assert [row[3] for row in csv.reader(open(run / "eval.csv"))][1:] == ["3", "3"]
    assert len([p for p in run.iterdir() if p.name.startswith("events.out")]) == 1


@pytest.mark.parametrize("algo", ["sac", "crossq", "ppo", "dreamer_v2", "dreamer_v3"])  # td3: the SIGTERM test below
def test_two_processes_train_one_run(algo, tmp_path):
    run = tmp_path / "run"
    _check_one_run(run, algo, _torchrun(["train", *RUNS[algo], "--progress", "log", "--run-dir", str(run)]))


def test_sigterm_checkpoints_both_ranks_at_one_step_and_resume_is_exact(tmp_path):
    """SIGTERM to torchrun while both ranks evaluate at step 400 (held there until the signal
    lands): both ranks' parts of the checkpoint at 400 and nothing later; the resumed run ends with
    the very parameters of an uninterrupted two-process run (which is also checked as one run, as
    the other algorithms are above). Then a one-process resume is refused."""
    args = ["train", *RUNS["td3"]]
    whole, cut, marker = tmp_path / "whole", tmp_path / "cut", tmp_path / "held"
    _check_one_run(whole, "td3", _torchrun([*args, "--progress", "log", "--run-dir", str(whole)]))

    proc = _launch([*args, "--run-dir", str(cut)], env={"HERON_FAULT": "eval:hold", "HERON_FAULT_MARKER": str(marker)})
    deadline = time.time() + 120
    while not (marker.exists() and len(marker.read_text().splitlines()) == 2):
        assert proc.poll() is None and time.time() < deadline, _finish(proc)[1][-3000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    rc, output = _finish(proc, timeout=60)
    assert rc != 0 and "stopped at step 400; checkpoint saved" in output, output[-3000:]
    assert [s for s, _ in step_checkpoints(cut / "checkpoints")] == [400]
    assert (cut / "checkpoints" / "step_000000400.rank1.pt").exists()

    _torchrun(["train", "--resume", str(cut)])
    for a, b in zip(_parts(whole), _parts(cut)):
        assert a["step"] == b["step"] == 800
        assert all(_equal(a[k], b[k]) for k in ("actor", "critic", "actor_target", "critic_target", "q_opt"))

    before = sorted((p.name, p.stat().st_mtime_ns) for p in (cut / "checkpoints").iterdir())
    assert main(["train", "--resume", str(cut), "--total-steps", "1600"]) == 2  # one process, not two
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (cut / "checkpoints").iterdir()) == before


def test_a_rank_that_dies_ends_the_job_and_leaves_whole_checkpoints(tmp_path):
    """Rank 1's process dies (its env calls os._exit) at its 300th step: the job ends non-zero within
    a minute, the checkpoints at 200 and 400 (global steps) each have both parts, and the run
    resumes to the end."""
    run = tmp_path / "run"
    args = [
        "train",
        "td3",
        "--env-id",
        "fault_envs:Faulty",
        *OFF[2:],
        "--checkpoint-every",
        "200",
        "--run-dir",
        str(run),
    ]
    t0 = time.time()
    rc, output = _finish(_launch(args, env={"HERON_TEST_FAULT": "exit@300", "HERON_TEST_FAULT_RANK": "1"}), timeout=120)
    assert rc != 0 and time.time() - t0 < 60, output[-3000:]
    assert "Traceback" not in "\n".join(line for line in output.splitlines() if line.startswith("heron"))
    steps = [s for s, _ in step_checkpoints(run / "checkpoints")]
    assert steps == [200, 400], steps
    for s in steps:
        _parts(run, s)  # both parts load
    _torchrun(["train", "--resume", str(run)])
    assert _parts(run)[0]["step"] == 800


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_on_one_machine(tmp_path):
    """Two torchrun invocations, --nnodes 2 with a c10d rendezvous on localhost, one process each:
    PPO trains to the end as one job."""
    run = tmp_path / "run"
    port = _free_port()
    launcher = lambda node: (
        "--nnodes",
        "2",
        "--node-rank",
        str(node),
        "--nproc-per-node",
        "1",  # noqa: E731
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        "heron-test",
    )
    args = [
        "train",
        "ppo",
        "--preset",
        "debug",
        "--env-id",
        "CartPole-v1",
        "--total-steps",
        "1024",
        "--dist-backend",
        "gloo",
        "--eval-every",
        "0",
        "--progress",
        "none",
        "--run-dir",
        str(run),
    ]
    nodes = [_launch(args, launcher=launcher(node)) for node in (0, 1)]
    results = [_finish(p) for p in nodes]
    assert all(rc == 0 for rc, _ in results), [out[-2000:] for _, out in results]
    zero, one = _parts(run)
    assert zero["step"] == 1024 and _equal(zero["actor"], one["actor"])


@pytest.mark.learning
def test_ppo_solves_cartpole_in_two_processes(tmp_path):
    """The zoo's CartPole-v1 block split over two processes (4 envs each, half of every minibatch):
    solved within 100k steps, mean deterministic evaluation >= 475 over 10 episodes (the bar of the
    one-process runs in test_learning.py)."""
    run = tmp_path / "run"
    _torchrun(["train", "ppo", "--preset", "classic", "--eval-every", "0", "--progress", "none", "--run-dir", str(run)])
    rows = list(csv.reader(open(run / "eval.csv")))[1:]
    assert float(rows[-1][1]) >= 475, rows
