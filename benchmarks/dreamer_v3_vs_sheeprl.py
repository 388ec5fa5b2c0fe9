#!/usr/bin/env python
"""Seconds per DreamerV3 gradient step: heron beside sheeprl 0.8.4's ``dreamer_v3``, same machine,
same sizes, vector observations.

    python benchmarks/dreamer_v3_vs_sheeprl.py --sizes vector --steps 20 --sheeprl-python VENV/bin/python
    python benchmarks/dreamer_v3_vs_sheeprl.py --sizes S --warmup 2 --steps 10 --sheeprl-python VENV/bin/python
    python benchmarks/dreamer_v3_vs_sheeprl.py --device cuda --cuda-graphs --sheeprl-compile --sizes S --warmup 5 \
        --steps 50 --sheeprl-python python3                    # on a GPU (benchmarks/gpu_check.sh dreamer-v3)

Both sides time exactly their gradient step (world model, imagination, actor, critic, and the slow
critic's update) on batches of 16 sequences x 64 steps of 4-dimensional observations with Discrete(2)
actions (CartPole's; ``--continuous``: 1-dimensional actions in [-1, 1], Pendulum's), made before
the timer. heron runs first, in this process; then sheeprl's own ``train`` runs in a subprocess with
the Python of a venv that has sheeprl (this script again, with ``--sheeprl-side``), its configuration
composed with Hydra from the package's configs as its CLI does (``exp=dreamer_v3``, no compile unless
``--sheeprl-compile``; float32, or with ``--precision bf16-mixed`` both sides in bf16-mixed) and its
batches from its own replay buffer. One torch thread each. Nothing else should run on the machine
meanwhile.

On a GPU (``--device cuda``) the batches are made on the device before the timer and each timed
step ends with ``torch.cuda.synchronize()``. Both sides run with sheeprl's numerics there (TF32
matrix products: its ``float32_matmul_precision: high``) unless ``--heron-defaults`` gives heron its
own (full float32 products with ``--precision 32``, deterministic kernels). ``--cuda-graphs``
records heron's step and replays it (heron's ``--cuda-graphs``: 3 eager steps, then the capture, so
``--warmup`` 4 or more); ``--sheeprl-compile`` turns on sheeprl's ``algo.compile`` (``torch.compile``
of its losses, in its default ``reduce-overhead`` mode: CUDA graphs too; the compilation falls in
the warm-up steps).

Sizes: ``vector`` is heron's ``--preset vector`` (dense 64 x 2, 16x16 latents, GRU 128, hidden 128),
``S`` and ``XS`` the paper's sizes (sheeprl's ``dreamer_v3_S`` and ``_XS``).

Prints one JSON line per side and the ratio (sheeprl's time / heron's). ``--flops`` adds, per side,
the floating-point operations of one gradient step (``torch.utils.flop_counter``: the matrix products
and convolutions, forward and backward; one more step, untimed) and the rate the timed steps reached,
beside this core's rate on one large float32 matrix product of the heads' shape: where both sides run
near that rate, the ratio of their times is the ratio of their operation counts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

from dreamer_learning_vs_sheeprl import SHEEPRL_KEYS  # noqa: E402 (heron's flag -> sheeprl's keys)

SIZES = {
    "vector": dict(
        dense_units=64, mlp_layers=2, stochastic_size=16, discrete_size=16, recurrent_state_size=128, hidden_size=128
    ),
    "XS": dict(
        dense_units=256, mlp_layers=1, stochastic_size=32, discrete_size=32, recurrent_state_size=256, hidden_size=256
    ),
    "S": dict(
        dense_units=512, mlp_layers=2, stochastic_size=32, discrete_size=32, recurrent_state_size=512, hidden_size=512
    ),
}
OBS_DIM = 4


def peak_rss_mb() -> float:
    """This process's peak resident set since its exec (/proc/self/status VmHWM), in MB."""
    return round(int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024, 1)


