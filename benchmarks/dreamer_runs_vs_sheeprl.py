#!/usr/bin/env python
"""Whole DreamerV2 trainings, heron then sheeprl 0.8.4, same machine, same sizes, same schedule:
wall time, agent steps per second and the training-episode returns at equal env steps.

    python benchmarks/dreamer_runs_vs_sheeprl.py --task pong --steps 16384
    python benchmarks/dreamer_runs_vs_sheeprl.py --task walker --steps 16384
    python benchmarks/dreamer_runs_vs_sheeprl.py --task walker --schedule preset --sizes dmc --device cuda \
        --steps 100000 --concurrent --time-limit 540 --heron-flags="--cuda-graphs"

``--schedule benchmark`` (the default) is sheeprl's own CPU benchmark (its
``exp=dreamer_v2_benchmarks``): one env, 1,024 random steps first, then one gradient step every 16
agent steps (replay ratio 1/16) on 16 x 50 sequences from a 16,384-step sequential buffer, its
default hyperparameters (gamma 0.99, free nats 1, KL scale 1, no continue model, lrs 3e-4 / 8e-5 /
8e-5, entropy 1e-4, gradient clip 100) and its tiny benchmark model (dense 8, 1 layer, CNN
multiplier 2, RSSM 8/8, 4x4 latents; ``--sizes`` picks another row of dreamer_vs_sheeprl.SIZES). The
tasks: ``pong`` is PongNoFrameskip-v4 with action repeat 4 (AtariPreprocessing on both sides);
``walker`` is DMC walker_walk from 64x64 pixels with action repeat 2; ``cartpole`` is DMC
cartpole_swingup from pixels with action repeat 8 (PlaNet's). ``--replay-ratio`` changes the
training rate on both sides. One torch thread each; nothing else should run meanwhile. sheeprl runs
with the Python of a venv that has it (``--sheeprl-python``) and prints its episode returns; heron's
come from its metrics.csv (its final evaluation is left out of its time). The returns are the mean
of the last ``--last`` training episodes (sampled actions, as sheeprl logs them).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from dreamer_vs_sheeprl import SIZES  # noqa: E402

TASKS = {
    "pong": dict(
        heron=["--env-id", "PongNoFrameskip-v4", "--action-repeat", "4", "--max-episode-steps", "27000"],
        sheeprl=["env=atari", "env.id=PongNoFrameskip-v4", "env.action_repeat=4", "env.max_episode_steps=27000"],
    ),
    "walker": dict(
        heron=["--env-id", "dmc_walker_walk", "--action-repeat", "2", "--max-episode-steps", "1000"],
        sheeprl=[
            "env=dmc",
            "env.wrapper.domain_name=walker",
            "env.wrapper.task_name=walk",
            "env.action_repeat=2",
            "env.max_episode_steps=1000",
            "env.wrapper.from_vectors=False",
        ],
    ),
    "cartpole": dict(
        heron=["--env-id", "dmc_cartpole_swingup", "--action-repeat", "8", "--max-episode-steps", "1000"],
        sheeprl=[
            "env=dmc",
            "env.wrapper.domain_name=cartpole",
            "env.wrapper.task_name=swingup",
            "env.action_repeat=8",
            "env.max_episode_steps=1000",
            "env.wrapper.from_vectors=False",
        ],
    ),
}
SHEEPRL_SIZE_KEYS = {  # heron flag -> sheeprl key
    "dense_units": ["algo.dense_units"],
    "mlp_layers": ["algo.mlp_layers"],
    "cnn_channels_multiplier": ["algo.world_model.encoder.cnn_channels_multiplier"],
    "recurrent_state_size": ["algo.world_model.recurrent_model.recurrent_state_size"],
    "hidden_size": [
        "algo.world_model.transition_model.hidden_size",
        "algo.world_model.representation_model.hidden_size",
    ],
    "stochastic_size": ["algo.world_model.stochastic_size"],
    "discrete_size": ["algo.world_model.discrete_size"],
}


# sheeprl's DreamerV2 settings for Atari and DMC (heron's presets) in sheeprl's keys; `train_every` k is
# sheeprl's replay ratio 1/k
PRESET_BLOCKS = {
    "dmc": dict(
        preset="dmc",
        train_every=5,
        sheeprl=[
            "algo.learning_starts=2000",
            "algo.per_rank_pretrain_steps=200",
            "algo.gamma=0.99",
            "algo.world_model.kl_regularizer=1.0",
            "algo.world_model.kl_free_nats=1.0",
            "algo.actor.ent_coef=1e-4",
            "algo.actor.optimizer.lr=8e-5",
            "algo.critic.optimizer.lr=8e-5",
            "algo.world_model.optimizer.lr=3e-4",
            "algo.world_model.use_continues=False",
            "env.clip_rewards=False",
        ],
    ),
    "atari": dict(
        preset="atari",
        train_every=4,
        sheeprl=[
            "algo.learning_starts=200000",
            "algo.per_rank_pretrain_steps=1",
            "algo.gamma=0.995",
            "algo.world_model.kl_regularizer=0.1",
            "algo.world_model.kl_free_nats=0.0",
            "algo.world_model.discount_scale_factor=5.0",
            "algo.actor.ent_coef=1e-3",
            "algo.actor.optimizer.lr=4e-5",
            "algo.critic.optimizer.lr=1e-4",
            "algo.world_model.optimizer.lr=2e-4",
            "algo.world_model.use_continues=True",
            "env.clip_rewards=True",
        ],
    ),
}
PRESET_COMMON_SHEEPRL = [
    "algo.per_rank_batch_size=50",
    "algo.per_rank_sequence_length=50",
    "buffer.type=episode",
    "buffer.prioritize_ends=True",
    "buffer.memmap=True",
]


def heron_argv(args, out: Path) -> list[str]:
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in SIZES[args.sizes].items()]
    common = [
        *TASKS[args.task]["heron"],
        *flags,
        "--total-steps",
        str(args.steps),
        "--device",
        args.device,
        "--eval-every",
        "0",
        "--eval-episodes",
        "1",
        "--checkpoint-every",
        "0",
        "--progress",
        "none",
        "--seed",
        str(args.seed),
        "--run-dir",
        str(out / "heron"),
    ]
    if args.device == "cpu":
        common += ["--torch-threads", "1"]
    if args.schedule == "preset":
        block = PRESET_BLOCKS["atari" if args.task == "pong" else "dmc"]
        return [
            sys.executable,
            "-m",
            "heron",
            "train",
            "dreamer_v2",
            "--preset",
            block["preset"],
            *common,
            "--capture-video",
            "false",
            "--buffer-size",
            str(args.steps),
            "--log-every",
            "1000",
            *shlex.split(args.heron_flags),
        ]
    return [
        sys.executable,
        "-m",
        "heron",
        "train",
        "dreamer_v2",
        *common,
        "--learning-starts",
        "1024",
        "--pretrain-steps",
        "0",
        "--train-every",
        str(round(1 / args.replay_ratio)),
        "--per-rank-batch-size",
        "16",
        "--sequence-length",
        "50",
        "--buffer-size",
        "16384",
        "--buffer-type",
        "sequential",
        "--gamma",
        "0.99",
        "--kl-free-nats",
        "1.0",
        "--kl-regularizer",
        "1.0",
        "--world-lr",
        "3e-4",
        "--actor-lr",
        "8e-5",
        "--critic-lr",
        "8e-5",
        "--actor-ent-coef",
        "1e-4",
        "--clip-gradients",
        "100",
        "--log-every",
        "1024",
        *shlex.split(args.heron_flags),
    ]


def sheeprl_argv(args, out: Path) -> list[str]:
    overrides = [f"{key}={v}" for k, v in SIZES[args.sizes].items() for key in SHEEPRL_SIZE_KEYS[k]]
    accel = ["fabric.accelerator=cpu", "num_threads=1"] if args.device == "cpu" else ["fabric.accelerator=cuda"]
    common = [
        *TASKS[args.task]["sheeprl"],
        *overrides,
        f"algo.total_steps={args.steps}",
        *accel,
        "fabric.devices=1",
        f"seed={args.seed}",
        "algo.run_test=False",
        "env.capture_video=False",
        "env.num_envs=1",
        "checkpoint.every=100000000",
        "checkpoint.save_last=False",
        "buffer.checkpoint=False",
        "model_manager.disabled=True",
        "metric.log_level=1",
        f"root_dir={out / 'sheeprl'}",
    ]
    if args.schedule == "preset":
        block = PRESET_BLOCKS["atari" if args.task == "pong" else "dmc"]
        return [
            args.sheeprl_python,
            "-m",
            "sheeprl",
            "exp=dreamer_v2",
            *common,
            *block["sheeprl"],
            *PRESET_COMMON_SHEEPRL,
            f"algo.replay_ratio={1 / block['train_every']}",
            f"buffer.size={args.steps}",
        ]
    return [
        args.sheeprl_python,
        "-m",
        "sheeprl",
        "exp=dreamer_v2_benchmarks",
        *common,
        f"algo.replay_ratio={args.replay_ratio}",
    ]


def heron_result(out: Path, wall: float) -> dict:
    with open(out / "heron" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    returns = [(int(r["step"]), float(r["value"])) for r in rows if r["metric"] == "charts/episodic_return"]
    # heron always evaluates at the end (sheeprl runs with run_test=False): leave that out
    trained = max((float(r["wall_time"]) for r in rows if r["metric"] == "charts/SPS"), default=0.0)
    evaluated = max((float(r["wall_time"]) for r in rows if r["metric"] == "eval/mean_return"), default=trained)
    return {"wall_s": wall - max(0.0, evaluated - trained), "returns": returns}


def sheeprl_result(log: Path, wall: float) -> dict:
    text = log.read_text()
    returns = [(int(m[1]), float(m[2])) for m in re.finditer(r"policy_step=(\d+), reward_env_\d+=\[?([-\d.e]+)", text)]
    return {"wall_s": wall, "returns": returns}


def launch(argv: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with open(log, "w") as f:
        return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env)


def wait(procs: dict[str, subprocess.Popen], start: float, time_limit: float) -> dict[str, float]:
    """Wait for the runs; at ``time_limit`` SIGTERM the rest (heron checkpoints, flushes its logs
    and exits 130). Returns each run's wall time."""
    walls: dict[str, float] = {}
    while len(walls) < len(procs):
        for name, proc in procs.items():
            if name not in walls and proc.poll() is not None:
                walls[name] = time.perf_counter() - start
        if time_limit and time.perf_counter() - start > time_limit:
            for name, proc in procs.items():
                if name not in walls:
                    proc.send_signal(signal.SIGTERM)
            for name, proc in procs.items():
                if name not in walls:
                    try:
                        proc.wait(120)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                    walls[name] = time_limit
        time.sleep(0.5)
    return walls


