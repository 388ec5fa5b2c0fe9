"""What both SAC loops (``train.py``, feed-forward; ``recurrent.py``) share: the env check, the
networks with their optimizers and the entropy coefficient (``Nets``), what a checkpoint holds of
them, and the policy a checkpoint loads back."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from heron.accel.acting import Policy
from heron.algos import offpolicy
from heron.algos.sac import crossq
from heron.algos.sac.config import Config
from heron.algos.sac.networks import Actor, Critic, build
from heron.envs.make import probe_spaces, require_box_actions, require_vector_obs
from heron.envs.native import require_vector_entry_point
from heron.ops.adam import adam
from heron.runtime.run import Run


def check(cfg: Config) -> dict:
    """Reject an env whose spaces SAC cannot handle, before a run directory exists; returns the
    spaces a checkpoint saves (resume and eval compare them)."""
    obs_space, act_space = probe_spaces(cfg.env_id)
    require_box_actions(act_space, "sac", cfg.env_id)
    require_vector_obs(obs_space, "sac", cfg.env_id)
    if cfg.vector_mode == "native":
        require_vector_entry_point(cfg.env_id)
    return offpolicy.spaces_of(obs_space, act_space)


def networks(cfg: Config, spaces: dict) -> tuple[Actor, Critic]:
    if cfg.crossq:
        return crossq.build(spaces["obs_shape"][0], spaces["action_low"], spaces["action_high"], cfg)
    return build(
        spaces["obs_shape"][0],
        spaces["action_low"],
        spaces["action_high"],
        tuple(cfg.hidden_sizes),
        cfg.obs_norm,
        cfg.recurrent,
        cfg.rnn_hidden_size,
        tuple(cfg.critic_hidden_sizes),
    )


def load_policy(cfg: Config, state: dict, device: str | torch.device = "cpu") -> Policy:
    actor, _ = networks(cfg, state["spaces"])
    actor.load_state_dict(state["actor"])
    return Policy(actor, tuple(state["spaces"]["obs_shape"]), actor.encoder.state_size, device)


@dataclass
class Nets:
    """What a gradient step works on."""

    actor: Actor
    critic: Critic
    critic_target: Critic | None  # None: CrossQ has none
    actor_opt: torch.optim.Optimizer
    q_opt: torch.optim.Optimizer
    alpha_opt: torch.optim.Optimizer
    log_alpha: torch.Tensor
    current_alpha: Callable[[], torch.Tensor]
    target_entropy: float

    def saved(self) -> dict:
        """What a checkpoint holds besides the actor (the policy's own state)."""
        saved = {
            "critic": self.critic,
            "critic_target": self.critic_target,
            "log_alpha": self.log_alpha,
            "actor_opt": self.actor_opt,
            "q_opt": self.q_opt,
            "alpha_opt": self.alpha_opt,
        }
        return {k: v for k, v in saved.items() if v is not None}


def make_nets(cfg: Config, run: Run, spaces: dict) -> Nets:
    """The run's networks on its device, identical on every rank, with CleanRL's optimizers (separate
    policy and Q learning rates; the entropy coefficient at the Q rate)."""
    device = run.device
    actor, critic = networks(cfg, spaces)
    actor, critic = actor.to(device), critic.to(device)
    critic_target = None if cfg.crossq else copy.deepcopy(critic)
    if critic_target is not None:
        critic_target.requires_grad_(False)
        for enc in critic_target.members():
            enc.norm = actor.encoder.norm  # one normalizer for all: targets normalize with the live statistics
    run.sync_start(actor=actor, critic=critic)
    run.precision.apply(*(m for m in (actor, critic, critic_target) if m is not None))  # --precision: autocast
    actor_opt = adam(list(actor.parameters()), cfg.policy_lr, beta1=cfg.adam_beta1)
    q_opt = adam(list(critic.parameters()), cfg.q_lr, beta1=cfg.adam_beta1)
    target_entropy = -cfg.target_entropy_scale * actor.action_dim  # -|A| (SAC v2)
    log_alpha = torch.tensor(math.log(cfg.alpha) if cfg.autotune else 0.0, device=device, requires_grad=cfg.autotune)
    fixed_alpha = torch.tensor(cfg.alpha, device=device)

    def current_alpha() -> torch.Tensor:
        return log_alpha.detach().exp() if cfg.autotune else fixed_alpha

    alpha_opt = adam([log_alpha], cfg.q_lr, beta1=cfg.adam_beta1)  # CleanRL: alpha shares the Q lr
    return Nets(actor, critic, critic_target, actor_opt, q_opt, alpha_opt, log_alpha, current_alpha, target_entropy)
