#!/usr/bin/env python
"""What watching every update for NaN/inf costs: heron SAC with the divergence guard on and off.

The guard (``heron.runtime.faults.DivergenceGuard``) adds a few device-side tensor ops per gradient
step and reads its flag only where the run syncs anyway (logging, evaluation, checkpoints). This
script trains the same SAC run (Hopper-v5 sizes of the offpolicy_vs_sb3 benchmark: 256 x 256
networks, batch 256) with the guard as shipped and with ``Run.watch`` replaced by a no-op,
alternating ON/OFF ``--rounds`` times in one process, one after the other, and reports the
learning-phase updates/s of each (from metrics.csv wall times, as offpolicy_vs_sb3 does) and their
ratio. Time it with nothing else running.

    python benchmarks/divergence_guard_cost.py --env-id Hopper-v5 --total-steps 4000 --rounds 3
    python benchmarks/divergence_guard_cost.py --micro   # the cost of one watch() call alone
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
import time
from pathlib import Path

import torch

import heron
from heron.runtime.faults import DivergenceGuard
from heron.runtime.run import Run


def micro(threads: int, calls: int = 20000) -> None:
    """One watch() on SAC's eight scalar metrics, timed alone (CPU tensors)."""
    guard = DivergenceGuard(torch.device("cpu"))
    metrics = {f"losses/m{i}": torch.randn(()) for i in range(8)}
    for _ in range(1000):
        guard.watch(metrics, 1)
    t0 = time.perf_counter()
    for i in range(calls):
        guard.watch(metrics, i)
    per_call = (time.perf_counter() - t0) / calls
    assert not guard.tripped()
    print(f"DivergenceGuard.watch, 8 metrics, {threads} thread(s): {per_call * 1e6:.1f} us per update")


def updates_per_second(run_dir: Path, start: int, end: int) -> float:
    wall = {}
    with open(run_dir / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["metric"] == "losses/qf_loss":
                wall[int(row["step"])] = float(row["wall_time"])
    return (end - start) / (wall[end] - wall[start])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="Hopper-v5")
    p.add_argument("--total-steps", type=int, default=6000)
    p.add_argument("--learning-starts", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--micro", action="store_true", help="only time one watch() call")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.micro:
        return micro(args.threads)
    log_every = 500
    watch = Run.watch
    rates: dict[str, list[float]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in ("on", "off"):
                Run.watch = watch if mode == "on" else (lambda self, metrics, step: metrics)
                run_dir = Path(tmp) / f"{mode}{r}"
                heron.train(
                    "sac",
                    env_id=args.env_id,
                    total_steps=args.total_steps,
                    learning_starts=args.learning_starts,
                    batch_size=256,
                    hidden_sizes=(256, 256),
                    eval_every=0,
                    eval_episodes=1,
                    log_every=log_every,
                    progress="none",
                    torch_threads=args.threads,
                    checkpoint_minutes=0,
                    run_dir=str(run_dir),
                )
                rate = updates_per_second(run_dir, args.learning_starts + log_every, args.total_steps)
                rates[mode].append(rate)
                print(f"round {r + 1} guard {mode:3s}: {rate:7.1f} updates/s", flush=True)
    Run.watch = watch
    on, off = statistics.mean(rates["on"]), statistics.mean(rates["off"])
    spread = {k: statistics.stdev(v) if len(v) > 1 else 0.0 for k, v in rates.items()}
    print(
        f"\n| guard | updates/s (mean +- sd over {args.rounds}) |\n|---|---|\n"
        f"| on  | {on:.1f} +- {spread['on']:.1f} |\n| off | {off:.1f} +- {spread['off']:.1f} |\n"
        f"on/off = {on / off:.3f}"
    )


if __name__ == "__main__":
    main()
