"""The process-wide settings a run changes, put back when it ends.

A run sets torch's intra-op thread count (``setup.start_threads``, then its thread governor), seeds
the global random generators, sets the deterministic-algorithms mode and cuDNN's flags
(``setup.seed_everything``), the TF32 flags (``precision.Precision``) and, for deterministic cuBLAS,
``CUBLAS_WORKSPACE_CONFIG``. Called from Python (``heron.train``, ``heron.resume``, a notebook, a
test), a run must not leave the caller's process changed: ``ProcessSettings.take()`` reads them as
the run opens and ``restore()`` puts them back as it closes, however it ended.

Not restored: the CUDA generators where CUDA was not initialised before the run (reading them
would initialise it). glibc's allocator settings are not a run's to change: the ``heron`` command
sets them for its own process (``memory.keep_freed_memory``).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from heron.ops import torch_private as private

_ENV_VARS = ("CUBLAS_WORKSPACE_CONFIG",)


@dataclass(frozen=True)
class ProcessSettings:
    threads: int
    deterministic: bool
    deterministic_warn_only: bool
    inductor_deterministic: bool | None  # None: Inductor's config not loaded
    cudnn_deterministic: bool
    cudnn_benchmark: bool
    cudnn_allow_tf32: bool
    matmul_allow_tf32: bool
    environ: tuple[tuple[str, str | None], ...]
    rng: tuple[Any, Any, torch.Tensor, list[torch.Tensor] | None]  # Python, NumPy, torch CPU, CUDA

    @classmethod
    def take(cls) -> ProcessSettings:
        inductor = private.loaded_inductor_config()
        return cls(
            threads=torch.get_num_threads(),
            deterministic=torch.are_deterministic_algorithms_enabled(),
            deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
            inductor_deterministic=None if inductor is None else bool(inductor.deterministic),
            cudnn_deterministic=torch.backends.cudnn.deterministic,
            cudnn_benchmark=torch.backends.cudnn.benchmark,
            cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
            matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32,
            environ=tuple((name, os.environ.get(name)) for name in _ENV_VARS),
            rng=(
                random.getstate(),
                np.random.get_state(),
                torch.get_rng_state(),
                torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
            ),
        )

    def restore(self) -> None:
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        # torch's own setter, less its side effect of importing Inductor (setup._deterministic_algorithms)
        private.set_deterministic_algorithms(self.deterministic, self.deterministic_warn_only)
        inductor = private.loaded_inductor_config()
        if inductor is not None:
            # loaded during the run (--compile): Inductor's default, which the caller had in effect
            inductor.deterministic = (
                self.deterministic if self.inductor_deterministic is None else self.inductor_deterministic
            )
        torch.backends.cudnn.deterministic = self.cudnn_deterministic
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        torch.backends.cudnn.allow_tf32 = self.cudnn_allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = self.matmul_allow_tf32
        for name, value in self.environ:
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        py, numpy_state, cpu, cuda = self.rng
        random.setstate(py)
        np.random.set_state(numpy_state)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
