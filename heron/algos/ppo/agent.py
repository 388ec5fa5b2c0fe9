"""What PPO's loop, its learning and its saved policies share: the actor-critic as the options
build it (``build``), the optimizer's target (``Nets``), and the policy a checkpoint loads back."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from heron.accel.acting import Policy
from heron.algos.ppo.config import Config
from heron.algos.ppo.networks import ActorCritic


@dataclass
class Nets:
    """What a gradient step works on."""

    model: ActorCritic
    opt: torch.optim.Optimizer


def build(cfg: Config, spaces: dict) -> ActorCritic:
    return ActorCritic(
        spaces,
        tuple(cfg.hidden_sizes),
        cfg.shared_network,
        cfg.recurrent,
        cfg.rnn_hidden_size,
        cfg.obs_norm,
        cfg.value_norm,
        cfg.state_dependent_std,
        cfg.init_log_std,
    )


def obs_dtype(spaces: dict) -> torch.dtype:
    """Observations as the rollout stores them: uint8 frames, else float32."""
    return torch.uint8 if spaces["obs_dtype"] == "uint8" else torch.float32


def load_policy(cfg: Config, state: dict, device: str | torch.device = "cpu") -> Policy:
    model = build(cfg, state["spaces"])
    model.load_state_dict(state["actor"])
    return Policy(model, tuple(state["spaces"]["obs_shape"]), model.state_size, device, obs_dtype(state["spaces"]))
