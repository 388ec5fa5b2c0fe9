#!/usr/bin/env python
"""Time to solve, as a user measures it: wall-clock seconds from the start of training until the
deterministic evaluation first reaches the task's threshold, for SAC on Pendulum (-200):

* ``heron-native``: heron's SAC on ``heron/TorchPendulum-v1`` (Gymnasium's Pendulum in torch)
  with many envs, ``--vector-mode native``;
* ``heron``: heron's SAC on Gymnasium's ``Pendulum-v1``, one env (``--preset pendulum``'s settings);
* ``sb3``: Stable-Baselines3's SAC on ``Pendulum-v1``, one env, at the same settings (learning rate
  1e-3, 1,000 random steps, batch 256, 256-256 networks, buffer 1M).

Every side evaluates with heron's evaluation loop, 10 episodes from the same start states, every
``--eval-every`` env steps; the clock runs through evaluations (a user's training evaluates too)
and starts when the library is asked to train (imports excluded). One torch thread per side
(``--threads``), one run at a time: time it with nothing else running.

    python benchmarks/time_to_solve.py --seeds 1 2 3
    python benchmarks/time_to_solve.py --seeds 1 --sides heron-native --num-envs 32 --gradient-steps 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

THRESHOLD = -200.0


class Solved(Exception):
    pass


def heron_side(args: argparse.Namespace, seed: int, native: bool, out: Path) -> tuple[float | None, int | None]:
    import heron

    settings = dict(total_steps=args.max_steps, learning_starts=1000, policy_lr=1e-3, eval_every=args.eval_every,
                    eval_episodes=10, checkpoint_every=0, checkpoint_minutes=0, torch_threads=args.threads,
                    progress="none", seed=seed, run_dir=str(out))
    if native:
        settings.update(env_id="heron/TorchPendulum-v1", vector_mode="native", num_envs=args.num_envs,
                        gradient_steps=args.gradient_steps, batch_size=args.batch_size, n_step=args.n_step)
    else:
        settings.update(env_id="Pendulum-v1")
    start, hit = time.perf_counter(), {}

    def check(evaluation: dict) -> None:
        if evaluation["mean_return"] >= THRESHOLD:
            hit.update(seconds=time.perf_counter() - start, step=evaluation["step"])
            raise Solved

    try:
        heron.train("sac", callback=check, **settings)
    except Solved:
        pass
    return hit.get("seconds"), hit.get("step")


def sb3_side(args: argparse.Namespace, seed: int) -> tuple[float | None, int | None]:
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import Logger

    from heron.core.envs import make_env
    from heron.core.episodes import EVAL_SEED_OFFSET, evaluate
    from offpolicy_curves_vs_sb3 import SB3Policy  # (benchmarks/, this script's folder)

    torch.set_num_threads(args.threads)
    start, hit = time.perf_counter(), {}
    env = make_vec_env(lambda: make_env("Pendulum-v1"), n_envs=1, seed=seed)
    model = SAC("MlpPolicy", env, learning_rate=1e-3, learning_starts=1000, batch_size=256, buffer_size=1_000_000,
                policy_kwargs=dict(net_arch=[256, 256]), seed=seed, device="cpu", verbose=0)
    model.set_logger(Logger(folder=None, output_formats=[]))

    class Check(BaseCallback):
        def _on_step(self) -> bool:
            step = self.model.num_timesteps
            if step % args.eval_every:
                return True
            if evaluate(SB3Policy(model), "Pendulum-v1", 10, seed + EVAL_SEED_OFFSET).mean() >= THRESHOLD:
                hit.update(seconds=time.perf_counter() - start, step=step)
                return False
            return True

    model.learn(total_timesteps=args.max_steps, callback=Check())
    env.close()
    return hit.get("seconds"), hit.get("step")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--sides", nargs="+", default=["heron-native", "heron", "sb3"],
                   choices=["heron-native", "heron", "sb3"])
    p.add_argument("--eval-every", type=int, default=1000, help="env steps between evaluations (every side)")
    p.add_argument("--max-steps", type=int, default=60_000, help="give up after this many env steps")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--num-envs", type=int, default=16, help="heron-native: pendulums stepped at once")
    p.add_argument("--gradient-steps", type=int, default=4, help="heron-native: updates per vector step")
    p.add_argument("--batch-size", type=int, default=256, help="heron-native")
    p.add_argument("--n-step", type=int, default=3, help="heron-native")
    p.add_argument("--out", default="/tmp/heron_time_to_solve", help="heron's run directories")
    p.add_argument("--json", metavar="FILE", help="also write the per-seed figures as JSON")
    args = p.parse_args(argv)
    results: dict[str, list] = {side: [] for side in args.sides}
    for seed in args.seeds:
        for side in args.sides:
            out = Path(args.out) / f"{side}_s{seed}_{time.time_ns()}"
            seconds, step = (sb3_side(args, seed) if side == "sb3"
                             else heron_side(args, seed, side == "heron-native", out))
            results[side].append((seconds, step))
            shown = "not solved" if seconds is None else f"{seconds:.1f} s at {step} env steps"
            print(f"{side} seed {seed}: {shown}", flush=True)
    print("\n| side | seeds solved | seconds to -200 (median, each) | env steps (each) |\n|---|---:|---:|---|")
    for side, runs in results.items():
        solved = [s for s, _ in runs if s is not None]
        median = f"{statistics.median(solved):.1f}" if solved else "-"
        each = ", ".join("-" if s is None else f"{s:.1f}" for s, _ in runs)
        steps = ", ".join("-" if n is None else str(n) for _, n in runs)
        print(f"| {side} | {len(solved)}/{len(runs)} | {median} ({each}) | {steps} |")
    if "sb3" in results and len(results) > 1:
        base = [s for s, _ in results["sb3"]]
        for side in (s for s in results if s != "sb3"):
            ratios = [b / s for (s, _), b in zip(results[side], base) if s and b]
            if ratios:
                print(f"{side}: {statistics.median(ratios):.2f}x faster than sb3 to -200 (median of per-seed ratios)")
    if args.json:
        Path(args.json).write_text(json.dumps({k: [list(r) for r in v] for k, v in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