def run_all(args, out: Path) -> dict[str, dict]:
    argvs = {}
    if not args.skip_heron:
        argvs["heron"] = heron_argv(args, out)
    if not args.skip_sheeprl:
        argvs["sheeprl"] = sheeprl_argv(args, out)
    results = {}
    order = [list(argvs)] if args.concurrent else [[name] for name in argvs]
    for group in order:
        start = time.perf_counter()
        procs = {name: launch(argvs[name], out / f"{name}.log") for name in group}
        walls = wait(procs, start, args.time_limit)
        for name in group:
            if procs[name].returncode not in (0, 130, -signal.SIGTERM):
                raise SystemExit(
                    f"{name} failed ({procs[name].returncode}):\n{(out / f'{name}.log').read_text()[-3000:]}"
                )
            results[name] = (
                heron_result(out, walls[name]) if name == "heron" else sheeprl_result(out / "sheeprl.log", walls[name])
            )
    return results


def binned(results: dict[str, dict], width: int) -> list[dict]:
    """Mean training return per bin of ``width`` agent steps, up to the last step every run reached."""
    common = min(max((s for s, _ in r["returns"]), default=0) for r in results.values())
    rows = []
    for lo in range(0, common, width):
        row = {"steps": f"{lo}-{min(lo + width, common)}"}
        for name, r in results.items():
            vals = [v for s, v in r["returns"] if lo < s <= lo + width and s <= common]
            row[name] = round(statistics.mean(vals), 1) if vals else None
        rows.append(row)
    return rows


