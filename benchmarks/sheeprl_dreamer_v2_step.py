#!/usr/bin/env python
"""Seconds per gradient step of sheeprl's own DreamerV2 (`sheeprl.algos.dreamer_v2.dreamer_v2.train`).

Run with a Python that has sheeprl installed (NOT heron's venv), e.g.::

    OMP_NUM_THREADS=1 /work/venv-sheeprl/bin/python benchmarks/sheeprl_dreamer_v2_step.py --sizes tiny
    OMP_NUM_THREADS=1 /work/venv-sheeprl/bin/python benchmarks/sheeprl_dreamer_v2_step.py --sizes atari \
        --warmup 1 --steps 3

What is timed: exactly one call of sheeprl's ``train`` per gradient step (world-model update, imagination, actor
update, critic update, zeroing of the gradients), plus the target-critic copy that sheeprl's main loop does before
``train`` every ``algo.critic.per_rank_target_network_update_freq`` gradient steps. Not timed: environment
interaction and the sampling of the batches (sheeprl's own ``training_timer`` excludes it too).

The configuration is sheeprl's, composed with Hydra from the package's configs exactly as its CLI
does (``exp=dreamer_v2`` for the Atari sizes, ``exp=dreamer_v2_benchmarks`` for the tiny ones), then
resolved to a ``dotdict`` as ``sheeprl.cli.run`` does. The agent is built with sheeprl's
``build_agent`` and optimizers with its ``build_optimizer`` on a ``lightning.fabric.Fabric``
(``--accelerator`` cpu or cuda, 1 device, ``--precision``: 32-true by default). The batches come
from sheeprl's own replay buffer (``build_buffer`` + ``sample_batches``: float32 tensors shaped
[sequence, batch, ...]) filled with random uint8 64x64 RGB frames under key ``rgb`` and one-hot
Discrete(6) actions (Pong's action space), or with ``--continuous`` 6-dimensional actions in [-1, 1]
(walker's). ``--sizes dmc``: sheeprl's DreamerV2 setting for DMC (``exp=dreamer_v2`` with RSSM
200/200).

Prints one JSON line: {"impl": "sheeprl", "sizes": ..., "sec_per_grad_step": <mean>, "steps": M, ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

# One thread, before torch is imported (sheeprl's CLI sets OMP_NUM_THREADS from `num_threads` too)
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


def peak_rss_mb() -> float:
    """This process's peak resident set since its exec (/proc/self/status VmHWM), in MB."""
    return round(int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024, 1)


EXPS = {"tiny": "dreamer_v2_benchmarks", "atari": "dreamer_v2", "dmc": "dreamer_v2"}
SIZE_OVERRIDES = {
    "dmc": [
        "algo.world_model.recurrent_model.recurrent_state_size=200",  # sheeprl's DMC setting
        "algo.world_model.transition_model.hidden_size=200",
        "algo.world_model.representation_model.hidden_size=200",
    ]
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--sizes",
        choices=sorted(EXPS),
        default="tiny",
        help="tiny: sheeprl's exp=dreamer_v2_benchmarks sizes; atari: exp=dreamer_v2 (default DreamerV2)",
    )
    p.add_argument("--obs", choices=["pixels"], default="pixels", help="3x64x64 uint8 RGB under key 'rgb'")
    p.add_argument("--actions", type=int, default=6, help="Discrete(n) action space (Pong: 6)")
    p.add_argument("--continuous", action="store_true", help="Box(-1, 1, (actions,)) instead (walker: 6)")
    p.add_argument("--accelerator", choices=["cpu", "cuda"], default="cpu", help="fabric.accelerator")
    p.add_argument("--warmup", type=int, default=3, help="untimed gradient steps first")
    p.add_argument("--steps", type=int, default=10, help="timed gradient steps")
    p.add_argument("--batch-size", type=int, default=None, help="override algo.per_rank_batch_size (sheeprl: 16)")
    p.add_argument(
        "--sequence-length", type=int, default=None, help="override algo.per_rank_sequence_length (sheeprl: 50)"
    )
    p.add_argument(
        "--use-continues",
        action="store_true",
        help="algo.world_model.use_continues=True (learned continue model; sheeprl default is False)",
    )
    p.add_argument(
        "--metrics",
        action="store_true",
        help="pass sheeprl's MetricAggregator to train (also computes the posterior/prior entropies), as "
        "a run with metric.log_level=1 does; default: aggregator=None",
    )
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--precision", default="32-true", help="fabric.precision (32-true, bf16-mixed, 16-mixed)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Hydra override, e.g. algo.horizon=15 (repeatable)",
    )
    return p.parse_args(argv)


