"""Network pieces shared by the algorithms: MLPs, ensembles of MLPs, Polyak averaging, running
observation normalization and recurrent cores."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TypeVar

import torch
from torch import nn

from heron.ops import fused
from heron.ops import torch_private as private
from heron.ops.capture import recording
from heron.ops.fused import ReluMLP, TanhMLP

Layer = TypeVar("Layer", nn.Linear, nn.Conv2d)  # a layer with a weight and a bias
M = TypeVar("M", bound=nn.Module)

FLOAT32_OUT = "_heron_float32"  # heron.accel.precision leaves layers marked so in float32


def float32_out(layer: M) -> M:
    """Mark an output layer whose outputs are values or a distribution's parameters (a PPO value
    head; DreamerV2's reward, continue, critic and actor heads, its latents' logits and its vector
    decoder): under ``--precision bf16-mixed``/``16-mixed`` it runs in float32, as the fused MLPs
    run their last layer (heron.ops.fused: a bfloat16 value near 300 moves in steps of 2, and a
    bfloat16 logit keeps 8 significant bits)."""
    setattr(layer, FLOAT32_OUT, True)
    return layer


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int) -> ReluMLP:
    """Linear-ReLU-...-Linear (an ``nn.Sequential``; forward and backward fused, heron.ops.fused)."""
    return ReluMLP(in_dim, hidden, out_dim)


class EnsembleLinear(nn.Module):
    """Weights of ``members`` independent linear layers in one tensor [E, in, out] (bias [E, out]),
    each member initialized like ``nn.Linear``."""

    def __init__(self, members: int, in_dim: int, out_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(members, out_dim))
        bound = 1.0 / math.sqrt(in_dim)  # nn.Linear's default (kaiming_uniform a=sqrt(5)) bound
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)


class EnsembleMLP(nn.Module):
    """``members`` ReLU MLPs with identical shapes and independent weights (twin critics).

    The weights of each layer live in one tensor (one module, one optimizer group, one fused Polyak
    update); each member runs its own ``addmm`` (on a CPU faster than one batched ``baddbmm`` over
    the members, measured on the forward-backward of two 256-256 critics at batch 256, one thread),
    and all members go through one autograd node (``heron.ops.fused``)."""

    amp_dtype: torch.dtype | None = None  # --precision (heron.accel.precision)

    def __init__(self, members: int, in_dim: int, hidden: tuple[int, ...], out_dim: int):
        super().__init__()
        self.members = members
        dims = (in_dim, *hidden, out_dim)
        self.layers = nn.ModuleList(EnsembleLinear(members, a, b) for a, b in zip(dims[:-1], dims[1:]))

    def linears(self) -> list[EnsembleLinear]:
        """The layers, in order."""
        return list(self.layers)  # type: ignore[arg-type]  # a ModuleList of EnsembleLinear

    def _params(self) -> list[torch.Tensor]:
        return [t for layer in self.linears() for t in (layer.weight, layer.bias)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, in] (shared by all members) or [E, B, in] -> [E, B, out]."""
        return fused.run(x, self._params(), tuple(range(self.members)), self.amp_dtype)

    def member(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """Only member ``i``: x [B, in] -> [B, out] (TD3's Q1 path, half the cost of all members)."""
        return fused.run(x, self._params(), (i,), self.amp_dtype)[0]


def orthogonal_(layer: Layer, gain: float = math.sqrt(2), bias: float = 0.0) -> Layer:
    """Orthogonal weights with ``gain`` and constant biases (Saxe et al. 2014; the PPO baselines
    initialization: sqrt(2) for hidden layers, 0.01 for the policy head, 1 for the value head)."""
    nn.init.orthogonal_(layer.weight, gain)
    assert layer.bias is not None, "a layer with a bias"
    nn.init.constant_(layer.bias, bias)
    return layer


def tanh_mlp(in_dim: int, hidden: tuple[int, ...]) -> tuple[TanhMLP, int]:
    """Hidden tanh layers with orthogonal init (PPO's MLP body; an ``nn.Sequential`` whose forward
    and backward are fused, heron.ops.fused); returns (body, output width)."""
    return TanhMLP(in_dim, hidden, orthogonal_), hidden[-1] if hidden else in_dim


class NatureCNN(nn.Module):
    """The DQN Nature CNN (Mnih et al. 2015): uint8 frames [B, C, 84, 84] -> features [B, 512].
    Pixels are scaled to [0, 1] here, so images stay uint8 until they reach the network."""

    def __init__(self, channels: int, height: int = 84, width: int = 84, out_dim: int = 512):
        super().__init__()
        self.convs = nn.Sequential(
            orthogonal_(nn.Conv2d(channels, 32, 8, stride=4)),
            nn.ReLU(),
            orthogonal_(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            orthogonal_(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, channels, height, width)).shape[1]
        self.fc = nn.Sequential(orthogonal_(nn.Linear(flat, out_dim)), nn.ReLU())
        self.out_dim = out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = x.float()
        # uint8 frames: scaled in the fresh float copy (the same numbers, one frame-sized buffer fewer);
        # a float input is the caller's tensor and is not written to
        return self.fc(self.convs(f.div_(255.0) if f is not x else f / 255.0))


def requires_grad(params: Iterable[torch.Tensor], flag: bool) -> None:
    """``Module.requires_grad_`` on a list of parameters kept by the caller (no module walk)."""
    for p in params:
        p.requires_grad_(flag)


class Polyak:
    """Polyak averaging of (target, source) module pairs: target <- tau * source + (1 - tau) *
    target, in place, fused over all parameters. The parameter lists are walked once, not at every
    call (the module walks were a large part of the call's time for TD3's actor and critics)."""

    def __init__(self, *pairs: tuple[nn.Module, nn.Module]):
        self.pairs: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = [
            (list(target.parameters()), list(source.parameters())) for target, source in pairs
        ]

    @torch.no_grad()
    def __call__(self, tau: float) -> None:
        for t_params, s_params in self.pairs:
            private.foreach_lerp_(t_params, s_params, tau)


class RunningNorm(nn.Module):
    """Running mean/variance of observations (Chan et al. parallel update), applied as
    ``clip((x - mean) / sqrt(var + eps), -clip, clip)``. Its statistics are buffers, so they are
    part of every state_dict: checkpoints and loaded policies always carry them.

    ``enabled=False`` makes it the identity (and it never updates), so networks can always hold one.
    """

    mean: torch.Tensor  # a buffer
    var: torch.Tensor  # a buffer
    count: torch.Tensor  # a buffer

    def __init__(self, shape: tuple[int, ...], enabled: bool = True, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.enabled, self.clip, self.eps = enabled, clip, eps
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a batch [B, *shape] into the statistics."""
        if not self.enabled:
            return
        x = x.to(self.mean.device, torch.float64).reshape(-1, *self.mean.shape)
        self.update_moments(x.mean(0), x.var(0, unbiased=False), x.shape[0])

    @torch.no_grad()
    def update_moments(self, b_mean: torch.Tensor, b_var: torch.Tensor, b_count: int) -> None:
        """Fold a batch given by its moments (a data-parallel run passes those of all ranks' batches,
        ``heron.ops.dist.global_moments``, so every rank's statistics stay identical)."""
        if not self.enabled:
            return
        b_mean = b_mean.to(self.mean.device, torch.float64).reshape(self.mean.shape)
        b_var = b_var.to(self.mean.device, torch.float64).reshape(self.mean.shape)
        delta = b_mean - self.mean
        total = self.count + b_count
        self.mean += delta * b_count / total
        m2 = self.var * self.count + b_var * b_count + delta.pow(2) * self.count * b_count / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def _float32(self) -> tuple[torch.Tensor, torch.Tensor]:
        """float32 mean and sqrt(var + eps), computed again only when the statistics changed (their
        tensors' version counters move with every in-place update, load_state_dict included): the
        acting loop normalizes every env step, and four conversions a call were a large part of it.
        Inside a compiled or recorded (``--cuda-graphs``) step they are computed afresh: a cached
        tensor would be frozen into the graph while the statistics move between replays."""
        if torch.compiler.is_compiling() or recording(self.mean):
            return self.mean.float(), torch.sqrt(self.var.float() + self.eps)
        key = (
            private.version(self.mean),
            private.version(self.var),
            self.mean.data_ptr(),
            self.var.data_ptr(),
            self.mean.device,
        )
        if getattr(self, "_cache_key", None) != key:
            self._cache = (self.mean.float(), torch.sqrt(self.var.float() + self.eps))
            self._cache_key = key
        return self._cache

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x.float()
        mean, std = self._float32()
        return ((x.float() - mean) / std).clamp(-self.clip, self.clip)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """The inverse of ``forward`` (without the clip): normalized values back to raw scale."""
        if not self.enabled:
            return x
        mean, std = self._float32()
        return x * std + mean


class RecurrentCore(nn.Module):
    """A GRU or LSTM cell unrolled step by step, with the state zeroed at episode starts.

    The state is one tensor [B, S] (LSTM: h and c concatenated, S = 2H), so buffers can store it
    and checkpoints can save it like any other field."""

    def __init__(self, kind: str, in_dim: int, hidden: int):
        super().__init__()
        self.kind, self.hidden = kind, hidden
        self.cell = nn.LSTMCell(in_dim, hidden) if kind == "lstm" else nn.GRUCell(in_dim, hidden)
        self.state_size = 2 * hidden if kind == "lstm" else hidden

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, in], state [B, S] -> output [B, H], new state [B, S]."""
        if self.kind == "lstm":
            h, c = self.cell(x, (state[:, : self.hidden], state[:, self.hidden :]))
            return h, torch.cat([h, c], -1)
        h = self.cell(x, state)
        return h, h

    def sequence(
        self, x: torch.Tensor, state0: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The same recurrence over sequences: x [B, L, in] from state0 [B, S], zeroing the state
        before every step flagged in ``starts`` [B, L] -> outputs [B, L, H], states [B, L, S].

        Runs the fused multi-step kernel (``torch.lstm``/``torch.gru``, the weights of ``cell``)
        over the time chunks between steps where any sequence starts an episode: on CPU a 32-step
        LSTM costs about as much as 4 single cell calls. Finding the chunks reads ``starts`` on the
        host (one sync per call). ``states[:, t]`` is exact at the last step of every chunk (so
        wherever a sequence's episode ends, and at the end); elsewhere the LSTM's cell half is 0.
        A step being recorded as a CUDA graph (``--cuda-graphs``) cannot read the host, and its
        chunks must not depend on the batch it was recorded with: there every step is a chunk
        (the same outputs, every state exact).
        """
        B, L = x.shape[:2]
        if recording(x):
            bounds = list(range(L + 1))
        else:
            bounds = [0, *(starts[:, 1:].any(0).nonzero().flatten() + 1).tolist(), L]
        params = [self.cell.weight_ih, self.cell.weight_hh, self.cell.bias_ih, self.cell.bias_hh]
        outs, ends, state = [], [], state0
        for t0, t1 in zip(bounds[:-1], bounds[1:]):
            state = state * (~starts[:, t0]).unsqueeze(-1).to(state.dtype)
            if self.kind == "lstm":
                hx = (state[None, :, : self.hidden].contiguous(), state[None, :, self.hidden :].contiguous())
                out, h, c = torch.lstm(x[:, t0:t1], hx, params, True, 1, 0.0, False, False, True)
                state = torch.cat([h[0], c[0]], -1)
            else:
                out, h = torch.gru(x[:, t0:t1], state[None].contiguous(), params, True, 1, 0.0, False, False, True)
                state = h[0]
            outs.append(out)
            ends.append((t1 - 1, state))
        out = torch.cat(outs, 1)  # [B, L, H]
        if self.kind == "gru":
            return out, out
        cells = torch.zeros_like(out)
        for t, st in ends:
            cells[:, t] = st[:, self.hidden :]
        return out, torch.cat([out, cells], -1)


class Encoder(nn.Module):
    """Observation -> features: running normalization, then (optionally) a recurrent core.

    ``forward`` handles sequences [B, L, D] from a stored initial state, zeroing the state before
    every step flagged in ``starts`` (the first step of an episode); it returns the features
    [B, L, F] and the state after each step [B, L, S]. Without a recurrent core, S = 0 and the
    features are the normalized observations."""

    def __init__(self, obs_dim: int, norm: RunningNorm, recurrent: str = "none", hidden: int = 128):
        super().__init__()
        self.norm = norm
        self.rnn = RecurrentCore(recurrent, obs_dim, hidden) if recurrent != "none" else None
        self.out_dim = hidden if self.rnn is not None else obs_dim
        self.state_size = self.rnn.state_size if self.rnn is not None else 0

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """obs [B, D], state [B, S] (already zeroed at episode starts) -> features, new state."""
        x = self.norm(obs)
        if self.rnn is None:
            return x, state
        return self.rnn.step(x, state)

    def forward(
        self, obs: torch.Tensor, state0: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rnn is None:
            return self.norm(obs), state0[:, None].expand(-1, obs.shape[1], -1)
        feats, states, state = [], [], state0
        for t in range(obs.shape[1]):
            state = state * (~starts[:, t]).unsqueeze(-1).float()
            f, state = self.step(obs[:, t], state)
            feats.append(f)
            states.append(state)
        return torch.stack(feats, 1), torch.stack(states, 1)
