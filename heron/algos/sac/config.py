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
    policy_frequency: int = opt(2, "actor update every N gradient steps, done N times to compensate (CleanRL)")
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
