"""``heron bench``: the smoke suite end to end, a suite stopped by SIGINT and continued by the same
command, and the results table from a hand-written results.csv."""

import csv
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_helpers import cli_error

from heron import bench
from heron.cli import main
from heron.runtime import checkpoint as ckpt

ROOT = Path(__file__).resolve().parent.parent


def _rows(out):
    with open(out / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def _bench(*args, **popen):
    return subprocess.Popen(
        [sys.executable, "-m", "heron", "bench", *args],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        **popen,
    )


def _dmc_pixels() -> bool:
    """Whether dm_control renders here (EGL, or OSMesa with MUJOCO_GL=osmesa)."""
    import gymnasium as gym

    from heron.envs import dmc

    dmc.register("dmc_cartpole_swingup")
    try:
        env = gym.make("dmc_cartpole_swingup", from_pixels=True, render_mode="rgb_array")
        env.reset(seed=0)
        env.close()
    except Exception:
        return False
    return True


def test_fake_results_make_the_table_beside_the_published_figures(tmp_path, capsys):
    out = tmp_path / "b"
    for seed, final, best, train in ((1, 3000, 3100, 2500), (2, 3200, 3300, 2700), (3, 3400, 3500, 2900)):
        bench.record(
            out / "results.csv",
            [
                "mujoco-sac",
                "sac",
                "Hopper-v5",
                seed,
                1_000_000,
                final,
                10.0,
                best,
                3600 * seed,
                "0.1.0",
                "abc123",
                train,
            ],
        )
    bench.record(
        out / "results.csv",
        ["mujoco-td3", "td3", "Hopper-v5", 1, 1_000_000, 3300, 5.0, 3400, 600, "0.1.0", "abc123", 3000],
    )
    # a run recorded again (it was trained further) replaces its row, it does not add one; this one
    # ended no training episode in its last tenth (an empty training return)
    bench.record(
        out / "results.csv",
        ["mujoco-td3", "td3", "Hopper-v5", 1, 1_000_000, 3310, 5.0, 3410, 1200, "0.1.0", "def456", ""],
    )
    assert len(_rows(out)) == 4
    assert main(["bench", "--report", "--out", str(out)]) == 0
    sac = (out / "mujoco-sac.md").read_text()
    # finals 3000/3200/3400: mean 3200, sample std 200; bests 3300 +- 200; training returns 2700 +- 200;
    # wall times 1h, 2h, 3h: 2h mean
    assert "| Hopper-v5 | sac | 1,000,000 | 3 | 3200.0 ± 200.0 | 3300.0 ± 200.0 | 2700.0 ± 200.0 |" in sac
    assert "2686 ± 762 (CleanRL 1.0.0 docs (2022), v2, 1M, training return); ~3250 (SAC paper (2018))" in sac
    assert "| 2h00m |" in sac and "abc123" in sac
    td3 = (out / "mujoco-td3.md").read_text()
    assert (
        "| Hopper-v5 | td3 | 1,000,000 | 1 | 3310.0 | 3410.0 | - | 3564 ± 115 (TD3 paper (2018), v1, 1M, max average return) | 20m00s |"  # noqa: E501 (the table's row as printed)
        in td3
    )
    assert "def456" in td3 and "abc123" not in td3
    # a run without a results row (stopped, or training now) is listed apart with where it stands
    run = out / "mujoco-td3" / "td3__Walker2d-v5__s1"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("algo: td3\nenv_id: Walker2d-v5\nseed: 1\ntotal_steps: 1000000\n")
    (run / "eval.csv").write_text(
        "step,mean_return,std_return,episodes,wall_time\n"
        "10000,300.0,20.0,10,1.0\n20000,900.5,40.25,10,2.0\n30000,700.0,5.0,10,3.0\n"
    )
    (run / "metrics.csv").write_text(
        "step,time,metric,value\n29000,1.0,charts/episodic_return,400.0\n"
        "31000,1.0,charts/episodic_return,600.0\n32000,1.0,losses/qf_loss,1.0\n"
    )
    done = out / "mujoco-td3" / "td3__Hopper-v5__s1"  # finished (its row above): not listed again
    done.mkdir()
    for name in ("config.yaml", "eval.csv"):
        (done / name).write_text((run / name).read_text())
    assert main(["bench", "--report", "--out", str(out)]) == 0
    td3 = (out / "mujoco-td3.md").read_text()
    assert "| Hopper-v5 | td3 | 1,000,000 | 1 | 3310.0 | 3410.0 |" in td3  # the means: finished runs only
    assert td3.count("| td3 | 1 |") == 1
    # steps so far 32,000; latest eval at 30,000; best 900.5; training episodes after 28,800: 400, 600
    assert "| Walker2d-v5 | td3 | 1 | 32,000 of 1,000,000 | 700.0 ± 5.0 (at 30,000) | 900.5 | 500.0 |" in td3
    assert "Walker2d" not in (out / "mujoco-sac.md").read_text()
    pong = out / "atari-ppo" / "ppo__ALE_Pong-v5__s1"  # a suite with no finished run yet gets its table too
    pong.mkdir(parents=True)
    (pong / "config.yaml").write_text("algo: ppo\nenv_id: ALE/Pong-v5\nseed: 1\ntotal_steps: 10000000\n")
    (pong / "eval.csv").write_text("step,mean_return,std_return,episodes,wall_time\n250000,-20.0,1.0,5,1.0\n")
    (out / "plots").mkdir(exist_ok=True)  # not a suite
    assert main(["bench", "--report", "--out", str(out)]) == 0
    assert (
        "| ALE/Pong-v5 | ppo | 1 | 250,000 of 10,000,000 | -20.0 ± 1.0 (at 250,000) | -20.0 | - |"
        in (out / "atari-ppo.md").read_text()
    )
    assert not (out / "plots.md").exists()
    # a results file of something else is refused in one line, and left as it was
    (out / "results.csv").write_text("a,b\n1,2\n")
    assert "is not a heron bench results file" in cli_error(capsys, ["bench", "--report", "--out", str(out)])
    assert (out / "results.csv").read_text() == "a,b\n1,2\n"


def test_training_return_of_the_last_tenth_and_results_from_before_the_column(tmp_path):
    out = tmp_path / "b"
    run = out / "mujoco-sac" / "sac__Hopper-v5__s1"
    run.mkdir(parents=True)
    # training episodes ended at steps 100 .. 1000; the last tenth is steps >= 900: 30, 40, 50 -> 40.
    # Other metrics are not episodes, and a line torn by a kill (no newline) is not read.
    (run / "metrics.csv").write_text(
        "step,wall_time,metric,value\n100,0,charts/episodic_return,1000\n500,0,charts/episodic_return,20\n"
        "899,0,charts/episodic_return,7\n900,0,charts/episodic_return,30\n950,0,losses/qf_loss,9999\n"
        "960,0,charts/episodic_return,40\n1000,0,charts/episodic_return,50\n1000,0,charts/episodic_return,99"
    )
    assert bench.train_summary(run) == pytest.approx(40.0)
    assert bench.train_summary(out / "nowhere") is None
    # results.csv as heron bench wrote it before the column: read, its run's training return computed
    # from the run directory, and rewritten with the column when a run is recorded
    (out / "results.csv").write_text(
        ",".join(bench.RESULTS_HEADER[:-1]) + "\n"
        "mujoco-sac,sac,Hopper-v5,1,1000,3000,10,3100,60,0.1.0,abc\n"
        "mujoco-sac,sac,Hopper-v5,2,1000,3200,10,3300,60,0.1.0,abc\n"
    )
    rows = bench.read_results(out / "results.csv")
    assert [r["train_return"] for r in rows] == [pytest.approx(40.0), None]  # seed 2's run is not here
    assert main(["bench", "--report", "--out", str(out)]) == 0
    assert (
        "| Hopper-v5 | sac | 1,000 | 2 | 3100.0 ± 141.4 | 3200.0 ± 141.4 | - |" in (out / "mujoco-sac.md").read_text()
    )
    bench.record(
        out / "results.csv", ["mujoco-sac", "sac", "Hopper-v5", 3, 1000, 3400, 10, 3500, 60, "0.1.0", "abc", "41.00"]
    )
    assert [r["train_return"] for r in _rows(out)] == ["", "", "41.00"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "smok"], "unknown suite 'smok' (did you mean smoke?)"),
        (["bench", "smoke", "--parallel", "0"], "--parallel must be at least 1"),
        (["bench", "smoke", "--only", "nothing"], "--only nothing matches no entry of smoke"),
        (["bench", "smoke", "--steps", "-5"], "--steps must be positive"),
        (["bench", "smoke", "--seed", "3"], "unknown flag --seed (did you mean --seeds?)"),
        (["bench", "--report", "--out", "/nonexistent/heron-bench"], "results.csv not found"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    assert message in cli_error(capsys, argv)


def _wait_for(predicate, proc, timeout=120.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    raise AssertionError("timed out")


HEAD = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout


@pytest.mark.skipif(not HEAD, reason="not a git checkout")
def test_a_tree_exported_by_git_archive_knows_its_commit(tmp_path):
    # Benchmarks run from exported snapshots (no .git), and their results.csv must still name the code.
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD", "heron"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=tar.stdout, check=True)
    out = subprocess.run(
        [sys.executable, "-c", "from heron.bench import git_commit; print(git_commit())"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == HEAD.strip()[:12]
    assert bench.git_commit().startswith(HEAD.strip()[:12])  # the checkout asks git


def test_interrupted_suite_continues_where_it_stopped(tmp_path):
    """SIGINT to the bench while seed 2 trains: seed 2 checkpoints and stops, seed 1's result stays;
    the same command then skips seed 1 and resumes seed 2 from its checkpoint."""
    out = tmp_path / "b"
    args = [
        "smoke",
        "--only",
        "td3",
        "--seeds",
        "1",
        "2",
        "--steps",
        "1500",
        "--threads",
        "1",
        "--out",
        str(out),
        "--status-every",
        "1",
    ]
    proc = _bench(*args)
    try:
        seed2 = out / "smoke" / "td3__Hopper-v5__s2"
        _wait_for(lambda: ckpt.step_checkpoints(seed2 / "checkpoints"), proc)
        proc.send_signal(signal.SIGINT)  # the bench itself, which asks its running child to stop
        text, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, text
    assert "[done] td3 Hopper-v5 seed 1: 1500 steps" in text
    assert "[stopped] td3 Hopper-v5 seed 2 at step" in text
    assert [r["seed"] for r in _rows(out)] == ["1"]
    stopped_at = ckpt.step_checkpoints(seed2 / "checkpoints")[-1][0]
    assert 0 < stopped_at < 1500

    proc = _bench(*args)
    text, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, text
    assert "[done] td3 Hopper-v5 seed 1: finished earlier" in text
    assert f"[start] td3 Hopper-v5 seed 2: resuming at step {stopped_at}" in text
    rows = _rows(out)
    assert sorted(r["seed"] for r in rows) == ["1", "2"] and {r["steps"] for r in rows} == {"1500"}
    state = bench.read_state(seed2)
    assert state["done"] and state["attempts"] == 2 and state["wall_s"] > 0
    # the resumed run logged on from its checkpoint: one evaluation per step, none repeated
    steps = [int(r[0]) for r in csv.reader((seed2 / "eval.csv").read_text().splitlines()[1:])]
    assert steps == sorted(set(steps)) and steps[-1] == 1500
    assert "| Hopper-v5 | td3 | 1,500 | 2 |" in (out / "smoke.md").read_text()
    if importlib.util.find_spec("matplotlib"):
        assert (out / "plots" / "smoke" / "Hopper-v5.png").stat().st_size > 0

    proc = _bench(*args)  # a third time: nothing left to do
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "[start]" not in text and "2/2 runs finished" in text, text


@pytest.mark.learning
def test_smoke_suite_end_to_end(tmp_path):
    """Every suite's first entry (SAC, TD3 and PPO on Hopper, PPO on Pong pixels, DreamerV2 and
    DreamerV3 on DMC pixels), two at a time: each runs, is evaluated and lands in results.csv, the table and a plot."""
    for module in ("mujoco", "ale_py", "dm_control", "matplotlib"):
        pytest.importorskip(module)
    out = tmp_path / "b"
    entries = bench.SUITES["smoke"]
    only = []
    if not _dmc_pixels():  # the Dreamers' DMC entries learn from pixels: the rest of the suite runs
        only = ["--only", "sac", "td3", "ppo"]
        entries = [e for e in entries if not e.algo.startswith("dreamer")]
    proc = _bench("smoke", "--parallel", "2", "--out", str(out), "--status-every", "5", *only)
    text, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, text
    rows = _rows(out)
    assert sorted((r["algo"], r["env_id"]) for r in rows) == sorted((e.label, e.env_id) for e in entries)
    for r in rows:
        assert int(r["steps"]) >= next(
            e.total_steps for e in bench.SUITES["smoke"] if (e.label, e.env_id) == (r["algo"], r["env_id"])
        )
        assert float(r["wall_s"]) > 0 and r["heron_version"]
        if r["env_id"] == "Hopper-v5":  # its early episodes are short: some end in the last tenth
            assert float(r["train_return"]) > 0
    table = (out / "smoke.md").read_text()
    assert table.count("\n| ") == 1 + len(rows)  # the header and one line per (env, algo)
    assert sorted(p.name for p in (out / "plots" / "smoke").iterdir()) == sorted(
        {f"{bench.safe_name(e.env_id)}.png" for e in entries}
    )
    assert "about" in text and "left" in text  # the overall progress line with its estimate


def test_threads_per_run_come_from_the_free_cores(tmp_path, monkeypatch):
    lines = []
    monkeypatch.setattr(bench, "usable_cpus", lambda: [0, 1, 2, 3])
    monkeypatch.setattr(bench, "others_now", lambda: 1.1)  # another process keeps a core busy
    assert bench.run_suite("smoke", [1], tmp_path, parallel=1, only=["td3"], dry_run=True, echo=lines.append) == 0
    assert "other processes keep 1.1 of 4 cores busy: 3 torch thread(s) per run" in lines[0]
    assert lines[-1].split("--torch-threads ")[1].startswith("3 ")
    lines.clear()
    monkeypatch.setattr(bench, "others_now", lambda: pytest.fail("a chosen count reads no load"))
    bench.run_suite("smoke", [1], tmp_path, parallel=2, only=["td3"], dry_run=True, threads=2, echo=lines.append)
    assert lines[-1].split("--torch-threads ")[1].startswith("2 ") and not any("busy" in x for x in lines)


def test_a_stopped_run_resumes_with_this_benchs_threads(tmp_path):
    """A run stopped under one division of the cores resumes under the bench's present one (a 2-thread
    run must not come back with 2 threads beside another run pinned to the other core)."""
    run = tmp_path / "smoke" / "td3__Hopper-v5__s1"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("algo: td3\ntorch_threads: 2\n")
    (run / "checkpoints" / "step_500.pt").write_bytes(b"")
    lines = []
    bench.run_suite("smoke", [1], tmp_path, only=["td3"], dry_run=True, threads=1, echo=lines.append)
    assert f"--resume {run}" in lines[-1] and lines[-1].endswith("--torch-threads 1"), lines


def test_a_precision_runs_under_its_own_label(tmp_path, capsys):
    """--precision bf16-mixed: every run gets the flag, its runs, rows and table go under
    SUITE.bf16-mixed (never beside the float32 runs), and a precision the device lacks is refused."""
    lines = []
    assert (
        bench.run_suite(
            "smoke", [1, 2], tmp_path, only=["td3"], dry_run=True, threads=1, echo=lines.append, precision="bf16-mixed"
        )
        == 0
    )
    commands = [line for line in lines if " train " in line]
    assert len(commands) == 2 and all("--precision bf16-mixed" in c for c in commands)
    assert all(f"{tmp_path / 'smoke.bf16-mixed' / 'td3__Hopper-v5__s'}" in c for c in commands)
    lines.clear()
    bench.run_suite("smoke", [1], tmp_path, only=["td3"], dry_run=True, threads=1, echo=lines.append)
    assert "--precision" not in lines[-1] and f"{tmp_path / 'smoke' / 'td3__Hopper-v5__s1'}" in lines[-1]
    bench.record(
        tmp_path / "results.csv",
        ["smoke.bf16-mixed", "td3", "Hopper-v5", 1, 1500, 30, 2, 35, 9, "0.1.0", "abc", "20.00"],
    )
    assert main(["bench", "smoke", "--precision", "bf16-mixed", "--report", "--out", str(tmp_path)]) == 0
    assert "### smoke.bf16-mixed" in (tmp_path / "smoke.bf16-mixed.md").read_text()
    if not torch.cuda.is_available():
        assert "16-mixed needs CUDA" in cli_error(
            capsys, ["bench", "smoke", "--precision", "16-mixed", "--device", "cpu", "--dry-run"]
        )


def test_the_curves_draw_each_published_figure_as_a_line_at_its_mean():
    from heron.bench import published_lines

    assert published_lines("td3", "Hopper-v5") == [("TD3 paper (2018), v1, 1M, max average return: 3564 ± 115", 3564.0)]
    assert [v for _, v in published_lines("sac", "HalfCheetah-v5")] == [10310.0, 11250.0]  # "~11250" too
    assert published_lines("sac", "CartPole-v1") == []
    assert [v for _, v in published_lines("crossq", "Walker2d-v5")] == [3253.0, 690.0]  # CrossQ and its paper's SAC


def test_a_preset_that_changes_the_method_names_its_runs_and_rows(tmp_path):
    """CrossQ's entries train SAC with --preset crossq; their run directories, rows and table say crossq,
    and a run not finished yet shows under that name too."""
    entries = bench.suite_entries("mujoco-crossq", ["walker"])
    assert [(e.algo, e.label, e.presets) for e in entries] == [("sac", "crossq", ("crossq", "mujoco"))]
    assert entries[0].name(2) == "crossq__Walker2d-v5__s2"
    assert bench.suite_entries("mujoco-crossq", ["crossq"]) == bench.SUITES["mujoco-crossq"]
    lines: list[str] = []
    bench.run_suite("mujoco-crossq", [1], tmp_path, only=["hopper"], dry_run=True, threads=1, echo=lines.append)
    command = next(line for line in lines if " train " in line)
    assert "train sac --env-id Hopper-v5 --preset crossq mujoco" in command
    assert "crossq__Hopper-v5__s1" in command
