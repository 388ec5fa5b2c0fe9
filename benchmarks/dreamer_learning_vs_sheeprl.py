#!/usr/bin/env python
"""DreamerV2 and DreamerV3 sample efficiency: heron beside sheeprl 0.8.4 at equal env steps, over seeds.

    python benchmarks/dreamer_learning_vs_sheeprl.py --task cartpole --seeds 1 2 3 4 5 --steps 6000
    python benchmarks/dreamer_learning_vs_sheeprl.py --task pendulum --seeds 1 2 3 --steps 10000
    python benchmarks/dreamer_learning_vs_sheeprl.py --algo dreamer_v3 --task cartpole --seeds 1 2 3 --steps 5000

DreamerV3 (``--algo dreamer_v3``): both sides with their DreamerV3 defaults (the paper's fixed set)
and the same small model (``TASKS_V3``, heron's ``--preset vector``), one gradient step every 2 env
steps (replay ratio 0.5) on 16 x 64 sequences, no pretraining.

Both sides train the same small DreamerV2 from vectors with the same schedule and hyperparameters
(``TASKS`` below, in each side's own flags): one env, ``learning_starts`` random steps, then
``pretrain`` gradient steps at once and one gradient step every ``train_every`` env steps (sheeprl's
replay ratio 1 / train_every) on 16 x 50 sequences from a sequential buffer (windows may cross
episode ends, the state resets there: CartPole's first episodes are shorter than a sequence). Each
run has one torch thread; ``--parallel`` runs go at once (2 on this 2-core machine: a learning
comparison, not a timing).

The training return of a seed in a bin of ``--bin`` env steps is the mean of its episodes that end
in the bin, or, when none ends there (a 500-step CartPole episode spans a bin), the return of its
last finished episode. The table gives, per bin, the mean over seeds and its standard error.
heron also evaluates its policy deterministically (``--eval-episodes`` episodes, the clamped mean /
argmax action) every ``--eval-every`` steps; sheeprl is not evaluated (its greedy test is one
episode at the end). sheeprl runs with the Python of a venv that has it (``--sheeprl-python``) and
its returns come from its printed episode lines; heron's from its metrics.csv and eval.csv.

Writes ``--out`` (a JSON with every return) and, with matplotlib, a PNG of the two mean curves
with their standard-error bands. ``--runs benchmarks/results/dreamer_curves.csv`` keeps each
finished run's returns (one row per side and seed, with its settings, heron's commit, the machine
and the command) in that file, and takes a run found there instead of running it again: seeds run on
different days or machines add up to one table; ``results_tables.py --plot`` draws the docs' images of the
kept DreamerV3 runs from that file (``DREAMER_PLOTS``: a band of one standard deviation over the seeds, where the
PNG here has one standard error). ``--record benchmarks/results/summaries.csv --record-from N`` puts
the bins from N env steps on in the summaries file the docs' tables come from, in place of the task's
rows there, with the command that made them.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# One small model and schedule per task, in heron's flag names; SHEEPRL_KEYS maps them to sheeprl's.
COMMON = dict(
    hidden_size=128,
    recurrent_state_size=128,
    dense_units=64,
    mlp_layers=2,
    stochastic_size=16,
    discrete_size=16,
    per_rank_batch_size=16,
    sequence_length=50,
)
TASKS = {
    # CartPole: continue model, 1024 random steps, a gradient step every 2 steps
    "cartpole": dict(
        env_id="CartPole-v1", use_continues=True, learning_starts=1024, pretrain_steps=100, train_every=2, **COMMON
    ),
    # continuous actions (truncated normal, dynamics backpropagation); no terminations: no continue model
    "pendulum": dict(
        env_id="Pendulum-v1", use_continues=False, learning_starts=1000, pretrain_steps=100, train_every=2, **COMMON
    ),
}
# DreamerV3: the small model of heron's --preset vector, the paper's hyperparameters otherwise
COMMON_V3 = dict(
    hidden_size=128,
    recurrent_state_size=128,
    dense_units=64,
    mlp_layers=2,
    stochastic_size=16,
    discrete_size=16,
    per_rank_batch_size=16,
    sequence_length=64,
    learning_starts=1024,
    pretrain_steps=0,
    replay_ratio=0.5,
)
TASKS_V3 = {"cartpole": dict(env_id="CartPole-v1", **COMMON_V3), "pendulum": dict(env_id="Pendulum-v1", **COMMON_V3)}
SHEEPRL_KEYS = {
    "hidden_size": [
        "algo.world_model.transition_model.hidden_size",
        "algo.world_model.representation_model.hidden_size",
    ],
    "recurrent_state_size": ["algo.world_model.recurrent_model.recurrent_state_size"],
    "dense_units": ["algo.dense_units"],
    "mlp_layers": ["algo.mlp_layers"],
    "stochastic_size": ["algo.world_model.stochastic_size"],
    "discrete_size": ["algo.world_model.discrete_size"],
    "per_rank_batch_size": ["algo.per_rank_batch_size"],
    "sequence_length": ["algo.per_rank_sequence_length"],
    "use_continues": ["algo.world_model.use_continues"],
    "learning_starts": ["algo.learning_starts"],
    "pretrain_steps": ["algo.per_rank_pretrain_steps"],
}


def task_of(args) -> dict:
    return dict((TASKS if args.algo == "dreamer_v2" else TASKS_V3)[args.task])


def heron_argv(args, seed: int, run_dir: Path, extra: str = "") -> list[str]:
    task = task_of(args)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in task.items()]
    return [
        sys.executable,
        "-m",
        "heron",
        "train",
        args.algo,
        *flags,
        "--buffer-type",
        "sequential",
        "--buffer-size",
        "100000",
        "--total-steps",
        str(args.steps),
        "--seed",
        str(seed),
        "--eval-every",
        str(args.eval_every),
        "--eval-episodes",
        str(args.eval_episodes),
        "--checkpoint-every",
        "0",
        "--torch-threads",
        "1",
        "--progress",
        "none",
        "--run-dir",
        str(run_dir),
        *args.heron_flags.split(),
        *extra.split(),
    ]


def sheeprl_argv(args, seed: int, root: Path) -> list[str]:
    task = task_of(args)
    overrides = [f"{key}={task[k]}" for k, keys in SHEEPRL_KEYS.items() for key in keys if k in task]
    ratio = task["replay_ratio"] if "replay_ratio" in task else 1 / task["train_every"]
    return [
        args.sheeprl_python,
        "-m",
        "sheeprl",
        f"exp={args.algo}",
        "env=gym",
        f"env.id={task['env_id']}",
        "env.num_envs=1",
        "env.sync_env=True",
        "env.capture_video=False",
        "algo.cnn_keys.encoder=[]",
        "algo.cnn_keys.decoder=[]",
        "algo.mlp_keys.encoder=[state]",
        "algo.mlp_keys.decoder=[state]",
        *overrides,
        f"algo.replay_ratio={ratio}",
        f"algo.total_steps={args.steps}",
        *(["buffer.type=sequential"] if args.algo == "dreamer_v2" else []),
        "buffer.size=100000",
        "buffer.checkpoint=False",
        "fabric.accelerator=cpu",
        "fabric.devices=1",
        "num_threads=1",
        f"seed={seed}",
        "algo.run_test=False",
        "checkpoint.every=100000000",
        "checkpoint.save_last=False",
        "model_manager.disabled=True",
        "metric.log_level=1",
        f"root_dir={root}",
        *args.sheeprl_flags.split(),
    ]


def heron_returns(run_dir: Path) -> dict:
    with open(run_dir / "metrics.csv") as f:
        train = [
            (int(r["step"]), float(r["value"])) for r in csv.DictReader(f) if r["metric"] == "charts/episodic_return"
        ]
    evals = []
    if (run_dir / "eval.csv").is_file():
        with open(run_dir / "eval.csv") as f:
            evals = [(int(r["step"]), float(r["mean_return"])) for r in csv.DictReader(f)]
    return {"train": train, "eval": evals}


def sheeprl_returns(log: Path) -> dict:
    text = log.read_text()
    train = [(int(m[1]), float(m[2])) for m in re.finditer(r"policy_step=(\d+), reward_env_\d+=\[?([-\d.e]+)", text)]
    return {"train": train, "eval": []}


RUN_KEYS = ("algo", "env_id", "total_steps", "eval_every", "eval_episodes", "side", "flags", "seed")
RUN_FIELDS = (*RUN_KEYS, "train", "evals", "heron_version", "machine", "recorded", "command")


def side_flags(args, impl: str) -> str:
    """The flags a side's runs take beyond the task's (part of what identifies a kept run)."""
    return {
        "heron": args.heron_flags,
        "sheeprl": args.sheeprl_flags,
        VARIANT: " ".join(f for f in (args.heron_flags, args.variant) if f),
    }[impl]


def run_key(args, impl: str, seed: int) -> tuple[str, ...]:
    values = (
        args.algo,
        task_of(args)["env_id"],
        args.steps,
        args.eval_every,
        args.eval_episodes,
        impl,
        side_flags(args, impl),
        seed,
    )
    return tuple(map(str, values))


def _pairs(text: str) -> list[tuple[int, float]]:
    return [(int(s), float(r)) for s, r in (item.split(":") for item in text.split())]


def load_runs(path: Path) -> dict[tuple[str, ...], dict]:
    """The kept runs of ``--runs`` by their key: {"train": [(step, return)], "eval": [...]}."""
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        return {
            tuple(r[k] for k in RUN_KEYS): {
                "train": _pairs(r["train"]),
                "eval": _pairs(r["evals"]),
                "heron_version": r["heron_version"],
            }
            for r in csv.DictReader(f)
        }


def keep_runs(args, finished: dict[tuple[str, int], dict], path: Path) -> None:
    """Write the runs finished in the work dir to ``--runs``, in place of the rows with their key."""
    rows = []
    if path.is_file():
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    version = heron_version()
    new = {
        run_key(args, impl, seed): {
            **dict(zip(RUN_KEYS, run_key(args, impl, seed))),
            "train": " ".join(f"{s}:{r:.2f}" for s, r in res["train"]),
            "evals": " ".join(f"{s}:{r:.2f}" for s, r in res["eval"]),
            "heron_version": version if impl != "sheeprl" else "",
            "machine": args.machine,
            "recorded": time.strftime("%Y-%m-%d"),
            "command": command_of(args),
        }
        for (impl, seed), res in finished.items()
    }
    rows = [r for r in rows if tuple(r[k] for k in RUN_KEYS) not in new] + list(new.values())
    rows.sort(key=lambda r: tuple(r[k] for k in RUN_KEYS[:-1]) + (int(r["seed"]),))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, RUN_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"kept {len(new)} runs in {path}", flush=True)


def heron_version() -> str:
    """The checkout's commit, with "+" when it has changes (what heron's runs were made with)."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "heron"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return commit + ("+" if dirty else "")


