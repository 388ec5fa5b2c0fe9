"""``heron bench``: named suites of trainings at the budgets people train at, resumable, with a
results table beside the published figures and learning curves.

A suite is a list of entries (algorithm, env id, presets, total steps); each entry runs once per
seed as an ordinary run directory ``OUT/SUITE/<algo>__<env>__s<seed>`` in a child process
(``python -m heron train ...``, its output in ``OUT/SUITE/logs/``). The same command given again
skips the runs that finished, resumes the ones that stopped from their latest checkpoint and
starts the rest, so a suite survives Ctrl-C and lost machines. ``--parallel K`` runs K at once
with the cores divided among them (one thread each on a 2-core machine at K = 2).

What it writes, under ``OUT``:

* ``results.csv``: one row per finished run (suite, algorithm, env, seed, steps, final and best
  deterministic evaluation, wall time, heron version, git commit);
* ``SUITE.md``: per env and algorithm, the mean and standard deviation over seeds beside the
  published figures (``PUBLISHED``), then the runs not finished yet as far as they got;
* ``plots/SUITE/<env>.png``: the evaluation curves, mean with a band over seeds, one line per
  algorithm (``heron.plot.plot_bands``, the same as ``heron plot --bands``).
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from heron import __version__
from heron._commit import COMMIT
from heron.errors import HeronError
from heron.runtime.cores import busy_cores, others_now, usable_cpus
from heron.runtime.logger import complete_rows, write_csv
from heron.runtime.rundir import best_logged_eval, read_config

RESULTS_HEADER = [
    "suite",
    "algo",
    "env_id",
    "seed",
    "steps",
    "final_return",
    "final_std",
    "best_return",
    "wall_s",
    "heron_version",
    "git_commit",
    "train_return",
]
# results.csv as written before train_return: read, its rows padded, and rewritten whole by record()
_EARLIER_HEADER = RESULTS_HEADER[:-1]
TRAIN_WINDOW = 0.1  # train_return: the training episodes that ended in the last tenth of the steps
STATE_FILE = "bench.json"  # in each run directory: what the bench knows of it (wall time, attempts, outcome)


@dataclasses.dataclass(frozen=True)
class Entry:
    algo: str
    env_id: str
    presets: tuple[str, ...]
    total_steps: int
    overrides: tuple[tuple[str, Any], ...] = ()  # further flags, (field, value)
    method: str = ""  # the name in tables and run directories when a preset changes the method (crossq)

    @property
    def label(self) -> str:
        """The method the entry trains: its ``method``, else its algorithm."""
        return self.method or self.algo

    def name(self, seed: int) -> str:
        return f"{self.label}__{safe_name(self.env_id)}__s{seed}"


def safe_name(env_id: str) -> str:
    """An env id as a file name: ALE/Pong-v5 -> ALE_Pong-v5."""
    return re.sub(r"[^\w.-]+", "_", env_id).strip("_")


MUJOCO = ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5")
CROSSQ = ("Hopper-v5", "Walker2d-v5", "Humanoid-v5")  # the three of the CrossQ paper's 100k table
GAMES = ("Pong", "Breakout", "Qbert", "SpaceInvaders")
ATARI = tuple(f"ALE/{game}-v5" for game in GAMES)  # sticky actions 0.25 (Machado et al.): the harder setting
ATARI_V4 = tuple(f"{game}NoFrameskip-v4" for game in GAMES)  # no sticky actions: DI-engine's and the PPO paper's
DMC = ("dmc_walker_walk", "dmc_cartpole_swingup")
# four of the Atari 100k benchmark's 26 games (Boxing and MsPacman: sheeprl's dreamer_v3 100k experiments)
ATARI_100K = tuple(f"{game}NoFrameskip-v4" for game in ("Pong", "Breakout", "Boxing", "MsPacman"))

SUITES: dict[str, list[Entry]] = {
    "mujoco-sac": [Entry("sac", env, ("mujoco",), 1_000_000) for env in MUJOCO],
    "mujoco-td3": [Entry("td3", env, ("mujoco",), 1_000_000) for env in MUJOCO],
    "mujoco-ppo": [Entry("ppo", env, ("mujoco",), 1_000_000) for env in MUJOCO],
    # CrossQ (SAC's --preset crossq) at the paper's sample-efficiency budget; a checkpoint every 20k steps, as
    # its 2048-wide critics make a CPU run long
    "mujoco-crossq": [
        Entry("sac", env, ("crossq", "mujoco"), 100_000, (("checkpoint_every", 20_000),), method="crossq")
        for env in CROSSQ
    ],
    "atari-ppo": [Entry("ppo", env, ("atari",), 10_000_000) for env in ATARI],
    "atari-ppo-v4": [Entry("ppo", env, ("atari",), 10_000_000) for env in ATARI_V4],
    "dmc-dreamer": [Entry("dreamer_v2", env, ("dmc",), 500_000) for env in DMC],  # agent steps (x2 frames)
    # DreamerV3 from pixels at the paper's DMC budget, 1M frames; Atari 100k: 100k agent steps, 400k frames
    "dmc-dreamer-v3": [Entry("dreamer_v3", env, ("dmc",), 500_000) for env in DMC],
    "atari100k-dreamer-v3": [Entry("dreamer_v3", env, ("atari",), 100_000) for env in ATARI_100K],
}
# The first entry of every suite for a few thousand steps with the algorithm's debug sizes: the whole
# machinery (children, resume, results, table, plots) in a minute or two.
SUITES["smoke"] = [
    Entry("sac", "Hopper-v5", ("mujoco", "debug"), 1500),
    Entry("td3", "Hopper-v5", ("mujoco", "debug"), 1500),
    Entry("sac", "Hopper-v5", ("crossq", "mujoco", "debug"), 1500, (("critic_hidden_sizes", (64, 64)),), "crossq"),
    Entry("ppo", "Hopper-v5", ("mujoco", "debug"), 2048),
    Entry("ppo", "ALE/Pong-v5", ("atari", "debug"), 1024, (("eval_episodes", 1),)),
    Entry("dreamer_v2", "dmc_walker_walk", ("dmc", "debug"), 300, (("capture_video", False),)),
    Entry("dreamer_v3", "dmc_walker_walk", ("dmc", "debug"), 300, (("capture_video", False),)),
]

DI_ENGINE_ATARI = {"Pong": "20", "Qbert": "10000", "SpaceInvaders": "800"}  # DI-engine's on-policy PPO

# What the implementations heron follows (and their papers) report, per (algo, env): (source, figure). Shown
# beside our numbers; the notes say how each was measured, which is not always as we measure, and when it was
# published: CleanRL's SAC figures are its docs' of 2022 (release 1.0.0, vwxyzjn/cleanrl docs/rl-algorithms/sac.md,
# replaced there by a rerun in November 2023), DI-engine's its docs' PPO page of 2022 (opendilab/DI-engine-docs
# source/12_policies/ppo.rst, on-policy table; raised there since: Walker2d 3700, Qbert 12146, SpaceInvaders 907).
PUBLISHED: dict[tuple[str, str], list[tuple[str, str]]] = {
    ("sac", "HalfCheetah-v5"): [
        ("CleanRL 1.0.0 docs (2022), v2, 1M, training return", "10310 ± 1873"),
        ("SAC paper (2018)", "~11250"),
    ],
    ("sac", "Walker2d-v5"): [
        ("CleanRL 1.0.0 docs (2022), v2, 1M, training return", "4418 ± 593"),
        ("SAC paper (2018)", "~4800"),
    ],
    ("sac", "Hopper-v5"): [
        ("CleanRL 1.0.0 docs (2022), v2, 1M, training return", "2686 ± 762"),
        ("SAC paper (2018)", "~3250"),
    ],
    ("td3", "Hopper-v5"): [("TD3 paper (2018), v1, 1M, max average return", "3564 ± 115")],
    # Bhatt et al., ICLR 2024: evaluation return at 100k env steps, MuJoCo v4, 10 seeds, CrossQ and the SAC
    # baseline of the same paper
    **{
        ("crossq", env): [("CrossQ paper (2024), v4, 100k, 10 seeds", crossq), ("SAC in the CrossQ paper, 100k", sac)]
        for env, crossq, sac in (
            ("Hopper-v5", "2754", "1103"),
            ("Walker2d-v5", "3253", "690"),
            ("Humanoid-v5", "2828", "632"),
        )
    },
    ("td3", "HalfCheetah-v5"): [("TD3 paper (2018), v1, 1M, max average return", "9637 ± 859")],
    ("td3", "Walker2d-v5"): [("TD3 paper (2018), v1, 1M, max average return", "4683 ± 540")],
    ("ppo", "Hopper-v5"): [("DI-engine docs (2022), v3, best mean", "3000")],
    ("ppo", "Walker2d-v5"): [("DI-engine docs (2022), v3, best mean", "3000")],
    ("ppo", "HalfCheetah-v5"): [("DI-engine docs (2022), v3, best mean", "3500")],
    **{
        ("ppo", f"{game}NoFrameskip-v4"): [("DI-engine docs (2022), NoFrameskip-v4, best mean", figure)]
        for game, figure in DI_ENGINE_ATARI.items()
    },
    **{
        ("ppo", f"ALE/{game}-v5"): [("DI-engine docs (2022), NoFrameskip-v4 (no sticky actions), best mean", figure)]
        for game, figure in DI_ENGINE_ATARI.items()
    },
    ("dreamer_v2", "dmc_walker_walk"): [("DreamerV2 official scores (2022), DMC vision, 1M frames", "~950")],
    # the DreamerV2 authors' published curves (danijar/dreamerv2, scores/dmc-vision-dreamerv2.json, May 2022): 956 at 1M
    # frames, mean of 5 seeds' last evaluation there. The DreamerV3 authors' (danijar/dreamerv3,
    # scores/*-dreamerv3.json.gz, April 2024): the mean return of
    # the episodes in the last 10% of the budget, mean ± std over seeds (benchmarks/dreamer_v3_published.py)
    **{
        ("dreamer_v3", env): [("DreamerV3 official scores (2024), 400k frames, 5 seeds", figure)]
        for env, figure in (
            ("PongNoFrameskip-v4", "-4.2 ± 3.1"),
            ("BreakoutNoFrameskip-v4", "9.0 ± 1.9"),
            ("BoxingNoFrameskip-v4", "79.4 ± 6.4"),
            ("MsPacmanNoFrameskip-v4", "1525.8 ± 269.1"),
        )
    },
    ("dreamer_v3", "dmc_walker_walk"): [
        ("DreamerV3 official scores (2024), DMC vision, 1M frames, 10 seeds", "960.6 ± 2.1")
    ],
    ("dreamer_v3", "dmc_cartpole_swingup"): [
        ("DreamerV3 official scores (2024), DMC vision, 1M frames, 10 seeds", "860.1 ± 11.9")
    ],
}


# -- one run of the suite -------------------------------------------------------------------------------
@dataclasses.dataclass
class Job:
    suite: str
    entry: Entry
    seed: int
    run_dir: Path
    total_steps: int
    proc: subprocess.Popen | None = None
    started: float = 0.0  # monotonic, this attempt
    start_step: int = 0  # the step this attempt began at
    log: Any = None

    @property
    def process(self) -> subprocess.Popen:
        """The running attempt's process."""
        assert self.proc is not None, "started"
        return self.proc

    @property
    def label(self) -> str:
        return f"{self.entry.label} {self.entry.env_id} seed {self.seed}"

    def state(self) -> dict:
        return read_state(self.run_dir)

    def save_state(self, **changes: Any) -> None:
        state = {**self.state(), **changes}
        tmp = self.run_dir / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.run_dir / STATE_FILE)

    def finished(self) -> bool:
        """Trained to the target and finally evaluated (what ``Run.finish`` leaves behind)."""
        state = self.state()
        return bool(state.get("done")) and int(state.get("steps", -1)) >= self.total_steps

    def checkpoint_step(self) -> int | None:
        """The step of the run's latest checkpoint (what a resume continues from), or None."""
        from heron.runtime import checkpoint as ckpt

        found = ckpt.step_checkpoints(self.run_dir / "checkpoints")
        return found[-1][0] if found and (self.run_dir / "config.yaml").is_file() else None

    def has_checkpoint(self) -> bool:
        return self.checkpoint_step() is not None

    def command(self, threads: int, device: str) -> list[str]:
        base = [sys.executable, "-m", "heron", "train"]
        if self.has_checkpoint():
            return base + [
                "--resume",
                str(self.run_dir),
                "--total-steps",
                str(self.total_steps),
                "--torch-threads",
                str(threads),
            ]  # this bench's division of the cores
        flags = [
            "--env-id",
            self.entry.env_id,
            "--preset",
            *self.entry.presets,
            "--total-steps",
            str(self.total_steps),
            "--seed",
            str(self.seed),
            "--run-dir",
            str(self.run_dir),
            "--torch-threads",
            str(threads),
            "--progress",
            "log",
            "--device",
            device,
        ]
        for key, value in self.entry.overrides:
            flags.append(f"--{key.replace('_', '-')}")
            if isinstance(value, tuple):  # a list flag: one argument per value
                flags += [str(v) for v in value]
            else:
                flags.append(str(value).lower() if isinstance(value, bool) else str(value))
        return base + [self.entry.algo] + flags

    def current_step(self) -> int:
        return last_logged_step(self.run_dir / "metrics.csv")


