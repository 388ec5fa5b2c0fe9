"""Acting from an RSSM state: the ``Player`` that both Dreamers act with (in the real envs, in
evaluations and in a loaded policy), and ``DreamerPolicy``, the ``predict`` interface around it."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from heron.accel.acting import Policy
from heron.algos.dreamer.distributions import st_sample
from heron.algos.dreamer.spaces import obs_spec, to_env_actions


class Player(nn.Module):
    """Acting in the real env: carries (h, z, previous action) per env, resets them at episode
    starts, filters each observation into the posterior and samples the actor.

    ``act(obs, state, deterministic)`` follows heron's recurrent-policy interface with
    ``state = cat(h, z, a_prev)``; actions come out one-hot (discrete) or in [-1, 1]."""

    def __init__(self, agent: Any):  # DreamerV2's Agent, or DreamerV3's
        super().__init__()
        self.encoder, self.rssm, self.actor = agent.world.encoder, agent.world.rssm, agent.actor
        self.action_dim = agent.action_dim
        self.state_size = self.rssm.deter + self.rssm.z_dim + self.action_dim

    @torch.no_grad()
    def initial_state(self, batch: int, device: str | torch.device) -> torch.Tensor:
        """Where every episode starts: the RSSM's initial state (DreamerV2's zeros, DreamerV3's learned
        one) and a zero previous action."""
        h, z = self.rssm.initial(batch, torch.device(device))
        return torch.cat([h, z, torch.zeros(batch, self.action_dim, device=h.device)], -1).to(device)

    @torch.no_grad()
    def act(
        self,
        obs: dict[str, torch.Tensor],
        state: torch.Tensor,
        deterministic: bool,
        is_first: torch.Tensor | None = None,
        uniform: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``uniform`` [B, stoch]: the draws of the posterior's categoricals (fresh ones if None)."""
        rssm = self.rssm
        if is_first is not None:
            state = torch.where(is_first.unsqueeze(-1), self.initial_state(state.shape[0], state.device), state)
        h, z, a = state.split([rssm.deter, rssm.z_dim, self.action_dim], -1)
        h = rssm.recurrent(h, z, rssm.in_a(a))
        z = st_sample(rssm.posterior_step(h, rssm.post_e(self.encoder(obs))), uniform).flatten(-2)
        dist = self.actor(torch.cat([z, h], -1))
        action = dist.mode() if deterministic else dist.rsample()
        return action, torch.cat([h, z, action], -1)


class DreamerPolicy(Policy):
    """``predict(obs)`` for dict observations (one, or a batch of [B, ...] per key); carries the
    player's state (RSSM state and previous action) between calls, ``reset()`` at episode starts.

    The player: ``act(obs, state, deterministic, is_first)`` and ``initial_state(batch, device)``
    (zeros for DreamerV2, the learned initial state for DreamerV3)."""

    def __init__(self, player: Any, spaces: dict, device: str | torch.device = "cpu"):
        super().__init__(player, (), player.state_size, device)
        self.spaces = spaces
        self.keys = list(spaces["cnn_keys"]) + list(spaces["mlp_keys"])
        self.spec = obs_spec(spaces)
        self.generators: list[torch.Generator] | None = None  # the rows' own draws (``seed``)

    def on_host(self) -> Policy:
        """Itself: the player (RSSM, encoder and actor, hundreds of units wide) is not the few small
        products that a CPU copy runs faster than the accelerator."""
        return self

    def reset(self, batch: int = 1) -> None:
        self.state = self.actor.initial_state(batch, self.device)
        self.generators = None

    def seed(self, seeds: list[int]) -> None:
        """Each row's posterior draws from its own generator, seeded with its episode's seed: the
        latent state is sampled even in a deterministic step, and an evaluation must repeat."""
        self.generators = [torch.Generator().manual_seed(s) for s in seeds]

    def _draws(self, batch: int) -> torch.Tensor | None:
        """The uniforms of the posterior's categoricals [B, stoch] from the rows' generators (None:
        no seeds, fresh draws from torch's stream)."""
        gens = self.generators
        if gens is None or len(gens) != batch:
            return None
        stoch = self.actor.rssm.stoch
        return torch.stack([torch.rand(stoch, generator=g) for g in gens]).to(self.device)

    def predict(self, obs: dict[str, np.ndarray], deterministic: bool = True) -> np.ndarray:  # type: ignore[override]  # Dict observations
        if not isinstance(obs, dict):
            raise ValueError(f"expected a dict of observations with keys {self.keys}")
        first = np.asarray(obs[self.keys[0]])
        single = first.shape == self.spec[self.keys[0]]
        x = {k: torch.as_tensor(np.asarray(obs[k]), device=self.device) for k in self.keys}
        if single:
            x = {k: v.unsqueeze(0) for k, v in x.items()}
        batch = x[self.keys[0]].shape[0]
        if self.state is None or self.state.shape[0] != batch:
            self.reset(batch)
        action, self.state = self.actor.act(x, self.state, deterministic, uniform=self._draws(batch))
        out = to_env_actions(action, self.spaces)
        return out[0] if single else out


def load_player(player: Any, state: dict, device: str | torch.device = "cpu") -> Policy:
    """The policy of a checkpoint's ``actor`` entry (the player's weights)."""
    player.load_state_dict(state["actor"])
    return DreamerPolicy(player, state["spaces"], device)
