#!/usr/bin/env python
"""Whole DreamerV2 trainings, heron then sheeprl 0.8.4, same machine, same sizes, same schedule:
wall time, agent steps per second and the training-episode returns at equal env steps.

    python benchmarks/dreamer_runs_vs_sheeprl.py --task pong --steps 16384
    python benchmarks/dreamer_runs_vs_sheeprl.py --task walker --steps 16384

The schedule is sheeprl's own CPU benchmark (its ``exp=dreamer_v2_benchmarks``): one env, 1,024
random steps first, then one gradient step every 16 agent steps (replay ratio 1/16) on 16 x 50
sequences from a 16,384-step sequential buffer, its default hyperparameters (gamma 0.99, free nats
1, KL scale 1, no continue model, lrs 3e-4 / 8e-5 / 8e-5, entropy 1e-4, gradient clip 100) and
its tiny benchmark model (dense 8, 1 layer, CNN multiplier 2, RSSM 8/8, 4x4 latents; ``--sizes``
picks another row of dreamer_vs_sheeprl.SIZES). The tasks: ``pong`` is PongNoFrameskip-v4 with
action repeat 4 (AtariPreprocessing on both sides); ``walker`` is DMC walker_walk from 64x64 pixels
with action repeat 2; ``cartpole`` is DMC cartpole_swingup from pixels with action repeat 8 (PlaNet's).
``--replay-ratio`` changes the training rate on both sides. One torch thread each; nothing else should run meanwhile. sheeprl runs with
the Python of a venv that has it (``--sheeprl-python``) and prints its episode returns; heron's come
from its metrics.csv (its final evaluation is left out of its time). The returns are the mean of
the last ``--last`` training episodes (sampled actions, as sheeprl logs them).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from dreamer_vs_sheeprl import SIZES  # noqa: E402

TASKS = {
    "pong": dict(heron=["--env-id", "PongNoFrameskip-v4", "--action-repeat", "4", "--max-episode-steps", "27000"],
                 sheeprl=["env=atari", "env.id=PongNoFrameskip-v4", "env.action_repeat=4",
                          "env.max_episode_steps=27000"]),
    "walker": dict(heron=["--env-id", "dmc_walker_walk", "--action-repeat", "2", "--max-episode-steps", "1000"],
                   sheeprl=["env=dmc", "env.wrapper.domain_name=walker", "env.wrapper.task_name=walk",
                            "env.action_repeat=2", "env.max_episode_steps=1000", "env.wrapper.from_vectors=False"]),
    "cartpole": dict(heron=["--env-id", "dmc_cartpole_swingup", "--action-repeat", "8", "--max-episode-steps", "1000"],
                     sheeprl=["env=dmc", "env.wrapper.domain_name=cartpole", "env.wrapper.task_name=swingup",
                              "env.action_repeat=8", "env.max_episode_steps=1000", "env.wrapper.from_vectors=False"]),
}
SHEEPRL_SIZE_KEYS = {  # heron flag -> sheeprl key
    "dense_units": ["algo.dense_units"], "mlp_layers": ["algo.mlp_layers"],
    "cnn_channels_multiplier": ["algo.world_model.encoder.cnn_channels_multiplier"],
    "recurrent_state_size": ["algo.world_model.recurrent_model.recurrent_state_size"],
    "hidden_size": ["algo.world_model.transition_model.hidden_size",
                    "algo.world_model.representation_model.hidden_size"],
    "stochastic_size": ["algo.world_model.stochastic_size"], "discrete_size": ["algo.world_model.discrete_size"],
}


def run_heron(task: str, sizes: str, steps: int, seed: int, out: Path, replay_ratio: float) -> dict:
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in SIZES[sizes].items()]
    argv = [sys.executable, "-m", "heron", "train", "dreamer_v2", *TASKS[task]["heron"], *flags,
            "--total-steps", str(steps), "--learning-starts", "1024", "--pretrain-steps", "0",
            "--train-every", str(round(1 / replay_ratio)),
            "--per-rank-batch-size", "16", "--sequence-length", "50", "--buffer-size", "16384",
            "--buffer-type", "sequential", "--gamma", "0.99", "--kl-free-nats", "1.0", "--kl-regularizer", "1.0",
            "--world-lr", "3e-4", "--actor-lr", "8e-5", "--critic-lr", "8e-5", "--actor-ent-coef", "1e-4",
            "--clip-gradients", "100", "--torch-threads", "1", "--eval-every", "0", "--eval-episodes", "1",
            "--checkpoint-every", "0", "--log-every", "1024", "--progress", "none", "--seed", str(seed), "--run-dir", str(out / "heron")]
    t = time.perf_counter()
    subprocess.run(argv, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - t
    with open(out / "heron" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    returns = [(int(r["step"]), float(r["value"])) for r in rows if r["metric"] == "charts/episodic_return"]
    # heron always evaluates at the end (sheeprl runs with run_test=False): leave that out
    trained = max(float(r["wall_time"]) for r in rows if r["metric"] == "charts/SPS")
    evaluated = max(float(r["wall_time"]) for r in rows if r["metric"] == "eval/mean_return")
    return {"wall_s": wall - max(0.0, evaluated - trained), "returns": returns}


def run_sheeprl(python: str, task: str, sizes: str, steps: int, seed: int, out: Path, replay_ratio: float) -> dict:
    overrides = [f"{key}={v}" for k, v in SIZES[sizes].items() for key in SHEEPRL_SIZE_KEYS[k]]
    argv = [python, "-m", "sheeprl", "exp=dreamer_v2_benchmarks", *TASKS[task]["sheeprl"], *overrides,
            f"algo.total_steps={steps}", f"algo.replay_ratio={replay_ratio}", "fabric.accelerator=cpu", "fabric.devices=1", "num_threads=1",
            f"seed={seed}", "algo.run_test=False", "env.capture_video=False", "checkpoint.every=100000000",
            "checkpoint.save_last=False", "buffer.checkpoint=False", "model_manager.disabled=True",
            "metric.log_level=1", f"root_dir={out / 'sheeprl'}"]
    t = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"sheeprl failed:\n{proc.stderr[-3000:]}")
    returns = [(int(m[1]), float(m[2])) for m in re.finditer(r"policy_step=(\d+), reward_env_\d+=\[?([-\d.e]+)",
                                                              proc.stdout)]
    return {"wall_s": wall, "returns": returns}


def summary(name: str, res: dict, steps: int, last: int) -> dict:
    rets = [r for _, r in res["returns"]]
    tail = rets[-last:]
    return {"impl": name, "wall_s": round(res["wall_s"], 1), "steps_per_s": round(steps / res["wall_s"], 1),
            "episodes": len(rets), f"mean_last_{last}": round(statistics.mean(tail), 2) if tail else None,
            "returns": [round(r, 1) for r in rets]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=sorted(TASKS), default="pong")
    p.add_argument("--sizes", choices=sorted(SIZES), default="tiny")
    p.add_argument("--steps", type=int, default=16384, help="agent steps (frames = steps x action repeat)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--replay-ratio", type=float, default=1 / 16,
                   help="gradient steps per agent step, 1/k (heron: --train-every k; sheeprl: algo.replay_ratio)")
    p.add_argument("--last", type=int, default=5, help="average the last N training episodes")
    p.add_argument("--sheeprl-python", default="/work/venv-sheeprl/bin/python")
    p.add_argument("--skip-sheeprl", action="store_true")
    p.add_argument("--skip-heron", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    out = Path(tempfile.mkdtemp(prefix="dreamer_runs_"))
    rows = []
    if not args.skip_heron:
        rows.append(summary("heron", run_heron(args.task, args.sizes, args.steps, args.seed, out, args.replay_ratio), args.steps, args.last))
        print(json.dumps(rows[-1]), flush=True)
    if not args.skip_sheeprl:
        rows.append(summary("sheeprl", run_sheeprl(args.sheeprl_python, args.task, args.sizes, args.steps, args.seed, out,
                                                         args.replay_ratio),
                            args.steps, args.last))
        print(json.dumps(rows[-1]), flush=True)
    if len(rows) == 2:
        print(json.dumps({"task": args.task, "sizes": args.sizes, "steps": args.steps,
                          "speedup": round(rows[1]["wall_s"] / rows[0]["wall_s"], 2)}))


if __name__ == "__main__":
    main()
