"""DreamerV2 hyperparameters. Every option of sheeprl's DreamerV2 command blocks (Atari and DMC)
is a flag of the same name in kebab-case; the defaults are the DMC block's, with a
model-size default that fits a CPU and sheeprl's sequential replay (any episode length), and the
presets ``atari`` and ``dmc`` carry the blocks as written (docs/dreamer_v2.md has each default's
source). Steps count agent (policy) steps, summed over envs, as in sheeprl: with ``--action-repeat
k`` an agent step is k env frames (4k on ``ALE/...-v5``)."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from heron.algos.dreamer.config import DEBUG, DreamerConfig, in_unit_interval, non_negative, positive
from heron.config import opt
from heron.errors import HeronError


@dataclass
class Config(DreamerConfig):
    ALGO: typing.ClassVar[str] = "dreamer_v2"

    # -- schedule
    pretrain_steps: int = opt(200, "gradient steps done at once when training starts")
    train_every: int = opt(5, "one round of --gradient-steps every N agent steps")
    gradient_steps: int = opt(1, "gradient steps per round")
    # -- objective
    gamma: float = opt(0.99, "discount factor")
    lmbda: float = opt(0.95, "lambda of the lambda-returns")
    horizon: int = opt(15, "imagination horizon")
    kl_balancing_alpha: float = opt(0.8, "KL balancing: weight of the prior's term (alpha)")
    kl_free_nats: float = opt(1.0, "free nats: the KL loss is at least this")
    kl_free_avg: bool = opt(True, "apply free nats to the batch-averaged KL (else to each sample's)")
    kl_regularizer: float = opt(1.0, "scale of the KL loss")
    use_continues: bool = opt(False, "learn a continue (discount) model and use it in imagination")
    continue_scale_factor: float = opt(1.0, "scale of the continue loss")
    actor_ent_coef: float = opt(1e-4, "entropy bonus (eta)")
    objective_mix: float = opt(
        -1.0, "rho: REINFORCE share of the actor objective (-1 = 1 for discrete, 0 for continuous actions)"
    )
    lambda_rewards: str = opt(
        "current",
        "the reward and continue in step t of the lambda-return: current (predicted "
        "at imagined state t: the paper's eq. 4 and its code) or next (at state t+1: "
        "DreamerV3's correction)",
        ("current", "next"),
    )
    critic_target_update_freq: int = opt(100, "copy the critic into the target critic every N gradient steps")
    # -- optimizers
    world_lr: float = opt(3e-4, "world model learning rate")
    actor_lr: float = opt(8e-5, "actor learning rate")
    critic_lr: float = opt(8e-5, "critic learning rate")
    adam_eps: float = opt(1e-5, "Adam epsilon (all three optimizers)")
    weight_decay: float = opt(
        1e-6,
        "DreamerV2's weight decay: before every step each weight is multiplied by "
        "(1 - wd), whatever the learning rate (0 = off)",
    )
    clip_gradients: float = opt(100.0, "gradient-norm clip of each model (0 = off)")
    # -- model sizes
    hidden_size: int = opt(200, "hidden units of the RSSM's transition and representation models")
    recurrent_state_size: int = opt(200, "deterministic (GRU) state size")
    stochastic_size: int = opt(32, "categorical variables in the stochastic state")
    discrete_size: int = opt(32, "classes per categorical variable")
    dense_units: int = opt(400, "units of the MLPs (encoder, decoder, heads, actor, critic)")
    mlp_layers: int = opt(4, "hidden layers of those MLPs")
    cnn_channels_multiplier: int = opt(48, "channels of the first conv layer (doubling per layer)")
    layer_norm: bool = opt(True, "layer norm in the GRU")

    def validate(self) -> None:
        super().validate()
        positive(
            self,
            "train_every",
            "gradient_steps",
            "horizon",
            "critic_target_update_freq",
            "hidden_size",
            "recurrent_state_size",
            "stochastic_size",
            "discrete_size",
            "dense_units",
            "cnn_channels_multiplier",
            "world_lr",
            "actor_lr",
            "critic_lr",
            "adam_eps",
        )
        non_negative(
            self,
            "pretrain_steps",
            "kl_free_nats",
            "kl_regularizer",
            "continue_scale_factor",
            "actor_ent_coef",
            "clip_gradients",
            "mlp_layers",
        )
        in_unit_interval(self, "gamma", "lmbda", "kl_balancing_alpha")
        if not 0 <= self.weight_decay < 1:
            raise HeronError(f"--weight-decay must be in [0, 1), got {self.weight_decay}")
        if not (self.objective_mix == -1 or 0 <= self.objective_mix <= 1):
            raise HeronError(f"--objective-mix must be in [0, 1] (or -1 for auto), got {self.objective_mix}")
        if self.horizon < 2:
            raise HeronError(
                f"--horizon must be at least 2 (the actor scores the imagined steps before the last), "
                f"got {self.horizon}"
            )


_SEED_COMMON = dict(
    capture_video=True,
    total_steps=200_000_000,
    max_episode_steps=27000,
    per_rank_batch_size=50,
    buffer_size=2_000_000,
    memmap_buffer=True,
    checkpoint_every=100_000,
    buffer_type="episode",
    prioritize_ends=True,
)

PRESETS: dict[str, dict[str, Any]] = {
    # sheeprl's DreamerV2, "standard hyperparameters to learn in the Atari environments"
    "atari": dict(
        _SEED_COMMON,
        env_id="PongNoFrameskip-v4",
        action_repeat=4,
        clip_rewards=True,
        learning_starts=200_000,
        pretrain_steps=1,
        train_every=4,
        gamma=0.995,
        kl_regularizer=0.1,
        continue_scale_factor=5.0,
        actor_ent_coef=1e-3,
        actor_lr=4e-5,
        critic_lr=1e-4,
        world_lr=2e-4,
        use_continues=True,
        hidden_size=600,
        recurrent_state_size=600,
        kl_free_nats=0.0,
    ),
    # sheeprl's DreamerV2, "standard hyperparameters used for the DMC environment"
    "dmc": dict(
        _SEED_COMMON,
        env_id="dmc_walker_walk",
        action_repeat=2,
        clip_rewards=False,
        learning_starts=2000,
        pretrain_steps=200,
        train_every=5,
        gamma=0.99,
        kl_regularizer=1.0,
        actor_ent_coef=1e-4,
        actor_lr=8e-5,
        critic_lr=8e-5,
        world_lr=3e-4,
        use_continues=False,
        hidden_size=200,
        recurrent_state_size=200,
        kl_free_nats=1.0,
    ),
    # a tiny model for seconds-long smoke runs, with this Dreamer's schedule
    "debug": dict(DEBUG, pretrain_steps=2, train_every=20),
}

# heron tune's search space (docs/guide/tuning-export.md, "What is searched"): learning rates and
# the terms the DreamerV2 paper reports as sensitive (KL balance and free nats, the actor's entropy,
# the horizon).
SEARCH_SPACE = {
    "world_lr": {"log": [1e-4, 1e-3]},
    "actor_lr": {"log": [1e-5, 3e-4]},
    "critic_lr": {"log": [1e-5, 3e-4]},
    "actor_ent_coef": {"log": [1e-5, 1e-2]},
    "kl_balancing_alpha": {"choices": [0.6, 0.8, 0.9]},
    "kl_free_nats": {"choices": [0.0, 1.0]},
    "horizon": {"choices": [10, 15, 20]},
    "gamma": {"choices": [0.99, 0.995, 0.999]},
}
