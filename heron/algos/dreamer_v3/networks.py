"""DreamerV3's networks (Hafner et al. 2023; sheeprl 0.8.4's ``dreamer_v3``): the same parts as
DreamerV2's, with LayerNorm and SiLU after every hidden layer (no bias before a norm), symlog on
vector inputs, 1% uniform mixed into the latents' and actions' categoricals, a learned initial
recurrent state, and two-hot reward and value heads that start at exactly 0.

Its continuous actions' distribution is in ``distributions``. What it computes alike with
DreamerV2 (the shapes, the RSSM's filtering and imagination, the latents' sampling, the player) is
in ``heron.algos.dreamer`` (``networks``, ``distributions``, ``policy``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from heron.algos.dreamer import networks as shared
from heron.algos.dreamer import policy
from heron.algos.dreamer.distributions import OneHotST
from heron.algos.dreamer.networks import LayerNormGRUCell
from heron.algos.dreamer_v3.distributions import Normal, clip_actions
from heron.algos.dreamer_v3.layers import EPS, ChannelNorm, init_output, init_weights, ln_mlp, trunc_normal_fan_avg_
from heron.algos.dreamer_v3.losses import symlog, unimix_logits
from heron.rl.nets import float32_out


class Encoder(shared.Encoder):
    """Four stride-2 convolutions (64 -> 4), LayerNorm and SiLU after each, over the image keys, and
    an MLP over the symlog of the vector keys."""

    def conv_stack(self, channels: int, depth: int) -> tuple[nn.Module, int]:
        convs: list[nn.Module] = []
        for i, mult in enumerate((1, 2, 4, 8)):
            convs += [
                nn.Conv2d(channels if i == 0 else depth * mult // 2, depth * mult, 4, 2, 1, bias=False),
                ChannelNorm(depth * mult, eps=EPS),
                nn.SiLU(),
            ]
        return nn.Sequential(*convs), 8 * depth * 4 * 4

    def vector_mlp(self, dims: int, units: int, layers: int) -> nn.Module:
        return ln_mlp(dims, units, layers)

    def vector_in(self, x: torch.Tensor) -> torch.Tensor:
        return symlog(x)


class Decoder(shared.Decoder):
    """The image keys' means from a linear layer to 4x4 maps and 4 stride-2 transposed convolutions
    (LayerNorm and SiLU after each but the last); the vector keys' symlog from an MLP with one linear
    head per key."""

    def __init__(
        self,
        obs_spec: dict[str, tuple],
        cnn_keys: tuple[str, ...],
        mlp_keys: tuple[str, ...],
        feat_dim: int,
        depth: int,
        units: int,
        layers: int,
    ):
        super().__init__(cnn_keys, mlp_keys, (8 * depth, 4, 4))
        if cnn_keys:
            self.channels = [obs_spec[k][0] for k in cnn_keys]
            self.cnn_in = nn.Linear(feat_dim, 8 * depth * 4 * 4)
            mods: list[nn.Module] = []
            for mult in (4, 2, 1):  # 4 -> 8 -> 16 -> 32
                mods += [
                    nn.ConvTranspose2d(2 * mult * depth, mult * depth, 4, 2, 1, bias=False),
                    ChannelNorm(mult * depth, eps=EPS),
                    nn.SiLU(),
                ]
            mods.append(nn.ConvTranspose2d(depth, sum(self.channels), 4, 2, 1))  # 32 -> 64
            self.cnn = nn.Sequential(*mods)
        if mlp_keys:
            self.dims = [obs_spec[k][0] for k in mlp_keys]
            self.mlp = ln_mlp(feat_dim, units, layers)
            self.heads = nn.ModuleList(nn.Linear(units if layers else feat_dim, d) for d in self.dims)
            for head in self.heads:
                float32_out(head)  # --precision: the vector observations' predictions in float32

    def vectors(self, feat: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.mlp(feat)
        return {k: head(x) for k, head in zip(self.mlp_keys, self.heads)}


class RSSM(shared.RSSM):
    """Recurrent state-space model with discrete latents (paper eq. 3, the official code's RSSM),
    DreamerV2's with norms and unimix:

    recurrent model   h_t = GRU(SiLU(LN(W [z_{t-1}, a_{t-1}])), h_{t-1})
    prior             p(z_t | h_t)       = unimix(MLP(h_t))
    posterior         q(z_t | h_t, e_t)  = unimix(MLP(h_t, e_t))

    At an episode start the previous state is the learned initial one, h_0 = tanh(w) and z_0 the
    prior's mode at h_0, and the previous action is zero (``observe``, ``imagine_step`` and
    ``imagine``: ``heron.algos.dreamer.networks.RSSM``)."""

    def __init__(
        self,
        action_dim: int,
        embed_dim: int,
        deter: int,
        hidden: int,
        dense: int,
        stoch: int,
        classes: int,
        unimix: float,
        learnable_initial: bool = True,
    ):
        super().__init__()
        self.deter, self.stoch, self.classes, self.unimix = deter, stoch, classes, unimix
        self.z_dim = stoch * classes
        self.feat_dim = self.z_dim + deter
        self.in_z = nn.Linear(self.z_dim, dense, bias=False)
        self.in_a = nn.Linear(action_dim, dense, bias=False)
        self.in_norm = nn.LayerNorm(dense, eps=EPS)
        self.gru = LayerNormGRUCell(dense, deter, bias=False)
        self.prior = nn.Sequential(
            nn.Linear(deter, hidden, bias=False),
            nn.LayerNorm(hidden, eps=EPS),
            nn.SiLU(),
            nn.Linear(hidden, self.z_dim),
        )
        self.post_h = nn.Linear(deter, hidden, bias=False)
        self.post_e = nn.Linear(embed_dim, hidden, bias=False)
        self.post_norm = nn.LayerNorm(hidden, eps=EPS)
        self.post_out = nn.Linear(hidden, self.z_dim)
        self.initial_h = nn.Parameter(torch.zeros(deter), requires_grad=learnable_initial)
        self.apply(init_weights)
        for head in (self.prior[-1], self.post_out):
            init_output(head, 1.0)
            float32_out(head)  # --precision: the latents' logits in float32
        # in_z/in_a and post_h/post_e are the two halves of one layer each (Linear(cat(z, a)) and
        # Linear(cat(h, e))): initialised with the whole layer's fans
        for part, fan_in in (
            (self.in_z, self.z_dim + action_dim),
            (self.in_a, self.z_dim + action_dim),
            (self.post_h, deter + embed_dim),
            (self.post_e, deter + embed_dim),
        ):
            trunc_normal_fan_avg_(part.weight, (fan_in + part.out_features) / 2.0)

    def _logits(self, flat: torch.Tensor) -> torch.Tensor:
        return unimix_logits(flat.float().unflatten(-1, (self.stoch, self.classes)), self.unimix)

    def initial(self, batch: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The learned initial state, [batch, deter] and [batch, stoch * classes] (on the parameters' device)."""
        h = torch.tanh(self.initial_h).expand(batch, -1)
        index = self.prior_logits(h[:1]).argmax(-1)  # [1, stoch]: the prior's mode
        z = F.one_hot(index, self.classes).to(h.dtype).flatten(-2).expand(batch, -1)
        return h, z

    def recurrent(self, h: torch.Tensor, z: torch.Tensor, a_in: torch.Tensor) -> torch.Tensor:
        """h' from h, z and the action's (precomputed) contribution ``a_in = in_a(a)``."""
        return self.gru(F.silu(self.in_norm(self.in_z(z) + a_in)), h)

    def posterior_step(self, h: torch.Tensor, e_in: torch.Tensor) -> torch.Tensor:
        """Posterior logits [B, stoch, classes] from h and the embedding's contribution ``post_e(e)``."""
        return self._logits(self.post_out(F.silu(self.post_norm(self.post_h(h) + e_in))))


