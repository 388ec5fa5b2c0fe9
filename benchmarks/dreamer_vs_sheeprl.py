#!/usr/bin/env python
"""Seconds per DreamerV2 gradient step: heron beside sheeprl 0.8.4, same machine, same sizes.

    python benchmarks/dreamer_vs_sheeprl.py --sizes tiny --steps 20                # CPU, one thread
    python benchmarks/dreamer_vs_sheeprl.py --sizes atari --warmup 1 --steps 5
    python benchmarks/dreamer_vs_sheeprl.py --sizes atari --warmup 1 --steps 5 --precision bf16-mixed
    python benchmarks/dreamer_vs_sheeprl.py --device cuda --sizes dmc --continuous --batch-size 50
    python benchmarks/dreamer_vs_sheeprl.py --device cuda --sizes dmc --cuda-graphs --skip-sheeprl

Both sides time exactly their gradient step (world model, imagination, actor, critic) on batches of
16 sequences x 50 steps of 3x64x64 images with Discrete(6) actions (Pong's), or with ``--continuous``
6-dimensional actions in [-1, 1] (walker's: the actor then learns by backpropagating through the
imagined dynamics), made before the timer and already on the device. heron's batch stays uint8
until the step converts it; sheeprl's sampler hands float32 tensors to its step. heron runs first
in this process, then sheeprl's own ``train`` runs in a subprocess with the Python of a venv that
has sheeprl (``--sheeprl-python``; see benchmarks/sheeprl_dreamer_v2_step.py). Nothing else should
run on the machine meanwhile.

Sizes: ``tiny`` is sheeprl's exp=dreamer_v2_benchmarks (dense 8, 1 layer, CNN multiplier 2, RSSM 8/8,
4x4 latents); ``atari`` is its exp=dreamer_v2 default (dense 400, 4 layers, CNN 48, RSSM 600/600,
32x32 latents); ``dmc`` is sheeprl's DreamerV2 setting for DMC, heron's ``--preset dmc`` (the same
with RSSM 200/200). None uses a continue model (sheeprl's default).

On CUDA both sides run with sheeprl's default numerics (TF32 matrix products, cuDNN autotuning,
non-deterministic kernels) unless ``--heron-defaults`` gives heron its own training defaults
(deterministic kernels, and its ``--precision`` as a training run sets it: ``32`` is full fp32
matrix products, ``tf32`` TF32). With sheeprl's numerics heron's ``32`` has TF32 products, as
sheeprl's float32 has on CUDA (its ``float32_matmul_precision: high``). On CUDA each side also reports the
most memory its tensors held (``peak_gpu_mb``). ``--cuda-graphs`` times heron's
``--cuda-graphs`` step (3 eager steps, a capture, then replays: give ``--warmup`` 4 or more).

``--precision`` runs heron's step in that ``--precision`` (``heron.accel.precision``) and sheeprl's
with the same Fabric precision (``32`` is sheeprl's ``32-true``); ``--sheeprl-precision`` gives
sheeprl another one, e.g. heron in bf16-mixed beside sheeprl's float32 default.
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


def peak_rss_mb() -> float:
    """This process's peak resident set since its exec (/proc/self/status VmHWM), in MB."""
    return round(int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024, 1)


SIZES = {
    "tiny": dict(
        dense_units=8,
        mlp_layers=1,
        cnn_channels_multiplier=2,
        recurrent_state_size=8,
        hidden_size=8,
        stochastic_size=4,
        discrete_size=4,
    ),
    "small": dict(
        dense_units=64,
        mlp_layers=2,
        cnn_channels_multiplier=4,
        recurrent_state_size=64,
        hidden_size=64,
        stochastic_size=8,
        discrete_size=8,
    ),
    "atari": dict(
        dense_units=400,
        mlp_layers=4,
        cnn_channels_multiplier=48,
        recurrent_state_size=600,
        hidden_size=600,
        stochastic_size=32,
        discrete_size=32,
    ),
    "dmc": dict(
        dense_units=400,
        mlp_layers=4,
        cnn_channels_multiplier=48,
        recurrent_state_size=200,
        hidden_size=200,
        stochastic_size=32,
        discrete_size=32,
    ),
}