def compose_cfg(args, log_dir):
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf
    from sheeprl.utils.utils import dotdict

    overrides = [
        f"exp={EXPS[args.sizes]}",
        "env=atari",
        "env.id=PongNoFrameskip-v4",
        "env.num_envs=1",
        "env.capture_video=False",
        f"fabric.accelerator={args.accelerator}",
        "fabric.devices=1",
        f"fabric.precision={args.precision}",
        "~fabric.callbacks",
        f"num_threads={args.threads}",
        f"seed={args.seed}",
        "algo.compile.enabled=False",
        "algo.run_test=False",
        "buffer.size=4096",
        "buffer.memmap=False",
        "buffer.checkpoint=False",
        "checkpoint.every=0",
        "checkpoint.save_last=False",
        "model_manager.disabled=True",
        f"metric.log_level={1 if args.metrics else 0}",
        f"log_root={log_dir}",
    ]
    overrides += SIZE_OVERRIDES.get(args.sizes, [])
    if args.batch_size is not None:
        overrides.append(f"algo.per_rank_batch_size={args.batch_size}")
    if args.sequence_length is not None:
        overrides.append(f"algo.per_rank_sequence_length={args.sequence_length}")
    if args.use_continues:
        overrides.append("algo.world_model.use_continues=True")
    overrides += args.override
    with initialize_config_module(config_module="sheeprl.configs", version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    # As `sheeprl.cli.run`: resolved to a dotdict; and as `dreamer_v2.main`: these cannot be changed
    cfg = dotdict(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True))
    cfg.env.screen_size = 64
    cfg.env.frame_stack = 1
    return cfg


