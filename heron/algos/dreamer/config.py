"""The options both Dreamers share: the env stack's and the episode replay's (``DreamerConfig``), the
checks of their values, and the sizes of the seconds-long smoke runs (``DEBUG``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from heron.config import RunConfig, flag, opt
from heron.errors import HeronError


@dataclass
class DreamerConfig(RunConfig):
    """The options of the env stack (``heron.envs.dreamer``) and of the episode replay, the same
    for both Dreamers. Steps count agent (policy) steps, summed over envs, as in sheeprl: with
    ``--action-repeat k`` an agent step is k env frames (4k on ``ALE/...-v5``)."""

    ALGO: ClassVar[str] = "dreamer"  # each Dreamer's own name, in its messages

    env_id: str = opt("CartPole-v1", "Gymnasium id, ALE id (ALE/Pong-v5, PongNoFrameskip-v4) or dmc_<domain>_<task>")
    total_steps: int = opt(
        1_000_000, "total agent steps (policy steps, summed over envs; frames = steps x action repeat)"
    )
    eval_every: int = opt(0, "deterministic evaluation every N agent steps (0 = only at the end)")
    eval_episodes: int = opt(5, "episodes per evaluation")
    # -- environment
    action_repeat: int = opt(1, "repeat each action k times (ALE/...-v5 skips frames itself: 1 only)")
    clip_rewards: bool = opt(False, "squash rewards with tanh for learning (DreamerV2 on Atari); logs stay raw")
    grayscale: bool = opt(False, "Atari: one grayscale channel instead of RGB")
    observation: str = opt(
        "auto",
        "what the model sees: auto (images of image envs and DMC pixels, else vectors), "
        "pixels (64x64 renders), state (vectors)",
        ("auto", "pixels", "state"),
    )
    cnn_keys: tuple[str, ...] = opt((), "observation keys for the CNN encoder/decoder (empty: every image key)")
    mlp_keys: tuple[str, ...] = opt(
        (), "observation keys for the MLP encoder/decoder (empty: every vector key when there is no image, else none)"
    )
    max_episode_steps: int = opt(
        0,
        "cap episodes at this many agent steps (sheeprl's env.max_episode_steps; "
        "the env's own limit still holds; 0 = only that)",
    )
    # -- replay
    learning_starts: int = opt(2000, "agent steps of random actions before training")
    per_rank_batch_size: int = opt(16, "sequences per gradient step (per process)")
    sequence_length: int = opt(50, "steps per training sequence")
    buffer_size: int = opt(1_000_000, "replay capacity in agent steps")
    buffer_type: str = opt(
        "sequential",
        "sequential: sequences may run on into the next stored episodes (the state "
        "resets at episode starts); episode: sequences inside single episodes, which never "
        "samples episodes shorter than --sequence-length (sheeprl's blocks, the presets)",
        ("sequential", "episode"),
    )
    memmap_buffer: bool = opt(False, "keep the replay in memory-mapped files in the run directory")
    prioritize_ends: bool = opt(False, "sample sequence starts so that episode ends are not undersampled")

    def validate(self) -> None:
        if self.cuda_graphs and self.compile:  # SAC, TD3 and PPO record their compiled step
            raise HeronError(f"{self.ALGO}: --cuda-graphs and --compile are alternatives: choose one")
        super().validate()
        if self.vector_mode == "native" and (self.action_repeat != 1 or self.observation == "pixels"):
            raise HeronError(
                f"--vector-mode native trains {self.ALGO} on the env's vector observations as it "
                "steps them: --action-repeat 1 and no --observation pixels (heron's vector envs do "
                "those)"
            )
        positive(self, "action_repeat", "per_rank_batch_size", "sequence_length", "buffer_size")
        non_negative(self, "learning_starts", "max_episode_steps")
        if self.buffer_size < self.sequence_length:
            raise HeronError(
                f"--buffer-size {self.buffer_size} is smaller than --sequence-length {self.sequence_length}"
            )


def positive(cfg: Any, *names: str) -> None:
    for name in names:
        if getattr(cfg, name) <= 0:
            raise HeronError(f"--{flag(name)} must be positive, got {getattr(cfg, name)}")


def non_negative(cfg: Any, *names: str) -> None:
    for name in names:
        if getattr(cfg, name) < 0:
            raise HeronError(f"--{flag(name)} must be >= 0, got {getattr(cfg, name)}")


def in_unit_interval(cfg: Any, *names: str) -> None:
    for name in names:
        if not 0 <= getattr(cfg, name) <= 1:
            raise HeronError(f"--{flag(name)} must be in [0, 1], got {getattr(cfg, name)}")


# the ``debug`` preset's common part: a tiny model, short sequences, seconds-long runs (each Dreamer
# adds its training schedule)
DEBUG: dict[str, Any] = dict(
    total_steps=300,
    learning_starts=100,
    per_rank_batch_size=4,
    sequence_length=8,
    buffer_size=2000,
    horizon=5,
    hidden_size=16,
    recurrent_state_size=16,
    stochastic_size=4,
    discrete_size=4,
    dense_units=16,
    mlp_layers=1,
    cnn_channels_multiplier=2,
    eval_every=150,
    eval_episodes=1,
    checkpoint_every=150,
    log_every=50,
    max_episode_steps=200,
)
