"""PPO hyperparameters. Defaults follow CleanRL's ppo.py (classic control); DI-engine's options
(DI-engine's: dual clip, value clipping, advantage recomputation, value normalization, off-policy
mode, RNN) are flags; presets carry the tuned blocks for CartPole, MuJoCo and Atari."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from heron.config import RunConfig, flag, opt
from heron.errors import HeronError


@dataclass
class Config(RunConfig):
    env_id: str = opt("CartPole-v1", "Gymnasium environment id (e.g. CartPole-v1, Hopper-v5, ALE/Pong-v5)")
    total_steps: int = opt(500_000, "total environment steps to train for (summed over envs)")
    num_envs: int = opt(4, "number of parallel environments")
    env_backend: str = opt(
        "auto",
        "vector env backend: gymnasium, envpool or ale (Atari: EnvPool's or ALE's own C++ "
        "vector env), auto (envpool for Atari when installed; on resume the checkpoint's)",
        ("auto", "gymnasium", "envpool", "ale"),
    )
    mode: str = opt(
        "on-policy",
        "on-policy PPO, or off-policy PPO on a replay of recent rollouts (DI-engine)",
        ("on-policy", "off-policy"),
    )
    # -- rollouts and epochs
    num_steps: int = opt(128, "steps per env per rollout")
    update_epochs: int = opt(4, "epochs over the rollout per iteration")
    num_minibatches: int = opt(4, "minibatches per epoch")
    # -- objective
    learning_rate: float = opt(2.5e-4, "Adam learning rate")
    anneal_lr: bool = opt(True, "anneal the learning rate linearly to 0 over training")
    gamma: float = opt(0.99, "discount factor")
    gae_lambda: float = opt(0.95, "GAE lambda")
    clip_coef: float = opt(0.2, "surrogate clipping epsilon (also the value clipping range)")
    dual_clip: float = opt(0.0, "dual clip c > 1 for negative advantages (Ye et al. 2020; 0 = off)")
    clip_vloss: bool = opt(True, "clip the value loss around the rollout's values")
    ent_coef: float = opt(0.01, "entropy bonus coefficient")
    vf_coef: float = opt(0.5, "value loss coefficient")
    max_grad_norm: float = opt(0.5, "global gradient-norm clip (0 = off)")
    target_kl: float = opt(0.0, "stop the epochs early when the approximate KL exceeds this (0 = off)")
    norm_adv: bool = opt(True, "normalize advantages per minibatch")
    recompute_adv: bool = opt(True, "recompute advantages with the current value network before every epoch")
    value_norm: bool = opt(False, "learn values normalized by running mean/std of the returns")
    obs_norm: bool = opt(False, "normalize observations with running statistics (saved with the model)")
    reward_scale: bool = opt(False, "divide rewards by the running std of the discounted return")
    # -- networks
    hidden_sizes: tuple[int, ...] = opt((64, 64), "hidden tanh layers (after the CNN for images)")
    shared_network: bool = opt(False, "one body for actor and critic (two heads) instead of two networks")
    state_dependent_std: bool = opt(False, "Gaussian log-std from the network instead of a free parameter")
    init_log_std: float = opt(0.0, "initial log-std of Gaussian policies")
    recurrent: str = opt(
        "none", "recurrent body: hidden state carried across steps, reset at episode starts", ("none", "lstm", "gru")
    )
    rnn_hidden_size: int = opt(128, "recurrent state size (with --recurrent)")
    fused_update: bool = opt(
        True,
        "the hand-written gradient step (heron/accel/handwritten/ppo.py) where it applies: "
        "feed-forward MLPs on vector observations, separate actor and critic, float32; "
        "off: autograd",
    )
    # -- off-policy mode
    replay_rollouts: int = opt(4, "rollouts kept for --mode off-policy (the newest K)")
    nstep: int = opt(5, "n of the n-step value targets in --mode off-policy")

    def validate(self) -> None:
        super().validate()
        if self.vector_mode == "native" and self.recurrent != "none":
            raise HeronError(
                "--vector-mode native trains feed-forward policies; --recurrent needs heron's own vector "
                "envs (--vector-mode sync or async)"
            )
        if self.vector_mode == "native" and self.cuda_graphs:
            raise HeronError(
                "--vector-mode native gives minibatches of varying size (its reset steps are left out); "
                "--cuda-graphs records one size: turn one of them off"
            )
        for name in (
            "num_steps",
            "update_epochs",
            "num_minibatches",
            "learning_rate",
            "rnn_hidden_size",
            "replay_rollouts",
            "nstep",
        ):
            if getattr(self, name) <= 0:
                raise HeronError(f"--{flag(name)} must be positive, got {getattr(self, name)}")
        for name in ("clip_coef", "ent_coef", "vf_coef", "max_grad_norm", "target_kl"):
            if getattr(self, name) < 0:
                raise HeronError(f"--{flag(name)} must be >= 0, got {getattr(self, name)}")
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise HeronError(f"--{flag(name)} must be in [0, 1], got {getattr(self, name)}")
        if self.dual_clip and self.dual_clip <= 1.0:
            raise HeronError(f"--dual-clip must be greater than 1 (or 0 to turn it off), got {self.dual_clip}")
        if self.recurrent != "none":
            if self.num_envs % self.num_minibatches:
                raise HeronError(
                    f"--recurrent minibatches whole env sequences: --num-envs ({self.num_envs}) must "
                    f"be a multiple of --num-minibatches ({self.num_minibatches})"
                )
        elif self.num_envs * self.num_steps < self.num_minibatches:
            raise HeronError(
                f"--num-minibatches ({self.num_minibatches}) exceeds the rollout size "
                f"({self.num_envs} envs x {self.num_steps} steps)"
            )


PRESETS: dict[str, dict[str, Any]] = {
    "debug": dict(
        total_steps=2048,
        num_envs=2,
        num_steps=64,
        update_epochs=2,
        num_minibatches=2,
        hidden_sizes=(32, 32),
        rnn_hidden_size=16,
        eval_every=1024,
        eval_episodes=2,
        log_every=128,
        checkpoint_every=1024,
    ),
    # CartPole and friends: the SB3 zoo's CartPole-v1 block (solves it in 100k steps).
    "classic": dict(
        env_id="CartPole-v1",
        total_steps=100_000,
        num_envs=8,
        num_steps=32,
        num_minibatches=1,
        update_epochs=20,
        learning_rate=1e-3,
        gamma=0.98,
        gae_lambda=0.8,
        ent_coef=0.0,
        eval_every=10_000,
        eval_episodes=10,
    ),
    # Overlay for recurrent policies on classic tasks (the zoo's RecurrentPPO CartPoleNoVel block:
    # --preset classic recurrent). Value normalization keeps the tanh critic out of saturation:
    # without it, returns near 1/(1 - 0.98) = 50 drove every tanh unit to +-1 and the critic
    # froze at a constant (explained variance 0) in 2 of 4 seeds.
    "recurrent": dict(recurrent="lstm", rnn_hidden_size=64, hidden_sizes=(64,), obs_norm=True, value_norm=True),
    # MuJoCo: Tianshou's and the SB3 zoo's continuous-control block with observation normalization,
    # reward scaling, value normalization and a state-independent std.
    # 8 envs x 256 steps (Tianshou collects 2048 steps from 10 envs) and an initial std of
    # exp(-0.5): HalfCheetah reached 4,700 at 1M where 1 env x 2048 steps and std 1 stalled at 1,900.
    "mujoco": dict(
        env_id="Hopper-v5",
        total_steps=1_000_000,
        num_envs=8,
        num_steps=256,
        num_minibatches=32,
        update_epochs=10,
        learning_rate=3e-4,
        ent_coef=0.0,
        vf_coef=0.25,
        clip_vloss=False,
        obs_norm=True,
        reward_scale=True,
        value_norm=True,
        init_log_std=-0.5,
        eval_every=10_000,
        eval_episodes=10,
        checkpoint_every=100_000,
    ),
    # Atari: CleanRL's ppo_atari.py / the SB3 zoo (Nature CNN shared by actor and critic).
    "atari": dict(
        env_id="ALE/Pong-v5",
        total_steps=10_000_000,
        num_envs=8,
        num_steps=128,
        num_minibatches=4,
        update_epochs=4,
        learning_rate=2.5e-4,
        clip_coef=0.1,
        ent_coef=0.01,
        vf_coef=0.5,
        hidden_sizes=(),
        shared_network=True,
        eval_every=250_000,
        eval_episodes=5,
        checkpoint_every=500_000,
    ),
}

# heron tune's search space (docs/guide/tuning-export.md, "What is searched"); the SB3 zoo's PPO ranges.
SEARCH_SPACE = {
    "learning_rate": {"log": [1e-5, 1e-2]},
    "num_steps": {"choices": [32, 64, 128, 256, 512, 1024, 2048]},
    "num_minibatches": {"choices": [1, 2, 4, 8, 16, 32]},
    "update_epochs": {"choices": [1, 3, 5, 10, 20]},
    "gamma": {"choices": [0.9, 0.95, 0.98, 0.99, 0.995, 0.999]},
    "gae_lambda": {"choices": [0.8, 0.9, 0.92, 0.95, 0.98, 0.99, 1.0]},
    "clip_coef": {"choices": [0.1, 0.2, 0.3, 0.4]},
    "ent_coef": {"log": [1e-8, 0.1]},
    "vf_coef": {"range": [0.0, 1.0]},
    "max_grad_norm": {"choices": [0.3, 0.5, 0.7, 1.0, 2.0, 5.0]},
    "hidden_sizes": {"choices": [[64, 64], [256, 256]]},
}
