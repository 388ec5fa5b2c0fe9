"""The one MLP forward: ``h <- act(h W + b)`` layer by layer, without the activation after the
last layer (a linear output: Q values, a Gaussian's parameters, logits) or with it (``last``: a
body whose features feed a head).

Everything that runs an MLP outside ``nn.Module.__call__`` runs it through ``forward``: the fused
MLPs' autograd node (``heron.ops.fused``), PPO's direct acting and value layers, the hand-written
gradient steps (``heron.accel.handwritten``), which keep each layer's input for their backward,
and the numpy acting twins (``heron.accel.acting.NumpyMLP``). A change to the shape (another
activation, a normalization between layers) is made here once.

In torch a layer is ``torch.addmm`` with the activation in place, on an input cast to the layer's
weights' type (mixed precision); in numpy, ``h @ W + b`` and the activation in place. The
activations:

* ``relu``;
* ``tanh``;
* ``sigmoid_tanh``: tanh computed as 2 sigmoid(2z) - 1, the factor 2 taken inside the product
  (``addmm``'s ``alpha`` and ``beta``); within 2e-7 of ``tanh`` and faster on a CPU, where torch's
  sigmoid beats its tanh (the hand-written PPO step's body). Torch only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

Layers = Sequence[tuple[Any, Any]]  # [(W [in, out], b [out])]: tensors, or numpy arrays


def of_linears(modules: Sequence[nn.Linear]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``nn.Linear`` layers as ``forward``'s layers: (W^T [in, out], a view; b)."""
    return [(m.weight.t(), m.bias) for m in modules]


def _numpy_relu(h: np.ndarray) -> np.ndarray:
    return np.maximum(h, 0.0, out=h)


def _numpy_tanh(h: np.ndarray) -> np.ndarray:
    return np.tanh(h, out=h)


def _sigmoid_tanh(h: torch.Tensor) -> torch.Tensor:
    return h.sigmoid_().mul_(2).sub_(1)  # h is 2z here: the product was scaled by 2


# name -> (the scale taken into the product, the activation applied to it in place)
_TORCH = {"relu": (1, torch.Tensor.relu_), "tanh": (1, torch.Tensor.tanh_), "sigmoid_tanh": (2, _sigmoid_tanh)}
_NUMPY = {"relu": _numpy_relu, "tanh": _numpy_tanh}


def forward(x: Any, layers: Layers, act: str, last: bool = False) -> tuple[Any, list[Any]]:
    """``x`` [B, in] through ``layers``: the output [B, out] and the input of every layer (what a
    backward reads), then, with ``last``, the output (the activation's, whose derivative a tanh
    backward reads from it). A tensor ``x`` runs in torch, an array in numpy."""
    inputs, h, n = [], x, len(layers) - 1
    if isinstance(x, np.ndarray):
        if act not in _NUMPY:
            raise ValueError(f"the {act} activation runs in torch only")
        hidden = _NUMPY[act]
        for k, (w, b) in enumerate(layers):
            inputs.append(h)
            h = h @ w + b
            if k < n or last:
                h = hidden(h)
    else:
        scale, activation = _TORCH[act]
        for k, (w, b) in enumerate(layers):
            if h.dtype != w.dtype:
                h = h.to(w.dtype)
            inputs.append(h)
            if k < n or last:
                h = activation(torch.addmm(b, h, w, beta=scale, alpha=scale))
            else:
                h = torch.addmm(b, h, w)
    if last:
        inputs.append(h)
    return h, inputs
