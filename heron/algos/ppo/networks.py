"""PPO's actor-critic: bodies (MLP, Nature CNN, optional RNN), action heads for Discrete,
MultiDiscrete/MultiBinary and Box spaces, and the value head.

Everything runs on sequences ``[B, L, ...]`` from a stored initial state with episode-start flags:
the feed-forward networks see L = 1, the recurrent ones whole rollouts (L = --num-steps). Acting
step by step (``step``) is the same computation with L = 1, which the tests check.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import cast

import numpy as np
import torch
from torch import nn

from heron.accel import acting
from heron.rl.nets import NatureCNN, RecurrentCore, RunningNorm, float32_out, orthogonal_, tanh_mlp

LOG_2PI = math.log(2 * math.pi)
LOG_STD_BOUNDS = (-20.0, 2.0)  # the Gaussian head's log-std, clamped (torch and numpy acting)


def image_layout(shape: tuple[int, ...]) -> tuple[tuple[int, int, int], bool]:
    """(C, H, W) of an image and whether it arrives channel-last (H, W, C), as pixel envs render."""
    channels_last = shape[-1] in (1, 3, 4) and shape[0] not in (1, 3, 4)
    c, h, w = (shape[2], shape[0], shape[1]) if channels_last else shape
    return (c, h, w), channels_last


class Body(nn.Module):
    """(normalized) observations -> features: [Nature CNN per image] -> [GRU/LSTM] -> tanh MLP.

    ``parts`` describes the input: one vector ``[(D, None)]``, one image ``[(0, shape)]``, or, for
    Dict observations holding images (``flat``), the pieces of the flattened vector in order:
    ``(size, image shape or None)``. Images go through their own CNN, vectors pass through, and
    the results are concatenated."""

    def __init__(
        self,
        parts: list[tuple[int, tuple | None]],
        flat: bool,
        recurrent: str,
        rnn_hidden: int,
        hidden: tuple[int, ...],
    ):
        super().__init__()
        self.flat = flat
        self.parts = [(size, None if shape is None else image_layout(shape)) for size, shape in parts]
        self.cnns = nn.ModuleList(NatureCNN(*layout[0]) for _, layout in self.parts if layout is not None)
        dim = sum(cnn.out_dim for cnn in self.cnn_list()) + sum(size for size, layout in self.parts if layout is None)
        self.rnn = RecurrentCore(recurrent, dim, rnn_hidden) if recurrent != "none" else None
        dim = rnn_hidden if self.rnn is not None else dim
        self.mlp, self.out_dim = tanh_mlp(dim, hidden)
        self.state_size = self.rnn.state_size if self.rnn is not None else 0

    def cnn_list(self) -> list[NatureCNN]:
        """The CNNs of the image parts, in order."""
        return list(self.cnns)  # type: ignore[arg-type]  # a ModuleList of NatureCNN

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, *obs] -> [B, D]: images through their CNNs (uint8 or float pixels 0..255)."""
        pieces = x.split([size for size, _ in self.parts], -1) if self.flat else [x]
        out, cnns = [], iter(self.cnns)
        for piece, (_, layout) in zip(pieces, self.parts):
            if layout is None:
                out.append(piece)
                continue
            (c, h, w), channels_last = layout
            img = piece.reshape(-1, h, w, c).permute(0, 3, 1, 2) if channels_last else piece.reshape(-1, c, h, w)
            out.append(next(cnns)(img))
        return out[0] if len(out) == 1 else torch.cat(out, -1)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Feed-forward bodies only: x [B, *obs] -> [B, F] (the acting fast path)."""
        return self.mlp(self.encode(x))

    def forward(self, x: torch.Tensor, state0: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, L, *obs], state0 [B, S], starts [B, L] -> features [B, L, F], states after each step
        [B, L, S] (exact at the last step and wherever an episode ends; see RecurrentCore.sequence)."""
        B, L = x.shape[:2]
        h = self.encode(x.reshape(B * L, *x.shape[2:])).reshape(B, L, -1)  # [B*L, *obs] -> [B, L, D]
        if self.rnn is None:
            return self.mlp(h), state0[:, None].expand(B, L, 0)
        if L == 1:  # acting: one cell step
            state = state0 * (~starts[:, 0]).unsqueeze(-1).to(state0.dtype)
            out, state = self.rnn.step(h[:, 0], state)
            return self.mlp(out[:, None]), state[:, None]
        out, states = self.rnn.sequence(h, state0, starts)
        return self.mlp(out), states


