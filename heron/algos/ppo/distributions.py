"""PPO's action distributions, from an action head's outputs: a diagonal Gaussian (Box actions,
with a free or a state-dependent log-std) and one or several categoricals (Discrete,
MultiDiscrete, MultiBinary). ``ActionHead`` holds the head's layer and each distribution's sample,
log-probability, entropy and mode, in torch, with their numpy twins (``numpy_sample_logp``,
``numpy_mode``: what PPO acts with on a CPU, ``heron.algos.ppo.acting``); ``HeadTerms`` is one
batch's distribution with the pieces its log-probs and entropy share computed once."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from heron.rl.distributions import normal_entropy, normal_log_prob
from heron.rl.nets import orthogonal_

LOG_STD_BOUNDS = (-20.0, 2.0)  # the Gaussian head's log-std, clamped (torch and numpy acting)


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
        if self.kind != "box":  # where each categorical's logits begin and end in the output
            self.bounds = np.cumsum([0] + self.sizes).tolist()
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
            return mean + log_std.exp() * eps, normal_log_prob(eps, log_std).sum(-1)
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

    # -- the numpy twins: the operations above in the same order, on float32 arrays ------------------
    # (PPO's acting on a CPU, heron.algos.ppo.acting.NumpyActing; tests/test_distributions.py holds them to
    # the torch versions). ``out``: the head's layer output [N, ...] as an array; ``log_std``: a free
    # log-std, clamped, read once per rollout (``numpy_log_std``), or None where ``out`` holds it.
    def numpy_log_std(self) -> np.ndarray | None:
        """The free log-std, clamped, as an array (None: state-dependent, or a categorical head)."""
        if self.kind != "box" or self.state_dependent:
            return None
        return self.log_std.detach().clamp(*LOG_STD_BOUNDS).numpy()

    def numpy_sample_logp(
        self, out: np.ndarray, noise: np.ndarray, log_std: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``sample_logp`` from ``noise`` (``noise``'s layout): the actions and their log-probs."""
        if self.kind == "box":
            if log_std is None:
                out, log_std = out[:, : self.dim], np.clip(out[:, self.dim :], *LOG_STD_BOUNDS)
            actions = out + np.exp(log_std) * noise
            return actions, normal_log_prob(noise, log_std).sum(-1)
        picks, logp = [], cast(Any, 0.0)  # a float, then arrays
        for lo, hi in zip(self.bounds, self.bounds[1:]):
            z = out[:, lo:hi]
            z = z - z.max(-1, keepdims=True)
            lp = z - np.log(np.exp(z).sum(-1, keepdims=True))  # log_softmax, in torch's order
            pick = (lp - np.log(-np.log(np.maximum(noise[:, lo:hi], np.float32(1e-20))))).argmax(-1)
            picks.append(pick)
            logp = logp + np.take_along_axis(lp, pick[:, None], -1)[:, 0]
        return (picks[0] if self.kind == "discrete" else np.stack(picks, -1)), logp

    def numpy_mode(self, out: np.ndarray) -> np.ndarray:
        """``mode``: the mean, or each categorical's most likely choice."""
        if self.kind == "box":
            return out[:, : self.dim]
        picks = [out[:, lo:hi].argmax(-1) for lo, hi in zip(self.bounds, self.bounds[1:])]
        return picks[0] if self.kind == "discrete" else np.stack(picks, -1)

    def numpy_to_env(self, actions: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """``to_env`` with the bounds as arrays (read once per rollout)."""
        return np.minimum(np.maximum(actions, low), high) if self.kind == "box" else actions


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
            return normal_log_prob(self.z, self.log_std).sum(-1)
        if self.head.kind == "discrete":
            return self.logps[0].gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        acts = actions.long()
        return _total(lp.gather(-1, acts[..., i : i + 1]).squeeze(-1) for i, lp in enumerate(self.logps))

    def entropy(self) -> torch.Tensor:
        """[B]: the entropy, summed over the action's entries or categoricals."""
        if self.head.kind == "box":
            return normal_entropy(self.log_std).sum(-1)
        self.probs = [lp.exp() for lp in self.logps]
        self.entropies = [-(p * lp).sum(-1) for p, lp in zip(self.probs, self.logps)]
        return _total(self.entropies)
