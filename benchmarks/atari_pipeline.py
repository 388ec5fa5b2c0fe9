#!/usr/bin/env python
"""Would PPO's rollout from Atari frames gain from stepping its envs as two halves in turn?

A rollout step of heron's PPO now acts on all N observations (on a GPU: one recorded forward, a
copy in and a copy back) and then steps all N envs on ALE's thread pool, each side waiting for
the other. With two halves, each an ALE vector env of N/2 envs on N/2 threads, half A's envs step
while half B's observations are acted on, and the reverse: a step of all N envs then costs about
max(2 x acting, acting + stepping N/2 envs) instead of acting + stepping N envs. Whether that
pays depends on the machine: how much faster N/2 envs step than N, and how long acting takes.

This times both loops with the real acting step (the atari preset's Nature CNN, recorded as a
CUDA graph on a GPU as ``--cuda-graphs`` records it, eager on the CPU) and the same envs (ALE's
vector env as ``--env-backend ale`` makes it, random weights), in ``--rounds`` alternating
rounds of ``--steps`` vector steps; it prints the median env steps/s of each loop, and of the
envs alone (random actions) for N and N/2 envs.

    python benchmarks/atari_pipeline.py --device cuda --num-envs 8 --steps 1000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch


def make_envs(env_id: str, n: int, seed: int):
    """ALE's vector env of ``n`` envs on ``n`` threads, as heron's ``AleVecEnv`` makes it (its
    bare env: the halves loop sends and receives on it)."""
    from heron.envs.atari import AleVecEnv

    envs = AleVecEnv(env_id, n, seed, threads=n).envs
    envs.reset(seed=(seed + np.arange(n)).astype(np.int64))
    return envs


def make_actor(n_actions: int, batch: int, device: torch.device):
    """obs [batch, 4, 84, 84] uint8 -> actions [batch] int64, as PPO's rollout acts."""
    from heron.algos.ppo.acting import RecordedActing
    from heron.algos.ppo.agent import build as _build
    from heron.algos.ppo.config import PRESETS, Config

    cfg = Config(**PRESETS["atari"])
    spaces = {
        "obs_shape": [4, 84, 84],
        "obs_dtype": "uint8",
        "action": {"kind": "discrete", "n": n_actions},
        "obs_parts": None,
    }
    model = _build(cfg, spaces).to(device)
    noise = model.pi_head.noise((1, batch), device)[0]
    if device.type == "cuda":
        recorded = RecordedActing(model, device)
        noise_np = noise.cpu().numpy()
        return lambda obs: recorded(obs, noise_np)[0]

    def eager(obs):
        with torch.no_grad():
            params, _, _ = model.step(torch.as_tensor(obs), torch.zeros(len(obs), 0))
            actions, _ = model.pi_head.sample_logp(params, noise)
        return actions.numpy()

    return eager


def run_sync(envs, act, steps: int) -> float:
    obs = np.array(envs.step(np.zeros(envs.num_envs, np.int64))[0])
    start = time.perf_counter()
    for _ in range(steps):
        obs = np.array(envs.step(act(obs))[0])  # (heron's wrapper keeps its own copy)
    return steps * envs.num_envs / (time.perf_counter() - start)


def run_halves(halves, act, steps: int) -> float:
    """Half A acts and sends, then half B receives, acts and sends while A's envs step, ..."""
    obs = [np.array(h.step(np.zeros(h.num_envs, np.int64))[0]) for h in halves]
    start = time.perf_counter()
    for h, o in zip(halves, obs):
        h.send(act(o))
    for _ in range(steps - 1):
        for h in halves:
            h.send(act(np.array(h.recv()[0])))
    for h in halves:
        h.recv()
    return steps * sum(h.num_envs for h in halves) / (time.perf_counter() - start)


def run_envs(envs, steps: int) -> float:
    actions = np.random.default_rng(0).integers(0, envs.single_action_space.n, (steps, envs.num_envs))
    start = time.perf_counter()
    for a in actions:
        np.array(envs.step(a)[0])
    return steps * envs.num_envs / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env-id", default="PongNoFrameskip-v4")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--steps", type=int, default=1000, help="vector steps of all the envs per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--torch-threads", type=int, default=1, help="torch's threads (the eager CPU acting)")
    a = p.parse_args()
    torch.set_num_threads(a.torch_threads)
    device, n = torch.device(a.device), a.num_envs
    if n % 2:
        raise SystemExit("--num-envs must be even")
    full = make_envs(a.env_id, n, 1)
    halves = [make_envs(a.env_id, n // 2, 1), make_envs(a.env_id, n // 2, 1 + n // 2)]  # envs 0..n/2-1, n/2..n-1
    n_actions = int(full.single_action_space.n)
    act_full, act_half = make_actor(n_actions, n, device), make_actor(n_actions, n // 2, device)
    for _ in range(5):  # warm-up: the graphs' warm-up calls and capture
        act_full(np.zeros((n, 4, 84, 84), np.uint8))
        act_half(np.zeros((n // 2, 4, 84, 84), np.uint8))
    rates: dict[str, list[float]] = {}
    loops = {
        f"envs alone, {n} envs": lambda: run_envs(full, a.steps),
        f"envs alone, {n // 2} envs": lambda: run_envs(halves[0], a.steps),
        f"act, then step {n} envs": lambda: run_sync(full, act_full, a.steps),
        f"two halves of {n // 2} in turn": lambda: run_halves(halves, act_half, a.steps),
    }
    for r in range(a.rounds):
        for name in list(loops) if r % 2 == 0 else list(loops)[::-1]:
            rates.setdefault(name, []).append(loops[name]())
    print(f"{a.env_id}, {n} envs, {a.device}, {a.steps} vector steps x {a.rounds} rounds (median env steps/s):")
    for name, values in rates.items():
        print(f"  {name:32s} {statistics.median(values):8.0f}   ({', '.join(f'{v:.0f}' for v in values)})")
    sync, halves_rate = (statistics.median(rates[k]) for k in list(loops)[2:])
    print(f"  two halves / act-then-step: {halves_rate / sync:.2f}x")


if __name__ == "__main__":
    main()
