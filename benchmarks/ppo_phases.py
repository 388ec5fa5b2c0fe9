"""Where a PPO iteration's time goes in a heron training: the rollout (env steps, and the rest:
acting and storing) and the learning phase (re-valuing and advantages, and the gradient steps),
and what ``after_step`` (logging, evaluations, checkpoints) adds.

Made for GPU machines, where PPO from Atari frames ran at 2,058 (eager) and 2,532 (graphed)
env steps/s beside LeanRL's published 6,809, and one run of this script shows why. It
times the phases by wrapping the functions ``heron.algos.ppo.train`` calls at their edges (the
iteration's ``set_lr``, ``as_sequences`` after the rollout, ``sequence_values`` and ``targets``, and
``Run.after_step``) and the env object's ``step``; on a GPU it waits for the device at the three
phase edges, so each phase carries its own kernels (three syncs an iteration, which the loop makes
anyway). Nothing in heron changes. After ``--skip`` iterations (compilation, graph capture, the
first evaluation) it prints the mean milliseconds per iteration and per env step of each phase.

    python benchmarks/ppo_phases.py --skip 5 -- --preset atari --env-id PongNoFrameskip-v4 --env-backend ale \\
        --device cuda --cuda-graphs true --total-steps 61440 --eval-every 0 --checkpoint-every 0 \\
        --torch-threads 8 --progress none

Everything after ``--`` goes to ``heron train ppo``. The run stops at its ``--total-steps`` or at
Ctrl-C (its checkpoint then), and the table covers the iterations done.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from collections import defaultdict

import torch

from heron.algos.ppo.networks import ActorCritic
from heron.cli import main as heron_main
from heron.runtime.run import Run

ppo = importlib.import_module("heron.algos.ppo.train")  # the module (the package's ``train`` is its function)
learn = importlib.import_module("heron.algos.ppo.learn")

PHASES = ("env steps", "acting and storing", "value passes", "advantages", "gradient steps", "after_step")


class Clock:
    """Per-iteration phase times: ``mark(name)`` closes the phase running since the last mark."""

    def __init__(self):
        self.iterations: list[dict[str, float]] = []
        self.current: dict[str, float] = defaultdict(float)
        self.steps_per_iteration = 0

    @staticmethod
    def sync() -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def now(self) -> float:
        self.sync()
        return time.perf_counter()

    def add(self, phase: str, seconds: float) -> None:
        self.current[phase] += seconds


def install(clock: Clock) -> None:
    """Wrap what PPO's loop calls (``heron.algos.ppo.train``'s and ``.learn``'s module globals, the
    actor-critic's ``sequence_values`` and ``Run.after_step``)."""
    state = {"rollout_start": None, "learn_start": None, "env": 0.0, "aside": 0.0}

    set_lr = ppo.set_lr

    def timed_set_lr(opt, lr):  # the first call of each iteration: the rollout begins after it
        set_lr(opt, lr)
        if clock.current:
            clock.iterations.append(dict(clock.current))
            clock.current = defaultdict(float)
        state["rollout_start"], state["env"] = clock.now(), 0.0

    as_sequences = learn.as_sequences

    def timed_as_sequences(data):  # right after the rollout's commit: learning begins
        end = clock.now()
        if state["rollout_start"] is not None:
            clock.add("env steps", state["env"])
            clock.add("acting and storing", end - state["rollout_start"] - state["env"])
        state["learn_start"], state["aside"] = end, 0.0
        return as_sequences(data)

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            start = clock.now()
            out = fn(*args, **kwargs)
            seconds = clock.now() - start
            clock.add(name, seconds)
            state["aside"] += seconds
            return out

        return wrapper

    make_envs = ppo.make_envs

    def timed_make_envs(cfg, run):
        envs = make_envs(cfg, run)
        step = envs.step

        def timed_step(actions):  # no sync: acting's copy to the host has waited for the device
            start = time.perf_counter()
            out = step(actions)
            state["env"] += time.perf_counter() - start
            return out

        envs.step = timed_step
        clock.steps_per_iteration = cfg.num_envs * cfg.num_steps
        return envs

    after_step = Run.after_step

    def timed_after_step(self, *args, **kwargs):
        start = clock.now()
        if state["learn_start"] is not None:
            clock.add("gradient steps", start - state["learn_start"] - state["aside"])
        after_step(self, *args, **kwargs)
        clock.add("after_step", clock.now() - start)

    ppo.set_lr, ppo.make_envs, learn.as_sequences = timed_set_lr, timed_make_envs, timed_as_sequences
    ActorCritic.sequence_values = timed("value passes", ActorCritic.sequence_values)
    learn.targets = timed("advantages", learn.targets)
    Run.after_step = timed_after_step


def report(clock: Clock, skip: int) -> str:
    if clock.current:
        clock.iterations.append(dict(clock.current))
        clock.current = defaultdict(float)
    rows = clock.iterations[skip:]
    if not rows:
        return f"no iteration after the first {skip} ({len(clock.iterations)} in all): raise --total-steps"
    steps = clock.steps_per_iteration
    means = {p: sum(r.get(p, 0.0) for r in rows) / len(rows) for p in PHASES}
    total = sum(means.values())
    lines = [
        f"{len(rows)} iterations of {steps} env steps (after {skip} skipped): "
        f"{total * 1e3:.1f} ms each, {steps / total:.0f} env steps/s",
        f"{'phase':<20} {'ms/iteration':>13} {'us/env step':>12} {'share':>6}",
    ]
    for p in PHASES:
        lines.append(f"{p:<20} {means[p] * 1e3:>13.2f} {means[p] / steps * 1e6:>12.1f} {means[p] / total:>6.1%}")
    return "\n".join(lines)


def main() -> int:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--skip", type=int, default=5, help="iterations left out at the start (compile, capture)")
    args = p.parse_args(argv[:split])
    train_args = argv[split + 1 :]
    if "--run-dir" not in train_args:
        train_args += ["--run-dir", tempfile.mkdtemp(prefix="heron_phases_") + "/run"]
    clock = Clock()
    install(clock)
    code = heron_main(["train", "ppo", *train_args])
    print(report(clock, args.skip))
    return code


if __name__ == "__main__":
    sys.exit(main())
