"""``heron.ops.mlp.forward``, the MLP forward the fused MLPs, PPO's direct layers, the hand-written
steps and the numpy acting twins all run: the same numbers as ``nn.Sequential`` of the same
layers, in torch and in numpy, and the layer inputs a backward reads."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from heron.ops import mlp


def _net(act: type[nn.Module], last: bool) -> nn.Sequential:
    torch.manual_seed(0)
    mods: list[nn.Module] = []
    for k, (i, o) in enumerate([(5, 16), (16, 16), (16, 3)]):
        mods.append(nn.Linear(i, o))
        if k < 2 or last:
            mods.append(act())
    return nn.Sequential(*mods)


@pytest.mark.parametrize("act", ["relu", "tanh"])
@pytest.mark.parametrize("last", [False, True])
def test_forward_is_the_sequential_in_torch_and_numpy(act, last):
    net = _net(nn.ReLU if act == "relu" else nn.Tanh, last)
    linears = [m for m in net if isinstance(m, nn.Linear)]
    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = net(x)
        got, inputs = mlp.forward(x, mlp.of_linears(linears), act, last)
    torch.testing.assert_close(got, want, rtol=0, atol=0)  # addmm: nn.Linear's own operation
    assert len(inputs) == 3 + last and inputs[0] is x
    torch.testing.assert_close(inputs[1], net[:2](x).detach(), rtol=0, atol=0)
    if last:
        assert inputs[-1] is got  # a tanh backward reads its derivative from the output
    arrays = [(m.weight.detach().numpy().T, m.bias.detach().numpy()) for m in linears]
    out, _ = mlp.forward(x.numpy(), arrays, act, last)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-5, atol=1e-6)


def test_sigmoid_tanh_is_tanh_within_rounding():
    net = _net(nn.Tanh, False)
    linears = [m for m in net if isinstance(m, nn.Linear)]
    x = torch.randn(64, 5, generator=torch.Generator().manual_seed(2)) * 3
    with torch.no_grad():
        got, inputs = mlp.forward(x, mlp.of_linears(linears), "sigmoid_tanh")
        want, want_inputs = mlp.forward(x, mlp.of_linears(linears), "tanh")
    assert not torch.equal(inputs[1], want_inputs[1])  # another computation ...
    torch.testing.assert_close(inputs[1], want_inputs[1], rtol=0, atol=1e-6)  # ... of the same tanh
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="torch only"):
        mlp.forward(
            x.numpy(), [(w.detach().numpy(), b.detach().numpy()) for w, b in mlp.of_linears(linears)], "sigmoid_tanh"
        )
