"""SAC hyperparameters. Defaults follow CleanRL's sac_continuous_action.py (seed 000) except where
noted; the skrl options (seed 002: gradient clipping, LR schedulers, RNN) are off by default."""

from __future__ import annotations

from dataclasses import dataclass

from heron.config import HeronError, RunConfig, opt


@dataclass
class Config(RunConfig):
    buffer_size: int = opt(1_000_000, "replay buffer capacity in transitions")
    buffer_device: str = opt("auto", "where replay data lives: auto (the training device), cpu, or cuda")
    gamma: float = opt(0.99, "discount factor")
    tau: float = opt(0.005, "target network Polyak coefficient")
    batch_size: int = opt(256, "transitions per gradient step")
    learning_starts: int = opt(5000, "env steps of uniform random actions before learning starts")
    policy_lr: float = opt(3e-4, "actor learning rate (CleanRL)")
    q_lr: float = opt(1e-3, "critic learning rate (CleanRL); also the entropy coefficient's")
    policy_frequency: int = opt(2, "actor update every N gradient steps, done N times to compensate (CleanRL)")
    target_network_frequency: int = opt(1, "Polyak update of the target critics every N gradient steps")
    gradient_steps: int = opt(1, "gradient steps per vector env step")
    hidden_sizes: tuple[int, ...] = opt((256, 256), "hidden layer sizes of actor and critics")
    autotune: bool = opt(True, "tune the entropy coefficient automatically (SAC v2)")
    alpha: float = opt(0.2, "entropy coefficient (initial value when --autotune)")
    target_entropy_scale: float = opt(1.0, "target entropy = -scale * action dimensions")
    max_grad_norm: float = opt(0.0, "clip actor and critic gradient norms to this (0 = off; skrl)")
    lr_schedule: str = opt("constant", "learning-rate schedule over training (skrl)", ("constant", "linear", "cosine"))
    obs_norm: bool = opt(False, "normalize observations with running statistics (saved with the model)")
    recurrent: str = opt("none", "recurrent actor and critics for partial observability (skrl SAC_RNN)",
                         ("none", "lstm", "gru"))
    rnn_hidden_size: int = opt(128, "recurrent state size (with --recurrent)")
    sequence_length: int = opt(16, "length of sampled training sequences (with --recurrent)")
    burn_in: int = opt(0, "leading steps of each sequence that only warm up the recurrent state")

    def validate(self) -> None:
        super().validate()
        for name in ("policy_lr", "q_lr", "batch_size", "buffer_size", "gradient_steps", "policy_frequency",
                     "target_network_frequency", "rnn_hidden_size", "sequence_length"):
            if getattr(self, name) <= 0:
                raise HeronError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.learning_starts < 0 or self.alpha < 0 or self.max_grad_norm < 0:
            raise HeronError("--learning-starts, --alpha and --max-grad-norm must be >= 0")
        if not 0.0 <= self.gamma <= 1.0:
            raise HeronError(f"--gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise HeronError(f"--tau must be in (0, 1], got {self.tau}")
        if self.batch_size > self.buffer_size:
            raise HeronError(f"--batch-size {self.batch_size} is larger than --buffer-size {self.buffer_size}")
        if self.buffer_size < self.num_envs:
            raise HeronError(f"--buffer-size {self.buffer_size} is smaller than --num-envs {self.num_envs}")
        if not self.hidden_sizes:
            raise HeronError("--hidden-sizes needs at least one layer")
        if self.burn_in >= self.sequence_length:
            raise HeronError("--burn-in must be smaller than --sequence-length")


PRESETS = {
    "debug": dict(total_steps=1500, learning_starts=300, batch_size=64, buffer_size=5000, hidden_sizes=(64, 64),
                  eval_every=750, eval_episodes=2, checkpoint_every=750, log_every=100, sequence_length=8),
    "pendulum": dict(env_id="Pendulum-v1", total_steps=15_000, learning_starts=1000, policy_lr=1e-3,
                     eval_every=5000, eval_episodes=10),
    "mujoco": dict(total_steps=1_000_000, learning_starts=5000, buffer_size=1_000_000, eval_every=10_000,
                   eval_episodes=10, checkpoint_every=100_000),
}
