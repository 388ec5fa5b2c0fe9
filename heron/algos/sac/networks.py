"""SAC networks: a tanh-Gaussian actor and an ensemble of soft Q critics, each behind an Encoder
(observation normalization, optionally a recurrent core for SAC_RNN)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from heron.accel import acting
from heron.accel.acting import Acting, as_like
from heron.ops.fused import ReluMLP
from heron.rl.distributions import TanhGaussian
from heron.rl.nets import Encoder, EnsembleMLP, RunningNorm, mlp


class Actor(nn.Module):
    """pi(a|s) = tanh(N(mean(s), std(s))) rescaled to [low, high] (CleanRL's SAC): a
    ``heron.rl.distributions.TanhGaussian`` of the MLP's output."""

    scale: torch.Tensor  # a buffer
    bias: torch.Tensor  # a buffer

    def __init__(
        self,
        encoder: Encoder,
        hidden: tuple[int, ...],
        low: torch.Tensor,
        high: torch.Tensor,
        net: nn.Module | None = None,  # instead of the ReLU MLP (CrossQ's: heron.algos.sac.crossq)
    ):
        super().__init__()
        self.encoder = encoder
        self.action_dim = low.numel()
        self.net = net if net is not None else mlp(encoder.out_dim, hidden, 2 * self.action_dim)
        self.register_buffer("scale", (high - low).float() / 2)
        self.register_buffer("bias", (high + low).float() / 2)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """A feed-forward actor's features of obs [..., D]: the normalized observations."""
        return self.encoder.norm(obs)

    def head(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussian's (mean, log_std), each [..., A]."""
        return TanhGaussian.params(self.net(feats))

    def sample(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized actions [..., A] and their log-probs [...]."""
        mean, log_std = self.head(feats)
        return TanhGaussian.sample(mean, log_std, self.scale, self.bias)

    def deterministic(self, feats: torch.Tensor) -> torch.Tensor:
        return TanhGaussian.mode(self.head(feats)[0], self.scale, self.bias)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, state: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """One step for a batch of envs: obs [N, D], state [N, S] -> actions [N, A], new state."""
        feats, state = self.encoder.step(obs, state)
        action = self.deterministic(feats) if deterministic else self.sample(feats)[0]
        return action, state

    @torch.no_grad()
    def gaussian(self, obs: torch.Tensor) -> torch.Tensor:
        """The feed-forward actor's Gaussian (before the tanh) on obs [N, D]: [N, 2A], the means then
        the standard deviations. Training draws its actions from it on the host
        (``TanhGaussian.draw``, with the normals ``act`` would draw on the CPU), so that no random
        draw waits for the GPU."""
        mean, log_std = self.head(self.encoder.norm(obs))
        return torch.cat([mean, log_std.exp()], -1)

    def numpy_mode(self, batch: int):
        """``act(obs, state, deterministic=True)`` in numpy for ``batch`` observations
        (``heron.accel.acting.Policy``), or None where it stays in torch (``NumpyActor.of``)."""
        actor = NumpyActor.of(self, batch)
        return None if actor is None else actor.mode


def make_acting(actor: Actor, num_envs: int, device: torch.device, cfg: Any, tensors: bool) -> Acting:
    """How the feed-forward loop acts (``acting.act(obs)`` -> actions [N, A]): the actor's Gaussian on
    the observations (in numpy where that is fastest: ``heron.accel.acting.Acting``), and the
    actions drawn from it with the normals ``Actor.sample`` would draw, from the torch stream on the
    CPU; numpy arrays, or, for a tensor env (``tensors``), tensors beside the actor's output."""
    numpy_actor = NumpyActor.of(actor, num_envs, mixed=True)
    scale, bias = (actor.scale, actor.bias) if tensors else (actor.scale.cpu().numpy(), actor.bias.cpu().numpy())
    A = actor.action_dim

    def sample(gaussian: Any) -> Any:
        return TanhGaussian.draw(gaussian, as_like(torch.randn(num_envs, A), gaussian), scale, bias)

    return Acting(
        lambda obs: actor.gaussian(obs.float()),
        numpy_actor.gaussian if numpy_actor else None,
        device,
        cfg,
        sample=sample,
    )


class NumpyActor:
    """``Actor.act`` (sampled actions, feed-forward) in numpy for acting on the CPU
    (``heron.accel.acting``): obs [N, D] arrays and standard normals [N, A] -> actions [N, A],
    float32: the torch path's operations in its order, given the normals ``torch.randn_like`` would
    draw there."""

    def __init__(self, actor: Actor):
        self.norm, self.mlp = actor.encoder.norm, acting.NumpyMLP(acting.linears(actor.net), "relu")
        self.scale, self.bias, self.dim = actor.scale.numpy(), actor.bias.numpy(), actor.action_dim

    @staticmethod
    def of(actor: Actor, num_envs: int, mixed: bool = False) -> NumpyActor | None:
        """The numpy actor where it applies (feed-forward, ``acting.eligible``), else None.
        ``mixed``: under mixed precision too, in float32 (training's acting; ``heron.accel.acting``)."""
        if not isinstance(actor.net, ReluMLP):  # the twin runs a ReLU MLP's layers (not CrossQ's)
            return None
        amp = None if mixed else actor.net.amp_dtype
        ok = actor.encoder.state_size == 0 and acting.eligible(num_envs, acting.linears(actor.net), amp)
        return NumpyActor(actor) if ok else None

    def __call__(self, obs: np.ndarray, normals: np.ndarray) -> np.ndarray:
        return TanhGaussian.draw(self.gaussian(obs), normals, self.scale, self.bias)

    def gaussian(self, obs: np.ndarray) -> np.ndarray:
        """``Actor.gaussian`` in numpy: [N, 2A], the means then the standard deviations."""
        return TanhGaussian.numpy_gaussian(self.mlp(acting.normalize(obs, self.norm)))

    def mode(self, obs: np.ndarray) -> np.ndarray:
        """The deterministic actions (``Actor.deterministic``): the squashed mean, rescaled."""
        return TanhGaussian.numpy_mode(self.mlp(acting.normalize(obs, self.norm)), self.scale, self.bias)


class Critic(nn.Module):
    """``members`` soft Q networks Q_i(s, a), evaluated together; each has its own encoder (they
    share the observation normalizer)."""

    encoders: nn.ModuleList  # of Encoder

    def __init__(
        self,
        encoders: list[Encoder],
        hidden: tuple[int, ...],
        action_dim: int,
        q: nn.Module | None = None,  # instead of the ReLU ensemble (CrossQ's: heron.algos.sac.crossq)
    ):
        super().__init__()
        self.encoders = nn.ModuleList(encoders)
        self.q = q if q is not None else EnsembleMLP(len(encoders), encoders[0].out_dim + action_dim, hidden, 1)

    def members(self) -> list[Encoder]:
        """Each critic's encoder."""
        return list(self.encoders)  # type: ignore[arg-type]  # a ModuleList of Encoder

    @property
    def state_size(self) -> int:
        return self.members()[0].state_size

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """Feed-forward critics' features of obs [B, D]: [E, B, F], each member's normalized
        observations (one normalizer serves them all)."""
        return torch.stack([enc.norm(obs) for enc in self.members()])

    def encode(
        self, obs: torch.Tensor, state0: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """obs [B, L, D], state0 [B, E, S] -> features [E, B, L, F], states [B, L, E, S]."""
        out = [enc(obs, state0[:, i], starts) for i, enc in enumerate(self.members())]
        return torch.stack([f for f, _ in out]), torch.stack([s for _, s in out], 2)

    def encode_step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """obs [B, D], state [B, E, S] -> features [E, B, F], new state [B, E, S]."""
        out = [enc.step(obs, state[:, i]) for i, enc in enumerate(self.members())]
        return torch.stack([f for f, _ in out]), torch.stack([s for _, s in out], 1)

    def values(self, feats: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """feats [E, M, F], actions [M, A] -> Q values [E, M]."""
        x = torch.cat([feats, actions.unsqueeze(0).expand(feats.shape[0], *actions.shape)], -1)
        return self.q(x).squeeze(-1)


def build(
    obs_dim: int,
    low: torch.Tensor,
    high: torch.Tensor,
    hidden: tuple[int, ...],
    obs_norm: bool,
    recurrent: str,
    rnn_hidden: int,
    critic_hidden: tuple[int, ...] = (),  # empty: ``hidden``
) -> tuple[Actor, Critic]:
    norm = RunningNorm((obs_dim,), enabled=obs_norm)
    actor = Actor(Encoder(obs_dim, norm, recurrent, rnn_hidden), hidden, low, high)
    critics = [Encoder(obs_dim, norm, recurrent, rnn_hidden) for _ in range(2)]
    critic = Critic(critics, critic_hidden or hidden, low.numel())
    return actor, critic
