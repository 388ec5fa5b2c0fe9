#!/usr/bin/env python
"""Where a heron training's CPU time goes, by kind of work: matrix products, convolutions,
everything else torch runs, and what runs outside torch (the env, Python). It tells whether a
speed target is still within reach of code changes: a step whose matrix products already run at
the core's peak can only get faster by doing fewer of them or by running them in bfloat16.

Two ways in:

    python benchmarks/cpu_profile.py --skip 2500 --window 1000 -- td3 --env-id Hopper-v5 --total-steps 3600
    python benchmarks/cpu_profile.py --dreamer-sizes atari

The first profiles ``--window`` iterations of ``heron train ARGS`` (everything after ``--``)
after ``--skip`` (an iteration: one ``after_step``, an env step and its updates for SAC and TD3,
a rollout and its epochs for PPO); the second, two DreamerV2 gradient steps at
``benchmarks/dreamer_vs_sheeprl.py``'s sizes after one warm-up. One torch thread (``--threads``).
It prints each kind's share and the operators that took the most time.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

PRODUCTS = {
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::matmul",
    "aten::linear",
    "aten::_addmm_activation",
}
CONVOLUTIONS = {
    "aten::convolution_backward",
    "aten::_convolution",
    "aten::mkldnn_convolution",
    "aten::convolution",
    "aten::conv2d",
    "aten::conv_transpose2d",
    "aten::slow_conv_transpose2d",
    "aten::_slow_conv2d_forward",
    "aten::_slow_conv2d_backward",
}


def kind(name: str) -> str:
    if name in PRODUCTS:
        return "matrix products"
    if name in CONVOLUTIONS:
        return "convolutions"
    if name.startswith("ProfilerStep"):
        return "outside torch (env, Python)"
    return "other torch operators"


def report(prof: profile, steps: int, wall: float) -> None:
    shares: dict[str, float] = {}
    events = prof.key_averages()
    for e in events:
        shares[kind(e.key)] = shares.get(kind(e.key), 0.0) + e.self_cpu_time_total
    total = sum(shares.values())
    print(f"{steps} profiled iterations, {wall / steps * 1e3:.2f} ms each (with the profiler's overhead)")
    for name, us in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"  {name:30s} {us / steps / 1e3:9.2f} ms/iteration  {100 * us / total:5.1f}%")
    print("the operators that took the most time:")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:10]:
        if not e.key.startswith("ProfilerStep"):
            print(
                f"  {e.key:32s} {e.self_cpu_time_total / steps / 1e3:8.2f} ms/iteration  {e.count / steps:6.1f} calls"
            )


def profile_training(args: list[str], skip: int, window: int) -> None:
    from heron.cli import main as heron_main
    from heron.runtime.run import Run

    # (no record_shapes: with it, some copies and products took 20-40x longer under the profiler)
    prof = profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=window, repeat=1))
    after_step, seen = Run.after_step, {"n": 0, "t0": 0.0, "t1": 0.0}

    def counted(self, *a, **k):
        out = after_step(self, *a, **k)
        seen["n"] += 1
        if seen["n"] == skip - 1:
            prof.start()  # the warm-up iteration, then ``window`` recorded ones, each a ProfilerStep
        elif skip - 1 < seen["n"] <= skip + window:
            if seen["n"] == skip:
                seen["t0"] = time.perf_counter()
            prof.step()
            if seen["n"] == skip + window:
                seen["t1"] = time.perf_counter()
                prof.stop()
        return out

    Run.after_step = counted
    with tempfile.TemporaryDirectory() as tmp:
        if "--run-dir" not in args:
            args = [*args, "--run-dir", str(Path(tmp) / "run")]
        code = heron_main(["train", *args, "--progress", "none"])
    if code:
        raise SystemExit(code)
    if not seen["t1"]:
        raise SystemExit(f"the run ended after {seen['n']} iterations, before --skip + --window = {skip + window}")
    report(prof, window, seen["t1"] - seen["t0"])


def profile_dreamer(sizes: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    bench = importlib.import_module("dreamer_vs_sheeprl")
    steps = importlib.import_module("heron.accel.step")
    prof = profile(activities=[ProfilerActivity.CPU])
    wrap, calls, clock = steps.build_step, {"n": 0}, {}

    def profiled(cfg, fn, *args, **kwargs):
        update = wrap(cfg, fn, *args, **kwargs)

        def step(data):
            calls["n"] += 1
            if calls["n"] == 2:  # after the warm-up step
                clock["t0"] = time.perf_counter()
                prof.start()
            out = update(data)
            if calls["n"] == 3:
                prof.stop()
                clock["t1"] = time.perf_counter()
            return out

        return step

    steps.build_step = profiled
    try:
        bench.heron_step_time(sizes, 1, 2, 16, 50, 6)
    finally:
        steps.build_step = wrap
    report(prof, 2, clock["t1"] - clock["t0"])


def main() -> None:
    argv = sys.argv[1:]
    heron_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--skip", type=int, default=2500, help="iterations before the profiled window")
    p.add_argument("--window", type=int, default=1000, help="iterations profiled")
    p.add_argument(
        "--dreamer-sizes",
        choices=("atari", "dmc", "small", "tiny"),
        help="profile DreamerV2's gradient step at these sizes instead of a training",
    )
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(own)
    torch.set_num_threads(a.threads)
    if a.dreamer_sizes:
        profile_dreamer(a.dreamer_sizes)
    elif heron_args:
        profile_training([*heron_args, "--torch-threads", str(a.threads)], a.skip, a.window)
    else:
        p.error("give heron train's arguments after --, or --dreamer-sizes")


if __name__ == "__main__":
    main()
