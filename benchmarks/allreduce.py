#!/usr/bin/env python
"""The time of one gradient all-reduce (``heron.ops.dist.all_reduce_grads``) for each optimizer
of each algorithm, at the sizes of its preset, under torchrun: what data parallelism adds to every
optimizer step. Run it with as many processes as you would train with:

    torchrun --standalone --nproc-per-node 2 benchmarks/allreduce.py              # CPU, gloo
    torchrun --standalone --nproc-per-node 8 benchmarks/allreduce.py --device cuda  # one GPU per rank, NCCL

Rank 0 prints one markdown table: parameters per optimizer, the flattened gradient in MB, and the
median time per all-reduce (the GPU is synchronized around each call).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time

import torch

from heron import api
from heron.ops import dist

# (algorithm, presets, env, optimizers as attribute paths into what _build/build returns)
CASES = [
    ("sac", ["mujoco"], "Hopper-v5"),
    ("td3", ["mujoco"], "Hopper-v5"),
    ("ppo", ["mujoco"], "Hopper-v5"),
    ("ppo", ["atari"], "ALE/Pong-v5"),
    ("dreamer_v2", ["dmc"], "dmc_walker_walk"),
]


def optimizer_params(algo: str, cfg, spaces: dict) -> dict[str, list[torch.nn.Parameter]]:
    train = importlib.import_module(f"heron.algos.{algo}.train")
    if algo in ("sac", "td3"):
        actor, critic = train._build(cfg, spaces)
        groups = {"critics": list(critic.parameters()), "actor": list(actor.parameters())}
        if algo == "sac":
            groups["log_alpha"] = [torch.nn.Parameter(torch.zeros(()))]
        return groups
    if algo == "ppo":
        return {"actor-critic": list(train._build(cfg, spaces).parameters())}
    agent = train.build(cfg, spaces)
    return {
        "world model": list(agent.world.parameters()),
        "actor": list(agent.actor.parameters()),
        "critic": list(agent.critic.parameters()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=200)
    args = p.parse_args()
    world = dist.from_env()
    device = torch.device(dist.device_for(world, args.device))
    dist.init(world, dist.choose_backend("auto", device, world), device)
    torch.set_num_threads(1)
    rows = []
    for algo, presets, env_id in CASES:
        try:
            cfg = api.make_config(algo, presets, env_id=env_id)
            spaces = importlib.import_module(f"heron.algos.{algo}.train").check(cfg)
        except Exception as exc:  # an optional extra missing (atari, dmc): say so, go on
            rows.append(f"| {algo} `--preset {' '.join(presets)}` | ({str(exc).splitlines()[0][:60]}) | | |")
            continue
        for name, params in optimizer_params(algo, cfg, spaces).items():
            params = [q.to(device) for q in params]
            for q in params:
                q.grad = torch.randn_like(q)
            times = []
            for i in range(args.repeats + 10):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                dist.all_reduce_grads(params)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                if i >= 10:
                    times.append(time.perf_counter() - t0)
            n = sum(q.numel() for q in params)
            rows.append(
                f"| {algo} `--preset {' '.join(presets)}`: {name} | {n:,} | {n * 4 / 1e6:.2f} | "
                f"{statistics.median(times) * 1e3:.3f} |"
            )
    if world.is_main:
        print(f"\n{world.size} processes, {args.device}, median of {args.repeats}\n")
        print("| optimizer | parameters | gradient (MB) | all-reduce (ms) |\n|---|---:|---:|---:|")
        print("\n".join(rows))
    dist.close()


if __name__ == "__main__":
    main()
