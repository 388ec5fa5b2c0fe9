"""Where one env step's time goes in a heron training: torch.profiler over a window of env steps.

Made for short runs on a GPU machine, where the graphed SAC/TD3/PPO runs were measured below LeanRL's
figures (docs/benchmarks/speed.md). The run trains as the command line says. The
profiler waits ``--wait`` env steps (past learning_starts, so updates run), warms up for 20 steps,
and records ``--active`` steps. Then it prints four things:
- the wall time per env step in that window;
- the operators by self CPU time: what Python and dispatch cost outside the kernels;
- the operators by device time;
- the CUDA graph replays.

The run then goes on to its end (keep --total-steps just past the window).

    python benchmarks/gpu_profile.py sac --wait 6000 --active 300 -- --preset mujoco --env-id HalfCheetah-v5 \
        --device cuda --cuda-graphs true --learning-starts 5000 --total-steps 6400 --eval-every 0 \
        --checkpoint-every 0 --torch-threads 4 --progress none

Everything after ``--`` goes to ``heron train ALGO``. On a CPU it profiles the CPU alone (a quick
check of the script: ``--device cpu``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from heron.cli import main as heron_main
from heron.envs import make as envs

WARMUP = 20


def main() -> int:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("algo")
    p.add_argument("--wait", type=int, default=6000, help="env steps before the profiler warms up")
    p.add_argument("--active", type=int, default=300, help="env steps recorded")
    p.add_argument("--rows", type=int, default=25)
    args = p.parse_args(argv[:split])
    train_args = argv[split + 1 :]

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    steps = 0  # env steps so far
    window: list[float] = []  # the times of the recorded steps: the last one's before its prof.step,
    done: list[object] = []  # which ends the recording and processes the trace (active - 1 intervals)

    def report(prof: profile) -> None:
        done.append(prof.key_averages())

    prof = profile(
        activities=activities,
        on_trace_ready=report,
        schedule=schedule(wait=args.wait, warmup=WARMUP, active=args.active, repeat=1),
    )
    first = args.wait + WARMUP  # the env step (count of steps) the recording starts at
    step = envs.VecEnv.step

    def profiled_step(self, actions):  # every env step of the training's VecEnv (evaluation has its own envs)
        nonlocal steps
        out = step(self, actions)
        if first <= steps < first + args.active:
            if torch.cuda.is_available():
                torch.cuda.synchronize()  # in the window only: the wall time includes the queued GPU work
            window.append(time.perf_counter())
        steps += 1
        prof.step()
        return out

    envs.VecEnv.step = profiled_step
    if "--run-dir" not in train_args:
        train_args += ["--run-dir", tempfile.mkdtemp(prefix="heron_profile_") + "/run"]
    prof.start()
    try:
        code = heron_main(["train", args.algo, *train_args])
    finally:
        prof.stop()
        envs.VecEnv.step = step
    if not done or len(window) < 2:
        print(
            f"the run ended (exit {code}) before the window: {steps} env steps, needed "
            f"{first + args.active}; raise --total-steps or lower --wait",
            file=sys.stderr,
        )
        return 1
    per_step = (window[-1] - window[0]) / (len(window) - 1)
    print(
        f"{args.algo}: {per_step * 1e3:.3f} ms per env step over {len(window) - 1} steps "
        f"({1 / per_step:.0f} env steps/s, the profiler's own cost included)"
    )
    table = done[0]
    print("\n== by self CPU time (all steps of the window together)")
    print(table.table(sort_by="self_cpu_time_total", row_limit=args.rows))
    if torch.cuda.is_available():
        print("\n== by device time")
        print(table.table(sort_by="self_device_time_total", row_limit=args.rows))
        replays = [e for e in table if "replay" in e.key.lower() or "graph" in e.key.lower()]
        print(
            "\n== graph events: " + ", ".join(f"{e.key} x{e.count}" for e in replays)
            if replays
            else "\n== no graph events"
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