class ActionHead(nn.Module):
    """Distribution parameters and their log-probs/entropies, as plain tensor maths.

    * discrete: logits [.., n]; actions int64 [..]
    * multidiscrete (also MultiBinary): concatenated logits [.., sum(nvec)]; actions int64 [.., K]
    * box: diagonal Gaussian; params = (mean, log_std) [.., 2A]; the log-std is a free parameter
      (state-independent, the default) or a network output. Actions are the unclipped samples
      (their log-prob is exact); ``to_env`` clips them to the bounds for the environment only.
    """

    low: torch.Tensor  # a buffer
    high: torch.Tensor  # a buffer

    def __init__(self, in_dim: int, action: dict, state_dependent_std: bool, init_log_std: float):
        super().__init__()
        self.kind = action["kind"]
        if self.kind == "discrete":
            self.sizes = [int(action["n"])]
        elif self.kind == "multidiscrete":
            self.sizes = [int(n) for n in action["nvec"]]
        else:
            self.dim = len(action["low"])
            self.register_buffer("low", torch.as_tensor(action["low"], dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(action["high"], dtype=torch.float32))
        self.state_dependent = self.kind == "box" and state_dependent_std
        out = sum(self.sizes) if self.kind != "box" else self.dim * (2 if self.state_dependent else 1)
        self.linear = orthogonal_(nn.Linear(in_dim, out), gain=0.01)  # near-uniform initial policy
        if self.kind == "box":
            if self.state_dependent:
                with torch.no_grad():
                    self.linear.bias[self.dim :] = init_log_std
            else:
                self.log_std = nn.Parameter(torch.full((self.dim,), float(init_log_std)))

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.params_of(self.linear(feats))

    def params_of(self, out: torch.Tensor) -> torch.Tensor:
        """The distribution's parameters from the linear layer's output: a free log-std joins it."""
        if self.kind == "box" and not self.state_dependent:
            out = torch.cat([out, self.log_std.expand_as(out)], -1)
        return out

    def _box(self, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = params.split(self.dim, -1)
        return mean, log_std.clamp(*LOG_STD_BOUNDS)

    def _logits(self, params: torch.Tensor) -> list[torch.Tensor]:
        parts = params.split(self.sizes, -1) if len(self.sizes) > 1 else (params,)
        return [torch.log_softmax(p, -1) for p in parts]

    def sample(self, params: torch.Tensor) -> torch.Tensor:
        return self.sample_logp(params)[0]

    def noise(self, shape: tuple[int, ...], device: torch.device | str) -> torch.Tensor:
        """The sampling noise of ``shape`` acting steps in one draw, [*shape, K]: standard normals
        (box, K = A) or the uniforms of Gumbel-max (categoricals, K = sum of the sizes). A rollout
        draws its noise once, so the torch and the numpy acting paths sample the same actions."""
        size = (*shape, self.dim if self.kind == "box" else sum(self.sizes))
        return torch.randn(size, device=device) if self.kind == "box" else torch.rand(size, device=device)

    def sample_logp(self, params: torch.Tensor, noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A sample and its log-prob in one pass (acting, every step), from ``noise`` (``noise``'s
        layout) or fresh draws. Categoricals are sampled with Gumbel-max: argmax(logits + Gumbel noise)."""
        if self.kind == "box":
            mean, log_std = self._box(params)
            eps = torch.randn_like(mean) if noise is None else noise
            return mean + log_std.exp() * eps, (-0.5 * eps.pow(2) - log_std - 0.5 * LOG_2PI).sum(-1)
        logps = self._logits(params)
        uniforms = [torch.rand_like(lp) for lp in logps] if noise is None else noise.split(self.sizes, -1)
        picks = [
            (lp - torch.log(-torch.log(u.clamp_min(1e-20)))).argmax(-1, keepdim=True) for lp, u in zip(logps, uniforms)
        ]
        logp = cast(torch.Tensor, sum(lp.gather(-1, a).squeeze(-1) for lp, a in zip(logps, picks)))
        actions = picks[0].squeeze(-1) if self.kind == "discrete" else torch.cat(picks, -1)
        return actions, logp

    def mode(self, params: torch.Tensor) -> torch.Tensor:
        if self.kind == "box":
            return self._box(params)[0]
        picks = [lp.argmax(-1) for lp in self._logits(params)]
        return picks[0] if self.kind == "discrete" else torch.stack(picks, -1)

    def terms(self, params: torch.Tensor) -> HeadTerms:
        """The distribution of ``params`` [B, P], its pieces computed once (``HeadTerms``)."""
        return HeadTerms(self, params)

    def log_prob(self, params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.terms(params).log_prob(actions)

    def entropy(self, params: torch.Tensor) -> torch.Tensor:
        return self.terms(params).entropy()

    def to_env(self, actions: torch.Tensor) -> torch.Tensor:
        """What the environment receives: Gaussian samples clipped to the action bounds."""
        return torch.maximum(torch.minimum(actions, self.high), self.low) if self.kind == "box" else actions


def _total(terms: Iterable[torch.Tensor]) -> torch.Tensor:
    """The sum of per-categorical terms (one for a discrete head: that term itself)."""
    terms = list(terms)
    return terms[0] if len(terms) == 1 else sum(terms[1:], terms[0])


class HeadTerms:
    """An action head's distribution on a batch of parameters [B, P] (``ActionHead.forward``'s),
    with the pieces its log-probs and entropy share computed once: the log-softmaxes of the
    categoricals, or the Gaussian's mean and clamped log-std (the hand-written step's derivatives
    read them too: ``heron.accel.handwritten.ppo.head_grad``)."""

    def __init__(self, head: ActionHead, params: torch.Tensor, log_std: torch.Tensor | None = None):
        """``log_std``: a free log-std [A] (then ``params`` are the means [B, A], not joined to it)."""
        self.head = head
        if head.kind == "box":
            self.mean: torch.Tensor
            self.raw_log_std: torch.Tensor
            self.mean, self.raw_log_std = (
                (params, log_std.expand_as(params)) if log_std is not None else params.split(head.dim, -1)
            )
            self.log_std = self.raw_log_std.clamp(*LOG_STD_BOUNDS)
            self.std: torch.Tensor | None = None
            self.z: torch.Tensor | None = None
        else:
            self.logps = head._logits(params)
            self.probs: list[torch.Tensor] | None = None
            self.entropies: list[torch.Tensor] | None = None

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """[B]: the Gaussian's log-density (summed over the action's entries), or the categoricals'
        log-probabilities, summed."""
        if self.head.kind == "box":
            self.std = self.log_std.exp()
            self.z = (actions - self.mean) / self.std
            return (-0.5 * self.z.pow(2) - self.log_std - 0.5 * LOG_2PI).sum(-1)
        if self.head.kind == "discrete":
            return self.logps[0].gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        acts = actions.long()
        return _total(lp.gather(-1, acts[..., i : i + 1]).squeeze(-1) for i, lp in enumerate(self.logps))

    def entropy(self) -> torch.Tensor:
        """[B]: the entropy, summed over the action's entries or categoricals."""
        if self.head.kind == "box":
            return (0.5 + 0.5 * LOG_2PI + self.log_std).sum(-1)
        self.probs = [lp.exp() for lp in self.logps]
        self.entropies = [-(p * lp).sum(-1) for p, lp in zip(self.probs, self.logps)]
        return _total(self.entropies)


