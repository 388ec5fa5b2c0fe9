#!/usr/bin/env python
"""Seconds per DreamerV2 gradient step: heron beside sheeprl 0.8.4, same machine, same sizes, one thread.

    python benchmarks/dreamer_vs_sheeprl.py --sizes tiny --steps 20
    python benchmarks/dreamer_vs_sheeprl.py --sizes atari --warmup 1 --steps 5

Both sides time exactly their gradient step (world model, imagination, actor, critic) on batches of
16 sequences x 50 steps of 3x64x64 images with Discrete(6) actions (Pong's), sampled before the
timer. heron's batch stays uint8 until the step converts it on the device; sheeprl's sampler hands
float32 tensors to its step. heron runs first in this process, then sheeprl's own ``train`` runs in
a subprocess with the Python of a venv that has sheeprl (``--sheeprl-python``; see
benchmarks/sheeprl_dreamer_v2_step.py). Nothing else should run on the machine meanwhile.

Sizes: ``tiny`` is sheeprl's exp=dreamer_v2_benchmarks (dense 8, 1 layer, CNN multiplier 2, RSSM 8/8,
4x4 latents); ``atari`` is its exp=dreamer_v2 default (dense 400, 4 layers, CNN 48, RSSM 600/600,
32x32 latents). Neither uses a continue model (sheeprl's default).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

SIZES = {
    "tiny": dict(dense_units=8, mlp_layers=1, cnn_channels_multiplier=2, recurrent_state_size=8, hidden_size=8,
                 stochastic_size=4, discrete_size=4),
    "small": dict(dense_units=64, mlp_layers=2, cnn_channels_multiplier=4, recurrent_state_size=64, hidden_size=64,
                  stochastic_size=8, discrete_size=8),
    "atari": dict(dense_units=400, mlp_layers=4, cnn_channels_multiplier=48, recurrent_state_size=600,
                  hidden_size=600, stochastic_size=32, discrete_size=32),
}


def heron_step_time(sizes: str, warmup: int, steps: int, batch: int, length: int, actions: int) -> dict:
    import numpy as np
    import torch

    from heron.algos.dreamer_v2.config import Config
    from heron.algos.dreamer_v2.train import build, make_optimizers, make_update

    from heron.core.memory import keep_freed_memory

    keep_freed_memory()  # as heron's training loop does
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = Config(use_continues=False, per_rank_batch_size=batch, sequence_length=length, **SIZES[sizes])
    spaces = {"obs_spec": {"rgb": [[3, 64, 64], "uint8"]}, "cnn_keys": ["rgb"], "mlp_keys": [], "discrete": True,
              "action_dim": actions}
    agent = build(cfg, spaces)
    update = make_update(cfg, agent, spaces, *make_optimizers(cfg, agent).values())
    rng = np.random.default_rng(0)

    def make_batch():
        is_first = np.zeros((length, batch), bool)
        is_first[0] = True
        return {"rgb": torch.from_numpy(rng.integers(0, 256, (length, batch, 3, 64, 64), dtype=np.uint8)),
                "action": torch.nn.functional.one_hot(torch.from_numpy(rng.integers(0, actions, (length, batch))),
                                                      actions).float(),
                "reward": torch.from_numpy(rng.standard_normal((length, batch)).astype(np.float32)),
                "is_first": torch.from_numpy(is_first), "is_terminal": torch.zeros(length, batch, dtype=torch.bool)}

    times = []
    for i in range(warmup + steps):
        data = make_batch()
        t = time.perf_counter()
        metrics = update(data)
        float(metrics["losses/world_model_loss"])  # the step is done (a no-op sync on CPU)
        if i >= warmup:
            times.append(time.perf_counter() - t)
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in
              (("world_model", agent.world), ("actor", agent.actor), ("critic", agent.critic))}
    return {"impl": "heron", "sizes": sizes, "sec_per_grad_step": statistics.mean(times),
            "median": statistics.median(times), "min": min(times), "steps": steps, "params": params}


def sheeprl_step_time(python: str, sizes: str, warmup: int, steps: int, batch: int, length: int) -> dict:
    script = Path(__file__).with_name("sheeprl_dreamer_v2_step.py")
    out = subprocess.run([python, str(script), "--sizes", sizes, "--warmup", str(warmup), "--steps", str(steps),
                          "--batch-size", str(batch), "--sequence-length", str(length)],
                         capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", choices=sorted(SIZES), default="tiny")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--sequence-length", type=int, default=50)
    p.add_argument("--sheeprl-python", default="/work/venv-sheeprl/bin/python")
    p.add_argument("--skip-sheeprl", action="store_true")
    args = p.parse_args()
    heron = heron_step_time(args.sizes, args.warmup, args.steps, args.batch_size, args.sequence_length, 6)
    print(json.dumps(heron), flush=True)
    if args.skip_sheeprl:
        return
    peer = sheeprl_step_time(args.sheeprl_python, args.sizes, args.warmup, args.steps, args.batch_size,
                             args.sequence_length)
    print(json.dumps(peer), flush=True)
    print(json.dumps({"sizes": args.sizes, "heron_s": round(heron["sec_per_grad_step"], 4),
                      "sheeprl_s": round(peer["sec_per_grad_step"], 4),
                      "speedup": round(peer["sec_per_grad_step"] / heron["sec_per_grad_step"], 2)}))


if __name__ == "__main__":
    sys.exit(main())
