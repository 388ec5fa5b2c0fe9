"""The pieces of the off-policy algorithms' hand-written gradient steps (``heron/accel/handwritten/sac.py``,
``heron/accel/handwritten/td3.py``): gradients in one flat buffer per optimizer, and twin (ensemble)
ReLU critics run forward, trained on their mean squared error, and asked for dQ/da, without
autograd. Their layers' arithmetic is ``heron.ops.fused``'s (the same products in the same order
as the autograd path's fused nodes), in float32 or, under ``--precision bf16-mixed``, with the
products in bfloat16 as the fused nodes run them: weights and inputs cast once per pass,
activations in bfloat16 between layers, the last layer (the Q value) in float32, dQ/da and every
gradient back in float32."""

from __future__ import annotations

from typing import Any, cast

import torch

from heron.ops import dist, mlp
from heron.ops import torch_private as private
from heron.ops.adam import Adam
from heron.ops.fused import _layers, backprop
from heron.rl.distributions import LOG_STD_MAX, LOG_STD_MIN
from heron.rl.nets import EnsembleMLP


class FlatGrads:
    """The gradients of an optimizer's parameters as views of one buffer, attached as their ``.grad``
    (clipping is one norm and one scale; the torchrun all-reduce and Adam see the usual ``.grad``)."""

    def __init__(self, opt: torch.optim.Optimizer):
        self.opt = opt
        self.params = [p for group in opt.param_groups for p in group["params"]]
        self.flat = torch.zeros(sum(p.numel() for p in self.params), device=self.params[0].device)
        self.views, offset = [], 0
        for p in self.params:
            self.views.append(self.flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        self._of = {id(p): v for p, v in zip(self.params, self.views)}

    def of(self, p: torch.Tensor) -> torch.Tensor:
        """The gradient view of parameter ``p``."""
        return self._of[id(p)]

    def attach(self) -> None:
        """Make the views the parameters' ``.grad`` (another step, torch's or a checkpoint load's, may
        have replaced them); call before writing the gradients."""
        if self.params[0].grad is not self.views[0]:
            for p, v in zip(self.params, self.views):
                p.grad = v

    def step(self, max_norm: float) -> None:
        """The all-reduce under torchrun, clipping to ``max_norm`` (0: none), the optimizer step.
        The parameters' version counters move with it (``LayerViews``): the fused Adam kernel
        writes them in place without."""
        dist.all_reduce_grads(self.params)
        if max_norm > 0:
            norm = torch.linalg.vector_norm(self.flat)
            self.flat.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        self.opt.lean_step() if isinstance(self.opt, Adam) else self.opt.step()
        torch.autograd.graph.increment_version(self.params)


class LayerViews:
    """``_layers(params, member, dtype, float32_out=True)`` and its weights, per member (None: the
    nn.Linear layout), kept between steps: made again only when a parameter changed. In float32
    they are views of the parameters, so the optimizers' in-place steps and checkpoint loads show
    through, and they are made again only when a parameter's storage moves (the data pointers,
    read at each call). A SAC step asks for some 18 member passes; their index and transpose views
    were some 60 tensor calls per step.

    Under bf16-mixed the weights are cast copies. On the CPU they are kept until a parameter
    changes: the key adds the parameters' version counters, which every in-place write moves
    (Polyak averaging, a checkpoint load) but for the fused Adam kernel's, so ``FlatGrads.step``
    moves them itself. A write through ``.data`` would not move them: nothing writes the trained
    parameters so once the step exists (torchrun's ``broadcast_state`` runs before it is made).
    Each parameter is cast whole, an ensemble's members together. A TD3
    iteration at Hopper's sizes then casts the target networks only after they are averaged (every
    other iteration) and the critics once per change, not once per pass: 24 casts of 417k elements
    per iteration became 10 of 278k, and the copies took a smaller share of the step (SAC's too).
    On a GPU every call casts afresh, as the step --cuda-graphs records must."""

    def __init__(self, params: list[torch.Tensor], dtype: torch.dtype | None):
        self.params, self.dtype = list(params), dtype
        self.fresh = dtype is not None and self.params[0].device.type != "cpu"  # cast at every call
        self._key: tuple | None = None
        self._kept: dict = {}
        self._cast: list[torch.Tensor] = []
        self._held: list[torch.Tensor] = []

    def __call__(self, member: int | None) -> tuple[list, list[torch.Tensor]]:
        """(layers [(W [in, out], b)], their weights)."""
        if self.fresh:
            layers = _layers(self.params, member, self.dtype, float32_out=True)
            return layers, [w for w, _ in layers]
        key = tuple(p.data_ptr() for p in self.params)
        if self.dtype is not None:
            key += tuple(private.version(p) for p in self.params)
        if key != self._key:
            self._kept.clear()
            self._key = key
            if self.dtype is not None:  # the last layer (Q values, actions) stays float32
                last = len(self.params) - 2
                self._cast = [p if k >= last else p.to(self.dtype) for k, p in enumerate(self.params)]
                # the cast parameters' storage, held: freed, its address could come back under a
                # replaced parameter at the same version, and the key would not see the change
                self._held = [p.data for p in self.params]
        got = self._kept.get(member)
        if got is None:
            layers = _layers(self._cast if self.dtype is not None else self.params, member, None)
            got = self._kept[member] = (layers, [w for w, _ in layers])
        return got


class LeanCritics:
    """Twin critics (an ``EnsembleMLP``) and their targets, written out. Inputs are ``[B, in]``
    (observation features, then actions), shared by the members; ``dtype`` is the products' type
    (None: float32; ``torch.bfloat16`` under bf16-mixed). What ``forward`` keeps for a backward,
    per member, is its (cast) weights and every layer's input."""

    def __init__(
        self, critic: EnsembleMLP, target: EnsembleMLP, opt: torch.optim.Optimizer, dtype: torch.dtype | None = None
    ):
        self.params, self.t_params, self.E = critic._params(), target._params(), critic.members
        self.dtype = dtype
        self.grads = FlatGrads(opt)
        assert {id(p) for p in self.grads.params} == {id(p) for p in self.params}, "the q optimizer holds the critics"
        self.dws = [self.grads.of(layer.weight) for layer in critic.linears()]
        self.dbs = [self.grads.of(layer.bias) for layer in critic.linears()]
        self.member_grads = [([dw[e] for dw in self.dws], [db[e] for db in self.dbs]) for e in range(self.E)]
        self.views, self.t_views = LayerViews(self.params, dtype), LayerViews(self.t_params, dtype)

    def forward(self, x: torch.Tensor, members=None, target: bool = False) -> tuple[torch.Tensor, list]:
        """Q values [len(members), B] (float32) of ``members`` (default all) and, per member, its
        weights and layer inputs (``kept``, for ``step``/``input_grad``/``min_input_grad``)."""
        views = self.t_views if target else self.views
        xc = x if self.dtype is None else x.to(self.dtype)  # once for all members
        outs, kept = [], []
        for e in range(self.E) if members is None else members:
            layers, ws = views(e)
            y, inputs = mlp.forward(xc, layers, "relu")
            outs.append(y)
            kept.append((ws, inputs))
        return torch.stack(outs).squeeze(-1), kept

    def step(self, x: torch.Tensor, loss, max_norm: float) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step on the sum of the members' losses; ``loss(q) -> (losses [E], d(sum of
        losses)/dq [E, B])``, the algorithm's loss and its derivative. Returns q [E, B] (before the
        step) and the members' losses."""
        q, kept = self.forward(x)
        losses, g = loss(q)
        g = g.unsqueeze(-1)  # [E, B, 1]
        self.grads.attach()
        for e, (ws, inputs) in enumerate(kept):
            backprop(g[e], ws, inputs, *self.member_grads[e], "relu", False, linear_layout=False)
        self.grads.step(max_norm)
        return q, losses

    def input_grad(self, kept: list, members, g_q: list[torch.Tensor], first: int) -> torch.Tensor:
        """d/dx[:, first:] (the action columns) of sum_j g_q[j] . Q_members[j](x), from the layer inputs
        ``kept`` of ``forward(x, members)``; the critics' weights get no gradient. float32."""
        total: torch.Tensor | None = None
        for (ws, inputs), g in zip(kept, g_q):
            n = len(inputs)
            gx = backprop(
                g.unsqueeze(-1), ws, inputs, [None] * n, [None] * n, "relu", True, linear_layout=False, x_from=first
            )
            gx = cast(torch.Tensor, gx).float()  # need_x: the input's gradient
            total = gx if total is None else total + gx
        return cast(torch.Tensor, total)  # at least one member

    def min_input_grad(
        self, kept: list, which: torch.Tensor, scale: float, first: int, split: bool | None = None
    ) -> torch.Tensor:
        """d/dx[:, first:] of ``scale * sum_b min_e Q_e(x_b)``, from the layer inputs ``kept`` of
        ``forward(x)`` and ``which`` [B], the member that gave each row's minimum. A row's gradient
        flows through that member alone: on the CPU each member's backward runs on its own rows
        (one B x 256 x 256 product in all, not one per member); elsewhere the rows are masked (a
        row index would be a host sync). ``split`` forces either way. float32."""
        if not (which.device.type == "cpu" if split is None else split):
            g_q = [(which == e).float().mul_(scale) for e in range(self.E)]
            return self.input_grad(kept, range(self.E), g_q, first)
        out: torch.Tensor | None = None
        for e, (ws, held) in enumerate(kept):
            rows = (which == e).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            # the first layer's input is not read (no weight gradient, no activation below it)
            inputs = [held[0]] + [h.index_select(0, rows) for h in held[1:]]
            n = len(inputs)
            g = torch.full((rows.numel(), 1), scale, dtype=inputs[-1].dtype, device=which.device)
            gx = cast(
                torch.Tensor,
                backprop(g, ws, inputs, [None] * n, [None] * n, "relu", True, linear_layout=False, x_from=first),
            ).float()  # need_x: the input's gradient
            if out is None:
                out = gx.new_zeros(which.shape[0], gx.shape[1])
            out.index_copy_(0, rows, gx)
        return cast(torch.Tensor, out)  # every row has a member


