"""TD3 hyperparameters: the 15-step walkthrough's, with the TD3 paper's learning rate (Fujimoto et
al. 2018: Adam at 1e-3, which the walkthrough and Stable-Baselines3 use too) and the authors'
updated reference settings for the rest (256-256, batch 256, 25,000 random steps). The learning
rate was chosen by measurement, at short budgets beside Stable-Baselines3 and to 300k steps on
Hopper and Walker2d beside the updated code's 3e-4 (docs/algorithms/td3.md, "Which learning
rate")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from heron.config import OffPolicyConfig, opt
from heron.errors import HeronError


@dataclass
class Config(OffPolicyConfig):
    learning_starts: int = opt(25_000, "env steps of uniform random actions before learning starts (start_timesteps)")
    policy_lr: float = opt(1e-3, "actor learning rate (the TD3 paper's)")
    q_lr: float = opt(1e-3, "critic learning rate (as --policy-lr)")
    policy_frequency: int = opt(2, "policy delay d: actor and target updates every d critic updates")
    exploration_noise: float = opt(0.1, "std of Gaussian exploration noise, as a fraction of the action half-range")
    policy_noise: float = opt(0.2, "std of target policy smoothing noise (fraction of the action half-range)")
    noise_clip: float = opt(0.5, "clip of the target smoothing noise (fraction of the action half-range)")
    fused_update: bool = opt(
        True,
        "the hand-written gradient step (heron/accel/handwritten/td3.py) where it applies: "
        "on the CPU, float32 or bf16-mixed, no --compile; off: autograd",
    )

    def validate(self) -> None:
        super().validate()
        for name in ("exploration_noise", "policy_noise", "noise_clip"):
            if getattr(self, name) < 0:
                raise HeronError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")


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
    ),
    "pendulum": dict(env_id="Pendulum-v1", total_steps=15_000, learning_starts=1000, eval_every=5000, eval_episodes=30),
    # the authors' updated code's budget and warm-up (its learning rate, 3e-4, learned more slowly)
    "mujoco": dict(
        total_steps=1_000_000,
        learning_starts=25_000,
        buffer_size=1_000_000,
        eval_every=10_000,
        eval_episodes=10,
        checkpoint_every=100_000,
    ),
    # The walkthrough's and the original paper's network and optimizer settings.
    "original": dict(hidden_sizes=(400, 300), batch_size=100, policy_lr=1e-3, q_lr=1e-3, learning_starts=10_000),
}

# heron tune's search space (docs/guide/tuning-export.md, "What is searched"); the SB3 zoo's TD3 ranges.
SEARCH_SPACE = {
    "policy_lr": {"log": [1e-5, 3e-3]},
    "q_lr": {"log": [1e-5, 3e-3]},
    "batch_size": {"choices": [64, 100, 128, 256, 512]},
    "gamma": {"choices": [0.95, 0.98, 0.99, 0.995, 0.999]},
    "tau": {"choices": [0.001, 0.005, 0.01, 0.02]},
    "exploration_noise": {"range": [0.05, 0.5]},
    "policy_noise": {"choices": [0.1, 0.2, 0.3]},
    "hidden_sizes": {"choices": [[64, 64], [256, 256], [400, 300]]},
}
