#!/usr/bin/env python
"""Time to solve, as a user measures it: wall-clock seconds from the start of training until the
deterministic evaluation first reaches the task's threshold.

``--task pendulum``: SAC on Pendulum, to -200.

* ``heron-native``: heron's SAC on ``heron/TorchPendulum-v1`` (Gymnasium's Pendulum in torch)
  with many envs, ``--vector-mode native``;
* ``heron``: heron's SAC on Gymnasium's ``Pendulum-v1``, one env (``--preset pendulum``'s settings);
* ``sb3``: Stable-Baselines3's SAC on ``Pendulum-v1``, one env, at the same settings (learning rate
  1e-3, 1,000 random steps, batch 256, 256-256 networks, buffer 1M).

``--task cartpole``: PPO on CartPole-v1, to 475, every side at the SB3 zoo's CartPole settings
(heron's ``--preset classic``: 8 envs x 32 steps, one minibatch of 256, 20 epochs, learning rate
1e-3 annealed linearly over ``--max-steps``, gamma 0.98, GAE lambda 0.8, no entropy bonus, clip 0.2,
64-64 tanh networks):

* ``heron-native``: heron's PPO on Gymnasium's own vector CartPole (``--vector-mode native``,
  ``--num-envs`` envs);
* ``heron``: heron's PPO on heron's vector env of 8 CartPoles;
* ``sb3``: Stable-Baselines3's PPO on SB3's vector env of 8 CartPoles.

Every side evaluates with heron's evaluation loop, 10 episodes from the same start states, every
``--eval-every`` env steps; the clock runs through evaluations (a user's training evaluates too)
and starts when the library is asked to train (imports excluded). One torch thread per side
(``--threads``), one run at a time: time it with nothing else running.

    python benchmarks/time_to_solve.py --seeds 1 2 3
    python benchmarks/time_to_solve.py --task cartpole --seeds 1 2 3
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

TASKS = {  # task -> (algorithm, Gymnasium id, heron's vector env id for heron-native, threshold)
    "pendulum": ("sac", "Pendulum-v1", "heron/TorchPendulum-v1", -200.0),
    "cartpole": ("ppo", "CartPole-v1", "CartPole-v1", 475.0),
}


class Solved(Exception):
    pass


def heron_side(args: argparse.Namespace, seed: int, native: bool, out: Path) -> tuple[float | None, int | None]:
    import heron

    algo, env_id, native_id, threshold = TASKS[args.task]
    settings = dict(
        total_steps=args.max_steps,
        eval_every=args.eval_every,
        eval_episodes=10,
        checkpoint_every=0,
        checkpoint_minutes=0,
        torch_threads=args.threads,
        progress="none",
        seed=seed,
        run_dir=str(out),
        env_id=native_id if native else env_id,
    )
    presets = []
    if algo == "sac":
        settings.update(learning_starts=1000, policy_lr=1e-3)
        if native:
            settings.update(
                vector_mode="native",
                num_envs=args.num_envs,
                gradient_steps=args.gradient_steps,
                batch_size=args.batch_size,
                n_step=args.n_step,
            )
    else:
        presets = ["classic"]
        if native:
            settings.update(vector_mode="native", num_envs=args.num_envs)
    start, hit = time.perf_counter(), {}

    def check(evaluation: dict) -> None:
        if evaluation["mean_return"] >= threshold:
            hit.update(seconds=time.perf_counter() - start, step=evaluation["step"])
            raise Solved

    try:
        heron.train(algo, presets, callback=check, **settings)
    except Solved:
        pass
    return hit.get("seconds"), hit.get("step")


def sb3_side(args: argparse.Namespace, seed: int) -> tuple[float | None, int | None]:
    import torch
    from offpolicy_curves_vs_sb3 import SB3Policy  # (benchmarks/, this script's folder)
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import Logger

    from heron.envs.make import make_env
    from heron.runtime.episodes import EVAL_SEED_OFFSET, evaluate

    algo, env_id, _, threshold = TASKS[args.task]
    torch.set_num_threads(args.threads)
    start, hit = time.perf_counter(), {}
    if algo == "sac":
        env = make_vec_env(lambda: make_env(env_id), n_envs=1, seed=seed)
        model = SAC(
            "MlpPolicy",
            env,
            learning_rate=1e-3,
            learning_starts=1000,
            batch_size=256,
            buffer_size=1_000_000,
            policy_kwargs=dict(net_arch=[256, 256]),
            seed=seed,
            device="cpu",
            verbose=0,
        )
    else:
        env = make_vec_env(lambda: make_env(env_id), n_envs=8, seed=seed)
        model = PPO(
            "MlpPolicy",
            env,
            n_steps=32,
            batch_size=256,
            n_epochs=20,
            gamma=0.98,
            gae_lambda=0.8,
            ent_coef=0.0,
            clip_range=0.2,
            learning_rate=lambda remaining: 1e-3 * remaining,
            seed=seed,
            device="cpu",
            verbose=0,
        )
    every = max(args.eval_every // env.num_envs, 1)  # vector steps between evaluations
    model.set_logger(Logger(folder=None, output_formats=[]))

    class Check(BaseCallback):
        def _on_step(self) -> bool:
            step = self.model.num_timesteps
            if (step // env.num_envs) % every:
                return True
            if evaluate(SB3Policy(model), env_id, 10, seed + EVAL_SEED_OFFSET).mean() >= threshold:
                hit.update(seconds=time.perf_counter() - start, step=step)
                return False
            return True

    model.learn(total_timesteps=args.max_steps, callback=Check())
    env.close()
    return hit.get("seconds"), hit.get("step")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", choices=list(TASKS), default="pendulum")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument(
        "--sides", nargs="+", default=["heron-native", "heron", "sb3"], choices=["heron-native", "heron", "sb3"]
    )
    p.add_argument(
        "--eval-every",
        type=int,
        help="env steps between evaluations, every side (default: pendulum 1000, cartpole 2048)",
    )
    p.add_argument(
        "--max-steps",
        type=int,
        help="give up after this many env steps (default: pendulum 60000, "
        "cartpole 100000, over which PPO anneals its learning rate)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--num-envs", type=int, help="heron-native: envs stepped at once (default: pendulum 16, cartpole 8)")
    p.add_argument("--gradient-steps", type=int, default=4, help="heron-native, pendulum: updates per vector step")
    p.add_argument("--batch-size", type=int, default=256, help="heron-native, pendulum")
    p.add_argument("--n-step", type=int, default=3, help="heron-native, pendulum")
    p.add_argument("--out", default="/tmp/heron_time_to_solve", help="heron's run directories")
    p.add_argument("--json", metavar="FILE", help="also write the per-seed figures as JSON")
    args = p.parse_args(argv)
    pendulum = args.task == "pendulum"
    args.eval_every = args.eval_every or (1000 if pendulum else 2048)
    args.max_steps = args.max_steps or (60_000 if pendulum else 100_000)
    args.num_envs = args.num_envs or (16 if pendulum else 8)
    threshold = TASKS[args.task][3]
    results: dict[str, list] = {side: [] for side in args.sides}
    for seed in args.seeds:
        for side in args.sides:
            out = Path(args.out) / f"{side}_s{seed}_{time.time_ns()}"
            seconds, step = (
                sb3_side(args, seed) if side == "sb3" else heron_side(args, seed, side == "heron-native", out)
            )
            results[side].append((seconds, step))
            shown = "not solved" if seconds is None else f"{seconds:.1f} s at {step} env steps"
            print(f"{side} seed {seed}: {shown}", flush=True)
    print(f"\n| side | seeds solved | seconds to {threshold:g} (median, each) | env steps (each) |")
    print("|---|---:|---:|---|")
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
                print(
                    f"{side}: {statistics.median(ratios):.2f}x faster than sb3 to {threshold:g} "
                    "(median of per-seed ratios)"
                )
    if args.json:
        Path(args.json).write_text(json.dumps({k: [list(r) for r in v] for k, v in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