class Actor(nn.Module):
    """pi(a | z, h): a one-hot categorical with 1% uniform (discrete actions), or Normal(tanh(m),
    (max_std - min_std) sigmoid(s + init_std) + min_std) (continuous)."""

    def __init__(
        self,
        feat_dim: int,
        action_dim: int,
        discrete: bool,
        units: int,
        layers: int,
        unimix: float,
        min_std: float,
        max_std: float,
        init_std: float,
        action_clip: float,
    ):
        super().__init__()
        self.discrete, self.unimix = discrete, unimix
        self.min_std, self.max_std, self.init_std, self.action_clip = min_std, max_std, init_std, action_clip
        self.net = ln_mlp(feat_dim, units, layers, action_dim if discrete else 2 * action_dim)
        float32_out(self.net[-1])  # --precision: the action distribution's parameters in float32

    def forward(self, feat: torch.Tensor):
        out = self.net(feat)
        if self.discrete:
            return OneHotST(unimix_logits(out, self.unimix))
        mean, std = out.chunk(2, -1)
        std = (self.max_std - self.min_std) * torch.sigmoid(std + self.init_std) + self.min_std
        return Normal(torch.tanh(mean), std)


class Moments(nn.Module):
    """The state of the return normalisation (``losses.percentile_scale``): the moving 5th and 95th
    percentiles, saved with the agent."""

    low: torch.Tensor  # buffers
    high: torch.Tensor

    def __init__(self):
        super().__init__()
        self.register_buffer("low", torch.zeros(()))
        self.register_buffer("high", torch.zeros(()))


