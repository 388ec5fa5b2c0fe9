"""DreamerV2's networks (Hafner et al. 2021; sheeprl's DreamerV2): its layers and their
initialisation for the encoder, the RSSM, the decoder, the heads, the actor and the critic; its
continuous actions' distribution is in ``distributions``. What it computes alike with DreamerV3 (the
shapes, the RSSM's filtering and imagination, the latents' sampling, the player) is in
``heron.algos.dreamer`` (``networks``, ``distributions``, ``policy``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from heron.algos.dreamer import networks as shared
from heron.algos.dreamer.distributions import OneHotST
from heron.algos.dreamer.networks import LayerNormGRUCell
from heron.algos.dreamer_v2.distributions import TruncatedNormal
from heron.algos.dreamer_v2.layers import PointDeconv, init_weights, mlp, xavier_
from heron.rl.nets import float32_out


class Encoder(shared.Encoder):
    """Four stride-2 convolutions with ELU (64 -> 2, in channels-last memory) over the image keys and
    an ELU MLP over the vector keys."""

    channels_last = True  # oneDNN's fast layout

    def conv_stack(self, channels: int, depth: int) -> tuple[nn.Module, int]:
        convs: list[nn.Module] = []
        for i, mult in enumerate((1, 2, 4, 8)):
            convs += [
                nn.Conv2d(channels if i == 0 else depth * mult // 2, depth * mult, 4, 2),
                nn.ELU(inplace=True),
            ]
        # the ELUs overwrite the convolutions' outputs, which no backward reads (a convolution's
        # backward reads its input): a lower peak memory at the Atari sizes
        cnn = nn.Sequential(*convs).to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stub lacks it
        return cnn, 32 * depth  # 8 * depth channels at 2x2

    def vector_mlp(self, dims: int, units: int, layers: int) -> nn.Module:
        return mlp(dims, units, layers)


class Decoder(shared.Decoder):
    """Means of the unit-variance Gaussians over the observation: four transposed convolutions with
    ELU from a 1x1 map for the image keys, and one ELU MLP for all vector keys."""

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
        super().__init__(cnn_keys, mlp_keys, (32 * depth,))
        if cnn_keys:
            self.channels = [obs_spec[k][0] for k in cnn_keys]
            self.cnn_in = nn.Linear(feat_dim, 32 * depth)
            self.cnn = nn.Sequential(  # 1 -> 5 -> 13 -> 30 -> 64
                PointDeconv(32 * depth, 4 * depth, 5, 2),
                nn.ELU(inplace=True),  # in place: as the encoder's
                nn.ConvTranspose2d(4 * depth, 2 * depth, 5, 2),
                nn.ELU(inplace=True),
                nn.ConvTranspose2d(2 * depth, depth, 6, 2),
                nn.ELU(inplace=True),
                nn.ConvTranspose2d(depth, sum(self.channels), 6, 2),
            ).to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stub lacks it
        if mlp_keys:
            self.dims = [obs_spec[k][0] for k in mlp_keys]
            self.mlp = mlp(feat_dim, units, layers, sum(self.dims))
            float32_out(self.mlp[-1])  # --precision: the vector observations' means in float32

    def vectors(self, feat: torch.Tensor) -> dict[str, torch.Tensor]:
        return dict(zip(self.mlp_keys, self.mlp(feat).split(self.dims, -1)))


class RSSM(shared.RSSM):
    """DreamerV2's recurrent state-space model with discrete latents:

    recurrent model   h_t = GRU(ELU(W [z_{t-1}, a_{t-1}]), h_{t-1})
    transition (prior)        p(z_t | h_t)        = MLP(h_t)
    representation (posterior) q(z_t | h_t, e_t)  = MLP(h_t, e_t)   (e_t: the encoder's embedding)

    At an episode start the previous state and action are zero (``observe``, ``imagine_step`` and
    ``imagine``: ``heron.algos.dreamer.networks.RSSM``)."""

    def __init__(
        self,
        action_dim: int,
        embed_dim: int,
        deter: int,
        hidden: int,
        stoch: int,
        classes: int,
        layer_norm: bool = True,
    ):
        super().__init__()
        self.deter, self.stoch, self.classes = deter, stoch, classes
        self.z_dim = stoch * classes
        self.feat_dim = self.z_dim + deter
        self.in_z = nn.Linear(self.z_dim, hidden)
        self.in_a = nn.Linear(action_dim, hidden, bias=False)
        self.gru = LayerNormGRUCell(hidden, deter, layer_norm)
        self.prior = nn.Sequential(nn.Linear(deter, hidden), nn.ELU(), nn.Linear(hidden, self.z_dim))
        self.post_h = nn.Linear(deter, hidden)
        self.post_e = nn.Linear(embed_dim, hidden, bias=False)
        self.post_out = nn.Linear(hidden, self.z_dim)
        self.apply(init_weights)
        for head in (self.prior[-1], self.post_out):
            float32_out(head)  # --precision: the latents' logits in float32
        # in_z/in_a and post_h/post_e are the two halves of one layer each in the references
        # (Linear(cat(z, a)) and Linear(cat(h, e))): Xavier with the whole layer's fans
        xavier_(self.in_z.weight, self.z_dim + action_dim, hidden)
        xavier_(self.in_a.weight, self.z_dim + action_dim, hidden)
        xavier_(self.post_h.weight, deter + embed_dim, hidden)
        xavier_(self.post_e.weight, deter + embed_dim, hidden)

    def initial(self, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The state every episode starts from: zeros."""
        return torch.zeros(batch, self.deter, device=device), torch.zeros(batch, self.z_dim, device=device)

    def _logits(self, flat: torch.Tensor) -> torch.Tensor:
        return flat.unflatten(-1, (self.stoch, self.classes))

    def recurrent(self, h: torch.Tensor, z: torch.Tensor, a_in: torch.Tensor) -> torch.Tensor:
        """h' from h, z and the action's (precomputed) contribution ``a_in = in_a(a)``."""
        return self.gru(F.elu(self.in_z(z) + a_in), h)

    def posterior_step(self, h: torch.Tensor, e_in: torch.Tensor) -> torch.Tensor:
        """Posterior logits [B, stoch, classes] from h and the embedding's contribution ``post_e(e)``."""
        return self._logits(self.post_out(F.elu(self.post_h(h) + e_in)))


class Actor(nn.Module):
    """pi(a | z, h): one-hot categorical (discrete actions) or truncated normal on [-1, 1]
    (continuous; mean tanh(m), std 2 sigmoid(s / 2) + min_std as in the paper)."""

    def __init__(
        self,
        feat_dim: int,
        action_dim: int,
        discrete: bool,
        units: int,
        layers: int,
        min_std: float = 0.1,
        init_std: float = 0.0,
    ):
        super().__init__()
        self.discrete, self.min_std, self.init_std = discrete, min_std, init_std
        self.net = mlp(feat_dim, units, layers, action_dim if discrete else 2 * action_dim)
        float32_out(self.net[-1])  # --precision: the action distribution's parameters in float32

    def forward(self, feat: torch.Tensor):
        out = self.net(feat)
        if self.discrete:
            return OneHotST(out)
        mean, std = out.chunk(2, -1)
        return TruncatedNormal(torch.tanh(mean), 2.0 * torch.sigmoid((std + self.init_std) / 2.0) + self.min_std)


class WorldModel(nn.Module):
    def __init__(
        self, obs_spec: dict[str, tuple], cnn_keys: tuple[str, ...], mlp_keys: tuple[str, ...], action_dim: int, cfg
    ):
        super().__init__()
        units, layers, depth = cfg.dense_units, cfg.mlp_layers, cfg.cnn_channels_multiplier
        self.encoder = Encoder(obs_spec, cnn_keys, mlp_keys, depth, units, layers)
        self.rssm = RSSM(
            action_dim,
            self.encoder.out_dim,
            cfg.recurrent_state_size,
            cfg.hidden_size,
            cfg.stochastic_size,
            cfg.discrete_size,
            cfg.layer_norm,
        )
        feat = self.rssm.feat_dim
        self.decoder = Decoder(obs_spec, cnn_keys, mlp_keys, feat, depth, units, layers)
        self.reward = mlp(feat, units, layers, 1)
        float32_out(self.reward[-1])  # --precision: rewards in float32 (heron.rl.nets.float32_out)
        self.continue_model = mlp(feat, units, layers, 1) if cfg.use_continues else None
        if self.continue_model is not None:
            float32_out(self.continue_model[-1])


class Agent(nn.Module):
    """Everything a checkpoint holds: world model, actor, critic and the target critic."""

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
        self.actor = Actor(feat, action_dim, discrete, cfg.dense_units, cfg.mlp_layers)
        self.critic = mlp(feat, cfg.dense_units, cfg.mlp_layers, 1)
        self.target_critic = mlp(feat, cfg.dense_units, cfg.mlp_layers, 1)
        for critic in (self.critic, self.target_critic):
            float32_out(critic[-1])  # --precision: values in float32
        for part in (
            self.world.encoder,
            self.world.decoder,
            self.world.reward,
            self.world.continue_model,
            self.actor,
            self.critic,
        ):
            if part is not None:
                part.apply(init_weights)  # the RSSM initializes itself (split layers)
        self.target_critic.load_state_dict(self.critic.state_dict())
        self.target_critic.requires_grad_(False)
        self.action_dim, self.discrete = action_dim, discrete