def count_flops(step) -> float:
    """GFLOP of one call of ``step`` (matrix products and convolutions, forward and backward)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops() / 1e9


def matmul_gflops(rounds: int = 20) -> float:
    """This core's float32 rate on a product of the imagined heads' shape (16 x 1,024 states by 1,536
    inputs, 512 outputs), GFLOP/s."""
    import torch

    a, b = torch.randn(16 * 1024, 1536), torch.randn(1536, 512)
    a @ b
    t0 = time.perf_counter()
    for _ in range(rounds):
        a @ b
    return 2 * a.shape[0] * a.shape[1] * b.shape[1] * rounds / (time.perf_counter() - t0) / 1e9


def timed(step, args) -> list[float]:
    """Seconds of ``step(i)`` for i after the ``--warmup`` steps; on a GPU each ends when the device
    has finished it."""
    import torch

    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    times = []
    for i in range(args.warmup + args.steps):
        sync()
        t0 = time.perf_counter()
        step(i)
        sync()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    return times


def summary(impl: str, times: list[float], args, gflop: float | None = None) -> dict:
    flops = (
        {}
        if gflop is None
        else {"gflop_per_step": round(gflop, 1), "gflops_reached": round(gflop / statistics.fmean(times), 1)}
    )
    return {
        **flops,
        "impl": impl,
        "sizes": args.sizes,
        "sec_per_grad_step": statistics.fmean(times),
        "median_sec": statistics.median(times),
        "steps": len(times),
        "warmup": args.warmup,
        "batch": [args.sequence_length, args.batch_size],
        "continuous": args.continuous,
        "precision": args.precision,
        "device": args.device,
        **({"cuda_graphs": args.cuda_graphs} if impl == "heron" else {"compile": args.sheeprl_compile}),
        "peak_rss_mb": peak_rss_mb(),
        **gpu_memory(args),
    }


def gpu_memory(args) -> dict:
    """The peak GPU memory the side's tensors took (on a GPU)."""
    if args.device != "cuda":
        return {}
    import torch

    return {"peak_gpu_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1)}


def heron_side(args) -> dict:
    import numpy as np
    import torch

    from heron.accel.precision import Precision
    from heron.accel.step import build_step
    from heron.algos.dreamer_v3.config import Config
    from heron.algos.dreamer_v3.train import build, make_optimizers, make_update
    from heron.runtime.setup import seed_everything

    torch.set_num_threads(1)
    seed_everything(args.seed, deterministic=args.heron_defaults)  # heron's runs: deterministic kernels
    device = torch.device(args.device)
    cfg = Config(
        **SIZES[args.sizes],
        per_rank_batch_size=args.batch_size,
        sequence_length=args.sequence_length,
        device=args.device,
        cuda_graphs=args.cuda_graphs,
    )
    A = 1 if args.continuous else 2
    spaces = {
        "obs_spec": {"state": [[OBS_DIM], "float32"]},
        "cnn_keys": [],
        "mlp_keys": ["state"],
        "discrete": not args.continuous,
        "action_dim": A,
    }
    if args.continuous:
        spaces.update(action_low=torch.tensor([-2.0]), action_high=torch.tensor([2.0]))
    agent = build(cfg, spaces).to(device)
    optimizers = make_optimizers(cfg, agent)
    prec = Precision(args.precision, device, deterministic=args.heron_defaults)
    if device.type == "cuda" and not args.heron_defaults:  # sheeprl's numerics, over Precision's
        torch.backends.cuda.matmul.allow_tf32 = True
    prec.apply(agent)  # as heron's training does
    update = build_step(cfg, make_update(cfg, agent, spaces, *optimizers.values(), prec))  # --cuda-graphs: recorded
    rng = np.random.default_rng(args.seed)
    T, B = args.sequence_length, args.batch_size

    def batch() -> dict:
        actions = rng.uniform(-1, 1, (T, B, A)) if args.continuous else np.eye(A)[rng.integers(0, A, (T, B))]
        return {
            "state": torch.as_tensor(rng.normal(size=(T, B, OBS_DIM)), dtype=torch.float32, device=device),
            "action": torch.as_tensor(actions, dtype=torch.float32, device=device),
            "reward": torch.as_tensor(rng.choice([0.0, 1.0], (T, B)), dtype=torch.float32, device=device),
            "is_first": torch.zeros(T, B, dtype=torch.bool, device=device),
            "is_terminal": torch.zeros(T, B, dtype=torch.bool, device=device),
        }

    def step(b: dict) -> None:
        update(b)
        with torch.no_grad():  # the slow critic, as the loop's after_update does
            for slow, fast in zip(agent.target_critic.parameters(), agent.critic.parameters()):
                slow.lerp_(fast, cfg.critic_tau)

    batches = [batch() for _ in range(args.warmup + args.steps + args.flops)]
    times = timed(lambda i: step(batches[i]), args)
    return summary("heron", times, args, count_flops(lambda: step(batches[-1])) if args.flops else None)


def sheeprl_side(args) -> dict:
    import gymnasium as gym
    import hydra
    import numpy as np
    import torch
    from hydra import compose, initialize_config_module
    from lightning.fabric import Fabric
    from omegaconf import OmegaConf
    from sheeprl.algos.dreamer_v2.utils import sample_batches
    from sheeprl.algos.dreamer_v3.agent import build_agent
    from sheeprl.algos.dreamer_v3.dreamer_v3 import train
    from sheeprl.algos.dreamer_v3.utils import Moments
    from sheeprl.data.buffers import EnvIndependentReplayBuffer, SequentialReplayBuffer
    from sheeprl.utils.metric import MetricAggregator
    from sheeprl.utils.timer import timer
    from sheeprl.utils.utils import dotdict
    from torch.distributions import Distribution

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    log_dir = tempfile.mkdtemp(prefix="sheeprl_dv3_bench_")
    sizes = SIZES[args.sizes]
    overrides = [
        "exp=dreamer_v3",
        "env=gym",
        "env.id=CartPole-v1",
        "env.num_envs=1",
        "env.capture_video=False",
        f"fabric.accelerator={args.device}",
        "fabric.devices=1",
        f"fabric.precision={'32-true' if args.precision == '32' else args.precision}",
        "~fabric.callbacks",
        "num_threads=1",
        f"seed={args.seed}",
        f"algo.compile.enabled={args.sheeprl_compile}",
        "algo.run_test=False",
        "algo.cnn_keys.encoder=[]",
        "algo.cnn_keys.decoder=[]",
        "algo.mlp_keys.encoder=[state]",
        "algo.mlp_keys.decoder=[state]",
        f"algo.per_rank_batch_size={args.batch_size}",
        f"algo.per_rank_sequence_length={args.sequence_length}",
        "buffer.size=4096",
        "buffer.memmap=False",
        "buffer.checkpoint=False",
        "checkpoint.every=0",
        "checkpoint.save_last=False",
        "model_manager.disabled=True",
        "metric.log_level=0",
        f"log_root={log_dir}",
    ]
    overrides += [f"{key}={sizes[k]}" for k, keys in SHEEPRL_KEYS.items() if k in sizes for key in keys]
    with initialize_config_module(config_module="sheeprl.configs", version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    cfg = dotdict(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True))
    torch.set_float32_matmul_precision(cfg.float32_matmul_precision)
    Distribution.set_default_validate_args(cfg.distribution.validate_args)
    timer.disabled = True
    MetricAggregator.disabled = True
    fabric: Fabric = hydra.utils.instantiate(cfg.fabric, strategy="auto", _convert_="all")
    fabric.launch()
    fabric.seed_everything(cfg.seed)

    observation_space = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)})
    if args.continuous:
        actions_dim, is_continuous = (1,), True
    else:
        actions_dim, is_continuous = (2,), False
    world_model, actor, critic, target_critic, _ = build_agent(
        fabric, actions_dim, is_continuous, cfg, observation_space
    )
    opts = [
        hydra.utils.instantiate(c.optimizer, params=m.parameters(), _convert_="all")
        for c, m in ((cfg.algo.world_model, world_model), (cfg.algo.actor, actor), (cfg.algo.critic, critic))
    ]
    world_opt, actor_opt, critic_opt = fabric.setup_optimizers(*opts)
    moments = Moments(
        cfg.algo.actor.moments.decay,
        cfg.algo.actor.moments.max,
        cfg.algo.actor.moments.percentile.low,
        cfg.algo.actor.moments.percentile.high,
    )
    rb = EnvIndependentReplayBuffer(4096, n_envs=1, memmap=False, buffer_cls=SequentialReplayBuffer, seed=args.seed)
    rng = np.random.default_rng(args.seed)
    n_fill = max(4 * args.sequence_length, 256)
    A = actions_dim[0]
    rb.add(
        {
            "state": rng.normal(size=(n_fill, 1, OBS_DIM)).astype(np.float32),
            "terminated": np.zeros((n_fill, 1, 1)),
            "truncated": np.zeros((n_fill, 1, 1)),
            "actions": rng.uniform(-1, 1, (n_fill, 1, A))
            if is_continuous
            else np.eye(A)[rng.integers(0, A, (n_fill, 1))],
            "rewards": rng.choice([0.0, 1.0], (n_fill, 1, 1)),
            "is_first": np.zeros((n_fill, 1, 1)),
        },
        validate_args=cfg.buffer.validate_args,
    )
    batches = list(sample_batches(fabric, cfg, rb, args.warmup + args.steps + args.flops))

    def step(i: int, batch) -> None:
        tau = 1 if i == 0 else cfg.algo.critic.tau  # as its main loop, before `train`
        for cp, tcp in zip(critic.module.parameters(), target_critic.parameters()):
            tcp.data.copy_(tau * cp.data + (1 - tau) * tcp.data)
        train(
            fabric,
            world_model,
            actor,
            critic,
            target_critic,
            world_opt,
            actor_opt,
            critic_opt,
            batch,
            None,
            cfg,
            is_continuous,
            actions_dim,
            moments,
        )

    times = timed(lambda i: step(i, batches[i]), args)
    gflop = count_flops(lambda: step(len(batches) - 1, batches[-1])) if args.flops else None
    shutil.rmtree(log_dir, ignore_errors=True)
    return summary("sheeprl", times, args, gflop)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", choices=sorted(SIZES), default="vector")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--sequence-length", type=int, default=64)
    p.add_argument("--continuous", action="store_true")
    p.add_argument("--precision", default="32", help="both sides: 32 (sheeprl's 32-true) or bf16-mixed")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="both sides")
    p.add_argument("--cuda-graphs", action="store_true", help="heron records its step (--device cuda)")
    p.add_argument(
        "--heron-defaults",
        action="store_true",
        help="on CUDA, heron's own numerics instead of sheeprl's TF32 products (module doc)",
    )
    p.add_argument(
        "--sheeprl-compile", action="store_true", help="sheeprl compiles its losses, algo.compile (--device cuda)"
    )
    p.add_argument("--flops", action="store_true", help="count each side's operations per step (module doc)")
    p.add_argument("--sheeprl-python", default="", help="the Python of a venv with sheeprl 0.8.4")
    p.add_argument("--skip-sheeprl", action="store_true")
    p.add_argument("--sheeprl-side", action="store_true", help=argparse.SUPPRESS)
    return p