def read_state(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}


def last_logged_step(path: Path) -> int:
    """The latest step among the last whole rows of a growing metrics.csv, reading only its tail (an
    evaluation from a worker process, ``--eval-async``, lands after rows of later steps)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            tail = f.read().decode(errors="replace")
    except OSError:
        return 0
    heads = (line.split(",", 1)[0] for line in tail.split("\n")[1:-1])  # the ends may be cut
    return max((int(h) for h in heads if h.isdigit()), default=0)


def eval_summary(run_dir: Path) -> tuple[int, float, float, float] | None:
    """(step, final mean, final std, best mean) of a run's deterministic evaluations, or None."""
    rows = complete_rows(run_dir / "eval.csv", 5)
    if not rows:
        return None
    step, mean, std = int(rows[-1][0]), float(rows[-1][1]), float(rows[-1][2])
    return step, mean, std, best_logged_eval(run_dir / "eval.csv")


def train_summary(run_dir: Path, window: float = TRAIN_WINDOW) -> float | None:
    """The mean return of the training episodes (``charts/episodic_return``, the stochastic policy)
    that ended in the last ``window`` of the run's logged steps: the figure CleanRL's tables report,
    beside our deterministic evaluations. None without such episodes."""
    episodes = []
    for row in complete_rows(run_dir / "metrics.csv", 4):
        if row[2] == "charts/episodic_return":
            try:
                episodes.append((int(row[0]), float(row[3])))
            except ValueError:
                pass
    if not episodes:
        return None
    start = max(step for step, _ in episodes) * (1 - window)
    last = [ret for step, ret in episodes if step >= start]
    return sum(last) / len(last)


