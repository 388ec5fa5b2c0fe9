"""MLPs whose forward and backward are one autograd node each: SAC's and TD3's ReLU actors and
twin critics, where their update's time goes, and PPO's tanh bodies.

At batch 256 and width 256 a SAC update is 16 matrix products of 256 x 256 x 256 plus a few
hundred small operations. Through ``nn.Linear``/``torch.addmm`` layer by layer, autograd adds, per
layer and member: a transposed view, an out-of-place ReLU and its mask, a zero-filled gradient
for the member's slice of the ensemble weight and its accumulation, and the engine's bookkeeping;
on a CPU that was about as much time again as the products themselves. Here one function runs a
whole MLP (or all members of an ensemble): products into preallocated gradients, ReLU in place,
the ReLU mask taken from the saved activation (tanh's derivative from its output), and no gradient
for what does not need one (the critic's weights in the actor loss, the input of the first layer).
The arithmetic is the same operations in the same order as the layer-by-layer path: outputs and
gradients are equal to it (``tests/test_fused.py``).

``--precision bf16-mixed``/``16-mixed`` (``heron.accel.precision``) sets ``amp_dtype``: inputs,
weights and biases are cast once per call and the products run in that type, the activations
stay in it between layers (for ReLU exactly what autocast around each layer gives, since ReLU
commutes with rounding; tanh is then evaluated on the bfloat16 product and rounded, where the
layer-by-layer path kept its float32 result until the next layer rounded it), and outputs and
gradients come back as float32. An MLP whose last layer is linear (the critics' Q values, the
actors' Gaussian parameters and actions) runs that layer in float32 on the float32 copy of its
input: a bfloat16 output keeps 8 significant bits, so a Q value near 300 would move in steps of 2,
coarser than a MuJoCo task's reward per step, and the TD error would be mostly rounding. That
layer is a few percent of the MLP's products (one output per row for a critic).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from heron.ops import mlp
from heron.ops import torch_private as private


def _layers(
    params: Sequence[torch.Tensor], member: int | None, dtype: torch.dtype | None, float32_out: bool = False
) -> list:
    """[(W [in, out], b [out])] of one member, cast to ``dtype`` when given, but for the last layer
    with ``float32_out`` (module doc). ``member`` None: the nn.Linear layout (W [out, in]); else the
    ensemble layout (W [E, in, out], b [E, out])."""
    out, n = [], len(params) // 2
    for k in range(n):
        w, b = params[2 * k], params[2 * k + 1]
        w, b = (w.t(), b) if member is None else (w[member], b[member])
        if dtype is not None and not (float32_out and k == n - 1):
            w, b = w.to(dtype), b.to(dtype)
        out.append((w, b))
    return out


def _act_backward(g: torch.Tensor, out: torch.Tensor, act: str, inplace: bool = False) -> torch.Tensor:
    """The gradient through the activation, from its output; written over ``g`` when ``inplace``
    (a buffer the caller just made: no second allocation of the layer's size; not under autograd,
    which a double backward through the fused node would run it in)."""
    if act == "relu":
        f = private.threshold_backward
        return f.grad_input(g, out, 0, grad_input=g) if inplace else f(g, out, 0)
    f = private.tanh_backward
    return f.grad_input(g, out, grad_input=g) if inplace else f(g, out)


class _MLP(torch.autograd.Function):
    """x [B, in], shared by the members, or [M, B, in], one per member listed -> [M, B, out]; or,
    with ``members`` (None,) (the nn.Linear layout, one network), x [B, in] -> [B, out]."""

    @staticmethod
    def forward(ctx, x, members, dtype, act, last, *params):
        outs, saved = [], []
        for j, i in enumerate(members):
            layers = _layers(params, i, dtype, float32_out=not last)
            y, inputs = mlp.forward(x[j] if x.dim() == 3 else x, layers, act, last)
            outs.append(y)
            saved += [w for w, _ in layers] + inputs
        ctx.members, ctx.x_meta, ctx.act, ctx.last = members, (x.dim(), x.dtype), act, last
        ctx.shapes = [p.shape for p in params]
        ctx.save_for_backward(*saved)
        out = outs[0] if members == (None,) else torch.stack(outs)
        return out if dtype is None else out.float()

    @staticmethod
    def backward(ctx, grad):
        members, shapes, act, last = ctx.members, ctx.shapes, ctx.act, ctx.last
        saved = ctx.saved_tensors
        n = len(shapes) // 2  # layers
        per = 2 * n + last  # saved tensors per member: weights, layer inputs, [activated output]
        need_x, need = ctx.needs_input_grad[0], ctx.needs_input_grad[5:]
        # full-size float32 gradients; zero-filled only where a member was not run (TD3's Q1 path)
        whole = members == (None,) or len(members) == shapes[0][0]
        alloc = torch.empty if whole else torch.zeros
        grads = [
            alloc(shape, dtype=torch.float32, device=grad.device) if need[k] else None for k, shape in enumerate(shapes)
        ]
        g_all = grad  # backprop casts it to each layer's type
        gx = []
        for j, i in enumerate(members):
            ws, inputs = saved[per * j : per * j + n], saved[per * j + n : per * (j + 1)]
            g = g_all if i is None else g_all[j]
            if last:
                g = _act_backward(g.to(inputs[n].dtype), inputs[n], act)
            dws = [(grads[2 * k] if i is None else grads[2 * k][i]) if need[2 * k] else None for k in range(n)]
            dbs = [
                (grads[2 * k + 1] if i is None else grads[2 * k + 1][i]) if need[2 * k + 1] else None for k in range(n)
            ]
            g = backprop(g, ws, inputs, dws, dbs, act, need_x, linear_layout=i is None)
            if need_x:
                gx.append(g)
        gx_out = None
        if need_x:
            dim, x_dtype = ctx.x_meta
            gx_out = (torch.stack(gx) if dim == 3 else sum(gx[1:], gx[0])).to(x_dtype)
        return (gx_out, None, None, None, None, *grads)


def backprop(
    g: torch.Tensor,
    ws: list[torch.Tensor],
    inputs: list[torch.Tensor],
    dws: list,
    dbs: list,
    act: str,
    need_x: bool,
    linear_layout: bool = True,
    x_from: int = 0,
) -> torch.Tensor | None:
    """One member's backward from the gradient ``g`` of its last layer's output (before any final
    activation): weight and bias gradients written into ``dws``/``dbs`` (None: not wanted; weight
    layout [out, in] with ``linear_layout``, else [in, out]; float32 whatever the layer's type), and
    the gradient of the input's columns ``x_from:`` when ``need_x`` (else None), in the first
    layer's type. ``ws`` are the weights as ``[in, out]`` (views, or casts in the layer's type),
    ``inputs`` every layer's input from the forward (the activations' derivatives come from them);
    each layer's products run in its type, ``g`` cast to it on the way down."""
    for k in reversed(range(len(ws))):
        h = inputs[k]
        if g.dtype != h.dtype:
            g = g.to(h.dtype)
        if dws[k] is not None:
            if not linear_layout:
                _into(dws[k], h.t(), g)
            elif h.shape[1] < g.shape[1]:
                # a narrow input (the first layer on observations): g^T h with so few result
                # columns runs several times slower than (h^T g), written transposed
                dws[k].copy_(torch.mm(h.t(), g).t())
            else:
                _into(dws[k], g.t(), h)
        if dbs[k] is not None:
            torch.sum(g, 0, out=dbs[k]) if g.dtype == dbs[k].dtype else dbs[k].copy_(g.sum(0))
        if k > 0 or need_x:
            w = ws[k] if k > 0 else ws[k][x_from:]  # [in, out]: only the input columns asked for
            # one output (a critic's last layer): the product is an outer product, exact as a
            # broadcast multiply and several times faster than a K=1 matrix product
            gh = g * w.t() if w.shape[1] == 1 else torch.mm(g, w.t())
            g = _act_backward(gh, h, act, inplace=not torch.is_grad_enabled()) if k > 0 else gh
    return g if need_x else None


