#!/usr/bin/env python
"""The DreamerV3 authors' published scores for the tasks of heron's DreamerV3 suites.

    git clone https://github.com/danijar/dreamerv3 && python benchmarks/dreamer_v3_published.py dreamerv3/scores

The official repository (danijar/dreamerv3) publishes every training curve of its paper as
``scores/<benchmark>-dreamerv3.json.gz``: per task and seed, the env frames (``xs``) at which an
episode ended and its return (``ys``). This script reduces each run to the mean return of the
episodes that ended in the last 10% of the budget (the paper's curves end there), then gives the mean
and the sample standard deviation over the seeds. These are the figures ``heron bench`` shows beside
``atari100k-dreamer-v3`` and ``dmc-dreamer-v3`` (``heron.bench.PUBLISHED``); the script prints them
so that anyone can check them against the files.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path

# heron's suite env id -> (scores file, the official task name)
TASKS = {
    "PongNoFrameskip-v4": ("atari100k", "atari_pong"),
    "BreakoutNoFrameskip-v4": ("atari100k", "atari_breakout"),
    "BoxingNoFrameskip-v4": ("atari100k", "atari_boxing"),
    "MsPacmanNoFrameskip-v4": ("atari100k", "atari_ms_pacman"),
    "dmc_walker_walk": ("dmc_vision", "dmc_walker_walk"),
    "dmc_cartpole_swingup": ("dmc_vision", "dmc_cartpole_swingup"),
}


def final_scores(runs: list[dict], last: float = 0.1) -> list[float]:
    """Per run, the mean return of the episodes that ended in the last ``last`` of the budget (the
    largest frame count among the runs)."""
    budget = max(max(run["xs"]) for run in runs)
    return [statistics.mean(y for x, y in zip(run["xs"], run["ys"]) if x >= (1 - last) * budget) for run in runs]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scores", type=Path, help="the scores/ folder of a danijar/dreamerv3 checkout")
    args = p.parse_args()
    loaded: dict[str, list[dict]] = {}
    print("| env | scores file | seeds | budget (frames) | final score, mean ± std |")
    print("|---|---|---:|---:|---:|")
    for env, (bench, task) in TASKS.items():
        if bench not in loaded:
            with gzip.open(args.scores / f"{bench}-dreamerv3.json.gz", "rt") as f:
                loaded[bench] = json.load(f)
        runs = [run for run in loaded[bench] if run["task"] == task]
        if not runs:
            raise SystemExit(f"error: no runs of {task} in {bench}-dreamerv3.json.gz")
        scores = final_scores(runs)
        budget = max(max(run["xs"]) for run in runs)
        spread = statistics.stdev(scores) if len(scores) > 1 else 0.0
        print(
            f"| {env} | {bench}-dreamerv3.json.gz | {len(runs)} | {budget:,.0f} | "
            f"{statistics.mean(scores):.1f} ± {spread:.1f} |"
        )


if __name__ == "__main__":
    main()