# -- choosing the runs --------------------------------------------------------------------------------
def suite_entries(suite: str, only: Iterable[str] = ()) -> list[Entry]:
    if suite not in SUITES:
        close = difflib.get_close_matches(suite, SUITES, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise HeronError(f"unknown suite {suite!r}{hint}; choose from {', '.join(SUITES)}")
    entries = SUITES[suite]
    only = [o.lower() for o in only]
    if only:
        entries = [e for e in entries if any(o in f"{e.algo} {e.label} {e.env_id}".lower() for o in only)]
        if not entries:
            raise HeronError(
                f"--only {' '.join(only)} matches no entry of {suite}: "
                f"{', '.join(f'{e.label} {e.env_id}' for e in SUITES[suite])}"
            )
    return entries


def check_entries(entries: list[Entry], steps: int | None) -> None:
    """Every entry's config and env, before anything starts: a missing extra or a bad value is one
    line and exit 2, not a failed run an hour in."""
    from heron import api, registry
    from heron.envs.ids import check_env_id

    for e in entries:
        cfg = api.make_config(
            e.algo, e.presets, None, env_id=e.env_id, total_steps=steps or e.total_steps, **dict(e.overrides)
        )
        check_env_id(cfg.env_id)
        registry.get(e.algo).check(cfg)


def git_commit() -> str:
    """The commit of heron's source tree (with ``-dirty`` for uncommitted changes): from ``heron/_commit.py`` in a
    tree ``git archive`` exported, from git in a checkout; '' when neither knows."""
    if not COMMIT.startswith("$"):  # exported: the tree may sit inside some other repository, so ask no git
        return COMMIT[:12]
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if head.returncode:
            return ""
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def _duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, m, s = seconds // 3600, seconds % 3600 // 60, seconds % 60
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


# -- running a suite ----------------------------------------------------------------------------------
def suite_label(suite: str, precision: str = "32") -> str:
    """The name a suite's runs and rows go under: the suite's, with the precision when it is not
    float32 (``mujoco-sac.bf16-mixed``), so runs at two precisions never mix in one table."""
    return suite if precision == "32" else f"{suite}.{precision}"


def run_suite(
    suite: str,
    seeds: list[int],
    out: str | Path = "bench",
    parallel: int = 1,
    steps: int | None = None,
    only: Iterable[str] = (),
    device: str = "auto",
    status_every: float = 60.0,
    dry_run: bool = False,
    threads: int = 0,
    echo: Any = print,
    precision: str = "32",
) -> int:
    """Run (or continue) a suite; returns the exit code: 0 when every run finished, 1 when some
    failed (the others still ran), 130 when interrupted (every running child checkpoints first).
    ``precision`` is every run's ``--precision``; its runs go under ``suite_label``."""
    from heron.accel.precision import check

    check(precision, device)
    if parallel < 1:
        raise HeronError(f"--parallel must be at least 1, got {parallel}")
    if threads < 0:
        raise HeronError(f"--threads must be 0 (divide the cores) or positive, got {threads}")
    if steps is not None and steps <= 0:
        raise HeronError(f"--steps must be positive, got {steps}")
    if not seeds:
        raise HeronError("--seeds needs at least one seed")
    entries = suite_entries(suite, only)
    check_entries(entries, steps)
    out = Path(out)
    if precision != "32":
        entries = [dataclasses.replace(e, overrides=(*e.overrides, ("precision", precision))) for e in entries]
    suite = suite_label(suite, precision)  # from here on, the name its runs, rows and table go under
    suite_dir = out / suite
    jobs = [Job(suite, e, s, suite_dir / e.name(s), steps or e.total_steps) for e in entries for s in seeds]
    n_cores = len(usable_cpus())
    others = None if threads else others_now()  # a run's count is fixed at its start
    busy = min(busy_cores(others), n_cores - 1)
    threads = threads or max(1, (n_cores - busy) // parallel)
    if busy:
        echo(
            f"heron bench: note: other processes keep {others:.1f} of {n_cores} cores busy: {threads} torch "
            "thread(s) per run (--threads N to choose)"
        )
    if parallel * threads > n_cores - busy:
        echo(
            f"heron bench: note: {parallel} run(s) x {threads} thread(s) on {n_cores - busy} free cores: they "
            "compete for cores, and torch slows down badly when its threads wait for one"
        )
    pending = []
    for job in jobs:
        if job.finished():
            echo(f"[done] {job.label}: finished earlier ({job.run_dir})")
        else:
            pending.append(job)
    if dry_run:
        for job in pending:
            echo(" ".join(job.command(threads, device)))
        return 0
    if pending:
        (suite_dir / "logs").mkdir(parents=True, exist_ok=True)
        echo(
            f"heron bench {suite}: {len(jobs)} runs ({len(jobs) - len(pending)} finished earlier), {parallel} at a "
            f"time, {threads} torch thread(s) each; results in {out}"
        )
    commit = git_commit()
    running: list[Job] = []
    failed: list[Job] = []
    interrupted = False

    def on_signal(signum, frame):
        nonlocal interrupted
        if interrupted:  # a second Ctrl-C: the children get it again, and we wait no more politely
            for job in running:
                _signal(job, signal.SIGTERM)
            return
        interrupted = True
        echo("heron bench: stopping; each running run writes a checkpoint first (give the same command to continue)")
        for job in running:
            _signal(job, signal.SIGINT)

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    last_status = last_save = time.monotonic()
    try:
        while (pending and not interrupted) or running:
            while pending and len(running) < parallel and not interrupted:
                job = pending.pop(0)
                _start(job, threads, device, echo)
                running.append(job)
            time.sleep(0.2)
            for job in list(running):
                code = job.process.poll()
                if code is None:
                    continue
                running.remove(job)
                _ended(job, code, suite, commit, out, failed, echo)
            now = time.monotonic()
            if now - last_save >= 10:  # a lost machine loses at most 10 s of each run's wall time
                last_save = now
                for job in running:
                    job.save_state(wall_s=_wall(job))
            if running and status_every > 0 and now - last_status >= status_every:
                last_status = now
                _status(suite, jobs, running, pending, echo)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        for job in running:  # only on an exception of our own: leave no child behind
            _signal(job, signal.SIGTERM)
            job.process.wait()
    write_report(out, [suite])
    done = sum(job.finished() for job in jobs)
    echo(f"heron bench {suite}: {done}/{len(jobs)} runs finished; {out / 'results.csv'}, {out / (suite + '.md')}")
    if interrupted:
        return 130
    return 1 if failed else 0


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the bench dies, however it dies, so no orphan
    keeps training (and holding its run's lock) after a SIGKILL of the bench."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _signal(job: Job, sig: int) -> None:
    try:
        job.process.send_signal(sig)
    except (OSError, ProcessLookupError):
        pass


def _wall(job: Job) -> float:
    """Wall seconds of the run over all its attempts, this one included."""
    return float(job.state().get("wall_before", 0.0)) + (time.monotonic() - job.started)


def _start(job: Job, threads: int, device: str, echo: Any) -> None:
    cmd = job.command(threads, device)
    resumed = "--resume" in cmd
    state = job.state() if job.run_dir.exists() else {}
    job.run_dir.mkdir(parents=True, exist_ok=True)
    job.save_state(
        wall_before=float(state.get("wall_s", 0.0)),
        attempts=int(state.get("attempts", 0)) + 1,
        done=False,
        total_steps=job.total_steps,
        command=cmd,
    )
    job.start_step = (job.checkpoint_step() or 0) if resumed else 0
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    job.log = open(job.run_dir.parent / "logs" / f"{job.run_dir.name}.log", "a")
    job.log.write(f"\n$ {' '.join(cmd)}\n")
    job.log.flush()
    # its own process group: a Ctrl-C at the terminal reaches the bench only, which asks each child once
    job.proc = subprocess.Popen(
        cmd,
        stdout=job.log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )
    job.started = time.monotonic()
    how = f"resuming at step {job.start_step}" if resumed else "starting"
    echo(f"[start] {job.label}: {how} -> {job.total_steps} steps ({job.run_dir})")


def _ended(job: Job, code: int, suite: str, commit: str, out: Path, failed: list, echo: Any) -> None:
    job.log.close()
    wall = _wall(job)
    summary = eval_summary(job.run_dir)
    if code == 0 and summary is not None and summary[0] >= job.total_steps:
        step, final, std, best = summary
        train = train_summary(job.run_dir)
        job.save_state(
            wall_s=wall, done=True, steps=step, final_return=final, final_std=std, best_return=best, train_return=train
        )
        record(
            out / "results.csv",
            [
                suite,
                job.entry.label,
                job.entry.env_id,
                job.seed,
                step,
                f"{final:.2f}",
                f"{std:.2f}",
                f"{best:.2f}",
                f"{wall:.0f}",
                __version__,
                commit,
                "" if train is None else f"{train:.2f}",
            ],
        )
        echo(f"[done] {job.label}: {step} steps in {_duration(wall)}; final {final:.1f} +- {std:.1f}, best {best:.1f}")
        return
    job.save_state(wall_s=wall, done=False, last_exit=code)
    log = job.run_dir.parent / "logs" / f"{job.run_dir.name}.log"
    if code in (130, -signal.SIGINT, -signal.SIGTERM):
        echo(f"[stopped] {job.label} at step {job.current_step()}; it resumes from its checkpoint next time")
        return
    failed.append(job)
    echo(f"[failed] {job.label}: exit {code}: {_last_line(log)} (log: {log})")


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


def _status(suite: str, jobs: list[Job], running: list[Job], pending: list[Job], echo: Any) -> None:
    rate_sum, left = 0.0, 0
    for job in running:
        step = job.current_step()
        elapsed = time.monotonic() - job.started
        rate = max(0, step - job.start_step) / elapsed if elapsed > 0 else 0.0
        rate_sum += rate
        left += max(0, job.total_steps - step)
        eta = f", {_duration((job.total_steps - step) / rate)} left" if rate > 0 else ""
        echo(f"  {job.label}: {step}/{job.total_steps} ({100 * step / job.total_steps:.0f}%), {rate:.0f} steps/s{eta}")
    left += sum(job.total_steps - job.current_step() for job in pending)
    done = sum(job.finished() for job in jobs)
    eta = f"; about {_duration(left / rate_sum)} left" if rate_sum > 0 else ""
    echo(f"heron bench {suite}: {done}/{len(jobs)} done, {len(running)} running, {len(pending)} waiting{eta}")


def record(path: Path, row: list) -> None:
    """Add a run's row to results.csv, replacing an earlier row of the same (suite, algo, env, seed)."""
    key = [str(v) for v in row[:4]]
    rows = [r for r in _read_rows(path) if r[:4] != key]
    rows.append([str(v) for v in row])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_csv(path, RESULTS_HEADER, rows)


def _read_rows(path: Path) -> list[list[str]]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if rows and rows[0] == _EARLIER_HEADER:  # written before train_return: that column left empty
        return [r + [""] for r in rows[1:] if len(r) == len(_EARLIER_HEADER)]
    if not rows or rows[0][: len(RESULTS_HEADER)] != RESULTS_HEADER:
        raise HeronError(f"{path} is not a heron bench results file (header {rows[0] if rows else 'missing'})")
    return [r for r in rows[1:] if len(r) == len(RESULTS_HEADER)]


# -- the report -------------------------------------------------------------------------------------
def read_results(path: str | Path) -> list[dict]:
    out = []
    for r in _read_rows(Path(path)):
        row: dict[str, Any] = dict(zip(RESULTS_HEADER, r))
        try:
            for key in ("seed", "steps"):
                row[key] = int(row[key])
            for key in ("final_return", "final_std", "best_return", "wall_s"):
                row[key] = float(row[key])
            row["train_return"] = float(row["train_return"]) if row["train_return"] else None
        except ValueError as exc:
            raise HeronError(f"{path}: a row that does not parse ({', '.join(r)}): {exc}") from None
        if row["train_return"] is None:  # empty (a row from before the column): from its run, if it is here
            row["train_return"] = train_summary(Path(path).parent / row["suite"] / _run_name(row))
        out.append(row)
    return out


def _run_name(row: dict) -> str:
    return Entry(row["algo"], row["env_id"], (), 0).name(row["seed"])


def _mean_std(values: list) -> str:
    if any(v is None for v in values):
        return "-"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))  # sample std over seeds
    return f"{mean:.1f} ± {std:.1f}"


def unfinished_runs(out: Path, suite: str, rows: list[dict]) -> list[dict]:
    """The runs of a suite with evaluations but no row in results.csv yet (stopped, or training now),
    each with where it stands: what a suite that takes days shows in its table meanwhile."""
    suite_dir = out / suite
    if not suite_dir.is_dir():
        return []
    finished = {_run_name(r) for r in rows if r["suite"] == suite}
    found = []
    for run_dir in sorted(p for p in suite_dir.iterdir() if p.is_dir() and p.name not in finished):
        summary = eval_summary(run_dir)
        try:
            algo, cfg = read_config(run_dir)
        except HeronError:
            continue
        if summary is None:
            continue
        step, mean, std, best = summary
        found.append(
            dict(
                env_id=cfg.get("env_id", "?"),
                algo=run_dir.name.split("__")[0] if "__" in run_dir.name else algo,  # the entry's label
                seed=cfg.get("seed", "?"),
                steps=max(step, last_logged_step(run_dir / "metrics.csv")),
                total_steps=int(cfg.get("total_steps", 0)),
                eval_step=step,
                final_return=mean,
                final_std=std,
                best_return=best,
                train_return=train_summary(run_dir),
            )
        )
    return found


def table(rows: list[dict], suite: str, unfinished: Sequence[dict] = ()) -> str:
    """The markdown table of one suite: per (env, algo), mean ± standard deviation over seeds of the
    final and the best deterministic evaluation, beside the published figures; then, one per line,
    the ``unfinished`` runs (``unfinished_runs``) as far as they got, kept out of the means."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        if row["suite"] == suite:
            groups.setdefault((row["env_id"], row["algo"]), []).append(row)
    lines = [
        f"### {suite}",
        "",
        "| Env | Algorithm | Steps | Seeds | Final eval | Best eval | Training return (last 10%) | Published "
        "| Wall time per run |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for (env, algo), group in groups.items():
        group.sort(key=lambda r: r["seed"])
        published = "; ".join(f"{fig} ({src})" for src, fig in PUBLISHED.get((algo, env), [])) or "-"
        steps = sorted({r["steps"] for r in group})
        lines.append(
            f"| {env} | {algo} | {'/'.join(f'{s:,}' for s in steps)} | {len(group)} "
            f"| {_mean_std([r['final_return'] for r in group])} | {_mean_std([r['best_return'] for r in group])} "
            f"| {_mean_std([r['train_return'] for r in group])} | {published} "
            f"| {_duration(sum(r['wall_s'] for r in group) / len(group))} |"
        )
    if len(lines) == 4:
        lines.append("| (no finished runs) | | | | | | | | |")
    commits = sorted({r["git_commit"] or "?" for r in rows if r["suite"] == suite})
    lines += [
        "",
        f"Final: the deterministic evaluation at the end of training; best: the highest periodic "
        f"evaluation; training return: the mean return of the training episodes (the exploring policy) "
        f"that ended in the last 10% of the steps, the figure CleanRL's tables give. Mean ± sample "
        f"standard deviation over seeds. heron commit(s): {', '.join(commits) or '-'}.",
    ]
    if unfinished:
        lines += [
            "",
            "Not finished yet (stopped or training; not in the means above). The same command continues them:",
            "",
            "| Env | Algorithm | Seed | Steps so far | Latest eval | Best eval | Training return (last 10% so far) |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for run in unfinished:
            train = "-" if run["train_return"] is None else f"{run['train_return']:.1f}"
            lines.append(
                f"| {run['env_id']} | {run['algo']} | {run['seed']} | {run['steps']:,} of "
                f"{run['total_steps']:,} | {run['final_return']:.1f} ± {run['final_std']:.1f} "
                f"(at {run['eval_step']:,}) | {run['best_return']:.1f} | {train} |"
            )
    return "\n".join(lines) + "\n"


def write_report(out: str | Path, suites: list[str] | None = None, plots: bool = True) -> list[Path]:
    """``SUITE.md`` (and, given matplotlib and the run directories, ``plots/SUITE/<env>.png``) for
    ``suites``, or for each suite of ``OUT/results.csv`` and each suite directory under ``OUT`` (one
    whose runs have not finished yet); returns the files written."""
    out = Path(out)
    results = out / "results.csv"
    begun = {p.name for p in out.iterdir() if p.is_dir() and p.name.split(".")[0] in SUITES} if out.is_dir() else set()
    if not results.is_file() and suites is None and not begun:
        raise HeronError(f"{results} not found: run a suite first (heron bench SUITE --out {out})")
    rows = read_results(results) if results.is_file() else []  # none finished yet: the unfinished ones
    written = []
    for suite in suites if suites is not None else sorted({r["suite"] for r in rows} | begun):
        path = out / f"{suite}.md"
        path.write_text(table(rows, suite, unfinished_runs(out, suite, rows)))
        written.append(path)
        if plots:
            written += _plots(out, suite, [r for r in rows if r["suite"] == suite])
    return written


def _plots(out: Path, suite: str, rows: list[dict]) -> list[Path]:
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return []
    from heron.plot import plot_bands

    by_env: dict[str, dict[str, list[str]]] = {}
    for row in rows:
        run_dir = out / suite / _run_name(row)
        if (run_dir / "eval.csv").is_file():
            by_env.setdefault(row["env_id"], {}).setdefault(row["algo"], []).append(str(run_dir))
    written = []
    for env, groups in by_env.items():
        path = out / "plots" / suite / f"{safe_name(env)}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        plot_bands(
            groups,
            str(path),
            title=f"{env} ({suite})",
            references=[ref for algo in groups for ref in published_lines(algo, env)],
        )
        written.append(path)
    return written


def published_lines(algo: str, env_id: str) -> list[tuple[str, float]]:
    """The published figures of (algo, env) as (label, return) for a plot's reference lines: the
    figure's mean ("~11250", "3564 ± 115" and "20" give 11250, 3564 and 20)."""
    lines = []
    for source, figure in PUBLISHED.get((algo, env_id), []):
        try:
            value = float(figure.split("±")[0].strip().lstrip("~").replace(",", ""))
        except ValueError:
            continue
        lines.append((f"{source}: {figure}", value))
    return lines
