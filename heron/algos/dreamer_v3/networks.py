"""DreamerV3's networks (Hafner et al. 2023; sheeprl 0.8.4's ``dreamer_v3``): the same parts as
DreamerV2's, with LayerNorm and SiLU after every hidden layer (no bias before a norm), symlog on
vector inputs, 1% uniform mixed into the latents' and actions' categoricals, a learned initial
recurrent state, and two-hot reward and value heads that start at exactly 0.

What it computes alike with DreamerV2 (the shapes, the RSSM's filtering and imagination, the
latents' sampling, the player) is in ``heron.algos.dreamer.networks`` and
``heron.algos.dreamer.policy``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from heron.algos.dreamer import networks as shared
from heron.algos.dreamer import policy
from heron.algos.dreamer.networks import LayerNormGRUCell, OneHotST
from heron.algos.dreamer_v3.losses import symlog, unimix_logits
from heron.rl.distributions import normal_entropy, normal_log_prob
from heron.rl.nets import float32_out

EPS = 1e-3  # the LayerNorms' epsilon (the official code's and sheeprl's)


def ln_mlp(in_dim: int, units: int, layers: int, out_dim: int | None = None) -> nn.Sequential:
    """``layers`` x (Linear without bias, LayerNorm, SiLU), then a linear output when ``out_dim``."""
    mods: list[nn.Module] = []
    for i in range(layers):
        mods += [nn.Linear(in_dim if i == 0 else units, units, bias=False), nn.LayerNorm(units, eps=EPS), nn.SiLU()]
    if out_dim is not None:
        mods.append(nn.Linear(units if layers else in_dim, out_dim))
    return nn.Sequential(*mods)


class ChannelNorm(nn.LayerNorm):
    """LayerNorm over the channels of an [N, C, H, W] feature map (each pixel on its own)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def _fan_avg(module: Any) -> float:  # a Linear, Conv2d or ConvTranspose2d
    space = math.prod(module.kernel_size) if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)) else 1
    if isinstance(module, nn.Linear):
        return (module.in_features + module.out_features) / 2.0
    return space * (module.in_channels + module.out_channels) / 2.0


def trunc_normal_fan_avg_(weight: torch.Tensor, fan_avg: float) -> None:
    """A normal truncated at two standard deviations, scaled so that its variance is 1 / fan_avg."""
    std = math.sqrt(1.0 / fan_avg) / 0.87962566103423978  # the truncated normal's std ratio
    nn.init.trunc_normal_(weight, 0.0, std, -2.0 * std, 2.0 * std)


def init_weights(module: nn.Module) -> None:
    """The paper's initialisation (the official code's ``trunc_normal`` over the average fan, as
    sheeprl has it): weights from a normal truncated at two standard deviations, with the standard
    deviation that gives variance 1 / fan_avg after the truncation; zero biases; LayerNorms at 1
    and 0. Use with ``module.apply``."""
    if isinstance(module, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
        trunc_normal_fan_avg_(module.weight, _fan_avg(module))
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def init_output(layer: Any, scale: float) -> None:  # a Linear, Conv2d or ConvTranspose2d
    """An output layer's initialisation (the official code's ``outscale``): uniform with variance
    ``scale`` / fan_avg, zero bias. Scale 0 for the reward and value heads: they start predicting 0."""
    limit = math.sqrt(3.0 * scale / _fan_avg(layer))
    with torch.no_grad():
        layer.weight.uniform_(-limit, limit)
        if layer.bias is not None:
            layer.bias.zero_()


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


def clip_actions(actions: torch.Tensor, limit: float) -> torch.Tensor:
    """Continuous actions scaled back to magnitude ``limit`` where they exceed it, with the scale's
    gradient stopped (the official code's action clipping before the dynamics and the env)."""
    if limit <= 0:
        return actions
    return actions * (limit / actions.abs().clamp(min=limit)).detach()


class Normal:
    """Normal(tanh(m), std) per action dimension, independent (DreamerV3's continuous actions: the
    official code's ``bounded_normal``, sheeprl's ``scaled_normal``)."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor):
        self.mean, self.std = mean, std

    def rsample(self) -> torch.Tensor:
        return self.mean + self.std * torch.randn_like(self.mean)

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        z = (x - self.mean) / self.std
        return normal_log_prob(z, self.std.log()).sum(-1)

    def entropy(self) -> torch.Tensor:
        return normal_entropy(self.std.log()).sum(-1)

    def mode(self) -> torch.Tensor:
        return self.mean


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