def run_jobs(jobs: list[tuple[str, int, list[str], Path]], parallel: int) -> None:
    """Run (impl, seed, argv, log) jobs, ``parallel`` at a time; a failure stops everything. A job
    that finished before in the same ``--work-dir`` (its ``LOG.done`` marker) is not run again, so
    an interrupted benchmark continues where it stopped when given the same command."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    pending, running = [job for job in jobs if not job[3].with_suffix(".done").exists()], []
    try:
        while pending or running:
            while pending and len(running) < parallel:
                impl, seed, argv, log = pending.pop(0)
                with open(log, "w") as f:
                    running.append(
                        (
                            impl,
                            seed,
                            log,
                            time.perf_counter(),
                            subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env),
                        )
                    )
                print(f"started {impl} seed {seed}", flush=True)
            for job in list(running):
                impl, seed, log, start, proc = job
                if proc.poll() is None:
                    continue
                running.remove(job)
                if proc.returncode != 0:
                    raise SystemExit(f"{impl} seed {seed} failed ({proc.returncode}):\n{log.read_text()[-3000:]}")
                log.with_suffix(".done").touch()
                print(f"finished {impl} seed {seed} in {time.perf_counter() - start:.0f} s", flush=True)
            time.sleep(1.0)
    finally:
        for *_, proc in running:  # interrupted: stop what this script started, and wait for it
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def per_bin(train: list[tuple[int, float]], steps: int, width: int) -> list[float | None]:
    """A seed's training return in each bin (module doc)."""
    out, last = [], None
    for lo in range(0, steps, width):
        ended = [r for s, r in train if lo < s <= lo + width]
        if ended:
            last = ended[-1]
        out.append(statistics.mean(ended) if ended else last)
    return out


