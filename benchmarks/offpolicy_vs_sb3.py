#!/usr/bin/env python
"""heron vs Stable-Baselines3: SAC and TD3 with identical settings, one after the other, on this machine.

For each algorithm, heron trains first and SB3 second (never in parallel; each training in a fresh
Python process; with ``--rounds N`` the order alternates), with the same torch
thread count, device, seed and hyperparameters. Reported side by side, with heron/SB3 ratios:

* **updates/s**: gradient updates per second during the learning phase (the random warm-up of
  ``--learning-starts`` steps is excluded). Both libraries do one env step and one gradient update
  per iteration once learning has started, so this is the learning-phase iteration rate;
* **env steps/s**: overall training throughput, ``steps / (time from setup to the last step)``,
  warm-up included (final evaluation and heron's final checkpoint excluded on both sides);
* **eval return**: mean +- std of ``--eval-episodes`` deterministic episodes of the final policy,
  run by ONE evaluation loop of this script for both libraries, with episode k of every run reset
  with ``seed + 1_000_000 + k`` (heron's evaluation seeds; heron's own final evaluation is
  cross-checked against it).

How the learning phase is timed, without touching heron's library code
----------------------------------------------------------------------
heron: ``heron.train(..., progress="none", eval_every=0, log_every=L)``. heron writes losses every
``L`` env steps (only once learning has started), and every row of ``metrics.csv`` carries its
``wall_time``. The losses row at step ``s`` is written after the env step and the gradient update of
step ``s``. ``L`` is chosen as a divisor of both ``--learning-starts`` and ``--total-steps`` (when a
reasonable one exists) giving >= 10 rows, so the window runs from ``s0 = learning_starts + L``
to ``s1 = total_steps``:  updates/s = (s1 - s0) / (wall_time[s1] - wall_time[s0]).
The first ``L`` learning steps are left out (they include one-off costs such as the first backward
pass), and so is everything after the loop (final evaluation, final checkpoint). Overall env
steps/s is heron's own ``charts/SPS`` in the row at ``s1`` (steps since its logger opened / time).
The alternatives were worse: timing two trainings (``total_steps=learning_starts`` and
``total_steps``) and subtracting also subtracts setup, a final evaluation of a different (random
vs trained) policy and a final checkpoint of a different-size replay buffer, which heron always
does and none of which is learning.

SB3: a callback records the wall time in ``_on_rollout_start`` (called, with ``train_freq=1``,
right after the previous step's gradient update) at step ``s0``, and in ``_on_training_end``
(after the last update) or ``_on_rollout_start`` at ``s1``: exactly the same window of env steps
and updates as heron's. Overall env steps/s counts from just before the vec env and the model are
built (heron's clock also starts before its env and networks exist).

Identical settings (both sides)
-------------------------------
256-256 MLPs, batch 256, replay buffer 1e6, gamma 0.99, tau 0.005, train_freq 1 / gradient_steps 1,
the same learning_starts (uniform random actions before it), one env, no observation
normalization, Adam.

* Learning rates: SB3 has one ``learning_rate`` for actor, critics and entropy coefficient. heron's
  SAC defaults to policy 3e-4 / q 1e-3 (CleanRL); for parity heron runs here with policy-lr = q-lr
  = 3e-4 (its alpha optimizer uses q-lr) and SB3 with learning_rate = 3e-4. TD3: 3e-4 everywhere.
* SAC: heron ``policy_frequency=1`` and ``target_network_frequency=1`` (SB3 updates the actor
  and the targets every gradient step; heron's default policy_frequency is 2), automatic entropy
  tuning starting at alpha 0.2 on both sides (SB3 ``ent_coef="auto_0.2"``; its default would start
  at 1.0), target entropy -|A|.
* TD3: policy delay 2, target smoothing noise 0.2 clipped at 0.5 (both as fractions of the action
  half-range), Gaussian exploration noise with std 0.1 x action half-range. SB3 adds
  ``action_noise`` to the action rescaled to [-1, 1], so ``NormalActionNoise(sigma=0.1)`` there
  IS 0.1 x half-range in env units (a sigma of 0.1 * half-range would double-scale it on envs whose
  half-range is not 1, e.g. Pendulum's 2).

Left as each library does it (no effect on the work per update): heron's SAC squashes log-std
into [-5, 2] with tanh (CleanRL), SB3 clamps it to [-20, 2]; SB3's SAC updates the entropy
coefficient before the critics, heron after the actor; heron runs its twin critics as one batched
ensemble. These are single-seed runs: returns at 20k steps are noisy, throughput is the point.

Run (about 2 x 2 trainings of --total-steps each; use a quiet machine)::

    python benchmarks/offpolicy_vs_sb3.py                                   # Hopper-v5, 20k steps
    python benchmarks/offpolicy_vs_sb3.py --algos sac --threads 1 --out bench.json --markdown
    python benchmarks/offpolicy_vs_sb3.py --algos crossq --total-steps 2000 --learning-starts 1000 \\
        --threads 1 --rounds 3                              # CrossQ beside sb3-contrib's, 1024-wide critics
    python benchmarks/offpolicy_vs_sb3.py --env-id Pendulum-v1 --total-steps 1500 \\
        --learning-starts 500 --eval-episodes 1                             # smoke test
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import heron
from heron.envs.make import make_env
from heron.runtime.episodes import EVAL_SEED_OFFSET

ALGOS = ("sac", "td3", "crossq")  # crossq: heron's --preset crossq beside sb3-contrib's CrossQ
CROSSQ = dict(lr=1e-3, policy_delay=3, actor=(256, 256))  # sb3-contrib's CrossQ defaults (and the paper's)
LOSS_ROW = "losses/qf_loss"  # written every --log-every steps by both heron algorithms once learning starts


# -- settings ---------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="heron vs Stable-Baselines3 (SAC, TD3): update throughput, "
        "env steps/s and final evaluation with identical settings."
    )
    p.add_argument("--env-id", default="Hopper-v5")
    p.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    p.add_argument("--total-steps", type=int, default=20_000)
    p.add_argument("--learning-starts", type=int, default=5000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-episodes", type=int, default=5)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads, for both libraries; 0: each "
        "library's own default (heron's follows the free cores, SB3's is torch's: one per core)",
    )
    p.add_argument(
        "--busy",
        type=int,
        default=0,
        metavar="K",
        help="K other busy processes (a Python loop each) "
        "during the whole benchmark: a machine where something else runs",
    )
    p.add_argument(
        "--critic-width",
        type=int,
        default=1024,
        help="crossq: both critics' two hidden layers (default 1024, sb3-contrib's; the paper's is 2048)",
    )
    p.add_argument("--device", default="cpu", help="torch device for both libraries (default cpu)")
    p.add_argument(
        "--precision",
        nargs="+",
        default=["32"],
        choices=["32", "bf16-mixed"],
        help="heron's --precision; one heron training per value (SB3 runs float32)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="trainings per library, the order reversed every other round; the rates and the heron/SB3 "
        "ratios reported are the medians over rounds (a shared VM's speed can drift by tens of percent "
        "within minutes); the evaluation is the first round's",
    )
    p.add_argument("--out", default=None, help="write all results as JSON to this path")
    p.add_argument("--markdown", action="store_true", help="also print a markdown table for docs/benchmarks/speed.md")
    # internal: one training in a fresh process (what main() runs for every training)
    p.add_argument("--one", nargs=4, metavar=("ALGO", "LIB", "ROUND", "RESULT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.learning_starts < 0 or args.total_steps - args.learning_starts < 2:
        p.error("need 0 <= --learning-starts <= --total-steps - 2 (the learning phase is what is timed)")
    if args.batch_size <= 0 or args.eval_episodes <= 0 or args.threads < 0 or args.busy < 0:
        p.error("--batch-size and --eval-episodes must be positive, --threads and --busy >= 0")
    return args


def set_threads(args: argparse.Namespace) -> None:
    if args.threads:  # 0: left to each library
        torch.set_num_threads(args.threads)


def threads_label(args: argparse.Namespace) -> str:
    busy = f", {args.busy} other busy process(es)" if args.busy else ""
    return (f"{args.threads} torch thread(s)" if args.threads else "each library's default torch threads") + busy


COMMON = dict(hidden_sizes=(256, 256), buffer_size=1_000_000, gamma=0.99, tau=0.005, lr=3e-4)


def choose_log_every(total: int, starts: int) -> int:
    """heron's --log-every: losses rows at every multiple of it in (starts, total]. Prefer a divisor
    of gcd(total, starts) (rows then fall at starts + L and at total) with >= 10 rows in the learning
    phase; otherwise (awkward step counts) about 10 rows, unaligned."""
    span = total - starts
    g = math.gcd(total, starts)  # gcd(total, 0) = total
    divisors = {d for i in range(1, math.isqrt(g) + 1) if g % i == 0 for d in (i, g // i)}
    fits = [d for d in divisors if span // d >= 10]
    if fits and max(fits) * 200 >= span:  # not absurdly many rows (each row is a host sync + CSV/TB write)
        return max(fits)
    return max(1, span // 10)


def window(total: int, starts: int, log_every: int) -> tuple[int, int]:
    """(s0, s1): first and last losses row of heron's learning phase; the timed window."""
    s0 = (starts // log_every + 1) * log_every
    s1 = (total // log_every) * log_every
    if s1 <= s0:
        raise SystemExit(f"learning phase too short to time ({starts} -> {total} steps)")
    return s0, s1


# -- heron ------------------------------------------------------------------------------------------
def heron_overrides(algo: str, args: argparse.Namespace, run_dir: Path, log_every: int, precision: str = "32") -> dict:
    cfg = dict(
        env_id=args.env_id,
        precision=precision,
        seed=args.seed,
        total_steps=args.total_steps,
        learning_starts=args.learning_starts,
        batch_size=args.batch_size,
        buffer_size=COMMON["buffer_size"],
        hidden_sizes=COMMON["hidden_sizes"],
        gamma=COMMON["gamma"],
        tau=COMMON["tau"],
        policy_lr=COMMON["lr"],
        q_lr=COMMON["lr"],
        gradient_steps=1,
        num_envs=1,
        vector_mode="sync",
        device=args.device,
        torch_threads=args.threads,
        obs_norm=False,
        max_grad_norm=0.0,
        compile=False,
        eval_every=0,
        eval_episodes=args.eval_episodes,
        checkpoint_every=0,
        log_every=log_every,
        progress="none",
        run_dir=str(run_dir),
    )
    if algo == "sac":
        cfg.update(
            policy_frequency=1,
            target_network_frequency=1,
            autotune=True,
            alpha=0.2,
            target_entropy_scale=1.0,
            recurrent="none",
            lr_schedule="constant",
        )
    elif algo == "crossq":  # sb3-contrib's defaults on both sides; its entropy coefficient starts at 1
        width = args.critic_width
        cfg.update(
            crossq=True,
            policy_lr=CROSSQ["lr"],
            q_lr=CROSSQ["lr"],
            adam_beta1=0.5,
            policy_frequency=CROSSQ["policy_delay"],
            hidden_sizes=CROSSQ["actor"],
            critic_hidden_sizes=(width, width),
            bn_momentum=0.01,
            bn_warmup=100_000,
            autotune=True,
            alpha=1.0,
            target_entropy_scale=1.0,
        )
    else:
        cfg.update(policy_frequency=2, policy_noise=0.2, noise_clip=0.5, exploration_noise=0.1)
    return cfg


def run_heron(
    algo: str,
    args: argparse.Namespace,
    work: Path,
    log_every: int,
    s0: int,
    s1: int,
    precision: str = "32",
    round_: int = 0,
) -> dict:
    run_dir = work / f"heron_{algo}_{precision}_{round_}"
    set_threads(args)  # heron sets it too, from torch_threads
    t = time.perf_counter()
    summary = heron.train(
        "sac" if algo == "crossq" else algo, **heron_overrides(algo, args, run_dir, log_every, precision)
    )
    wall = time.perf_counter() - t

    losses_at, sps_at = {}, {}
    with open(run_dir / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            step = int(row["step"])
            if row["metric"] == LOSS_ROW:
                losses_at.setdefault(step, float(row["wall_time"]))
            elif row["metric"] == "charts/SPS":
                sps_at.setdefault(step, float(row["value"]))  # the first: bookkeeping's, before finish()
    missing = [s for s in (s0, s1) if s not in losses_at or (s == s1 and s not in sps_at)]
    if missing:
        raise RuntimeError(f"heron's metrics.csv lacks rows at steps {missing}; cannot time its learning phase")
    seconds = losses_at[s1] - losses_at[s0]
    policy = heron.load(run_dir, device=args.device)
    return {
        "updates_per_s": (s1 - s0) / seconds,
        "window_s": seconds,
        "env_steps_per_s": sps_at[s1],
        "wall_s": wall,
        "internal_eval": summary["mean_return"],
        "predict": lambda obs: policy.predict(obs, deterministic=True),
        "reset": policy.reset,
    }


# -- Stable-Baselines3 ------------------------------------------------------------------------------
def run_sb3(algo: str, args: argparse.Namespace, s0: int, s1: int) -> dict:
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    class Clock(BaseCallback):
        """Wall time right after the gradient update of step s0 and of step s1 (heron's rows)."""

        def __init__(self):
            super().__init__()
            self.at: dict[int, float] = {}

        def _on_rollout_start(self) -> None:  # train_freq=1: after the previous step's update
            if self.model.num_timesteps in (s0, s1):
                self.at.setdefault(self.model.num_timesteps, time.perf_counter())

        def _on_training_end(self) -> None:  # after the last update
            self.at.setdefault(self.model.num_timesteps, time.perf_counter())

        def _on_step(self) -> bool:
            return True

    set_threads(args)
    t_start = time.perf_counter()
    env = make_vec_env(lambda: make_env(args.env_id), n_envs=1, seed=args.seed)
    shared = dict(
        learning_rate=COMMON["lr"],
        buffer_size=COMMON["buffer_size"],
        learning_starts=args.learning_starts,
        batch_size=args.batch_size,
        tau=COMMON["tau"],
        gamma=COMMON["gamma"],
        train_freq=1,
        gradient_steps=1,
        policy_kwargs=dict(net_arch=list(COMMON["hidden_sizes"])),
        seed=args.seed,
        device=args.device,
        verbose=0,
    )
    if algo == "crossq":
        from sb3_contrib import CrossQ

        width = args.critic_width
        del shared["tau"]  # CrossQ has no target networks
        shared.update(
            learning_rate=CROSSQ["lr"],
            policy_kwargs=dict(net_arch={"pi": list(CROSSQ["actor"]), "qf": [width, width]}),
        )
        model = CrossQ("MlpPolicy", env, policy_delay=CROSSQ["policy_delay"], **shared)
    elif algo == "sac":
        model = SAC("MlpPolicy", env, ent_coef="auto_0.2", target_entropy="auto", target_update_interval=1, **shared)
    else:
        A = env.action_space.shape[0]
        # SB3 adds this noise to the action rescaled to [-1, 1]: sigma 0.1 = 0.1 x half-range in env units
        noise = NormalActionNoise(mean=np.zeros(A), sigma=0.1 * np.ones(A))
        model = TD3(
            "MlpPolicy",
            env,
            action_noise=noise,
            policy_delay=2,
            target_policy_noise=0.2,
            target_noise_clip=0.5,
            **shared,
        )
    clock = Clock()
    model.learn(total_timesteps=args.total_steps, callback=clock)
    wall = time.perf_counter() - t_start
    env.close()
    seconds = clock.at[s1] - clock.at[s0]
    return {
        "updates_per_s": (s1 - s0) / seconds,
        "window_s": seconds,
        "env_steps_per_s": s1 / (clock.at[s1] - t_start),
        "wall_s": wall,
        "predict": lambda obs: model.predict(obs, deterministic=True)[0],
        "reset": lambda: None,
    }


# -- evaluation (one loop for both) -----------------------------------------------------------------
def evaluate(predict, reset, env_id: str, episodes: int, seed: int) -> np.ndarray:
    env = make_env(env_id)
    returns = []
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=seed + EVAL_SEED_OFFSET + k)
            reset()
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(predict(np.asarray(obs, np.float32)))
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return np.asarray(returns)


# -- report -----------------------------------------------------------------------------------------
def cpu_name() -> str:
    """The CPU's model name and the vector instructions torch uses on it (VMs that report the same
    "AMD EPYC" name may have AVX512-BF16 or AVX2 only, and the ratios differ between them)."""
    from heron.accel.precision import native_bf16

    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    bf16 = "bfloat16 native" if native_bf16(torch.device("cpu")) else "bfloat16 emulated"
    return f"{name} ({torch.backends.cpu.get_cpu_capability()}, {bf16})"


def versions() -> dict:
    import gymnasium
    import stable_baselines3

    return {
        "heron": heron.__version__,
        "stable_baselines3": stable_baselines3.__version__,
        "torch": torch.__version__,
        "gymnasium": gymnasium.__version__,
        "python": platform.python_version(),
    }


def heron_label(precision: str) -> str:
    return "heron" if precision == "32" else f"heron {precision}"


def heron_rows(results: dict) -> list:
    """((algo, label), result) for every heron training (one per --precision)."""
    return [((algo, lib), r) for algo, libs in results.items() for lib, r in libs.items() if lib.startswith("heron")]


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def median_ratio(h: dict, s: dict, key: str) -> float:
    """The median over rounds of heron's rate over SB3's in the same round."""
    return float(np.median([a / b for a, b in zip(h[f"{key}_rounds"], s[f"{key}_rounds"])]))


def summarize_rounds(libs: dict) -> None:
    """Each library's rates become the medians of its rounds (the per-round values kept beside them)."""
    for r in libs.values():
        for key in ("updates_per_s", "env_steps_per_s"):
            r[key] = float(np.median(r[f"{key}_rounds"]))


def settings_text(args) -> str:
    """The settings both sides share, one clause per algorithm family that ran."""
    parts = []
    if {"sac", "td3"} & set(args.algos):
        parts.append(
            "SAC/TD3: 256-256, tau 0.005, train_freq 1, gradient_steps 1, lr 3e-4 for all networks (heron's SAC "
            "default q-lr is 1e-3; SB3 has a single learning_rate); SAC actor and targets updated every step, "
            "alpha auto from 0.2; TD3 policy delay 2, target noise 0.2 clip 0.5, exploration noise 0.1 x half-range"
        )
    if "crossq" in args.algos:
        parts.append(
            f"CrossQ: sb3-contrib's defaults, 256-256 actor, {args.critic_width}-wide critics, lr 1e-3, "
            "Adam beta1 0.5, actor every third update, no target networks"
        )
    return "; ".join(parts)


def print_table(args, results: dict, s0: int, s1: int, info: dict) -> None:
    print()
    print(
        f"heron {info['versions']['heron']} vs Stable-Baselines3 {info['versions']['stable_baselines3']} "
        f"on {args.env_id}: {args.total_steps} steps, learning from step {args.learning_starts}, seed {args.seed}"
    )
    print(
        f"machine: {info['cpu']}; torch {info['versions']['torch']}, {threads_label(args)}, "
        f"device {args.device}; trained one after the other, each in a fresh process"
    )
    print(f"settings (both sides): batch {args.batch_size}, buffer 1e6, gamma 0.99; {settings_text(args)}")
    print(
        f"updates/s: learning phase only, steps {s0} -> {s1} ({s1 - s0} updates); env steps/s: steps 0 -> {s1}; "
        f"eval: {args.eval_episodes} deterministic episode(s), same seeds for both"
    )
    if args.rounds > 1:
        print(
            f"{args.rounds} rounds, the order reversed every other round: rates are medians over rounds, ratios "
            "the medians of the per-round ratios"
        )
    print()
    head = f"{'algo':<5} {'metric':<12} {'heron':>18} {'SB3':>18} {'heron/SB3':>10}"
    print(head)
    print("-" * len(head))
    for (algo, lib), h in heron_rows(results):
        s = results[algo]["sb3"]
        print(
            f"{algo + lib[5:]:<5} {'updates/s':<12} {h['updates_per_s']:>18.1f} {s['updates_per_s']:>18.1f} "
            f"{median_ratio(h, s, 'updates_per_s'):>9.2f}x"
        )
        print(
            f"{'':<5} {'env steps/s':<12} {h['env_steps_per_s']:>18.1f} {s['env_steps_per_s']:>18.1f} "
            f"{median_ratio(h, s, 'env_steps_per_s'):>9.2f}x"
        )
        if args.rounds > 1:
            per = [f"{a / b:.2f}" for a, b in zip(h["updates_per_s_rounds"], s["updates_per_s_rounds"])]
            print(f"{'':<5} {'rounds':<12} updates/s ratio per round: {', '.join(per)}")
        he, se = f"{h['eval_mean']:.1f} +- {h['eval_std']:.1f}", f"{s['eval_mean']:.1f} +- {s['eval_std']:.1f}"
        diff = h["eval_mean"] - s["eval_mean"]
        print(f"{'':<5} {'eval return':<12} {he:>18} {se:>18} {f'{diff:+.1f}':>10}")
    print("(eval return column 'heron/SB3' is the difference heron - SB3, not a ratio; single seed)")


def print_markdown(args, results: dict, s0: int, s1: int, info: dict) -> None:
    v = info["versions"]
    print()
    print("| Algorithm | Env | Steps | Library | Updates/s | Env steps/s | Eval return | heron/SB3 updates/s |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for algo, r in results.items():
        for lib, x in r.items():
            name = f"SB3 {v['stable_baselines3']}" if lib == "sb3" else f"heron {v['heron']}{lib[5:]}"
            rel = f"{median_ratio(x, r['sb3'], 'updates_per_s'):.2f}x" if lib != "sb3" else ""
            print(
                f"| {algo.upper()} | {args.env_id} | {args.total_steps:,} | {name} | {x['updates_per_s']:.0f} | "
                f"{x['env_steps_per_s']:.0f} | {x['eval_mean']:.1f} ± {x['eval_std']:.1f} | {rel} |"
            )
    print()
    settings = settings_text(args)
    print(
        f"*{info['cpu']}, device {args.device}, {threads_label(args)}, torch {v['torch']}; "
        f"learning starts at {args.learning_starts:,}, updates/s over steps {s0:,}–{s1:,}; batch {args.batch_size}, "
        f"{settings}; eval: {args.eval_episodes} deterministic episode(s), same seeds; seed {args.seed}. "
        f"`python benchmarks/offpolicy_vs_sb3.py --algos {' '.join(args.algos)} --env-id {args.env_id} "
        f"--total-steps {args.total_steps} "
        f"--learning-starts {args.learning_starts} --threads {args.threads}"
        f"{f' --busy {args.busy}' if args.busy else ''}"
        f"{' --precision ' + ' '.join(args.precision) if args.precision != ['32'] else ''}"
        f"{f' --critic-width {args.critic_width}' if 'crossq' in args.algos else ''}"
        f"{f' --rounds {args.rounds}' if args.rounds > 1 else ''}`*"
        f"{f'; medians of {args.rounds} rounds' if args.rounds > 1 else ''}"
    )


def train_in_subprocess(argv: list[str] | None, algo: str, lib: str, round_: int, work: Path) -> dict:
    """One training (and, in the first round, its evaluation) in a fresh Python process, so that no
    training runs in a process an earlier one left its memory, threads and caches in."""
    result = work / f"{algo}_{lib.replace(' ', '_')}_{round_}.json"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        *(sys.argv[1:] if argv is None else argv),
        "--one",
        algo,
        lib,
        str(round_),
        str(result),
    ]
    subprocess.run(cmd, check=True)
    return json.loads(result.read_text())


def one(args: argparse.Namespace) -> int:
    """``--one ALGO LIB ROUND RESULT``: train, evaluate in round 0, write the result as JSON."""
    algo, lib, round_, result = args.one[0], args.one[1], int(args.one[2]), Path(args.one[3])
    set_threads(args)
    log_every = choose_log_every(args.total_steps, args.learning_starts)
    s0, s1 = window(args.total_steps, args.learning_starts, log_every)
    r = (
        run_heron(algo, args, result.parent, log_every, s0, s1, lib[6:] or "32", round_)
        if lib != "sb3"
        else run_sb3(algo, args, s0, s1)
    )
    predict, reset = r.pop("predict"), r.pop("reset")
    r["threads"] = torch.get_num_threads()  # heron's at the end of its run
    if round_ == 0:
        returns = evaluate(predict, reset, args.env_id, args.eval_episodes, args.seed)
        r.update(eval_mean=float(returns.mean()), eval_std=float(returns.std()), eval_returns=returns.tolist())
        if lib != "sb3" and abs(r["internal_eval"] - r["eval_mean"]) > 1e-3 * max(1.0, abs(r["eval_mean"])):
            # a run evaluates in its precision, a saved policy (this script's) in float32
            why = (
                " (expected in mixed precision: the run evaluates in it, the saved policy in float32)"
                if lib.endswith("mixed")
                else ""
            )
            print(
                f"  warning: heron's own final evaluation ({r['internal_eval']:.3f}) differs from this script's "
                f"({r['eval_mean']:.3f}) on the same seeds{why}",
                flush=True,
            )
    result.write_text(json.dumps(r))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one:
        return one(args)
    try:
        import stable_baselines3  # noqa: F401

        if "crossq" in args.algos:
            import sb3_contrib  # noqa: F401
    except ImportError:
        print(
            "this benchmark needs stable-baselines3 (and sb3-contrib for crossq): "
            "pip install 'stable-baselines3>=2.3' 'sb3-contrib>=2.4'",
            file=sys.stderr,
        )
        return 2
    set_threads(args)
    log_every = choose_log_every(args.total_steps, args.learning_starts)
    s0, s1 = window(args.total_steps, args.learning_starts, log_every)
    info = {"cpu": cpu_name(), "cores": os.cpu_count(), "versions": versions()}
    results: dict[str, dict] = {}
    work = Path(tempfile.mkdtemp(prefix="heron_vs_sb3_"))
    others = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        for algo in args.algos:
            results[algo] = {}
            labels = [*map(heron_label, args.precision), "sb3"]
            for round_ in range(args.rounds):
                for lib in labels if round_ % 2 == 0 else labels[::-1]:  # sequential, never in parallel
                    tag = f" round {round_ + 1}/{args.rounds}" if args.rounds > 1 else ""
                    print(f"[{algo}] training {lib} ({args.total_steps} steps on {args.env_id}){tag} ...", flush=True)
                    r = train_in_subprocess(argv, algo, lib, round_, work)
                    if round_ == 0:  # the same seed trains the same policy every round
                        results[algo][lib] = {**r, "updates_per_s_rounds": [], "env_steps_per_s_rounds": []}
                    for key in ("updates_per_s", "env_steps_per_s"):
                        results[algo][lib][f"{key}_rounds"].append(r[key])
                    evaluated = f", eval {r['eval_mean']:.1f}" if round_ == 0 else ""
                    print(
                        f"  {r['updates_per_s']:.1f} updates/s, {r['env_steps_per_s']:.1f} env steps/s{evaluated}, "
                        f"{r['wall_s']:.1f} s, {r['threads']} torch thread(s)",
                        flush=True,
                    )
            summarize_rounds(results[algo])
    finally:
        for proc in others:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)

    print_table(args, results, s0, s1, info)
    if args.markdown:
        print_markdown(args, results, s0, s1, info)
    if args.out:
        out = {
            "settings": {
                **vars(args),
                "log_every": log_every,
                "window": [s0, s1],
                "learning_rate": COMMON["lr"],
                "hidden_sizes": list(COMMON["hidden_sizes"]),
                "buffer_size": COMMON["buffer_size"],
                "gamma": COMMON["gamma"],
                "tau": COMMON["tau"],
                "eval_seed_offset": EVAL_SEED_OFFSET,
            },
            "machine": info,
            "results": results,
            "ratios": {
                f"{a}{lib[5:]}": {
                    k: median_ratio(h, results[a]["sb3"], k) for k in ("updates_per_s", "env_steps_per_s")
                }
                for (a, lib), h in heron_rows(results)
            },
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
