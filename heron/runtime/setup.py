"""Process setup for a run: its device and torchrun group, torch's thread count, seeding and
determinism, and the note for a GPU run that could record its steps."""

from __future__ import annotations

import os
import random
import sys
from typing import Any

import numpy as np
import torch

from heron.errors import HeronError
from heron.ops import dist
from heron.ops import torch_private as private
from heron.runtime import cores, evalworker


def resolve_device(name: str, world: dist.World | None = None) -> torch.device:
    """``auto``: CUDA when available. Under torchrun ``cuda`` is ``cuda:LOCAL_RANK``."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise HeronError(f"--device {name} requested but CUDA is not available")
    return torch.device(dist.device_for(world or dist.World(), name))


def join(cfg: Any) -> tuple[dist.World, torch.device]:
    """This process's place in a torchrun job (world size 1 without one) and its device; under
    torchrun the process group is joined here."""
    world = dist.from_env()
    device = resolve_device(cfg.device, world)
    if world.distributed:
        backend = dist.choose_backend(cfg.dist_backend, device, world)
        if world.is_main and cfg.dist_backend == "auto" and backend == "gloo" and device.type == "cuda":
            print(
                f"heron: note: {world.local_size} ranks share {torch.cuda.device_count()} GPU(s): "
                "the gloo backend, not NCCL",
                file=sys.stderr,
                flush=True,
            )
        dist.init(world, backend, device)
    return world, device


def start_threads(cfg: Any, local_envs: int, world: dist.World) -> tuple[str | None, cores.ThreadGovernor | None]:
    """Set torch's intra-op threads for a run (``heron.runtime.cores``): ``--torch-threads N``, or one per
    free core, leaving out the cores other processes keep busy, then a governor that follows the
    load. Returns a note when other processes took cores, and the governor (None for a fixed count,
    with several ranks on this machine, or where one thread is all there is room for)."""
    if cfg.torch_threads > 0:
        torch.set_num_threads(cfg.torch_threads)
        return None, None
    # --eval-async on: a core for the evaluation worker (auto takes one only where one is spare)
    worker = int(cfg.eval_async == "on" and evalworker.periodic(cfg) and not world.distributed)
    ceiling = cores.choose_threads(0, local_envs, cfg.vector_mode, world.local_size, worker)
    if world.local_size > 1 or ceiling == 1:
        torch.set_num_threads(ceiling)
        return None, None
    others = cores.others_now()
    threads = cores.choose_threads(0, local_envs, cfg.vector_mode, 1, cores.busy_cores(others) + worker)
    torch.set_num_threads(threads)
    note = (
        None
        if threads == ceiling
        else (
            f"other processes keep {others:.1f} of {len(cores.usable_cpus())} cores busy: {threads} torch thread(s), "
            f"not {ceiling} (a thread that shares a core stalls every operation; --torch-threads N fixes the count)"
        )
    )
    return note, cores.ThreadGovernor(ceiling, cores.env_workers(local_envs, cfg.vector_mode))


def cuda_graphs_note(cfg: Any, device: torch.device, world: dist.World) -> str | None:
    """What to tell a user who trains on a GPU without ``--cuda-graphs`` where it applies (one
    process, not 16-mixed) and who chose no other speed-up (``--compile``: DreamerV2 takes one of
    the two); None elsewhere."""
    if device.type != "cuda" or cfg.cuda_graphs or cfg.compile or world.distributed or cfg.precision == "16-mixed":
        return None
    return (
        "--cuda-graphs true records each gradient step as one CUDA graph, with the same results: on an H200 "
        "graphed SAC and TD3 ran at least 2.3x their eager env steps/s, and DreamerV2's step 4.8x (tf32) "
        "(docs/guide/performance.md, 'CUDA graphs')"
    )


def seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
        _deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    else:
        _deterministic_algorithms(False)


def _deterministic_algorithms(mode: bool) -> None:
    """``torch.use_deterministic_algorithms(mode, warn_only=True)`` without importing Inductor: that
    function sets ``torch._inductor.config.deterministic`` too, and the import slows every run's
    startup. Inductor's flag is set here when it is loaded already, else by ``update.compile_step``."""
    private.set_deterministic_algorithms(mode, warn_only=True)
    if (inductor := private.loaded_inductor_config()) is not None:
        inductor.deterministic = mode
