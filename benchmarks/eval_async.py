"""What --eval-async saves: the same training run with its evaluations in the training process
(``--eval-async off``) and in a worker process (``on``), rounds alternating, nothing else running.

Each run is a whole ``heron train`` process. Printed per run: the wall time of the process and the
env steps/s of training between the first and the last logged step (metrics.csv, evaluation rows
left out); then the medians and their ratio, and whether eval.csv is the same in both (it must be:
the worker plays the same episodes with the policy of the same step).

On the CPU the worker needs a core that training leaves free: give training ``--threads`` fewer
than the cores (on this 2-core VM: 1). On a GPU machine ``--device cuda``; heron's own default
there (``auto``) is the worker.

    python benchmarks/eval_async.py --algo ppo --env-id HalfCheetah-v5 --total-steps 60000 --threads 1
    python benchmarks/eval_async.py --algo sac --device cuda --threads 4 -- --cuda-graphs   # a GPU machine
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def train_rate(run: Path) -> float:
    rows = [
        (int(r["step"]), float(r["wall_time"]))
        for r in csv.DictReader(open(run / "metrics.csv"))
        if not r["metric"].startswith("eval/")
    ]
    (s0, t0), (s1, t1) = rows[0], rows[-1]
    return (s1 - s0) / (t1 - t0)


def eval_rows(run: Path) -> list[tuple[str, ...]]:
    return [(r["step"], r["mean_return"], r["std_return"]) for r in csv.DictReader(open(run / "eval.csv"))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", default="ppo", choices=["sac", "td3", "ppo"])
    p.add_argument("--env-id", default="HalfCheetah-v5")
    p.add_argument("--device", default="cpu")
    p.add_argument("--total-steps", type=int, default=60_000)
    p.add_argument("--eval-every", type=int, default=10_000)
    p.add_argument("--threads", type=int, default=1, help="training's torch threads (default 1)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("extra", nargs="*", help="more heron train flags (after --)")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="heron_eval_async_"))
    walls: dict[str, list[float]] = {"off": [], "on": []}
    rates: dict[str, list[float]] = {"off": [], "on": []}
    evals: dict[str, list] = {}
    for r in range(args.rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            run = root / f"{mode}{r}"
            cmd = [
                sys.executable,
                "-m",
                "heron",
                "train",
                args.algo,
                "--env-id",
                args.env_id,
                "--device",
                args.device,
                "--total-steps",
                str(args.total_steps),
                "--eval-every",
                str(args.eval_every),
                "--torch-threads",
                str(args.threads),
                "--eval-async",
                mode,
                "--progress",
                "none",
                "--run-dir",
                str(run),
                *args.extra,
            ]
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            walls[mode].append(time.perf_counter() - t0)
            rates[mode].append(train_rate(run))
            evals[mode] = eval_rows(run)
            print(
                f"round {r}, --eval-async {mode}: {walls[mode][-1]:.1f} s, {rates[mode][-1]:.0f} env steps/s",
                flush=True,
            )
    w = {m: statistics.median(v) for m, v in walls.items()}
    s = {m: statistics.median(v) for m, v in rates.items()}
    print(
        f"{args.algo} {args.env_id} {args.total_steps} steps, evaluation every {args.eval_every}, device "
        f"{args.device}, {args.threads} thread(s): wall {w['off']:.1f} s off, {w['on']:.1f} s on "
        f"({w['off'] / w['on']:.2f}x); env steps/s {s['off']:.0f} off, {s['on']:.0f} on ({s['on'] / s['off']:.2f}x); "
        f"eval.csv {'the same' if evals['off'] == evals['on'] else 'DIFFERS'}"
    )


if __name__ == "__main__":
    main()