def summary(name: str, res: dict, steps: int, last: int) -> dict:
    rets = [r for _, r in res["returns"]]
    tail = rets[-last:]
    reached = max((s for s, _ in res["returns"]), default=0) if steps <= 0 else steps
    return {
        "impl": name,
        "wall_s": round(res["wall_s"], 1),
        "steps_per_s": round(reached / res["wall_s"], 1),
        "episodes": len(rets),
        "last_episode_step": max((s for s, _ in res["returns"]), default=0),
        f"mean_last_{last}": round(statistics.mean(tail), 2) if tail else None,
        "returns": [round(r, 1) for r in rets],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=sorted(TASKS), default="pong")
    p.add_argument("--sizes", choices=sorted(SIZES), default="tiny")
    p.add_argument("--steps", type=int, default=16384, help="agent steps (frames = steps x action repeat)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--replay-ratio",
        type=float,
        default=1 / 16,
        help="gradient steps per agent step, 1/k (heron: --train-every k; sheeprl: algo.replay_ratio)",
    )
    p.add_argument("--last", type=int, default=5, help="average the last N training episodes")
    p.add_argument(
        "--schedule",
        choices=["benchmark", "preset"],
        default="benchmark",
        help="benchmark: sheeprl's CPU benchmark schedule; preset: sheeprl's DreamerV2 setting for the task "
        "(heron's --preset atari or dmc)",
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda (both sides)")
    p.add_argument("--heron-flags", default="", help='extra heron flags, e.g. --heron-flags="--cuda-graphs"')
    p.add_argument("--concurrent", action="store_true", help="run both at once (returns only, not speed)")
    p.add_argument("--time-limit", type=float, default=0.0, help="stop runs still going after this many seconds")
    p.add_argument("--bin", type=int, default=5000, help="agent steps per bin of the equal-steps table")
    p.add_argument("--out-json", default="", help="also write every return and the table here")
    p.add_argument("--sheeprl-python", default="/work/venv-sheeprl/bin/python")
    p.add_argument("--skip-sheeprl", action="store_true")
    p.add_argument("--skip-heron", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    out = Path(tempfile.mkdtemp(prefix="dreamer_runs_"))
    results = run_all(args, out)
    steps = 0 if args.time_limit else args.steps  # stopped runs: their last logged episode
    rows = [summary(name, res, steps, args.last) for name, res in results.items()]
    for row in rows:
        print(json.dumps(row), flush=True)
    table = binned(results, args.bin) if len(results) == 2 else []
    for row in table:
        print(json.dumps(row), flush=True)
    if len(rows) == 2 and not args.concurrent:
        print(
            json.dumps(
                {
                    "task": args.task,
                    "sizes": args.sizes,
                    "steps": args.steps,
                    "speedup": round(rows[1]["wall_s"] / rows[0]["wall_s"], 2),
                }
            )
        )
    if args.out_json:
        Path(args.out_json).write_text(
            json.dumps(
                {"args": vars(args), "runs": rows, "table": table, "raw": {k: v["returns"] for k, v in results.items()}}
            )
        )


if __name__ == "__main__":
    main()
