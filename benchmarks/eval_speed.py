"""What one evaluation costs: 10 episodes of HalfCheetah-v5 (1,000 steps each) with a SAC, TD3 or
PPO actor, played three ways:

  one at a time   one episode after another in one env, the actor on the training device
                  (heron before --eval-envs, and what ``--eval-envs 1`` does on the CPU)
  together        the 10 episodes at once, one env each, one batched forward per step
  together, host  the same with the actor's CPU copy (``Policy.on_host()``; what heron's
                  evaluations do on a GPU, and the same as "together" on the CPU)

The actor is the one a short run leaves (no gradient step: the weights do not change what an
evaluation costs, and HalfCheetah's episodes always last 1,000 steps). Rounds alternate the ways;
the median of each is printed with its ratio to "one at a time".

    python benchmarks/eval_speed.py --algo sac --device cpu --threads 1
    python benchmarks/eval_speed.py --algo sac --device cuda      # on a GPU machine
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

import heron
from heron.runtime.episodes import evaluate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", default="sac", choices=["sac", "td3", "ppo"])
    p.add_argument("--env-id", default="HalfCheetah-v5")
    p.add_argument("--device", default="cpu")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default: 1)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    run = tempfile.mkdtemp(prefix="heron_eval_speed_")
    steps = {
        "sac": dict(total_steps=1000, learning_starts=1000),
        "td3": dict(total_steps=1000, learning_starts=1000),
        "ppo": dict(total_steps=2048, num_envs=1, num_steps=2048),
    }[args.algo]
    heron.train(
        args.algo,
        env_id=args.env_id,
        device=args.device,
        run_dir=run,
        eval_every=0,
        eval_episodes=1,
        checkpoint_every=0,
        progress="none",
        torch_threads=args.threads,
        **steps,
    )
    policy = heron.load(run, device=args.device)
    ways = [
        ("one at a time", lambda: policy, 1),
        ("together", lambda: policy, args.episodes),
        ("together, host", policy.on_host, args.episodes),
    ]
    times: dict[str, list[float]] = {name: [] for name, *_ in ways}
    means: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, get, at_once in ways:
            t0 = time.perf_counter()
            returns = evaluate(get(), args.env_id, args.episodes, seed=1_000_001, at_once=at_once)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
            means[name] = float(returns.mean())
    base = statistics.median(times["one at a time"])
    print(
        f"{args.algo}, {args.env_id}, {args.episodes} episodes, device {args.device}, {args.threads} thread(s), "
        f"{args.rounds} rounds (torch {torch.__version__})"
    )
    print("| way | seconds per evaluation (median) | speed-up | mean return |")
    print("|---|---:|---:|---:|")
    for name, *_ in ways:
        t = statistics.median(times[name])
        print(f"| {name} | {t:.2f} | {base / t:.2f}x | {means[name]:.3f} |")


if __name__ == "__main__":
    main()
