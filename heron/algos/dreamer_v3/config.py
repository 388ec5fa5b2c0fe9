"""DreamerV3 hyperparameters: the paper's one fixed set (Hafner et al. 2023, table W.1), as the
official code and sheeprl 0.8.4's ``dreamer_v3`` configuration hold them, with sheeprl's flag names
in kebab-case. The model sizes are the paper's XS to XL (``--preset S`` and so on: depth, widths
and GRU size); the default is S, sheeprl's default experiment. The env and replay options are
DreamerV2's (``heron.algos.dreamer.config.DreamerConfig``); docs/algorithms/dreamer_v3.md has every
default's source."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from heron.algos.dreamer.config import DEBUG, DreamerConfig, in_unit_interval, non_negative, positive
from heron.config import opt
from heron.errors import HeronError


@dataclass
class Config(DreamerConfig):
    ALGO: typing.ClassVar[str] = "dreamer_v3"

    learning_starts: int = opt(1024, "agent steps of random actions before training")
    sequence_length: int = opt(64, "steps per training sequence")
    # -- schedule
    replay_ratio: float = opt(
        1.0,
        "gradient steps per agent step (per process), counted from --learning-starts "
        "(the official code's train_ratio is this x batch size x sequence length)",
    )
    pretrain_steps: int = opt(0, "extra gradient steps done at once when training starts")
    # -- objective
    gamma: float = opt(0.996996996996997, "discount factor (1 - 1/333: the official horizon of 333 steps)")
    lmbda: float = opt(0.95, "lambda of the lambda-returns")
    horizon: int = opt(15, "imagination horizon")
    kl_dynamic: float = opt(0.5, "weight of the dynamics loss, KL(sg(posterior) || prior)")
    kl_representation: float = opt(0.1, "weight of the representation loss, KL(posterior || sg(prior))")
    kl_free_nats: float = opt(1.0, "free bits: each step's KL terms are at least this many nats")
    kl_regularizer: float = opt(1.0, "scale of the two KL terms")
    continue_scale_factor: float = opt(1.0, "scale of the continue loss")
    actor_ent_coef: float = opt(3e-4, "entropy bonus (eta)")
    objective_mix: float = opt(
        -1.0,
        "rho: REINFORCE share of the actor objective (-1 = 1 for discrete, 0 for "
        "continuous actions: the dynamics backpropagation)",
    )
    moments_decay: float = opt(0.99, "decay of the moving percentiles of the returns")
    moments_limit: float = opt(
        1.0,
        "the return scale is at least this, so returns are never scaled up (the official "
        "code's retnorm limit; sheeprl's moments.max is its inverse)",
    )
    moments_low: float = opt(0.05, "low percentile of the return scale")
    moments_high: float = opt(0.95, "high percentile of the return scale")
    critic_tau: float = opt(0.02, "the slow critic moves this fraction towards the critic ...")
    critic_target_update_freq: int = opt(1, "... every N gradient steps")
    critic_slow_regularizer: float = opt(
        1.0, "weight of the critic's cross-entropy towards the slow critic's predictions"
    )
    # -- optimizers
    world_lr: float = opt(1e-4, "world model learning rate")
    actor_lr: float = opt(3e-5, "actor learning rate")
    critic_lr: float = opt(3e-5, "critic learning rate")
    world_eps: float = opt(1e-8, "Adam epsilon of the world model")
    actor_eps: float = opt(1e-5, "Adam epsilon of the actor")
    critic_eps: float = opt(1e-5, "Adam epsilon of the critic")
    world_clip_gradients: float = opt(1000.0, "gradient-norm clip of the world model (0 = off)")
    actor_clip_gradients: float = opt(100.0, "gradient-norm clip of the actor (0 = off)")
    critic_clip_gradients: float = opt(100.0, "gradient-norm clip of the critic (0 = off)")
    # -- model
    hidden_size: int = opt(512, "hidden units of the RSSM's transition and representation models")
    recurrent_state_size: int = opt(512, "deterministic (GRU) state size")
    stochastic_size: int = opt(32, "categorical variables in the stochastic state")
    discrete_size: int = opt(32, "classes per categorical variable")
    dense_units: int = opt(512, "units of the MLPs (encoder, decoder, heads, actor, critic, the GRU's input)")
    mlp_layers: int = opt(2, "hidden layers of those MLPs")
    cnn_channels_multiplier: int = opt(32, "channels of the first conv layer (doubling per layer)")
    bins: int = opt(255, "bins of the two-hot reward and value heads")
    twohot_space: str = opt(
        "raw",
        "where the two-hot heads interpolate targets and average their bins: raw (the "
        "official code) or symlog (its first release and sheeprl: symlog(x) between equally "
        "spaced points, the prediction symexp of their mean)",
        ("raw", "symlog"),
    )
    unimix: float = opt(0.01, "uniform share in the latents' and the discrete actions' categoricals")
    learnable_initial_state: bool = opt(True, "learn the recurrent state episodes start from (else tanh(0) = 0)")
    min_std: float = opt(0.1, "continuous actions: least standard deviation")
    max_std: float = opt(1.0, "continuous actions: greatest standard deviation")
    init_std: float = opt(2.0, "continuous actions: added to the std's pre-activation")
    action_clip: float = opt(1.0, "continuous actions: scaled back to this magnitude (0 = off)")

    def validate(self) -> None:
        super().validate()
        positive(
            self,
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
            "world_eps",
            "actor_eps",
            "critic_eps",
            "moments_limit",
            "min_std",
            "bins",
        )
        non_negative(
            self,
            "replay_ratio",
            "pretrain_steps",
            "kl_dynamic",
            "kl_representation",
            "kl_free_nats",
            "kl_regularizer",
            "continue_scale_factor",
            "actor_ent_coef",
            "critic_slow_regularizer",
            "world_clip_gradients",
            "actor_clip_gradients",
            "critic_clip_gradients",
            "mlp_layers",
            "action_clip",
        )
        in_unit_interval(self, "gamma", "lmbda", "moments_decay", "moments_low", "moments_high", "critic_tau", "unimix")
        if not (self.objective_mix == -1 or 0 <= self.objective_mix <= 1):
            raise HeronError(f"--objective-mix must be in [0, 1] (or -1 for auto), got {self.objective_mix}")
        if self.moments_low >= self.moments_high:
            raise HeronError(f"--moments-low ({self.moments_low}) must be below --moments-high ({self.moments_high})")
        if self.max_std < self.min_std:
            raise HeronError(f"--max-std ({self.max_std}) must be at least --min-std ({self.min_std})")
        if self.bins < 2:
            raise HeronError(f"--bins must be at least 2, got {self.bins}")


# the paper's model sizes (table B.1; sheeprl's dreamer_v3_XS .. _XL): CNN depth, MLP width and
# layers, GRU size, RSSM hidden units
SIZES = {
    "XS": dict(cnn_channels_multiplier=24, dense_units=256, mlp_layers=1, recurrent_state_size=256, hidden_size=256),
    "S": dict(cnn_channels_multiplier=32, dense_units=512, mlp_layers=2, recurrent_state_size=512, hidden_size=512),
    "M": dict(cnn_channels_multiplier=48, dense_units=640, mlp_layers=3, recurrent_state_size=1024, hidden_size=640),
    "L": dict(cnn_channels_multiplier=64, dense_units=768, mlp_layers=4, recurrent_state_size=2048, hidden_size=768),
    "XL": dict(cnn_channels_multiplier=96, dense_units=1024, mlp_layers=5, recurrent_state_size=4096, hidden_size=1024),
}

PRESETS: dict[str, dict[str, Any]] = {
    **SIZES,
    # Atari (sheeprl's dreamer_v3 experiment): 5M agent steps (20M frames) at action repeat 4, episodes
    # capped at 27,000 agent steps (108,000 frames, 30 minutes of play), size S
    "atari": dict(
        env_id="PongNoFrameskip-v4",
        action_repeat=4,
        max_episode_steps=27000,
        total_steps=5_000_000,
        buffer_size=1_000_000,
        memmap_buffer=True,
        checkpoint_every=100_000,
        replay_ratio=1.0,
        capture_video=True,
    ),
    # DMC from pixels (sheeprl's dreamer_v3_dmc_walker_walk): action repeat 2, 4 envs, 500k agent steps
    # (1M frames), dm_control's own 1000-frame episodes
    "dmc": dict(
        env_id="dmc_walker_walk",
        action_repeat=2,
        num_envs=4,
        total_steps=500_000,
        buffer_size=500_000,
        memmap_buffer=True,
        learning_starts=1300,
        replay_ratio=0.5,
        checkpoint_every=10_000,
        capture_video=True,
    ),
    # DMC from proprioception (the official dmc_proprio block: its 1M-parameter model, about XS)
    "dmc_proprio": dict(
        env_id="dmc_walker_walk",
        action_repeat=2,
        num_envs=4,
        total_steps=500_000,
        buffer_size=500_000,
        learning_starts=1300,
        replay_ratio=0.5,
        observation="state",
        checkpoint_every=10_000,
        **SIZES["XS"],
    ),
    # small vector tasks (CartPole, Pendulum, Acrobot) on a CPU: the small model heron's DreamerV2 is
    # compared with sheeprl's at (hidden 128), and replay ratio 0.5
    "vector": dict(
        dense_units=64,
        mlp_layers=2,
        stochastic_size=16,
        discrete_size=16,
        recurrent_state_size=128,
        hidden_size=128,
        replay_ratio=0.5,
        learning_starts=1024,
        sequence_length=64,
        per_rank_batch_size=16,
        buffer_size=100_000,
    ),
    # a tiny model for seconds-long smoke runs, with this Dreamer's schedule
    "debug": dict(DEBUG, replay_ratio=0.1, bins=15),
}

# heron tune's search space (docs/guide/tuning-export.md, "What is searched"): the learning rates, the
# entropy, the replay ratio and the horizon; the paper keeps the rest fixed across domains
SEARCH_SPACE = {
    "world_lr": {"log": [3e-5, 3e-4]},
    "actor_lr": {"log": [1e-5, 1e-4]},
    "critic_lr": {"log": [1e-5, 1e-4]},
    "actor_ent_coef": {"log": [1e-4, 3e-3]},
    "replay_ratio": {"choices": [0.25, 0.5, 1.0]},
    "horizon": {"choices": [10, 15, 20]},
}
