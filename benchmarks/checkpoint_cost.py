#!/usr/bin/env python
"""What a checkpoint with its replay buffer costs on this machine's disk, by buffer size.

Times ``heron.runtime.checkpoint.save_checkpoint`` (state file + replay file, each written to a
temporary file, fsynced and renamed) for a SAC-sized state and a full ``ReplayBuffer`` of Hopper-v5
transitions (obs 11, action 3: 108 bytes per transition), and optionally of 3 x 64 x 64 uint8
pixel observations (DreamerV2/Atari scale). With it: the wall-time share of timed checkpoints at
heron's cadence (``--checkpoint-minutes`` 10) and the interval the 2% cap would impose.

    python benchmarks/checkpoint_cost.py --sizes 100000 1000000
    python benchmarks/checkpoint_cost.py --sizes 100000 --pixels
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import torch

from heron.rl.buffers import ReplayBuffer
from heron.runtime import checkpoint as ckpt
from heron.runtime.run import CHECKPOINT_SHARE


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--pixels", action="store_true", help="3x64x64 uint8 observations instead of 11 floats")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    obs_shape, dtype = ((3, 64, 64), np.uint8) if args.pixels else ((11,), np.float32)
    state = {
        "actor": {f"w{i}": torch.randn(256, 256) for i in range(6)},
        "critic": {f"w{i}": torch.randn(256, 256) for i in range(12)},
    }  # about 4.7 MB, as SAC's
    print("| transitions | replay file | checkpoint time (s) | share at 10 min | interval under the 2% cap |")
    print("|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        rb = ReplayBuffer(size, 1, obs_shape, np.dtype(dtype), (3,))
        for t in rb.data.values():
            t.fill_(1)
        rb.pos, rb.full = 0, True
        times = []
        with tempfile.TemporaryDirectory(dir=".") as tmp:
            for r in range(args.repeats):
                t0 = time.perf_counter()
                ckpt.save_checkpoint(tmp, r, state, rb.state_dict(), keep=1)
                times.append(time.perf_counter() - t0)
        cost = min(times)
        print(
            f"| {size:,} | {rb.nbytes() / 1e6:,.0f} MB | {cost:.2f} | {cost / 600:.2%} | "
            f"{max(600.0, cost / CHECKPOINT_SHARE) / 60:.0f} min |"
        )


if __name__ == "__main__":
    main()
