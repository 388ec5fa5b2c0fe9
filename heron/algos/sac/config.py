"""SAC hyperparameters. Defaults follow CleanRL's sac_continuous_action.py; skrl's
options (gradient clipping, learning-rate schedules, RNN) are off by default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from heron.config import OffPolicyConfig, opt
from heron.errors import HeronError


@dataclass
class Config(OffPolicyConfig):
    policy_lr: float = opt(3e-4, "actor learning rate (CleanRL)")
    q_lr: float = opt(1e-3, "critic learning rate (CleanRL); also the entropy coefficient's")
    policy_frequency: int = opt(
        2, "actor update every N gradient steps, done N times to compensate (CleanRL); once with --crossq"
    )
    target_network_frequency: int = opt(1, "Polyak update of the target critics every N gradient steps")
    autotune: bool = opt(True, "tune the entropy coefficient automatically (SAC v2)")
    alpha: float = opt(0.2, "entropy coefficient (initial value when --autotune)")
    target_entropy_scale: float = opt(1.0, "target entropy = -scale * action dimensions")
    lr_schedule: str = opt("constant", "learning-rate schedule over training (skrl)", ("constant", "linear", "cosine"))
    recurrent: str = opt(
        "none", "recurrent actor and critics for partial observability (skrl SAC_RNN)", ("none", "lstm", "gru")
    )
    rnn_hidden_size: int = opt(128, "recurrent state size (with --recurrent)")
    sequence_length: int = opt(16, "length of sampled training sequences (with --recurrent)")
    burn_in: int = opt(0, "leading steps of each sequence that only warm up the recurrent state")
    crossq: bool = opt(
        False,
        "CrossQ (Bhatt et al. 2024): batch renormalisation in actor and critics, one critic forward on "
        "(s, a) and (s', a') together, no target networks (--preset crossq: the paper's settings)",
    )
    critic_hidden_sizes: tuple[int, ...] = opt((), "critic hidden layer sizes (empty: --hidden-sizes)")
    bn_momentum: float = opt(0.01, "--crossq: rate at which batch renormalisation's running statistics move")
    bn_warmup: int = opt(
        100_000, "--crossq: training forwards of each batch renormalisation layer before it renormalises"
    )
    adam_beta1: float = opt(0.9, "Adam's first-moment decay for the actor, critics and entropy coefficient")
    fused_update: bool = opt(
        True,
        "the hand-written gradient step (heron/accel/handwritten/sac.py) where it applies: "
        "feed-forward networks, float32 or bf16-mixed, no --compile; off: autograd",
    )

    def validate(self) -> None:
        super().validate()
        for name in ("target_network_frequency", "rnn_hidden_size", "sequence_length"):
            if getattr(self, name) <= 0:
                raise HeronError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.critic_hidden_sizes and min(self.critic_hidden_sizes) <= 0:
            raise HeronError(f"--critic-hidden-sizes must be positive, got {list(self.critic_hidden_sizes)}")
        if not 0.0 < self.bn_momentum <= 1.0:
            raise HeronError(f"--bn-momentum must be in (0, 1], got {self.bn_momentum}")
        if self.bn_warmup < 0:
            raise HeronError(f"--bn-warmup must be >= 0, got {self.bn_warmup}")
        if not 0.0 <= self.adam_beta1 < 1.0:
            raise HeronError(f"--adam-beta1 must be in [0, 1), got {self.adam_beta1}")
        if self.crossq and self.recurrent != "none":
            raise HeronError("--crossq has feed-forward networks: it does not combine with --recurrent")
        if self.alpha < 0 or (self.autotune and self.alpha == 0):
            raise HeronError(f"--alpha must be >= 0 (> 0 with --autotune, its initial value), got {self.alpha}")
        if self.recurrent == "none":
            if self.burn_in:
                raise HeronError("--burn-in applies to sequences: it needs --recurrent lstm|gru")
            return
        if self.n_step > 1:
            raise HeronError("--n-step applies to feed-forward SAC; with --recurrent the targets are one-step")
        if not 0 <= self.burn_in < self.sequence_length:
            raise HeronError("--burn-in must be >= 0 and smaller than --sequence-length")
        if self.learning_starts < self.sequence_length * self.num_envs:
            raise HeronError(
                f"--learning-starts must be at least --sequence-length x --num-envs "
                f"({self.sequence_length * self.num_envs}) with --recurrent"
            )


PRESETS: dict[str, dict[str, Any]] = {
    "debug": dict(
        total_steps=1500,
        learning_starts=300,
        batch_size=64,
        buffer_size=5000,
        hidden_sizes=(64, 64),
        eval_every=750,
        eval_episodes=2,
        checkpoint_every=750,
        log_every=100,
        sequence_length=8,
    ),
    "pendulum": dict(
        env_id="Pendulum-v1",
        total_steps=15_000,
        learning_starts=1000,
        policy_lr=1e-3,
        eval_every=5000,
        eval_episodes=30,
    ),
    # CrossQ's settings (Bhatt et al. 2024, and sb3-contrib's CrossQ where the paper leaves them open):
    # learning rate 1e-3 for actor, critics and entropy coefficient; Adam beta1 0.5; the actor every
    # third update; 2048-wide critics and 256-wide actor; batch renormalisation with momentum 0.01
    # (the paper's 0.99 in flax's convention) and 100k warm-up forwards
    "crossq": dict(
        crossq=True,
        policy_lr=1e-3,
        q_lr=1e-3,
        adam_beta1=0.5,
        policy_frequency=3,
        hidden_sizes=(256, 256),
        critic_hidden_sizes=(2048, 2048),
        bn_momentum=0.01,
        bn_warmup=100_000,
    ),
    "mujoco": dict(
        total_steps=1_000_000,
        learning_starts=5000,
        buffer_size=1_000_000,
        eval_every=10_000,
        eval_episodes=10,
        checkpoint_every=100_000,
    ),
}

# heron tune's search space (docs/guide/tuning-export.md, "What is searched"): log = log-uniform, range = uniform, int,
# choices. The SB3 zoo's SAC ranges, narrowed to what trains at all at these budgets.
SEARCH_SPACE = {
    "policy_lr": {"log": [1e-5, 3e-3]},
    "q_lr": {"log": [1e-5, 3e-3]},
    "batch_size": {"choices": [64, 128, 256, 512]},
    "gamma": {"choices": [0.95, 0.98, 0.99, 0.995, 0.999]},
    "tau": {"choices": [0.001, 0.005, 0.01, 0.02, 0.05]},
    "learning_starts": {"choices": [1000, 5000, 10000]},
    "hidden_sizes": {"choices": [[64, 64], [256, 256], [400, 300]]},
}