def main() -> None:
    p = parser()
    args = p.parse_args()
    if (args.cuda_graphs or args.sheeprl_compile) and args.device != "cuda":
        p.error("--cuda-graphs and --sheeprl-compile need --device cuda")
    if args.cuda_graphs and args.warmup < 4:
        p.error("--cuda-graphs records heron's step at its 4th call: give --warmup 4 or more")
    if args.flops and args.device != "cpu":
        p.error("--flops compares the step with this CPU core's rate: it needs --device cpu")
    if args.sheeprl_side:
        print(json.dumps(sheeprl_side(args)), flush=True)
        return
    mine = heron_side(args)
    print(json.dumps(mine), flush=True)
    if args.skip_sheeprl:
        return
    if not args.sheeprl_python:
        raise SystemExit("--sheeprl-python is needed (or --skip-sheeprl)")
    argv = [args.sheeprl_python, __file__, "--sheeprl-side", *sys.argv[1:]]
    out = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if out.returncode != 0:
        raise SystemExit(f"sheeprl side failed:\n{out.stderr[-3000:]}")
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(theirs), flush=True)
    ratio = {"ratio_sheeprl_over_heron": theirs["sec_per_grad_step"] / mine["sec_per_grad_step"]}
    if args.flops:
        ratio.update(
            flop_ratio_sheeprl_over_heron=theirs["gflop_per_step"] / mine["gflop_per_step"],
            matmul_gflops_this_core=round(matmul_gflops(), 1),
        )
    print(json.dumps(ratio))


if __name__ == "__main__":
    main()
