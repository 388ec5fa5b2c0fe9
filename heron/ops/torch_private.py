"""Every private torch API heron uses, in one place.

torch does not promise to keep these: a release may rename, move or change any of them. Each is
here with why heron uses it, and ``tests/test_torch_private.py`` checks every one against the public
behaviour it must match, so a torch upgrade that changes one fails there, by name, not somewhere
deep in a training run.

* the fused Adam kernel and its state initializer (``heron.ops.adam.Adam``'s lean step: the same
  kernel call as ``torch.optim.Adam(fused=True).step``, without regrouping the lists each call);
* the undecorated optimizer methods inside torch's ``_disable_dynamo`` wrappers (calling the
  wrapper imports ``torch._dynamo``, a noticeable delay in every run's startup);
* the ``_foreach`` kernels (one launch for a list of tensors: target averaging, gradient clipping,
  Adam's step counters);
* the activations' backward kernels (``heron.ops.fused``, the hand-written steps);
* tensors' version counters (``heron.accel.handwritten.common.LayerViews`` and ``RunningNorm``'s caches: an
  in-place write moves them);
* setting the deterministic-algorithms mode without importing Inductor
  (``torch.use_deterministic_algorithms`` imports it, which slows every run's startup), and
  Inductor's own ``deterministic`` flag where it is loaded.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

# -- optimizers ------------------------------------------------------------------------------------
fused_adam_ = torch._fused_adam_  # the kernel torch.optim.Adam(fused=True) calls
foreach_add_ = torch._foreach_add_
foreach_lerp_ = torch._foreach_lerp_
foreach_norm = torch._foreach_norm
foreach_mul_ = torch._foreach_mul_


def init_adam_group(opt: torch.optim.Adam, group: dict) -> None:
    """Adam's own creation of its state for ``group`` (what its first ``step`` does), without a step."""
    opt._init_group(group, [], [], [], [], [], [])


def undecorated(method: Callable) -> Callable:
    """The function inside torch's ``_disable_dynamo`` wrapper, or the method itself."""
    return getattr(method, "__wrapped__", method)


# -- backward kernels ------------------------------------------------------------------------------
threshold_backward = torch.ops.aten.threshold_backward  # ReLU's: g where out > threshold, else 0
tanh_backward = torch.ops.aten.tanh_backward  # g * (1 - out^2)


# -- version counters ------------------------------------------------------------------------------
def version(t: torch.Tensor) -> int:
    """The tensor's version counter: every in-place write moves it."""
    return t._version


# -- determinism -----------------------------------------------------------------------------------
def set_deterministic_algorithms(mode: bool, warn_only: bool) -> None:
    """``torch.use_deterministic_algorithms(mode, warn_only=...)`` less its import of Inductor."""
    torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


def loaded_inductor_config() -> Any:
    """Inductor's config module where something has imported it, else None (importing it is slow)."""
    return sys.modules.get("torch._inductor.config")


def inductor_config() -> Any:
    """Inductor's config module, imported (``--compile`` is about to use Inductor anyway)."""
    import torch._inductor.config as config

    return config
