"""The network pieces both Dreamers compute alike (DreamerV2: Hafner et al. 2021; DreamerV3: Hafner
et al. 2023), each Dreamer's ``networks`` module bringing its layers and initialisation.

Shapes: observations are dicts ``key -> [..., *shape]``; images are uint8 ``[C, 64, 64]`` on the
way in and become floats in [-0.5, 0.5] only here, on the training device. The model state is
``h`` (deterministic, ``recurrent_state_size``) and ``z`` (``stochastic_size`` one-hot categoricals
of ``discrete_size`` classes, flattened); the features the heads read are ``cat(z, h)``.

Speed: the sequence loop of ``RSSM.observe`` does only what depends on the previous step. The
observation's part of the posterior's first layer and the action's part of the recurrent input are
computed for the whole sequence at once before the loop, and the prior (which nothing in the loop
reads) after it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from heron.algos.dreamer.distributions import st_sample


def image_to_float(x: torch.Tensor) -> torch.Tensor:
    """uint8 [0, 255] -> float [-0.5, 0.5]."""
    return x.float().div_(255.0).sub_(0.5)


class LayerNormGRUCell(nn.Module):
    """The GRU of both Dreamers' recurrent models: one matmul over cat(x, h), layer norm on the gate
    pre-activations, and an update gate biased towards keeping the state (sigmoid(u - 1)). As in
    DreamerV2's code, the projection keeps its bias (DreamerV3's drops it: ``bias=False``); the norm
    has Keras's epsilon, 1e-3."""

    def __init__(self, in_dim: int, hidden: int, layer_norm: bool = True, bias: bool = True):
        super().__init__()
        self.linear = nn.Linear(in_dim + hidden, 3 * hidden, bias=bias)
        self.norm = nn.LayerNorm(3 * hidden, eps=1e-3) if layer_norm else nn.Identity()

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        parts = self.norm(self.linear(torch.cat([x, h], -1)))
        reset, cand, update = parts.chunk(3, -1)
        cand = torch.tanh(torch.sigmoid(reset) * cand)
        update = torch.sigmoid(update - 1.0)
        return update * cand + (1.0 - update) * h