def heron_step_time(
    sizes: str,
    warmup: int,
    steps: int,
    batch: int,
    length: int,
    actions: int,
    continuous: bool = False,
    device: str = "cpu",
    cuda_graphs: bool = False,
    heron_defaults: bool = False,
    precision: str = "32",
) -> dict:
    import numpy as np
    import torch

    from heron.accel.precision import Precision
    from heron.accel.step import build_step
    from heron.algos.dreamer_v2.config import Config
    from heron.algos.dreamer_v2.train import build, make_optimizers, make_update
    from heron.runtime.memory import keep_freed_memory
    from heron.runtime.setup import seed_everything

    keep_freed_memory()  # as the heron command does
    torch.set_num_threads(1)
    seed_everything(0, deterministic=heron_defaults)
    cfg = Config(
        use_continues=False,
        per_rank_batch_size=batch,
        sequence_length=length,
        device=device,
        cuda_graphs=cuda_graphs,
        **SIZES[sizes],
    )
    spaces = {
        "obs_spec": {"rgb": [[3, 64, 64], "uint8"]},
        "cnn_keys": ["rgb"],
        "mlp_keys": [],
        "discrete": not continuous,
        "action_dim": actions,
    }
    if continuous:
        spaces.update(action_low=torch.full((actions,), -1.0), action_high=torch.full((actions,), 1.0))
    agent = build(cfg, spaces).to(device)
    prec = Precision(precision, torch.device(device), deterministic=heron_defaults)
    if device.startswith("cuda") and not heron_defaults:  # sheeprl's numerics (its config.yaml), over Precision's
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    prec.apply(agent)  # as heron's training does
    update = build_step(cfg, make_update(cfg, agent, spaces, *make_optimizers(cfg, agent).values(), prec))
    rng = np.random.default_rng(0)

    def make_batch():
        is_first = np.zeros((length, batch), bool)
        is_first[0] = True
        if continuous:
            act = torch.from_numpy(rng.uniform(-1, 1, (length, batch, actions)).astype(np.float32))
        else:
            act = torch.nn.functional.one_hot(
                torch.from_numpy(rng.integers(0, actions, (length, batch))), actions
            ).float()
        data = {
            "rgb": torch.from_numpy(rng.integers(0, 256, (length, batch, 3, 64, 64), dtype=np.uint8)),
            "action": act,
            "reward": torch.from_numpy(rng.standard_normal((length, batch)).astype(np.float32)),
            "is_first": torch.from_numpy(is_first),
            "is_terminal": torch.zeros(length, batch, dtype=torch.bool),
        }
        return {k: v.to(device) for k, v in data.items()}

    times = []
    for i in range(warmup + steps):
        data = make_batch()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        metrics = update(data)
        float(metrics["losses/world_model_loss"])  # the step is done (a no-op sync on CPU)
        if i >= warmup:
            times.append(time.perf_counter() - t)
    params = {
        k: sum(p.numel() for p in m.parameters())
        for k, m in (("world_model", agent.world), ("actor", agent.actor), ("critic", agent.critic))
    }
    return {
        "impl": "heron",
        "sizes": sizes,
        "device": device,
        "cuda_graphs": cuda_graphs,
        "numerics": "heron defaults" if heron_defaults else "sheeprl defaults",
        "precision": precision,
        "batch": [length, batch],
        "continuous": continuous,
        "sec_per_grad_step": statistics.mean(times),
        "median": statistics.median(times),
        "min": min(times),
        "steps": steps,
        "params": params,
        # the peak resident memory of this process, which runs heron alone (sheeprl reports its own)
        "peak_rss_mb": peak_rss_mb(),
        "peak_gpu_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1) if device.startswith("cuda") else None,
    }


def sheeprl_step_time(
    python: str,
    sizes: str,
    warmup: int,
    steps: int,
    batch: int,
    length: int,
    continuous: bool = False,
    device: str = "cpu",
    precision: str = "32-true",
) -> dict:
    script = Path(__file__).with_name("sheeprl_dreamer_v2_step.py")
    argv = [
        python,
        str(script),
        "--sizes",
        sizes,
        "--warmup",
        str(warmup),
        "--steps",
        str(steps),
        "--batch-size",
        str(batch),
        "--sequence-length",
        str(length),
        "--accelerator",
        "cuda" if device.startswith("cuda") else "cpu",
        "--precision",
        precision,
    ]
    out = subprocess.run(
        argv + (["--continuous"] if continuous else []),
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if out.returncode != 0:
        raise SystemExit(f"sheeprl's step failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", choices=sorted(SIZES), default="tiny")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--sequence-length", type=int, default=50)
    p.add_argument("--continuous", action="store_true", help="6-dim actions in [-1, 1] instead of Discrete(6)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--cuda-graphs", action="store_true", help="heron's --cuda-graphs step")
    p.add_argument(
        "--heron-defaults",
        action="store_true",
        help="CUDA: heron with its training defaults (fp32 matmuls, deterministic) instead of sheeprl's",
    )
    p.add_argument("--sheeprl-python", default="/work/venv-sheeprl/bin/python")
    p.add_argument("--skip-sheeprl", action="store_true")
    p.add_argument(
        "--precision",
        default="32",
        choices=["32", "tf32", "bf16-mixed", "16-mixed"],
        help="heron's --precision, and sheeprl's Fabric precision unless --sheeprl-precision",
    )
    p.add_argument("--sheeprl-precision", default=None, help="sheeprl's fabric.precision (32-true, bf16-mixed, ...)")
    args = p.parse_args()
    heron = heron_step_time(
        args.sizes,
        args.warmup,
        args.steps,
        args.batch_size,
        args.sequence_length,
        6,
        args.continuous,
        args.device,
        args.cuda_graphs,
        args.heron_defaults,
        args.precision,
    )
    print(json.dumps(heron), flush=True)
    if args.skip_sheeprl:
        return
    peer = sheeprl_step_time(
        args.sheeprl_python,
        args.sizes,
        args.warmup,
        args.steps,
        args.batch_size,
        args.sequence_length,
        args.continuous,
        args.device,
        args.sheeprl_precision or {"32": "32-true", "tf32": "32-true"}.get(args.precision, args.precision),
    )
    print(json.dumps(peer), flush=True)
    print(
        json.dumps(
            {
                "sizes": args.sizes,
                "device": args.device,
                "heron_s": round(heron["sec_per_grad_step"], 4),
                "sheeprl_s": round(peer["sec_per_grad_step"], 4),
                "speedup": round(peer["sec_per_grad_step"] / heron["sec_per_grad_step"], 2),
                "heron_peak_rss_mb": heron["peak_rss_mb"],
                "sheeprl_peak_rss_mb": peer.get("peak_rss_mb"),
                "heron_peak_gpu_mb": heron["peak_gpu_mb"],
                "sheeprl_peak_gpu_mb": peer.get("peak_gpu_mb"),
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
