#!/usr/bin/env python
"""heron's gradient-step paths against each other: the hand-written step, the readable (autograd) step
and the readable step under ``--compile``, for SAC or TD3 at their defaults, on this machine.

Each training runs in a fresh Python process, one after the other (never in parallel); in each round
the paths run in turn, the order rotating from round to round, so a drift of the machine's speed
lands on every path alike. Reported per path: gradient updates per second over the learning phase
(from ``learning_starts + L`` to the last step, read from the ``wall_time`` of ``metrics.csv``'s
losses rows every ``L`` steps, as ``offpolicy_vs_sb3.py`` times heron), per round and as the median;
and each path's ratio to the first path as the median of the per-round ratios (the pairs ran back to
back, minutes apart).

The start-up check of the hand-written step (``heron.accel.step``) runs before the first update, so
its cost is outside the timed window; ``--startup`` also reports the check's own time, measured in
the same process before the training.

Run with nothing else on the machine::

    python benchmarks/step_paths.py --algo td3 --rounds 5                  # Hopper-v5, 10k steps
    python benchmarks/step_paths.py --algo sac --paths hand-written autograd compiled --rounds 2
    python benchmarks/step_paths.py --algo td3 --env-id Pendulum-v1 --total-steps 1200 \\
        --learning-starts 1000 --rounds 1                                   # smoke test
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PATHS = {
    "hand-written": dict(fused_update=True),
    "autograd": dict(fused_update=False),
    "compiled": dict(fused_update=True, compile=True),
}
LOSS_ROW = "losses/qf_loss"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--algo", choices=("sac", "td3"), default="td3")
    p.add_argument("--env-id", default="Hopper-v5")
    p.add_argument("--paths", nargs="+", choices=sorted(PATHS), default=["hand-written", "autograd"])
    p.add_argument("--total-steps", type=int, default=10_000)
    p.add_argument("--learning-starts", type=int, default=2_000)
    p.add_argument(
        "--log-every",
        type=int,
        default=500,
        help="losses rows every this many steps (the timed window starts one row after --learning-starts)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads of every training")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--startup", action="store_true", help="also time the hand-written step's start-up check")
    p.add_argument("--out", default=None, help="write every round's figures as JSON to this path")
    p.add_argument("--one", nargs=3, metavar=("PATH", "RUN_DIR", "RESULT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.learning_starts < 0 or args.total_steps - args.learning_starts < 2 * args.log_every:
        p.error("need at least two losses rows after --learning-starts (--log-every)")
    if args.rounds < 1 or args.threads < 1:
        p.error("--rounds and --threads must be positive")
    return args


def window(args: argparse.Namespace) -> tuple[int, int]:
    s0 = (args.learning_starts // args.log_every + 1) * args.log_every
    return s0, (args.total_steps // args.log_every) * args.log_every


def one(args: argparse.Namespace) -> None:
    """One training (in this fresh process): its updates/s, into the RESULT file."""
    import torch

    import heron

    path, run_dir, result = args.one
    torch.set_num_threads(args.threads)
    startup = None
    if args.startup and PATHS[path].get("fused_update") and not PATHS[path].get("compile"):
        startup = time_startup_check(args)
    heron.train(
        args.algo,
        env_id=args.env_id,
        seed=args.seed,
        total_steps=args.total_steps,
        learning_starts=args.learning_starts,
        torch_threads=args.threads,
        eval_every=0,
        eval_episodes=1,
        checkpoint_every=0,
        log_every=args.log_every,
        progress="none",
        run_dir=run_dir,
        **PATHS[path],
    )
    s0, s1 = window(args)
    at = {}
    with open(Path(run_dir) / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["metric"] == LOSS_ROW:
                at.setdefault(int(row["step"]), float(row["wall_time"]))
    Path(result).write_text(json.dumps({"updates_per_s": (s1 - s0) / (at[s1] - at[s0]), "startup_s": startup}))


def time_startup_check(args: argparse.Namespace) -> float:
    """Seconds of ``build_step``'s check of the hand-written step on the run's networks (median of 5)."""
    from heron.accel.handwritten import check

    times = []
    real = check.disagreement

    def timed(*a, **k):
        t = time.perf_counter()
        out = real(*a, **k)
        times.append(time.perf_counter() - t)
        return out

    check.disagreement = timed
    try:
        for _ in range(5):
            with tempfile.TemporaryDirectory() as d:
                build_the_step(args, d)
    finally:
        check.disagreement = real
    return statistics.median(times)


def build_the_step(args: argparse.Namespace, run_dir: str) -> None:
    """A one-step run: its gradient step is built, the check included."""
    import heron

    heron.train(
        args.algo,
        env_id=args.env_id,
        seed=args.seed,
        total_steps=1,
        learning_starts=1,
        torch_threads=args.threads,
        eval_every=0,
        eval_episodes=1,
        checkpoint_every=0,
        progress="none",
        run_dir=run_dir + "/run",
    )


def main() -> None:
    args = parse_args()
    if args.one:
        return one(args)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.rounds):
            order = args.paths[r % len(args.paths) :] + args.paths[: r % len(args.paths)]
            for path in order:
                result = Path(work) / f"{path}_{r}.json"
                cmd = [sys.executable, __file__, *sys.argv[1:], "--one", path, f"{work}/{path}_{r}", str(result)]
                subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
                rows.append({"round": r, "path": path, **json.loads(result.read_text())})
                print(f"round {r + 1}/{args.rounds} {path}: {rows[-1]['updates_per_s']:.1f} updates/s", flush=True)
    first = args.paths[0]
    by = {p: [row["updates_per_s"] for row in rows if row["path"] == p] for p in args.paths}
    s0, s1 = window(args)
    print(
        f"\n{args.algo.upper()} on {args.env_id}, updates/s over steps {s0}-{s1}, {args.threads} torch thread(s), "
        f"{args.rounds} rounds"
    )
    print(f"command: python benchmarks/step_paths.py {' '.join(sys.argv[1:])}")
    for p in args.paths:
        ratios = [a / b for a, b in zip(by[p], by[first])]
        print(
            f"  {p:>12}: median {statistics.median(by[p]):6.1f}  rounds {', '.join(f'{v:.1f}' for v in by[p])}"
            + (
                ""
                if p == first
                else f"  ratio to {first}: median {statistics.median(ratios):.3f} "
                f"(range {min(ratios):.3f}-{max(ratios):.3f})"
            )
        )
    startups = [row["startup_s"] for row in rows if row.get("startup_s") is not None]
    if startups:
        print(f"  start-up check: median {statistics.median(startups) * 1000:.0f} ms")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