class Encoder(nn.Module):
    """A CNN over the image keys (stacked on channels; 64x64) and an MLP over the vector keys; the two
    embeddings are concatenated. Each Dreamer brings its layers: ``conv_stack`` (the CNN and its
    embedding's size), ``vector_mlp``, and ``vector_in`` (what the vectors pass through first)."""

    channels_last = False  # the CNN's input in channels-last memory (its layers made so)

    def __init__(
        self,
        obs_spec: dict[str, tuple],
        cnn_keys: tuple[str, ...],
        mlp_keys: tuple[str, ...],
        depth: int,
        units: int,
        layers: int,
    ):
        super().__init__()
        self.cnn_keys, self.mlp_keys = cnn_keys, mlp_keys
        self.out_dim = 0
        if cnn_keys:
            self.cnn, cnn_dim = self.conv_stack(sum(obs_spec[k][0] for k in cnn_keys), depth)
            self.out_dim += cnn_dim
        if mlp_keys:
            dims = sum(obs_spec[k][0] for k in mlp_keys)
            self.mlp = self.vector_mlp(dims, units, layers)
            self.out_dim += units if layers else dims

    def conv_stack(self, channels: int, depth: int) -> tuple[nn.Module, int]:
        raise NotImplementedError

    def vector_mlp(self, dims: int, units: int, layers: int) -> nn.Module:
        raise NotImplementedError

    def vector_in(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = []
        if self.cnn_keys:
            x = torch.cat([image_to_float(obs[k]) for k in self.cnn_keys], -3)
            lead = x.shape[:-3]
            x = x.reshape(-1, *x.shape[-3:])  # [N, C, H, W]
            if self.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            parts.append(self.cnn(x).reshape(*lead, -1))  # [*lead, E]
        if self.mlp_keys:
            parts.append(self.mlp(self.vector_in(torch.cat([obs[k].float() for k in self.mlp_keys], -1))))
        return torch.cat(parts, -1) if len(parts) > 1 else parts[0]


class Decoder(nn.Module):
    """The observation's predictions from the features: the image keys' (in the encoder's [-0.5,
    0.5] scale) from a linear layer to the maps ``cnn_in_shape`` and a transposed CNN to 64x64, the
    vector keys' from ``vectors``. Each Dreamer brings its layers (``cnn_in``, ``cnn``, and what
    ``vectors`` runs)."""

    cnn_in: nn.Linear
    cnn: nn.Sequential
    channels: list[int]  # of each image key

    def __init__(self, cnn_keys: tuple[str, ...], mlp_keys: tuple[str, ...], cnn_in_shape: tuple[int, ...]):
        super().__init__()
        self.cnn_keys, self.mlp_keys, self.cnn_in_shape = cnn_keys, mlp_keys, cnn_in_shape

    def vectors(self, feat: torch.Tensor) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def forward(self, feat: torch.Tensor) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        lead = feat.shape[:-1]
        if self.cnn_keys:
            x = self.cnn(self.cnn_in(feat).reshape(-1, *self.cnn_in_shape))  # [N, C, 64, 64]
            x = x.contiguous().reshape(*lead, sum(self.channels), 64, 64)
            out.update(zip(self.cnn_keys, x.split(self.channels, -3)))
        if self.mlp_keys:
            out.update(self.vectors(feat))
        return out


class RSSM(nn.Module):
    """What both Dreamers' recurrent state-space models compute alike: the posterior states along
    sequences (``observe``), a step of the prior (``imagine_step``) and imagined trajectories
    (``imagine``). ``z_t`` is ``stoch`` one-hot categoricals of ``classes`` classes, sampled with
    straight-through gradients; at an episode start the previous state is ``initial``'s and the
    previous action zero.

    Each Dreamer's RSSM brings its layers (``in_a``, the action's part of the recurrent input;
    ``post_e``, the embedding's part of the posterior's first layer; ``prior``) and
    ``initial(batch, device)``, ``recurrent(h, z, in_a(a))`` (h'), ``posterior_step(h, post_e(e))``
    and ``_logits`` (the logits [..., stoch, classes] of a flat output)."""

    deter: int
    stoch: int
    classes: int
    z_dim: int  # stoch * classes
    feat_dim: int  # z_dim + deter
    in_a: nn.Linear
    post_e: nn.Linear
    prior: nn.Sequential

    def initial(self, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def recurrent(self, h: torch.Tensor, z: torch.Tensor, a_in: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def posterior_step(self, h: torch.Tensor, e_in: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _logits(self, flat: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def prior_logits(self, h: torch.Tensor) -> torch.Tensor:
        return self._logits(self.prior(h))

    def observe(self, embed: torch.Tensor, actions: torch.Tensor, is_first: torch.Tensor):
        """Posterior states along sequences [T, B, ...]; ``actions[t]`` led to observation t; where
        ``is_first``, the state is ``initial``'s and the previous action zero.

        Returns h [T, B, deter], z [T, B, stoch*classes] (straight-through samples), posterior
        and prior logits [T, B, stoch, classes]."""
        T, B = embed.shape[:2]
        h0, z0 = self.initial(1, embed.device)
        h, z = h0.expand(B, -1), z0.expand(B, -1)
        first = is_first.unsqueeze(-1)  # [T, B, 1]
        a_in = self.in_a(actions * (~first).to(actions.dtype))  # the action before an episode start is zero
        e_in = self.post_e(embed)
        hs, zs, posts = [], [], []
        for t in range(T):
            # the initial state itself (a select, not an interpolation: h + 1 * (h0 - h) rounds)
            h, z = torch.where(first[t], h0, h), torch.where(first[t], z0, z)
            h = self.recurrent(h, z, a_in[t])
            post = self.posterior_step(h, e_in[t])
            z = st_sample(post).flatten(-2)
            hs.append(h)
            zs.append(z)
            posts.append(post)
        h_seq = torch.stack(hs)
        return h_seq, torch.stack(zs), torch.stack(posts), self.prior_logits(h_seq)

    def imagine_step(self, h: torch.Tensor, z: torch.Tensor, action: torch.Tensor):
        h = self.recurrent(h, z, self.in_a(action))
        return h, st_sample(self.prior_logits(h)).flatten(-2)

    def imagine(
        self,
        actor: nn.Module,
        h: torch.Tensor,
        z: torch.Tensor,
        horizon: int,
        to_dynamics: Callable[[torch.Tensor], torch.Tensor] = lambda action: action,
        dynamics_grad: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Imagination from every posterior state (``h``, ``z`` [T, B, ...], detached here): at each
        of ``horizon`` steps the actor, from the detached state, picks an action, whose
        log-probability and the policy's entropy are kept (the actor loss scores this policy), and
        the prior steps on ``to_dynamics(action)``, with gradients only when ``dynamics_grad``.
        Returns the states [H + 1, M, F] (s_0 a posterior state .. s_H), log-probabilities and
        entropies [H, M]."""
        h_t, z_t = h.detach().flatten(0, 1), z.detach().flatten(0, 1)
        feats, log_probs, entropies = [torch.cat([z_t, h_t], -1)], [], []
        for _ in range(horizon):
            pi = actor(feats[-1].detach())
            action = pi.rsample()
            log_probs.append(pi.log_prob(action.detach()))
            entropies.append(pi.entropy())
            with torch.set_grad_enabled(dynamics_grad and torch.is_grad_enabled()):
                h_t, z_t = self.imagine_step(h_t, z_t, to_dynamics(action))
            feats.append(torch.cat([z_t, h_t], -1))
        return torch.stack(feats), torch.stack(log_probs), torch.stack(entropies)
