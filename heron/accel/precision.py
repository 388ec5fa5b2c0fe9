"""``--precision 32|tf32|bf16-mixed|16-mixed``: the numerics of every algorithm, in one place.

* ``32``: float32 throughout (the default). On CUDA the matrix products are full float32, and
  cuDNN's convolutions may use TF32 tensor cores, as PyTorch's own default has it: full-float32
  convolutions made DreamerV2's graphed step at the DMC sizes several times slower than ``tf32``
  on a GPU, with several times the peak memory (each mode's current figures:
  docs/benchmarks/speed.md, "Precision on the GPU").
* ``tf32``: float32 storage, TF32 matrix products and cuDNN autotuning on CUDA (sheeprl's GPU
  numerics); on a CPU the same as ``32``.
* ``bf16-mixed``: the matrix products and convolutions of every network run in bfloat16 under
  autocast (CPU and CUDA); everything else stays float32.
* ``16-mixed``: the same in float16, CUDA only, with one GradScaler per run (loss scaled before
  backward, gradients unscaled before clipping, the scale updated once per gradient step, its
  state in every checkpoint).

Where autocast applies, and where it must not. ``Precision.apply(module)`` puts autocast around
the forward pass of each compute layer (``nn.Linear``, convolutions, recurrent cells) and casts
its output back to float32, except inside a chain: in an ``nn.Sequential``, a layer whose output
reaches the next compute layer through elementwise activations alone (DreamerV2's CNN encoder and
decoder and its MLPs, the Nature CNN's convolutions) hands it over in the compute type. The next
layer would round its input to that type anyway, and torch evaluates an activation on a bfloat16
input in float32 and rounds once, so the values forward and backward are those of the per-layer
cast (``tests/test_precision.py``), while the activations kept for the backward take half the
memory and no float32 copy is made (a DreamerV2 step at the Atari sizes: a lower peak memory and
a slightly faster step). heron's fused MLPs (``EnsembleMLP``, ``ReluMLP``, ``TanhMLP``) get the type
instead and cast inside (``heron.ops.fused``), with the same result for their hidden layers; their
last layer, when linear (Q values, the actors' outputs), runs in float32 (``heron.ops.fused``), and
so do the output heads marked with ``heron.rl.nets.float32_out`` (PPO's value head; DreamerV2's
reward, continue, critic and actor heads, its latents' logits and its vector decoder). So
parameters, optimizer state, normalizer statistics, activations outside those chains, layer norms,
and everything computed from network outputs stay float32: distributions (tanh-normal,
categorical, truncated normal), log-probs, entropies, KL terms, returns, GAE, lambda-returns,
targets and losses. Networks and losses know nothing about it; an algorithm calls ``apply`` on its
networks and ``optimize`` for each optimizer step. SAC's and TD3's training loops act in numpy
on the float32 weights in every precision (``heron.accel.acting``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any, Literal, overload

import torch
from torch import nn

from heron.errors import HeronError
from heron.ops import dist
from heron.ops import torch_private as private
from heron.ops.adam import Adam
from heron.rl.batch_renorm import RenormMLP
from heron.rl.nets import FLOAT32_OUT, EnsembleMLP, ReluMLP, TanhMLP

MODES = ("32", "tf32", "bf16-mixed", "16-mixed")
COMPUTE_LAYERS = (
    nn.Linear,
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose2d,
    nn.GRUCell,
    nn.LSTMCell,
    nn.GRU,
    nn.LSTM,
)
FUSED = (EnsembleMLP, ReluMLP, TanhMLP, RenormMLP)  # cast inside their one autograd node (heron.ops.fused): no hooks


def check(mode: str, device: str) -> None:
    """Reject a precision this device cannot run (before a run directory exists)."""
    if mode not in MODES:
        raise HeronError(f"--precision must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "16-mixed" and not (device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())):
        raise HeronError(
            "--precision 16-mixed needs CUDA (float16 autocast with a GradScaler); on a CPU use bf16-mixed"
        )


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 matrices in hardware: any CUDA GPU torch supports, and a
    CPU with AVX512-BF16 or AMX. Elsewhere (AVX2-only CPUs, e.g. AMD Zen 3 and older, Intel before
    Cooper Lake) oneDNN emulates bfloat16 products, far slower than float32 ones."""
    if device.type != "cpu":
        return True
    return any(getattr(torch.cpu, f, lambda: False)() for f in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))


