"""ReLU MLPs whose forward and backward are one autograd node each (SAC's and TD3's actors and
twin critics, where the update's time goes).

At batch 256 and width 256 a SAC update is 16 matrix products of 256 x 256 x 256 plus a few
hundred small operations. Through ``nn.Linear``/``torch.addmm`` layer by layer, autograd adds, per
layer and member: a transposed view, an out-of-place ReLU and its mask, a zero-filled gradient
for the member's slice of the ensemble weight and its accumulation, and the engine's bookkeeping;
on this project's 2-core CPU that was about as much time again as the products themselves. Here
one function runs a whole MLP (or all members of an ensemble): products into preallocated
gradients, ReLU in place, the ReLU mask taken from the saved activation, and no gradient for
what does not need one (the critic's weights in the actor loss, the input of the first layer).
The arithmetic is the same operations in the same order as the layer-by-layer path: outputs and
gradients are equal to it (``tests/test_fused.py``).

``--precision bf16-mixed``/``16-mixed`` (``heron.core.precision``) sets ``amp_dtype``: inputs,
weights and biases are cast once per call and the products run in that type, the activations
stay in it between layers (exactly what autocast around each layer gives, since ReLU commutes
with rounding), and outputs and gradients come back as float32.
"""

from __future__ import annotations

import torch
from torch import nn


def _layers(params: tuple[torch.Tensor, ...], member: int | None, dtype: torch.dtype | None) -> list:
    """[(W [in, out], b [out])] of one member, cast to ``dtype`` when given. ``member`` None: the
    nn.Linear layout (W [out, in]); else the ensemble layout (W [E, in, out], b [E, out])."""
    out = []
    for k in range(0, len(params), 2):
        w, b = params[k], params[k + 1]
        w, b = (w.t(), b) if member is None else (w[member], b[member])
        if dtype is not None:
            w, b = w.to(dtype), b.to(dtype)
        out.append((w, b))
    return out


def _forward(x: torch.Tensor, layers: list) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One member: the output and the input of every layer (what the backward needs)."""
    inputs, h = [], x
    for k, (w, b) in enumerate(layers):
        inputs.append(h)
        h = torch.addmm(b, h, w)
        if k < len(layers) - 1:
            h = h.relu_()
    return h, inputs


class _MLP(torch.autograd.Function):
    """x [B, in], shared by the members, or [M, B, in], one per member listed -> [M, B, out]; or,
    with ``members`` (None,) (the nn.Linear layout, one network), x [B, in] -> [B, out]."""

    @staticmethod
    def forward(ctx, x, members, dtype, *params):
        xc = x if dtype is None else x.to(dtype)
        outs, saved = [], []
        for j, i in enumerate(members):
            layers = _layers(params, i, dtype)
            y, inputs = _forward(xc[j] if x.dim() == 3 else xc, layers)
            outs.append(y)
            saved += [w for w, _ in layers] + inputs
        ctx.members, ctx.dtype, ctx.x_meta = members, dtype, (x.dim(), x.dtype)
        ctx.shapes = [p.shape for p in params]
        ctx.save_for_backward(*saved)
        out = outs[0] if members == (None,) else torch.stack(outs)
        return out if dtype is None else out.float()

    @staticmethod
    def backward(ctx, grad):
        members, dtype, shapes = ctx.members, ctx.dtype, ctx.shapes
        saved = ctx.saved_tensors
        n = len(shapes) // 2  # layers
        need_x, need = ctx.needs_input_grad[0], ctx.needs_input_grad[3:]
        # full-size float32 gradients; zero-filled only where a member was not run (TD3's Q1 path)
        whole = members == (None,) or len(members) == shapes[0][0]
        alloc = torch.empty if whole else torch.zeros
        grads = [alloc(shape, dtype=torch.float32, device=grad.device) if need[k] else None
                 for k, shape in enumerate(shapes)]
        g_all = grad if dtype is None else grad.to(dtype)
        gx = []
        for j, i in enumerate(members):
            ws, inputs = saved[2 * n * j: 2 * n * j + n], saved[2 * n * j + n: 2 * n * (j + 1)]
            g = g_all if i is None else g_all[j]
            for k in reversed(range(n)):
                h = inputs[k]
                if need[2 * k]:  # nn.Linear layout: W [out, in]; ensemble: W[i] [in, out]
                    a, b = (g.t(), h) if i is None else (h.t(), g)
                    _into(grads[2 * k] if i is None else grads[2 * k][i], a, b, dtype)
                if need[2 * k + 1]:
                    dst = grads[2 * k + 1] if i is None else grads[2 * k + 1][i]
                    torch.sum(g, 0, out=dst) if dtype is None else dst.copy_(g.sum(0))
                if k > 0 or need_x:
                    gh = torch.mm(g, ws[k].t())
                    g = torch.ops.aten.threshold_backward(gh, h, 0) if k > 0 else gh
            if need_x:
                gx.append(g)
        gx_out = None
        if need_x:
            dim, x_dtype = ctx.x_meta
            gx_out = (torch.stack(gx) if dim == 3 else sum(gx[1:], gx[0])).to(x_dtype)
        return (gx_out, None, None, *grads)


def _into(dst: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype | None) -> None:
    """dst <- a @ b (computed in ``dtype`` when given, stored as float32)."""
    if dtype is None:
        torch.mm(a, b, out=dst)
    else:
        dst.copy_(torch.mm(a, b))


def run(x: torch.Tensor, params: list[torch.Tensor], members: tuple, dtype: torch.dtype | None) -> torch.Tensor:
    """The MLP(s) on ``x`` (shapes as ``_MLP``) through one autograd node, or straight through when
    nothing needs gradients. Under an enclosing autocast, its type is the compute type."""
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type):
        with torch.autocast(device_type, enabled=False):
            return run(x, params, members, dtype or torch.get_autocast_dtype(device_type))
    if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in params)):
        return _MLP.apply(x, members, dtype, *params)
    xc = x if dtype is None else x.to(dtype)
    outs = [_forward(xc[j] if x.dim() == 3 else xc, _layers(params, i, dtype))[0] for j, i in enumerate(members)]
    y = outs[0] if members == (None,) else torch.stack(outs)
    return y if dtype is None else y.float()


class ReluMLP(nn.Sequential):
    """Linear-ReLU-...-Linear, laid out (and saved) as ``nn.Sequential`` of ``nn.Linear``/``nn.ReLU``,
    run through one autograd node (module doc)."""

    amp_dtype: torch.dtype | None = None

    def __init__(self, in_dim: int, hidden: tuple[int, ...], out_dim: int):
        layers: list[nn.Module] = []
        for h in hidden:
            layers += [nn.Linear(in_dim, h), nn.ReLU()]
            in_dim = h
        layers.append(nn.Linear(in_dim, out_dim))
        super().__init__(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params = [t for layer in self if isinstance(layer, nn.Linear) for t in (layer.weight, layer.bias)]
        y = run(x.reshape(-1, x.shape[-1]), params, (None,), self.amp_dtype)
        return y.reshape(*x.shape[:-1], y.shape[-1])