def _into(dst: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """dst <- a @ b (computed in a's type, stored in dst's)."""
    if a.dtype == dst.dtype:
        torch.mm(a, b, out=dst)
    else:
        dst.copy_(torch.mm(a, b))


def run(
    x: torch.Tensor,
    params: list[torch.Tensor],
    members: tuple,
    dtype: torch.dtype | None,
    act: str = "relu",
    last: bool = False,
) -> torch.Tensor:
    """The MLP(s) on ``x`` (shapes as ``_MLP``; ``act`` between layers, and after the last one when
    ``last``) through one autograd node; straight through when nothing needs gradients, and as
    autograd's own graph inside torch.compile. Under an enclosing autocast, its type is the compute
    type."""
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type):
        with torch.autocast(device_type, enabled=False):
            return run(x, params, members, dtype or torch.get_autocast_dtype(device_type), act, last)
    if (
        torch.is_grad_enabled()
        and (x.requires_grad or any(p.requires_grad for p in params))
        and not torch.compiler.is_compiling()
    ):
        return _MLP.apply(x, members, dtype, act, last, *params)
    # no gradient wanted, or inside torch.compile: the same operations under autograd, whose graph
    # Inductor fuses as well as this node's (and Dynamo before torch 2.13 traced this node's backward
    # wrongly for tanh bodies: PPO's compiled steps moved none of their weights)
    outs = [
        mlp.forward(x[j] if x.dim() == 3 else x, _layers(params, i, dtype, float32_out=not last), act, last)[0]
        for j, i in enumerate(members)
    ]
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


class TanhMLP(nn.Sequential):
    """Linear-Tanh-...-Linear-Tanh (PPO's body: every layer activated), laid out (and saved) as
    ``nn.Sequential`` of ``nn.Linear``/``nn.Tanh``, run through one autograd node (module doc).
    ``init`` runs on each linear layer as it is made (the random draws in the layer-by-layer order)."""

    amp_dtype: torch.dtype | None = None

    def __init__(self, in_dim: int, hidden: tuple[int, ...], init=lambda layer: layer):
        layers: list[nn.Module] = []
        for h in hidden:
            layers += [init(nn.Linear(in_dim, h)), nn.Tanh()]
            in_dim = h
        super().__init__(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if len(self) == 0:
            return x
        params = [t for layer in self if isinstance(layer, nn.Linear) for t in (layer.weight, layer.bias)]
        y = run(x.reshape(-1, x.shape[-1]), params, (None,), self.amp_dtype, "tanh", True)
        return y.reshape(*x.shape[:-1], y.shape[-1])
