"""Data-parallel training on torch.distributed: the collectives heron needs, and nothing else.

Launch is torchrun's (``torchrun --nproc-per-node N -m heron train ...``): ``from_env`` reads RANK,
LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE; a plain process is world size 1, where every function
here returns at once without touching torch.distributed (no process group, no overhead).

Why hand-written collectives rather than DistributedDataParallel: SAC's and TD3's actor losses run
the critic (whose gradients must not be reduced there), SAC and DreamerV2 step three optimizers per
update, and DreamerV2's step is captured as a CUDA graph; DDP's bucketed hooks fit none of these.
One flattened all-reduce per optimizer step, called explicitly between ``backward`` and clipping,
does, and it is the same on every backend.

What must stay identical across ranks, and how (see the scale-out issue):
* gradients: ``all_reduce_grads`` (mean; a missing gradient counts as zeros, so every rank sends
  the same layout);
* running statistics: ``global_moments`` merges the batch moments of all ranks (count, mean, M2 in
  float64, combined in rank order), so every rank folds the very same numbers;
* decisions (early stops, stop requests, aborts): ``any_rank``;
* parameters at the start: ``broadcast_state``; checked at checkpoints: ``check_in_sync``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import torch
import torch.distributed as tdist

from heron.errors import Fault, HeronError


@dataclass(frozen=True)
class World:
    rank: int = 0
    local_rank: int = 0
    size: int = 1
    local_size: int = 1

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def from_env(environ: dict[str, str] | None = None) -> World:
    """The world torchrun describes in the environment (world size 1 when it describes none)."""
    env = os.environ if environ is None else environ
    if "WORLD_SIZE" not in env:
        return World()
    try:
        size, rank = int(env["WORLD_SIZE"]), int(env.get("RANK", "0"))
        local_rank = int(env.get("LOCAL_RANK", str(rank)))
        local_size = int(env.get("LOCAL_WORLD_SIZE", str(size)))
    except ValueError:
        raise HeronError(
            "RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE must be integers (set by torchrun)"
        ) from None
    if size < 1 or not 0 <= rank < size or not 0 <= local_rank < local_size:
        raise HeronError(
            f"inconsistent torchrun environment: RANK {rank}, LOCAL_RANK {local_rank}, "
            f"WORLD_SIZE {size}, LOCAL_WORLD_SIZE {local_size}"
        )
    return World(rank, local_rank, size, local_size)


def choose_backend(requested: str, device: torch.device, world: World) -> str:
    """``auto``: NCCL when each local rank has a GPU of its own, else gloo."""
    if requested not in ("auto", "nccl", "gloo"):
        raise HeronError(f"--dist-backend must be auto, nccl or gloo, got {requested!r}")
    if requested == "nccl" and device.type != "cuda":
        raise HeronError("--dist-backend nccl needs --device cuda")
    if requested != "auto":
        return requested
    own_gpu = device.type == "cuda" and torch.cuda.device_count() >= world.local_size
    return "nccl" if own_gpu else "gloo"


_DEVICE = torch.device("cpu")  # where collective tensors live: the GPU for NCCL, else the CPU


def init(world: World, backend: str, device: torch.device | None = None) -> None:
    """Join the process group (torchrun's rendezvous variables: MASTER_ADDR, MASTER_PORT)."""
    global _DEVICE
    if world.distributed and not tdist.is_initialized():
        _DEVICE = device if backend == "nccl" and device is not None else torch.device("cpu")
        if _DEVICE.type == "cuda":
            torch.cuda.set_device(_DEVICE)
        tdist.init_process_group(backend, rank=world.rank, world_size=world.size)


def close(together: bool = False) -> None:
    """Leave the process group. ``together`` (every rank finished the run): a barrier first, so no
    rank tears its connections down while a peer's last collective may still be reading from them."""
    if tdist.is_available() and tdist.is_initialized():
        if together and tdist.get_world_size() > 1:
            tdist.barrier()
        tdist.destroy_process_group()


def device_for(world: World, name: str) -> str:
    """``--device cuda`` under torchrun is ``cuda:LOCAL_RANK``: one GPU per local rank (an explicit
    ``cuda:K`` is kept: several ranks may share one GPU)."""
    if world.distributed and name == "cuda":
        return f"cuda:{world.local_rank}"
    return name


def rank_seed(seed: int, world: World) -> int:
    """The seed of this rank's own random streams (env-independent sampling, exploration, the
    torch stream after initialisation): ``seed`` itself on rank 0, so a run of one process is
    unchanged; a stream derived from (seed, rank) elsewhere."""
    if world.rank == 0:
        return seed
    return int(np.random.SeedSequence([seed, world.rank]).generate_state(1)[0])


def check_split(cfg: Any, world: World) -> None:
    """``--num-envs``, ``--batch-size`` and ``--buffer-size`` are global and split over the ranks,
    as are PPO's rollout minibatches: each must divide by the world size."""
    if not world.distributed:
        return
    n = world.size
    for name in ("num_envs", "batch_size", "buffer_size"):
        value = getattr(cfg, name, None)
        if value is not None and value % n:
            raise HeronError(
                f"--{name.replace('_', '-')} ({value}) is split over the {n} processes: it must be a multiple of {n}"
            )
    if hasattr(cfg, "num_minibatches"):  # PPO: each rank takes its share of every minibatch
        units = cfg.num_envs if cfg.recurrent != "none" else cfg.num_envs * cfg.num_steps
        if units % (cfg.num_minibatches * n):
            what = "--num-envs" if cfg.recurrent != "none" else "--num-envs x --num-steps"
            raise HeronError(
                f"{what} ({units}) must split into --num-minibatches ({cfg.num_minibatches}) "
                f"minibatches of a share for each of the {n} processes"
            )


def _active() -> bool:
    return tdist.is_available() and tdist.is_initialized() and tdist.get_world_size() > 1


# -- gradients --------------------------------------------------------------------------------------
def all_reduce_grads(params: Iterable[torch.Tensor]) -> None:
    """Average the gradients of ``params`` over all ranks with one flattened all-reduce. Call it after
    ``backward`` and before clipping and ``optimizer.step``. A parameter without a gradient on this
    rank sends zeros and receives the mean (set as its gradient when the mean is not all zeros
    elsewhere: the same optimizer step on every rank)."""
    if not _active():
        return
    params = [p for p in params if p.requires_grad]
    if not params:
        return
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    tdist.all_reduce(flat)  # on the parameters' device: NCCL for GPUs; gloo takes CPU tensors
    flat /= tdist.get_world_size()
    offset = 0
    for p in params:
        n = p.numel()
        mean = flat[offset : offset + n].view_as(p)
        if p.grad is None:
            p.grad = mean.clone()
        else:
            p.grad.copy_(mean)
        offset += n


# -- running statistics -----------------------------------------------------------------------------
def global_moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(mean, population variance, count) over the first dimension of ``x`` as concatenated across
    all ranks, in float64, bitwise identical on every rank: each rank's (count, mean, M2) are
    gathered and combined in rank order (Chan et al.'s pairwise update). World size 1: those of x."""
    x = x.to(torch.float64).reshape(x.shape[0], -1) if x.dim() > 1 else x.to(torch.float64).reshape(-1, 1)
    count = torch.tensor([float(x.shape[0])], dtype=torch.float64, device=x.device)
    mean = x.mean(0)
    m2 = ((x - mean) ** 2).sum(0)
    if _active():
        packed = torch.cat([count, mean, m2]).to(_DEVICE)
        parts = [torch.empty_like(packed) for _ in range(tdist.get_world_size())]
        tdist.all_gather(parts, packed)
        d = mean.numel()
        count, mean, m2 = parts[0][:1], parts[0][1 : 1 + d], parts[0][1 + d :]
        for part in parts[1:]:
            n_b, mean_b, m2_b = part[:1], part[1 : 1 + d], part[1 + d :]
            total = count + n_b
            delta = mean_b - mean
            mean = mean + delta * n_b / total
            m2 = m2 + m2_b + delta * delta * count * n_b / total
            count = total
    n = int(count.item())
    return mean.to(x.device), (m2 / max(n, 1)).to(x.device), n


def sum_over_ranks(x: torch.Tensor) -> torch.Tensor:
    """``x`` summed over all ranks, differentiably: the backward pass sums the ranks' gradients
    likewise (batch renormalisation's statistics over every rank's share of a batch). World size 1:
    ``x``."""
    if not _active():
        return x
    from torch.distributed.nn.functional import all_reduce

    return all_reduce(x)


def world_size() -> int:
    """How many ranks train together (1 without torchrun)."""
    return tdist.get_world_size() if _active() else 1


def all_gather_cat(x: torch.Tensor) -> torch.Tensor:
    """Every rank's ``x`` (the same shape on each) concatenated along the first dimension in rank
    order, on every rank (world size 1: ``x``)."""
    if not _active():
        return x
    mine = x.detach().contiguous().to(_DEVICE)
    parts = [torch.empty_like(mine) for _ in range(tdist.get_world_size())]
    tdist.all_gather(parts, mine)
    return torch.cat(parts).to(x.device)


def update_norm(norm: Any, x: torch.Tensor) -> None:
    """Fold a batch [B, *shape] into a RunningNorm; under torchrun the moments of every rank's
    batch, so the statistics stay bitwise identical on all ranks (world size 1: ``norm.update``)."""
    if not norm.enabled:  # the usual case, at every env step: no further calls
        return
    if not _active():
        norm.update(x)
    else:
        norm.update_moments(*global_moments(x.reshape(-1, *norm.mean.shape)))


# -- decisions, parameters --------------------------------------------------------------------------
@overload
def any_rank(flag: bool, /) -> bool: ...
@overload
def any_rank(first: bool, second: bool, /, *more: bool) -> tuple[bool, ...]: ...
def any_rank(*flags: bool) -> bool | tuple[bool, ...]:
    """True on every rank when the flag is true on any: one rank's stop or abort is everyone's.
    Several flags travel in one all-reduce and come back as a tuple."""
    if not _active():
        return bool(flags[0]) if len(flags) == 1 else tuple(bool(f) for f in flags)
    t = torch.tensor([1 if f else 0 for f in flags], dtype=torch.int32, device=_DEVICE)
    tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    out = tuple(bool(v) for v in t.tolist())
    return out[0] if len(out) == 1 else out


def all_ranks(flag: bool) -> bool:
    """True on every rank when ``flag`` is true on all of them."""
    return not any_rank(not flag)


class SharedError(HeronError):
    """Bad input found on another rank (``agree``): exit 2 here too; rank 0 reports it."""


class SharedFault(Fault):
    """A fault on another rank (``agree``): this rank ends with the same exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def agree(problem: BaseException | None) -> None:
    """Every rank reaches this point with its own verdict (None: all is well). If any rank has a
    problem, every rank ends: the rank that has it raises it, the others a SharedError (bad input,
    exit 2) or SharedFault (same exit code) naming that rank. So bad input or a failed write on one
    rank ends all of them at once instead of leaving them waiting in a collective."""
    if not _active():
        if problem is not None:
            raise problem
        return
    mine = (
        None
        if problem is None
        else (str(problem), 2 if isinstance(problem, HeronError) else getattr(problem, "exit_code", 1))
    )
    found = [None] * tdist.get_world_size()
    tdist.all_gather_object(found, mine)
    if problem is not None:
        raise problem
    for rank, verdict in enumerate(found):
        if verdict is not None:
            text, code = verdict
            text = f"rank {rank}: {text}" if rank else text
            raise SharedError(text) if code == 2 else SharedFault(text, code)


def gather(obj: Any) -> list:
    """Every rank's ``obj``, in rank order, on every rank (small Python objects: episode records,
    evaluation returns, a run directory's name)."""
    if not _active():
        return [obj]
    out = [None] * tdist.get_world_size()
    tdist.all_gather_object(out, obj)
    return out


def mean_metrics(metrics: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each metric averaged over the ranks (one all-reduce; at logging time only)."""
    if not _active() or not metrics:
        return metrics
    keys = sorted(metrics)
    packed = torch.stack(
        [torch.as_tensor(metrics[k], dtype=torch.float64).detach().to(_DEVICE).reshape(()) for k in keys]
    )
    tdist.all_reduce(packed)
    packed /= tdist.get_world_size()
    return dict(zip(keys, packed.unbind()))


def mean(x: torch.Tensor) -> torch.Tensor:
    """A tensor averaged over the ranks (PPO's approximate KL before the target-KL decision)."""
    if not _active():
        return x
    x = x.detach().to(_DEVICE, torch.float64).clone()
    tdist.all_reduce(x)
    return x / tdist.get_world_size()


def mean_std(xs: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """For each tensor of ``xs``: the mean and unbiased standard deviation of that tensor as
    concatenated across the ranks (rank r holds its share of each), all with one all-reduce and no
    host sync (PPO's advantage normalization over each global minibatch of an epoch). World size
    1: ``x.mean()``, ``x.std()``."""
    if not _active():
        return [(x.mean(), x.std()) for x in xs]
    sums = torch.stack([torch.stack([x.new_tensor(float(x.numel())), x.sum(), (x * x).sum()]) for x in xs])
    sums = sums.to(_DEVICE, torch.float64)  # [k, 3]: count, sum, sum of squares
    tdist.all_reduce(sums)
    n, s, ss = sums.unbind(1)
    mean = s / n
    std = ((ss - n * mean * mean) / (n - 1).clamp(min=1)).clamp(min=0).sqrt()
    return [(m.to(x.device, x.dtype), sd.to(x.device, x.dtype)) for m, sd, x in zip(mean, std, xs)]


def broadcast_state(module: torch.nn.Module) -> None:
    """Rank 0's parameters and buffers (normalizer statistics included) on every rank."""
    if not _active():
        return
    with torch.no_grad():
        for t in list(module.parameters()) + list(module.buffers()):
            tdist.broadcast(t.data, src=0)


def checksum(module: torch.nn.Module) -> torch.Tensor:
    """float64 sums of every parameter and buffer (with a position weight, so swapped values differ)."""
    parts = []
    for t in list(module.parameters()) + list(module.buffers()):
        flat = t.detach().reshape(-1).to(torch.float64)
        weights = torch.arange(1, flat.numel() + 1, dtype=torch.float64, device=flat.device)
        parts.append(torch.stack([flat.sum(), (flat * weights).sum()]))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def check_in_sync(modules: dict[str, torch.nn.Module]) -> None:
    """Raise if any module's parameters or buffers differ between ranks (called at checkpoints:
    a silent divergence between ranks would train N different agents)."""
    if not _active():
        return
    for name, module in modules.items():
        mine = checksum(module).to(_DEVICE)
        parts = [torch.empty_like(mine) for _ in range(tdist.get_world_size())]
        tdist.all_gather(parts, mine)
        for rank, other in enumerate(parts):
            if not torch.equal(other, parts[0]):
                raise Fault(f"{name} differs between rank 0 and rank {rank}: the ranks are out of sync")
