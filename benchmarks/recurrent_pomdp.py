#!/usr/bin/env python
"""Does recurrence matter? SAC with an MLP vs SAC with a GRU (``--recurrent gru``) on Pendulum with
the angular velocity masked out (``heron/Pendulum-NoVel-v1``: observations are cos and sin of the
angle only), with the fully observed Pendulum-v1 MLP as the reference. Runs one after the other;
reports the final deterministic evaluation (30 episodes, fixed start seeds) and wall time.

    python benchmarks/recurrent_pomdp.py --total-steps 20000 --markdown
"""

from __future__ import annotations

import argparse
import tempfile
import time

import heron

VARIANTS = [
    ("MLP, full observation", "Pendulum-v1", {}),
    ("MLP, velocity masked", "heron/Pendulum-NoVel-v1", {}),
    ("GRU, velocity masked", "heron/Pendulum-NoVel-v1", {"recurrent": "gru"}),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-steps", type=int, default=20_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--sequence-length", type=int, default=8)
    p.add_argument("--burn-in", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, env_id, extra in VARIANTS:
            if extra.get("recurrent"):
                extra = {
                    **extra,
                    "sequence_length": args.sequence_length,
                    "burn_in": args.burn_in,
                    "rnn_hidden_size": 64,
                }
            for seed in args.seeds:
                t0 = time.time()
                r = heron.train(
                    "sac",
                    presets=["pendulum"],
                    env_id=env_id,
                    seed=seed,
                    total_steps=args.total_steps,
                    progress="none",
                    torch_threads=args.threads,
                    run_dir=f"{tmp}/{len(rows)}",
                    **extra,
                )
                rows.append((name, seed, r["mean_return"], r["std_return"], time.time() - t0))
                print(
                    f"{name:24s} seed {seed}: {r['mean_return']:8.1f} +- {r['std_return']:.1f}  ({rows[-1][-1]:.0f} s)",
                    flush=True,
                )
    if args.markdown:
        print("\n| Variant | Seed | Final eval (30 episodes) | Wall time |\n|---|---:|---:|---:|")
        for name, seed, mean, std, sec in rows:
            print(f"| {name} | {seed} | {mean:.1f} ± {std:.1f} | {sec:.0f} s |")


if __name__ == "__main__":
    main()
