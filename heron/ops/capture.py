"""Whether a CUDA graph is being recorded: code that reads the host, or keeps a tensor between
calls, asks before it does (``heron.accel.graphs`` records the steps)."""

from __future__ import annotations

import torch


def recording(t: torch.Tensor) -> bool:
    """Whether a CUDA graph is being recorded on the current stream of ``t``'s device (code that
    would read the host, or reuse a tensor computed outside, must not then)."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()