def mean_se(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return statistics.mean(values), se


def table(results: dict[str, dict[int, dict]], steps: int, width: int) -> list[dict]:
    rows = []
    for i, lo in enumerate(range(0, steps, width)):
        row: dict = {"steps": f"{lo}-{min(lo + width, steps)}"}
        for impl, seeds in results.items():
            vals = [v for r in seeds.values() if (v := per_bin(r["train"], steps, width)[i]) is not None]
            m, se = mean_se(vals)
            row[impl] = {"mean": round(m, 1), "se": round(se, 1), "n": len(vals)}
        rows.append(row)
    return rows


def plot(rows: list[dict], impls: list[str], title: str, path: Path, labels: dict | None = None) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot", flush=True)
        return
    x = [int(r["steps"].split("-")[1]) for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for impl in impls:
        m = [r[impl]["mean"] for r in rows]
        se = [r[impl]["se"] for r in rows]
        ax.plot(x, m, label=(labels or {}).get(impl, impl))
        ax.fill_between(x, [a - b for a, b in zip(m, se)], [a + b for a, b in zip(m, se)], alpha=0.25)
    ax.set_xlabel("env steps")
    ax.set_ylabel("training episode return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}", flush=True)


ACTIONS = {"cartpole": "discrete", "pendulum": "continuous"}
VARIANT = "variant"  # --variant's runs: heron with more flags


def side_names(args) -> dict[str, str]:
    """Each side's name in the tables and the plot."""
    return {"heron": "heron", "sheeprl": "sheeprl 0.8.4", VARIANT: f"heron {args.variant}"}


def command_of(args) -> str:
    """The command line that makes these runs' table (the flags left at their defaults left out)."""
    flags = [] if args.algo == "dreamer_v2" else ["--algo", args.algo]
    flags += ["--task", args.task, "--seeds", *map(str, args.seeds), "--steps", str(args.steps)]
    for flag, value, default in (("--eval-every", args.eval_every, 5000), ("--bin", args.bin, 500)):
        if value != default:
            flags += [flag, str(value)]
    flags += [
        f'{flag}="{value}"'
        for flag, value in (
            ("--heron-flags", args.heron_flags),
            ("--sheeprl-flags", args.sheeprl_flags),
            ("--variant", args.variant),
        )
        if value
    ]
    flags += [flag for flag, skip in (("--skip-heron", args.skip_heron), ("--skip-sheeprl", args.skip_sheeprl)) if skip]
    return " ".join(["python benchmarks/dreamer_learning_vs_sheeprl.py", *flags])


def record(args, rows: list[dict], path: Path) -> None:
    """The table's bins from ``--record-from`` on, in the summaries file (``dreamer-vs-sheeprl``,
    ``dreamer-v3-vs-sheeprl``) in place of this task's rows there."""
    from results_tables import record_summaries

    table_name = args.record_table or ("dreamer-vs-sheeprl" if args.algo == "dreamer_v2" else "dreamer-v3-vs-sheeprl")
    env_id = task_of(args)["env_id"]
    columns = side_names(args)
    sides = " + ".join(str(max(row[impl]["n"] for row in rows)) for impl in columns if impl in rows[0])
    seeds = sorted(args.seeds)
    command = command_of(args)
    if args.runs:  # the table comes from the kept runs: the same command remakes it without running them
        runs = Path(args.runs).resolve()
        root = Path(__file__).resolve().parent.parent
        command += f" --runs {runs.relative_to(root) if runs.is_relative_to(root) else runs}"
    span = f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else ", ".join(map(str, seeds))
    new = []
    for row in rows:
        lo, hi = map(int, row["steps"].split("-"))
        if lo < args.record_from:
            continue
        label = f"{env_id} (vectors, {ACTIONS[args.task]}) | {args.steps:,} | {sides} | {lo:,}-{hi:,}"
        for impl, column in columns.items():
            if impl in row:
                new.append(
                    {
                        "table": table_name,
                        "row": label,
                        "column": column,
                        "value": f"{row[impl]['mean']:.1f} ± {row[impl]['se']:.1f}",
                        "seeds": span,
                        "machine": args.machine,
                        "recorded": time.strftime("%Y-%m-%d"),
                        "command": command,
                        "note": "training return of the episodes ending in the bin, mean ± standard error over seeds",
                    }
                )
    record_summaries(new, lambda r: r["table"] == table_name and r["row"].startswith(env_id + " "), path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algo", choices=["dreamer_v2", "dreamer_v3"], default="dreamer_v2")
    p.add_argument("--task", choices=sorted(TASKS), default="cartpole")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--steps", type=int, default=6000, help="env steps per run")
    p.add_argument("--bin", type=int, default=500, help="env steps per bin of the table")
    p.add_argument("--eval-every", type=int, default=5000, help="heron's deterministic evaluations")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--parallel", type=int, default=2, help="runs at once (one torch thread each)")
    p.add_argument("--heron-flags", default="", help='extra heron flags, e.g. --heron-flags="--lambda-rewards next"')
    p.add_argument("--sheeprl-flags", default="", help="extra sheeprl overrides")
    p.add_argument(
        "--variant",
        default="",
        help="heron flags of a third side, beside heron and sheeprl (e.g. "
        '--variant="--twohot-space symlog"): its runs are WORK_DIR/variant_SEED',
    )
    p.add_argument("--sheeprl-python", default="/work/bench/sheeprl-venv/bin/python")
    p.add_argument("--skip-sheeprl", action="store_true")
    p.add_argument("--skip-heron", action="store_true")
    p.add_argument(
        "--work-dir",
        default="",
        help="where runs go (default: a new temporary directory); runs "
        "that finished there before are kept, not run again",
    )
    p.add_argument("--out", default="", help="JSON of every return and the table (default: WORK_DIR/result.json)")
    p.add_argument("--plot", default="", help="PNG of the curves (default: WORK_DIR/curves.png)")
    p.add_argument(
        "--record",
        default="",
        help="put the table in this summaries CSV "
        "(benchmarks/results/summaries.csv), in place of the task's rows there",
    )
    p.add_argument("--record-from", type=int, default=0, help="--record: the bins from this many env steps on")
    p.add_argument(
        "--record-table",
        default="",
        help="--record: the summaries table (default: dreamer-vs-sheeprl, dreamer-v3-vs-sheeprl)",
    )
    p.add_argument(
        "--runs",
        default="",
        help="keep each finished run's returns in this CSV "
        "(benchmarks/results/dreamer_curves.csv) and take the runs found there instead of running them",
    )
    p.add_argument("--machine", default="2-core AMD EPYC VM, CPU", help="the machine, as --record and --runs write it")
    args = p.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix=f"{args.algo}_learning_{args.task}_"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"runs in {work}", flush=True)

    jobs = []
    for seed in args.seeds:  # interleaved, so that a parallel pair is one heron and one sheeprl run
        if not args.skip_heron:
            jobs.append(("heron", seed, heron_argv(args, seed, work / f"heron_{seed}"), work / f"heron_{seed}.log"))
        if not args.skip_sheeprl:
            jobs.append(
                ("sheeprl", seed, sheeprl_argv(args, seed, work / f"sheeprl_{seed}"), work / f"sheeprl_{seed}.log")
            )
        if args.variant:
            jobs.append(
                (
                    VARIANT,
                    seed,
                    heron_argv(args, seed, work / f"{VARIANT}_{seed}", args.variant),
                    work / f"{VARIANT}_{seed}.log",
                )
            )
    kept = load_runs(Path(args.runs)) if args.runs else {}
    taken = {
        (impl, seed)
        for impl, seed, _, log in jobs
        if not log.with_suffix(".done").exists() and run_key(args, impl, seed) in kept
    }
    if taken:
        print(
            "kept in " + args.runs + ": " + ", ".join(f"{impl} seed {seed}" for impl, seed in sorted(taken)), flush=True
        )
    jobs = [job for job in jobs if (job[0], job[1]) not in taken]
    for impl, seed, _, log in jobs:  # a run that did not finish starts again from nothing
        if not log.with_suffix(".done").exists():
            shutil.rmtree(work / f"{impl}_{seed}", ignore_errors=True)
    run_jobs(jobs, args.parallel)

    finished = {
        (impl, seed): sheeprl_returns(log) if impl == "sheeprl" else heron_returns(work / f"{impl}_{seed}")
        for impl, seed, _, log in jobs
    }
    if args.runs:
        keep_runs(args, finished, Path(args.runs))
    have = {**{(impl, seed): kept[run_key(args, impl, seed)] for impl, seed in taken}, **finished}
    results: dict[str, dict[int, dict]] = {}
    for impl in side_names(args):  # each side's seeds in order, run here or kept
        for seed in sorted(args.seeds):
            if (impl, seed) in have:
                results.setdefault(impl, {})[seed] = have[impl, seed]
    here = heron_version()  # the runs finished here were made with the checkout
    versions = {res.get("heron_version", here) for (impl, _), res in have.items() if impl != "sheeprl"}
    if len(versions) > 1:
        print("note: heron's runs come from more than one commit: " + ", ".join(sorted(versions)), flush=True)
    rows = table(results, args.steps, args.bin)
    impls = list(results)
    print("| env steps | " + " | ".join(f"{i} (mean +- s.e.)" for i in impls) + " |")
    print("|---|" + "---|" * len(impls))
    for row in rows:
        print(f"| {row['steps']} | " + " | ".join(f"{row[i]['mean']} +- {row[i]['se']}" for i in impls) + " |")
    for impl in [i for i in results if i != "sheeprl"]:
        name = side_names(args)[impl]
        for step in sorted({s for r in results[impl].values() for s, _ in r["eval"]}):
            vals = {seed: v for seed, r in results[impl].items() for s, v in r["eval"] if s == step}
            m, se = mean_se(list(vals.values()))
            print(
                f"{name} deterministic evaluation at {step} steps ({args.eval_episodes} episodes): "
                f"{m:.1f} +- {se:.1f}; per seed {json.dumps(vals)}"
            )
    out = Path(args.out or work / "result.json")
    out.write_text(
        json.dumps(
            {
                "args": vars(args),
                "tasks": task_of(args),
                "table": rows,
                "raw": {i: {str(s): r for s, r in seeds.items()} for i, seeds in results.items()},
            }
        )
    )
    print(f"wrote {out}", flush=True)
    if args.record:
        record(args, rows, Path(args.record))
    name = "DreamerV2" if args.algo == "dreamer_v2" else "DreamerV3"
    plot(
        rows,
        impls,
        f"{name} on {task_of(args)['env_id']}, {len(args.seeds)} seeds (mean +- s.e.)",
        Path(args.plot or work / "curves.png"),
        side_names(args),
    )


if __name__ == "__main__":
    main()