# -- derivatives shared by SAC's and TD3's hand-written steps --------------------------------------
def critic_losses_grad(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """d(sum of ``heron.rl.losses.critic_losses``)/dq, SAC's and TD3's critic loss: 2 (q - target) /
    B, [E, B]."""
    return (q - target).mul(2.0 / q.shape[1])


def squash_grad(g_a: torch.Tensor, t: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """dJ/dz from dJ/da through ``heron.rl.distributions.squash``: dJ/da * scale * (1 - tanh(z)^2),
    with ``t`` = tanh(z)."""
    return g_a * scale * (1 - t * t)


def tanh_gaussian_log_std_grad(g: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
    """dJ/draw from dJ/dlog_std through ``heron.rl.distributions.TanhGaussian.log_std``."""
    t = torch.tanh(raw)
    return g * (0.5 * (LOG_STD_MAX - LOG_STD_MIN)) * (1 - t * t)


def tanh_gaussian_rsample_grad(
    g_a: torch.Tensor,
    g_logp: torch.Tensor | float,
    saved: tuple[torch.Tensor, torch.Tensor],
    eps: torch.Tensor,
    scale: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dJ/dmean, dJ/dlog_std) from dJ/da [..., A] and dJ/dlog pi (per row [...] or one number)
    through ``heron.rl.distributions.TanhGaussian.rsample`` with ``eps`` held fixed; ``saved`` is its
    third output. With u = mean + std eps: dlog pi/du = 2 tanh(u) (the Gaussian term depends on mean
    and log_std only through eps), dlog pi/dlog_std = -1 through the normalizer, da/du = scale (1 -
    tanh(u)^2)."""
    t, std = saved
    if isinstance(g_logp, torch.Tensor) and g_logp.dim():
        g_logp = g_logp.unsqueeze(-1)
    g_u = t * (2.0 * g_logp) + squash_grad(g_a, t, scale)
    return g_u, g_u * std * eps - g_logp


def offpolicy_reason(cfg: Any, prec: Any) -> str | None:
    """Why neither of SAC's and TD3's hand-written steps applies to the run (None where both may)."""
    if cfg.compile:
        return "--compile wraps the autograd step"
    if prec.scaler is not None:
        return f"--precision {prec.mode} scales its losses through autograd (GradScaler)"
    return None


def batch_probe(cfg: Any, obs_dim: int, scale: torch.Tensor, bias: torch.Tensor, lead: tuple[int, ...]) -> dict:
    """A synthetic replay batch for the start-up check (``heron.accel.handwritten.check``):
    ``--batch-size`` transitions shaped ``[B, *lead, ...]`` as the run's, with standard-normal
    observations and rewards, actions uniform within the bounds, a quarter of them terminal, none
    truncated, and
    with n-step returns each transition's own discount. Drawn from a generator of its own."""
    g = torch.Generator().manual_seed(0)
    B, device = cfg.batch_size, scale.device
    shape = (B, *lead)
    A = scale.numel()

    def normal(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=g).to(device)

    batch = {
        "obs": normal(*shape, obs_dim),
        "next_obs": normal(*shape, obs_dim),
        "actions": (torch.rand(*shape, A, generator=g).to(device) * 2 - 1) * scale + bias,
        "rewards": normal(*shape),
        "terminated": (torch.rand(*shape, generator=g) < 0.25).to(device),
        "truncated": torch.zeros(shape, dtype=torch.bool, device=device),
    }
    if cfg.n_step > 1:
        steps = torch.randint(1, cfg.n_step + 1, shape, generator=g)
        batch["discount"] = (cfg.gamma ** steps.double()).float().to(device)
    return batch