def main(argv=None):
    args = parse_args(argv)

    import gymnasium as gym
    import numpy as np
    import torch
    from torch.distributions import Distribution

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)

    import hydra
    import sheeprl
    from lightning.fabric import Fabric
    from sheeprl.algos.dreamer_v2.agent import build_agent
    from sheeprl.algos.dreamer_v2.dreamer_v2 import train
    from sheeprl.algos.dreamer_v2.utils import (
        AGGREGATOR_KEYS,
        build_buffer,
        build_optimizer,
        sample_batches,
    )
    from sheeprl.utils.metric import MetricAggregator
    from sheeprl.utils.timer import timer

    log_dir = tempfile.mkdtemp(prefix="sheeprl_dv2_bench_")
    cfg = compose_cfg(args, log_dir)

    # What `sheeprl.cli.run_algorithm` sets before launching the algorithm
    torch.set_float32_matmul_precision(cfg.float32_matmul_precision)
    Distribution.set_default_validate_args(cfg.distribution.validate_args)
    timer.disabled = cfg.metric.log_level == 0 or cfg.metric.disable_timer
    for k in set(cfg.metric.aggregator.metrics.keys()) - AGGREGATOR_KEYS:
        cfg.metric.aggregator.metrics.pop(k, None)
    MetricAggregator.disabled = cfg.metric.log_level == 0 or len(cfg.metric.aggregator.metrics) == 0

    fabric: Fabric = hydra.utils.instantiate(cfg.fabric, strategy="auto", _convert_="all")
    fabric.launch()
    fabric.seed_everything(cfg.seed)
    torch.use_deterministic_algorithms(cfg.torch_use_deterministic_algorithms)
    torch.backends.cudnn.benchmark = cfg.torch_backends_cudnn_benchmark  # as sheeprl.cli does
    torch.backends.cudnn.deterministic = cfg.torch_backends_cudnn_deterministic

    # Pong-like spaces: a Dict observation with one 3x64x64 uint8 image, Discrete(6) actions
    observation_space = gym.spaces.Dict(
        {"rgb": gym.spaces.Box(0, 255, (3, cfg.env.screen_size, cfg.env.screen_size), np.uint8)}
    )
    if args.continuous:
        action_space = gym.spaces.Box(-1.0, 1.0, (args.actions,), np.float32)
        actions_dim = tuple(action_space.shape)
    else:
        action_space = gym.spaces.Discrete(args.actions)
        actions_dim = (int(action_space.n),)
    is_continuous = args.continuous
    assert list(cfg.algo.cnn_keys.encoder) == ["rgb"] and not cfg.algo.mlp_keys.encoder

    world_model, actor, critic, target_critic, _player = build_agent(
        fabric, actions_dim, is_continuous, cfg, observation_space
    )
    world_optimizer = build_optimizer(cfg.algo.world_model.optimizer, world_model.parameters())
    actor_optimizer = build_optimizer(cfg.algo.actor.optimizer, actor.parameters())
    critic_optimizer = build_optimizer(cfg.algo.critic.optimizer, critic.parameters())
    world_optimizer, actor_optimizer, critic_optimizer = fabric.setup_optimizers(
        world_optimizer, actor_optimizer, critic_optimizer
    )
    aggregator = None
    if not MetricAggregator.disabled:
        aggregator = hydra.utils.instantiate(cfg.metric.aggregator, _convert_="all").to(fabric.device)

    # sheeprl's replay buffer, filled with random steps laid out as its main loop adds them ([1, n_envs, ...])
    rng = np.random.default_rng(cfg.seed)
    rb = build_buffer(fabric, cfg, log_dir, dry_run_size=2)
    n_fill = max(4 * cfg.algo.per_rank_sequence_length, 256)
    n_envs = cfg.env.num_envs
    rb.add(
        {
            "rgb": rng.integers(0, 256, (n_fill, n_envs, 3, 64, 64), dtype=np.uint8),
            "terminated": np.zeros((n_fill, n_envs, 1)),
            "truncated": np.zeros((n_fill, n_envs, 1)),
            "actions": rng.uniform(-1, 1, (n_fill, n_envs, actions_dim[0]))
            if is_continuous
            else np.eye(actions_dim[0])[rng.integers(0, actions_dim[0], (n_fill, n_envs))],
            "rewards": rng.choice([-1.0, 0.0, 0.0, 0.0, 1.0], (n_fill, n_envs, 1)),
            "is_first": np.zeros((n_fill, n_envs, 1)),
        },
        validate_args=cfg.buffer.validate_args,
    )
    n_total = args.warmup + args.steps
    # Sampled up front, as sheeprl samples the batches of an iteration before its `training_timer`
    batches = list(sample_batches(fabric, cfg, rb, n_total))
    b0 = batches[0]
    shapes = {k: list(v.shape) for k, v in b0.items()}
    dtypes = sorted({str(v.dtype) for v in b0.values()})

    n_params = {
        "world_model": sum(p.numel() for p in world_model.parameters()),
        "actor": sum(p.numel() for p in actor.parameters()),
        "critic": sum(p.numel() for p in critic.parameters()),
    }

    times = []
    freq = cfg.algo.critic.per_rank_target_network_update_freq
    cuda = fabric.device.type == "cuda"
    for step, batch in enumerate(batches):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        # As sheeprl's main loop, right before `train`
        if step % freq == 0:
            for cp, tcp in zip(critic.module.parameters(), target_critic.module.parameters()):
                tcp.data.copy_(cp.data)
        train(
            fabric,
            world_model,
            actor,
            critic,
            target_critic,
            world_optimizer,
            actor_optimizer,
            critic_optimizer,
            batch,
            aggregator,
            cfg,
            actions_dim,
        )
        if cuda:
            torch.cuda.synchronize()  # its step ends in optimizer steps queued on the device
        dt = time.perf_counter() - t0
        if step >= args.warmup:
            times.append(dt)
        print(f"# step {step} ({'warmup' if step < args.warmup else 'timed'}): {dt:.4f}s", file=sys.stderr)

    mean = statistics.fmean(times) if times else float("nan")
    result = {
        "impl": "sheeprl",
        "sizes": args.sizes,
        "sec_per_grad_step": mean,
        "steps": len(times),
        "median_sec": statistics.median(times) if times else float("nan"),
        "min_sec": min(times) if times else float("nan"),
        "warmup": args.warmup,
        "obs": args.obs,
        "exp": EXPS[args.sizes],
        "batch": shapes,
        "dtypes": dtypes,
        "params": n_params,
        "use_continues": bool(cfg.algo.world_model.use_continues),
        "continuous": is_continuous,
        "device": str(fabric.device),
        "metrics": aggregator is not None,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "sheeprl": getattr(sheeprl, "__version__", "?"),
        "precision": args.precision,
        # the peak resident memory of this process since its exec (CPU runs: activations, weights,
        # optimizer state); VmHWM, not getrusage's ru_maxrss, which keeps the forking parent's size
        "peak_rss_mb": peak_rss_mb(),
        # on a GPU: the most memory its tensors held at once (torch's caching allocator), in MB
        "peak_gpu_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1) if torch.cuda.is_available() else None,
    }
    shutil.rmtree(log_dir, ignore_errors=True)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
