#!/usr/bin/env python
"""Env steps per second of heron's three Atari backends, the envs alone (random actions, no
learner): the Gymnasium stack (``--env-backend gymnasium``: ``heron.envs.atari.wrap`` on
Gymnasium's sync vector env), EnvPool (``envpool``) and ALE's own vector env (``ale``), each through
heron's wrapper class, so what PPO's rollout pays per step is what is timed (episodic life,
reward clipping, whole-game scores, copies of the arrays).

Each backend steps ``--steps`` vector steps after a warm-up of 50, in ``--rounds`` rounds whose
order alternates; the table gives the median rate and its ratio to the Gymnasium stack's. The
thread count is the C++ pool's (EnvPool's and ALE's ``num_threads``; the Gymnasium stack steps on
the calling thread).

    python benchmarks/atari_envs.py --env-id PongNoFrameskip-v4 --num-envs 8 --threads 1 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from heron.envs import atari
from heron.envs.make import VecEnv


def make(backend: str, env_id: str, n: int, threads: int):
    if backend == "ale":
        return atari.AleVecEnv(env_id, n, seed=1, threads=threads)
    if backend == "envpool":
        return atari.EnvPoolVecEnv(env_id, n, seed=1, threads=threads)
    return VecEnv(env_id, n, 1, "sync")


def rate(backend: str, env_id: str, n: int, threads: int, steps: int) -> float:
    envs = make(backend, env_id, n, threads)
    envs.reset()
    actions = np.random.default_rng(0).integers(0, envs.single_action_space.n, (steps + 50, n))
    for a in actions[:50]:
        envs.step(a)
    start = time.perf_counter()
    for a in actions[50:]:
        envs.step(a)
    elapsed = time.perf_counter() - start
    envs.close()
    return steps * n / elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="PongNoFrameskip-v4")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--threads", type=int, nargs="+", default=[1])
    p.add_argument("--steps", type=int, default=500, help="vector steps timed per round")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    backends = ["gymnasium", "ale"] + (["envpool"] if atari.envpool_available() else [])
    print(f"{args.env_id}, {args.num_envs} envs, {args.steps} vector steps a round, {args.rounds} rounds\n")
    print("| Backend | Threads | env steps/s (rounds) | median | vs the Gymnasium stack |")
    print("|---|---:|---|---:|---:|")
    for threads in args.threads:
        rates: dict[str, list[float]] = {b: [] for b in backends}
        for r in range(args.rounds):
            for b in backends if r % 2 == 0 else backends[::-1]:
                rates[b].append(rate(b, args.env_id, args.num_envs, threads, args.steps))
        base = statistics.median(rates["gymnasium"])
        for b in backends:
            med = statistics.median(rates[b])
            shown = ", ".join(f"{x:.0f}" for x in rates[b])
            print(f"| {b} | {threads if b != 'gymnasium' else '-'} | {shown} | {med:.0f} | {med / base:.2f}x |")


if __name__ == "__main__":
    main()