def _float32(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.float() if x.is_floating_point() else x
    if isinstance(x, tuple):
        return tuple(_float32(v) for v in x)
    return x


_KEEP = "_heron_keep_dtype"  # a layer whose output feeds the next layer of its chain in the compute type
# what may stand between two layers of a chain: elementwise activations (torch computes them on
# bfloat16/float16 inputs in float32 and rounds once) and views
_PASS = (nn.ELU, nn.ReLU, nn.LeakyReLU, nn.Tanh, nn.SiLU, nn.GELU, nn.Mish, nn.Identity, nn.Flatten)


def _enter(state: dict, module: nn.Module, args: Any) -> None:
    ctx = torch.autocast(state["device_type"], dtype=state["dtype"])
    ctx.__enter__()
    state["stack"].append(ctx)


def _exit(state: dict, module: nn.Module, args: Any, output: Any) -> Any:
    state["stack"].pop().__exit__(None, None, None)
    return output if getattr(module, _KEEP, False) else _float32(output)


def _mark_chains(module: nn.Module) -> None:
    """In every ``nn.Sequential`` of ``module``: a hooked layer whose output reaches another hooked
    layer through activations alone hands over its output in the compute type (module doc)."""
    hooked = {id(m) for m in module.modules() if getattr(m, "_heron_autocast", False)}
    for seq in module.modules():
        if not isinstance(seq, nn.Sequential):
            continue
        children = list(seq)
        for i, layer in enumerate(children):
            if id(layer) not in hooked:
                continue
            j = i + 1
            while j < len(children) and isinstance(children[j], _PASS):
                j += 1
            if j < len(children) and id(children[j]) in hooked:
                setattr(layer, _KEEP, True)


def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``nn.utils.clip_grad_norm_`` (2-norm), the same operations without its per-call grouping of
    the gradients by device and type when they share one (PPO clips every minibatch step, and on
    its small networks that grouping was a noticeable part of the step)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads or len({(g.device, g.dtype) for g in grads}) > 1 or any(g.is_sparse for g in grads):
        return nn.utils.clip_grad_norm_(params, max_norm)
    total = torch.linalg.vector_norm(torch.stack(private.foreach_norm(grads, 2.0)), 2.0)
    if max_norm < math.inf:
        private.foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


class Precision:
    def __init__(self, mode: str, device: torch.device, deterministic: bool = True):
        check(mode, str(device))
        self.mode, self.device = mode, device
        self.dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(mode)
        # what the hooks need, in a plain dict: a deepcopy of a module (target networks) copies its
        # hooks, and must not copy this object (with its GradScaler) along
        self._hook_state: dict[str, Any] = {"device_type": device.type, "dtype": self.dtype, "stack": []}
        self.scaler = torch.amp.GradScaler("cuda") if mode == "16-mixed" else None
        self._stepped: set[int] = set()  # the optimizers the scaler stepped since its last update
        if device.type == "cuda":
            tf32 = mode == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = True  # convolutions: PyTorch's default in every mode (module doc)
            torch.backends.cudnn.benchmark = tf32 and not deterministic

    @property
    def mixed(self) -> bool:
        return self.dtype is not None

    def slow_warning(self) -> str | None:
        """What to tell the user when this precision is much slower here than float32, else None."""
        if self.dtype is torch.bfloat16 and not native_bf16(self.device):
            return (
                "--precision bf16-mixed on a CPU without bfloat16 instructions (AVX512-BF16 or AMX): torch "
                "emulates its matrix products, several times slower than float32 (SAC on Hopper-v5: 9x on "
                "an AMD Zen 3); --precision 32 is the fast choice on this machine"
            )
        return None

    def apply(self, *modules: nn.Module) -> None:
        """Autocast around every compute layer of ``modules`` (module doc); a no-op in float32."""
        if not self.mixed:
            return
        for module in modules:
            fused = [m for m in module.modules() if isinstance(m, FUSED)]
            inside = {id(m) for f in fused for m in f.modules() if m is not f}
            for f in fused:
                f.amp_dtype = self.dtype
            for layer in module.modules():
                if (
                    isinstance(layer, COMPUTE_LAYERS)
                    and id(layer) not in inside
                    and not getattr(layer, "_heron_autocast", False)
                    and not getattr(layer, FLOAT32_OUT, False)
                ):
                    layer.register_forward_pre_hook(functools.partial(_enter, self._hook_state))
                    layer.register_forward_hook(functools.partial(_exit, self._hook_state))
                    layer._heron_autocast = True
            _mark_chains(module)

    @overload
    def optimize(
        self,
        opt: torch.optim.Optimizer,
        loss: torch.Tensor,
        params: Iterable[torch.Tensor],
        max_norm: float = ...,
        *,
        norm: Literal[True],
    ) -> torch.Tensor: ...
    @overload
    def optimize(
        self,
        opt: torch.optim.Optimizer,
        loss: torch.Tensor,
        params: Iterable[torch.Tensor],
        max_norm: float = ...,
        norm: bool = ...,
    ) -> torch.Tensor | None: ...
    def optimize(
        self,
        opt: torch.optim.Optimizer,
        loss: torch.Tensor,
        params: Iterable[torch.Tensor],
        max_norm: float = 0.0,
        norm: bool = False,
    ) -> torch.Tensor | None:
        """One optimizer step on ``loss``: backward (scaled in 16-mixed), the gradient all-reduce
        under torchrun, unscale, clipping to ``max_norm`` (0: none), step. Returns the gradient
        norm before clipping when clipping or asked (``norm``), else None. Call ``update`` once
        per gradient step, after the last optimizer. An optimizer stepped twice in one gradient step
        (SAC's policy_frequency actor steps) moves the loss scale in between: GradScaler unscales an
        optimizer once per scale."""
        params = list(params)
        if self.scaler is not None and id(opt) in self._stepped:
            self.update()
        # the lean step keeps lists on the optimizer between steps: eager only (a compiled step gets
        # torch's, which Dynamo traces; its attribute writes broke tracing before torch 2.13)
        lean = opt if isinstance(opt, Adam) and self.scaler is None and not torch.compiler.is_compiling() else None
        lean.lean_zero_grad() if lean is not None else opt.zero_grad(set_to_none=True)
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        dist.all_reduce_grads(params)  # torchrun: the global batch's gradient (identical scale on every rank)
        if self.scaler is not None:
            self.scaler.unscale_(opt)
        grad_norm = None
        if max_norm > 0 or norm:
            grad_norm = clip_grad_norm(params, max_norm if max_norm > 0 else math.inf)
        if self.scaler is not None:
            self.scaler.step(opt)  # skipped when the unscaled gradients hold inf/NaN
            self._stepped.add(id(opt))
        else:
            lean.lean_step() if lean is not None else opt.step()
        return grad_norm

    def update(self) -> None:
        """The end of a gradient step: the loss scale moves (16-mixed)."""
        if self.scaler is not None and self._stepped:
            self.scaler.update()
            self._stepped.clear()

    def state_dict(self) -> dict:
        return {"mode": self.mode, "scaler": self.scaler.state_dict() if self.scaler is not None else None}

    def load_state_dict(self, state: dict | None) -> None:
        if state and self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