class WorldModel(nn.Module):
    def __init__(
        self, obs_spec: dict[str, tuple], cnn_keys: tuple[str, ...], mlp_keys: tuple[str, ...], action_dim: int, cfg
    ):
        super().__init__()
        units, layers, depth = cfg.dense_units, cfg.mlp_layers, cfg.cnn_channels_multiplier
        self.encoder = Encoder(obs_spec, cnn_keys, mlp_keys, depth, units, layers)
        self.encoder.apply(init_weights)
        self.rssm = RSSM(
            action_dim,
            self.encoder.out_dim,
            cfg.recurrent_state_size,
            cfg.hidden_size,
            cfg.dense_units,
            cfg.stochastic_size,
            cfg.discrete_size,
            cfg.unimix,
            cfg.learnable_initial_state,
        )
        feat = self.rssm.feat_dim
        self.decoder = Decoder(obs_spec, cnn_keys, mlp_keys, feat, depth, units, layers)
        self.reward = ln_mlp(feat, units, layers, cfg.bins)
        self.continue_model = ln_mlp(feat, units, layers, 1)
        for part in (self.decoder, self.reward, self.continue_model):
            part.apply(init_weights)
        if cnn_keys:
            init_output(self.decoder.cnn_in, 1.0)
            init_output(self.decoder.cnn[-1], 1.0)
        if mlp_keys:
            for head in self.decoder.heads:
                init_output(head, 1.0)
        init_output(self.reward[-1], 0.0)
        init_output(self.continue_model[-1], 1.0)
        for head in (self.reward[-1], self.continue_model[-1]):
            float32_out(head)  # --precision: rewards and continues in float32


class Agent(nn.Module):
    """Everything a checkpoint holds: world model, actor, critic, the slow critic and the return
    normalisation's state."""

    def __init__(
        self,
        obs_spec: dict[str, tuple],
        cnn_keys: tuple[str, ...],
        mlp_keys: tuple[str, ...],
        action_dim: int,
        discrete: bool,
        cfg,
    ):
        super().__init__()
        self.world = WorldModel(obs_spec, cnn_keys, mlp_keys, action_dim, cfg)
        feat = self.world.rssm.feat_dim
        self.actor = Actor(
            feat,
            action_dim,
            discrete,
            cfg.dense_units,
            cfg.mlp_layers,
            cfg.unimix,
            cfg.min_std,
            cfg.max_std,
            cfg.init_std,
            cfg.action_clip,
        )
        self.critic = ln_mlp(feat, cfg.dense_units, cfg.mlp_layers, cfg.bins)
        self.target_critic = ln_mlp(feat, cfg.dense_units, cfg.mlp_layers, cfg.bins)
        for part in (self.actor, self.critic):
            part.apply(init_weights)
        init_output(self.actor.net[-1], 1.0)
        init_output(self.critic[-1], 0.0)
        for critic in (self.critic, self.target_critic):
            float32_out(critic[-1])  # --precision: values in float32
        self.target_critic.load_state_dict(self.critic.state_dict())
        self.target_critic.requires_grad_(False)
        self.moments = Moments()
        self.action_dim, self.discrete = action_dim, discrete


class Player(policy.Player):
    """The Dreamers' player (``heron.algos.dreamer.policy.Player``: ``state = cat(h, z, a_prev)``,
    episodes started from the RSSM's initial state), with continuous actions clipped as the env and
    the recurrent model get them."""

    @torch.no_grad()
    def act(
        self,
        obs: dict[str, torch.Tensor],
        state: torch.Tensor,
        deterministic: bool,
        is_first: torch.Tensor | None = None,
        uniform: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        action, state = super().act(obs, state, deterministic, is_first, uniform)
        if not self.actor.discrete:
            action = clip_actions(action, self.actor.action_clip)
            state = torch.cat([state[:, : -self.action_dim], action], -1)
        return action, state
