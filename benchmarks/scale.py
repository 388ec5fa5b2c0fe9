#!/usr/bin/env python
"""Strong scaling of data-parallel training: one process against N processes under torchrun, at
equal env steps and equal optimizer updates (heron's flags keep their meaning under torchrun, so
the same command line is the same algorithm with its work split N ways).

Each configuration trains a fresh run; its training time is its total env steps at the rate measured
from the first logged row to the final checkpoint (evaluation off), so interpreter and torchrun
start-up and the first steps' one-off costs are left out (printed beside as start-up).
Strong-scaling efficiency is T1 / (N * TN): 100% when N processes are N times faster. Rounds
alternate the configurations, so a noisy machine hurts them alike.

On a CPU, threads are shared: ``--threads T`` gives the one process T torch threads and each of N
processes T / N (torch stalls when ranks' threads outnumber the cores). On GPUs pass ``--device
cuda``: rank r takes ``cuda:r`` (NCCL), and --threads only sets the CPU side.

    python benchmarks/scale.py --procs 1 2 -- ppo --preset classic --total-steps 100000
    python benchmarks/scale.py --procs 1 2 -- ppo --preset mujoco --env-id Hopper-v5 --total-steps 100000
    python benchmarks/scale.py --procs 1 2 -- sac --env-id Pendulum-v1 --total-steps 6000 --learning-starts 1000
    python benchmarks/scale.py --procs 1 2 4 8 --device cuda -- sac --preset mujoco --total-steps 50000
    # --precision values side by side (one process each):
    python benchmarks/scale.py --procs 1 --precision bf16-mixed -- sac --env-id Hopper-v5 --total-steps 4000
    # world size 1 against an earlier commit of heron (the cost of being distribution-aware):
    python benchmarks/scale.py --procs 1 --against REV -- sac --env-id Pendulum-v1 --total-steps 6000
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def run_once(
    heron_args: list[str],
    procs: int,
    threads: int,
    device: str,
    run_dir: Path,
    source: Path | None = None,
    precision: str | None = None,
) -> dict:
    """One training; returns its training time, start-up time, env steps and optimizer updates."""
    per_rank = max(1, threads // procs) if device == "cpu" else threads
    flags = [
        *heron_args,
        "--run-dir",
        str(run_dir),
        "--eval-every",
        "0",
        "--eval-episodes",
        "1",
        "--progress",
        "none",
        "--torch-threads",
        str(per_rank),
        "--device",
        device,
        "--checkpoint-minutes",
        "0",
        *(["--precision", precision] if precision else []),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(per_rank)}
    if source is not None:
        env["PYTHONPATH"] = str(source)
    launcher = (
        [sys.executable, "-m", "heron"]
        if procs == 1
        else [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(procs),
            "-m",
            "heron",
        ]
    )
    t0 = time.time()
    done = subprocess.run([*launcher, "train", *flags], env=env, capture_output=True, text=True, cwd=source or ROOT)
    wall = time.time() - t0
    if done.returncode != 0:
        sys.exit(f"training failed ({' '.join(launcher[-2:])} {procs} process(es)):\n{done.stderr[-3000:]}")
    ckpts = sorted((run_dir / "checkpoints").glob("step_*[0-9].pt"))
    state = torch.load(ckpts[-1], weights_only=True)
    steps = int(state["step"])
    # the rate from the first logged row to the final checkpoint: one-off costs of the first steps
    # (lazy imports, the first TensorBoard write, warm-up) stay out of it
    with open(run_dir / "metrics.csv") as f:
        first = next(row for row in csv.reader(f) if row and row[0].isdigit())
    rate = (steps - int(first[0])) / (ckpts[-1].stat().st_mtime - float(first[1]))
    train = steps / rate
    return {"train": train, "startup": wall - train, "steps": steps, "updates": int(state["n_updates"])}


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        usage="scale.py [--procs 1 2] [--threads T] [--device D] [--rounds R] -- ALGO FLAGS",
    )
    p.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    p.add_argument(
        "--threads",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="torch threads in all (CPU): the one process gets them all, N processes share them",
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--against", metavar="REV", help="also run one process of this git revision of heron")
    p.add_argument("--precision", nargs="+", metavar="P", help="compare these --precision values (one process)")
    argv = sys.argv[1:]
    if "--" not in argv:
        p.error("give the heron train arguments after --")
    cut = argv.index("--")
    args, heron_args = p.parse_args(argv[:cut]), argv[cut + 1 :]

    configs = [(f"{n} process{'es' if n > 1 else ''}", n, None, None) for n in args.procs]
    configs += [(f"1 process, --precision {pr}", 1, None, pr) for pr in args.precision or []]
    with tempfile.TemporaryDirectory() as tmp:
        if args.against:
            old = Path(tmp) / "against"
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), args.against],
                check=True,
                capture_output=True,
            )
            configs.append((f"1 process, heron {args.against}", 1, old, None))
        try:
            results: dict[str, list[dict]] = {name: [] for name, *_ in configs}
            for r in range(args.rounds):
                for i, (name, n, source, precision) in enumerate(configs):
                    out = run_once(
                        heron_args, n, args.threads, args.device, Path(tmp) / f"round{r}_config{i}", source, precision
                    )
                    results[name].append(out)
                    print(
                        f"round {r + 1}: {name}: {out['train']:.1f} s training ({out['steps']} steps, "
                        f"{out['updates']} updates), {out['startup']:.1f} s start-up",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            if args.against:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], capture_output=True)

    print(f"\n`{' '.join(heron_args)}` on {args.device}, {args.threads} torch threads in all, {args.rounds} rounds\n")
    print("| configuration | training (s) | env steps/s | updates/s | start-up (s) | speed-up | efficiency T1/(N*TN) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = statistics.mean(o["train"] for o in results[configs[0][0]])
    for name, n, *_ in configs:
        runs = results[name]
        t = [o["train"] for o in runs]
        mean, spread = statistics.mean(t), (statistics.stdev(t) if len(t) > 1 else 0.0)
        steps, updates = runs[0]["steps"], runs[0]["updates"]
        assert all(o["steps"] == steps and o["updates"] == updates for o in runs)
        print(
            f"| {name} | {mean:.1f} +- {spread:.1f} | {steps / mean:,.0f} | {updates / mean:,.1f} | "
            f"{statistics.mean(o['startup'] for o in runs):.1f} | {base / mean:.2f}x | {base / (n * mean):.0%} |"
        )


if __name__ == "__main__":
    main()