def _direct(x: torch.Tensor, layers: list[nn.Linear]) -> torch.Tensor:
    """x [B, D] through tanh layers and a linear head, without gradients: the operations
    ``TanhMLP`` (heron.ops.fused) and ``nn.Linear`` run, so the same numbers, with a few
    microseconds of Python per layer less (PPO acts at every env step)."""
    h = x
    for layer in layers[:-1]:
        h = torch.addmm(layer.bias, h, layer.weight.t()).tanh_()
    head = layers[-1]
    return torch.addmm(head.bias, h, head.weight.t())


class NumpyActing:
    """PPO's acting step for feed-forward MLPs on the CPU in numpy (``heron.accel.acting``): obs
    [N, D] (float64 or float32 arrays, as envs return them) and the step's noise [N, K]
    (``ActionHead.noise``) -> the actions for the env, the actions, their log-probs and the
    normalized values, as arrays: ``ActorCritic.step`` and ``ActionHead.sample_logp``'s operations
    in the same order, in float32. Make one per rollout: a free log-std is read (clamped) when it is
    made, and the optimizer moves it between rollouts."""

    def __init__(self, model: ActorCritic):
        self.pi, self.v = acting.NumpyMLP(model._pi_direct, np.tanh), acting.NumpyMLP(model._v_direct, np.tanh)
        self.norm = model.norm
        head = self.head = model.pi_head
        if head.kind == "box":
            self.low, self.high = head.low.numpy(), head.high.numpy()
            self.log_std = None if head.state_dependent else head.log_std.detach().clamp(*LOG_STD_BOUNDS).numpy()
        else:
            self.bounds = np.cumsum([0] + head.sizes).tolist()

    def mode(self, obs: np.ndarray) -> np.ndarray:
        """The deterministic actions for the env (``ActorCritic.act(..., deterministic=True)``): the
        mean clipped to the bounds, or each categorical's most likely choice."""
        out = self.pi(acting.normalize(obs, self.norm))
        head = self.head
        if head.kind == "box":
            return np.minimum(np.maximum(out[:, : head.dim], self.low), self.high)
        picks = [out[:, lo:hi].argmax(-1) for lo, hi in zip(self.bounds, self.bounds[1:])]
        return picks[0] if head.kind == "discrete" else np.stack(picks, -1)

    def __call__(self, obs: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        x = acting.normalize(obs, self.norm)
        out, values = self.pi(x), self.v(x)[:, 0]
        head = self.head
        if head.kind == "box":
            if self.log_std is None:
                out, log_std = out[:, : head.dim], np.clip(out[:, head.dim :], *LOG_STD_BOUNDS)
            else:
                log_std = self.log_std
            actions = out + np.exp(log_std) * noise
            logp = (-0.5 * noise * noise - log_std - 0.5 * LOG_2PI).sum(-1)
            return np.minimum(np.maximum(actions, self.low), self.high), actions, logp, values
        picks, logp = [], 0.0
        for lo, hi in zip(self.bounds, self.bounds[1:]):
            z = out[:, lo:hi]
            z = z - z.max(-1, keepdims=True)
            lp = z - np.log(np.exp(z).sum(-1, keepdims=True))  # log_softmax, in torch's order
            pick = (lp - np.log(-np.log(np.maximum(noise[:, lo:hi], np.float32(1e-20))))).argmax(-1)
            picks.append(pick)
            logp = logp + np.take_along_axis(lp, pick[:, None], -1)[:, 0]
        actions = picks[0] if head.kind == "discrete" else np.stack(picks, -1)
        return actions, actions, logp, values


class RecordedActing:
    """PPO's acting step recorded as a CUDA graph (``--cuda-graphs`` on a GPU) for the feed-forward
    bodies that do not act in numpy on a CPU twin (CNNs, a shared body, mixed precision): obs
    [N, ...] and the step's noise [N, K] -> what ``NumpyActing`` returns (the actions for
    the env, the actions, their log-probs, the normalized values), from ``ActorCritic.step`` and
    ``ActionHead.sample_logp``. The graph packs actions, log-probs and values into one float32
    [N, A + 2] output (``GraphedActor``), so an env step makes one copy back; integer actions
    travel as float32, exact below 2^24."""

    def __init__(self, model: ActorCritic, device: torch.device | str):
        from heron.accel.acting import GraphedActor

        head = self.head = model.pi_head
        self.width = head.dim if head.kind == "box" else len(head.sizes)  # action entries per env

        def packed(obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
            params, values, _ = model.step(obs, torch.zeros(len(obs), 0, device=obs.device))
            actions, logp = head.sample_logp(params, noise)
            return torch.cat(
                [actions.reshape(len(obs), -1).float(), logp[:, None].float(), values[:, None].float()], -1
            )  # [N, A + 2]

        self.graph = GraphedActor(packed, device)
        if head.kind == "box":
            self.low, self.high = head.low.cpu().numpy(), head.high.cpu().numpy()

    def __call__(
        self, obs: np.ndarray | torch.Tensor, noise: np.ndarray | torch.Tensor
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``obs`` and ``noise`` arrays, or tensors already on the device (the rollout's: its frames
        uploaded once, its noise drawn there)."""
        out = self.graph(obs, noise)  # [N, A + 2]
        k, kind = self.width, self.head.kind
        if kind == "box":
            actions = out[:, :k]
            return np.minimum(np.maximum(actions, self.low), self.high), actions, out[:, k], out[:, k + 1]
        actions = out[:, 0 if kind == "discrete" else slice(0, k)].astype(np.int64)
        return actions, actions, out[:, k], out[:, k + 1]


class ActorCritic(nn.Module):
    """Actor and critic, separate (default) or sharing one body (``shared``). The recurrent state
    is one tensor [B, S] = [actor state | critic state]. ``norm`` holds the observation statistics
    and ``value_norm`` the return statistics: both are buffers, saved with every checkpoint."""

    vec_idx: torch.Tensor  # a buffer: the vector entries of the observations

    def __init__(
        self,
        spaces: dict,
        hidden: tuple[int, ...],
        shared: bool,
        recurrent: str,
        rnn_hidden: int,
        obs_norm: bool,
        value_norm: bool,
        state_dependent_std: bool,
        init_log_std: float,
    ):
        super().__init__()
        obs_shape = tuple(spaces["obs_shape"])
        layout = spaces.get("obs_parts")  # Dict observations with images, flattened: [[key, shape, image]]
        if layout:
            parts = [(math.prod(shape), tuple(shape) if image else None) for _, shape, image in layout]
            offsets = torch.cumsum(torch.tensor([0] + [size for size, _ in parts]), 0).tolist()
            vec = [
                i for (size, shape), start in zip(parts, offsets) if shape is None for i in range(start, start + size)
            ]
        elif len(obs_shape) == 3:
            parts, vec = [(0, obs_shape)], []
        else:
            parts, vec = [(obs_shape[0], None)], list(range(obs_shape[0]))
        self.flat = bool(layout)
        self.register_buffer("vec_idx", torch.tensor(vec, dtype=torch.long), persistent=False)
        self.norm = RunningNorm((len(vec),), enabled=obs_norm and len(vec) > 0)  # vector entries only
        self.value_norm = RunningNorm((), enabled=value_norm, clip=math.inf)
        self.pi_body = Body(parts, self.flat, recurrent, rnn_hidden, hidden)
        self.v_body = None if shared else Body(parts, self.flat, recurrent, rnn_hidden, hidden)
        self.pi_head = ActionHead(self.pi_body.out_dim, spaces["action"], state_dependent_std, init_log_std)
        self.v_head = float32_out(orthogonal_(nn.Linear(self.pi_body.out_dim, 1), gain=1.0))
        self.pi_state = self.pi_body.state_size
        self.state_size = self.pi_state + (self.v_body.state_size if self.v_body is not None else 0)
        # the acting fast path (``step``): separate feed-forward MLPs on vectors, in float32 (a mixed
        # ``Precision.apply`` sets the bodies' amp_dtype: then the layers' hooks and casts must run)
        self._direct: tuple[list[nn.Linear], list[nn.Linear]] | None = None
        if self.state_size == 0 and self.v_body is not None and not self.flat and not self.pi_body.cnns:
            self._direct = (
                [m for m in self.pi_body.mlp if isinstance(m, nn.Linear)] + [self.pi_head.linear],
                [m for m in self.v_body.mlp if isinstance(m, nn.Linear)] + [self.v_head],
            )
        self._pi_direct, self._v_direct = self._direct or ([], [])  # (typed: the hot paths read them)

    def direct_ok(self) -> bool:
        """Whether this call may take the direct layers: an eligible model, float32, no gradients."""
        return self._direct is not None and self.pi_body.mlp.amp_dtype is None and not torch.is_grad_enabled()

    def numpy_mode(self, batch: int):
        """``act(obs, state, deterministic=True)`` in numpy for ``batch`` observations
        (``heron.accel.acting.Policy``: evaluations and ``heron.load``), or None where it stays in torch."""
        acting_step = self.numpy_acting(batch)
        return None if acting_step is None else acting_step.mode

    def numpy_acting(self, num_envs: int) -> NumpyActing | None:
        """The numpy acting step for one rollout (``NumpyActing``: it keeps the rollout's clamped
        log-std), or None where acting stays in torch: recurrent, CNN or shared bodies, mixed
        precision, a GPU (training then acts on a CPU twin: ``heron.accel.acting.CpuTwin``), or
        products large enough for numpy's BLAS to take more threads than the run's."""
        if self._direct is None or not acting.eligible(
            num_envs, self._pi_direct + self._v_direct, self.pi_body.mlp.amp_dtype
        ):
            return None
        return NumpyActing(self)

    def _pi_params(self, x: torch.Tensor) -> torch.Tensor:
        """Policy parameters [B, P] of normalized x [B, D] through the direct layers (``direct_ok``)."""
        out = _direct(x, self._pi_direct)
        if self.pi_head.kind == "box" and not self.pi_head.state_dependent:
            out = torch.cat([out, self.pi_head.log_std.expand_as(out)], -1)
        return out

    def _in(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalize the vector entries; images stay as they are (uint8) until their CNN. Without
        an image (a uint8 vector: Atari RAM, a user's byte-valued Box) the MLP gets float32."""
        if not self.norm.enabled:
            return obs if obs.dtype == torch.uint8 and len(self.pi_body.cnns) else obs.float()
        if not self.flat:
            return self.norm(obs)
        out = obs.float().clone()
        out[..., self.vec_idx] = self.norm(obs[..., self.vec_idx])
        return out

    def norm_input(self, obs: torch.Tensor) -> torch.Tensor:
        """The entries of observations [..., *obs] that the normalizer sees (its vector entries)."""
        return obs[..., self.vec_idx] if self.flat else obs

    def update_norm(self, obs: torch.Tensor) -> None:
        """Fold observations [..., *obs] into the statistics of their vector entries."""
        if self.norm.enabled:
            self.norm.update(self.norm_input(obs))

    def forward(
        self, obs: torch.Tensor, state0: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """obs [B, L, ...], state0 [B, S], starts [B, L] -> policy params [B, L, P], normalized
        values [B, L], states after each step [B, L, S]."""
        x = self._in(obs)
        pi_feats, pi_states = self.pi_body(x, state0[:, : self.pi_state], starts)
        if self.v_body is None:
            v_feats, v_states = pi_feats, pi_states[..., :0]
        else:
            v_feats, v_states = self.v_body(x, state0[:, self.pi_state :], starts)
        return self.pi_head(pi_feats), self.v_head(v_feats).squeeze(-1), torch.cat([pi_states, v_states], -1)

    def values(
        self, obs: torch.Tensor, state0: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The critic alone: normalized values [B, L] and the states after each step [B, L, S] of
        ``forward``; feed-forward MLPs without gradients run only the critic's layers (re-valuing a
        rollout before every epoch, ``--recompute-adv``), with the same numbers."""
        if self.direct_ok():
            return self.mlp_values(obs), state0[:, None].expand(*obs.shape[:2], 0)
        _, values, states = self(obs, state0, starts)
        return values, states

    def mlp_values(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalized values [B, L] of obs [B, L, D] through the critic's direct layers (``values``'s
        numbers; where ``direct_ok``)."""
        B, L = obs.shape[:2]
        return _direct(self._in(obs).reshape(B * L, -1), self._v_direct).reshape(B, L)  # [B*L, D] -> [B, L]

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step: obs [B, ...], state [B, S] (zeroed by the caller at episode starts) ->
        params [B, P], normalized values [B], new state [B, S]."""
        if self.direct_ok():  # feed-forward MLPs acting: the layers' own operations, called directly
            x = self._in(obs)
            return self._pi_params(x), _direct(x, self._v_direct).squeeze(-1), state
        if self.state_size == 0:  # feed-forward: skip the sequence bookkeeping (runs every env step)
            x = self._in(obs)
            pi_feats = self.pi_body.features(x)
            v_feats = pi_feats if self.v_body is None else self.v_body.features(x)
            return self.pi_head(pi_feats), self.v_head(v_feats).squeeze(-1), state
        no_starts = torch.zeros(obs.shape[0], 1, dtype=torch.bool, device=obs.device)
        params, values, states = self(obs[:, None], state, no_starts)
        return params[:, 0], values[:, 0], states[:, 0]

    def act(self, obs: torch.Tensor, state: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """For evaluation and ``heron.load``: actions for the env, and the new state (actor only)."""
        if self.direct_ok():
            params = self._pi_params(self._in(obs))  # as in ``step``: the layers' operations
            actions = self.pi_head.mode(params) if deterministic else self.pi_head.sample(params)
            return self.pi_head.to_env(actions), state
        no_starts = torch.zeros(obs.shape[0], 1, dtype=torch.bool, device=obs.device)
        feats, states = self.pi_body(self._in(obs[:, None]), state[:, : self.pi_state], no_starts)
        params = self.pi_head(feats[:, 0])
        actions = self.pi_head.mode(params) if deterministic else self.pi_head.sample(params)
        return self.pi_head.to_env(actions), torch.cat([states[:, 0], state[:, self.pi_state :]], -1)
