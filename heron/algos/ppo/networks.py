"""PPO's actor-critic: bodies (MLP, Nature CNN, optional RNN), action heads for Discrete,
MultiDiscrete/MultiBinary and Box spaces, and the value head.

Everything runs on sequences ``[B, L, ...]`` from a stored initial state with episode-start flags:
the feed-forward networks see L = 1, the recurrent ones whole rollouts (L = --num-steps). Acting
step by step (``step``) is the same computation with L = 1, which the tests check.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from heron.accel import acting
from heron.algos.ppo.acting import NumpyActing
from heron.algos.ppo.distributions import ActionHead
from heron.ops import mlp
from heron.rl.nets import NatureCNN, RecurrentCore, RunningNorm, float32_out, orthogonal_, tanh_mlp


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


def _direct(x: torch.Tensor, layers: list[nn.Linear]) -> torch.Tensor:
    """x [B, D] through tanh layers and a linear head, without gradients: ``heron.ops.mlp.forward``,
    which ``TanhMLP`` (heron.ops.fused) runs too, so the same numbers, with a few microseconds of
    Python per layer less (PPO acts at every env step)."""
    return mlp.forward(x, mlp.of_linears(layers), "tanh")[0]


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

    @torch.no_grad()
    def sequence_values(self, seq: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """V(obs_t) and V(next_obs_t) of stored sequences [k*N, T, ...], on the raw scale, with the
        current critic (PPO re-values its data before every epoch, ``--recompute-adv``).

        V(next_obs_t) is the next step's value, except where the episode was cut at t (truncated: the
        final observation, valued from the recurrent state after step t) or the sequence ends at t
        (valued the same way). Terminated steps need no next value (GAE and n-step ignore it)."""
        B, T = seq["obs"].shape[:2]
        need = seq["truncated"].clone()
        need[:, -1] = True
        if self.direct_ok():
            # a feed-forward MLP critic: every obs and next obs in one forward, and the next obs's value
            # taken where needed; no gather of the needed rows and no host sync to count them, a third
            # of the operations
            both = self.mlp_values(torch.cat([seq["obs"], seq["next_obs"]]))  # [2B, T]
            values, following = both[:B], both[B:]  # [B, T] each
            next_values = torch.where(need, following, torch.cat([values[:, 1:], values[:, -1:]], 1))
            return self.value_norm.denormalize(values), self.value_norm.denormalize(next_values)
        chunk = max(1, 1024 // T)  # sequences per forward, to bound activation memory (images)
        value_parts, state_parts = [], []
        for i in range(0, seq["obs"].shape[0], chunk):
            v, st = self.values(seq["obs"][i : i + chunk], seq["state0"][i : i + chunk], seq["starts"][i : i + chunk])
            value_parts.append(v)
            state_parts.append(st)
        values, states = torch.cat(value_parts), torch.cat(state_parts)  # [k*N, T], [k*N, T, S]
        next_values = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], 1)
        rows, cols = need.nonzero(as_tuple=True)
        for i in range(0, len(rows), 1024):
            part = (rows[i : i + 1024], cols[i : i + 1024])
            no_starts = torch.zeros(len(part[0]), 1, dtype=torch.bool, device=values.device)
            v, _ = self.values(seq["next_obs"][part][:, None], states[part], no_starts)
            next_values[part] = v[:, 0]
        return self.value_norm.denormalize(values), self.value_norm.denormalize(next_values)

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
