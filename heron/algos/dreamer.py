"""What DreamerV2 and DreamerV3 share: their env and replay options, the spaces a saved agent
rebuilds itself from, the replay layout, the policy that acts from an RSSM state, and the loop
that collects experience and calls the algorithm's gradient step.

Data (danijar's layout): replay entry t of an episode holds observation t, the action that led to
it (zeros at the first), the reward received on arriving there, ``is_first`` and ``is_terminal``.
An episode of K env steps is K + 1 entries. A time-limit cut leaves ``is_terminal`` 0 on the last
entry, so a continue model never learns that truncation ends the world.

Each algorithm brings a ``Learner``: its agent (everything a checkpoint's ``agent`` holds), the
player that acts in the real envs, its optimizers, its gradient step ``update(batch [T, B, ...])
-> metrics``, how many gradient steps are due, and what follows each step (the target critic).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from heron.accel.acting import Policy
from heron.config import RunConfig, flag, opt
from heron.envs import dreamer as denvs
from heron.envs.make import VecEnv
from heron.envs.native import require_vector_entry_point
from heron.errors import HeronError
from heron.ops import dist
from heron.ops.rng import rng_state, set_rng_state
from heron.rl.buffers import EpisodeBuffer
from heron.runtime.run import Run


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


# -- envs and spaces ----------------------------------------------------------------------------------
def env_fn(cfg: DreamerConfig, render_mode: str | None = None) -> gym.Env:
    return denvs.make(
        cfg.env_id, cfg.action_repeat, cfg.observation, cfg.grayscale, cfg.max_episode_steps, render_mode=render_mode
    )


def eval_env(cfg: DreamerConfig):
    """Evaluation envs: the training stack (``heron.api`` hands this to Run and ``heron eval``)."""
    return functools.partial(env_fn, cfg)


def spaces_of(cfg: DreamerConfig, obs_space: gym.spaces.Dict, act_space: gym.Space) -> dict:
    """What a saved agent needs to rebuild itself: observation spec, encoder keys, actions."""
    spec = {k: [list(s.shape or ()), str(s.dtype)] for k, s in obs_space.spaces.items()}
    images = [k for k, (shape, _) in spec.items() if len(shape) == 3]
    vectors = [k for k, (shape, _) in spec.items() if len(shape) == 1]
    if cfg.cnn_keys or cfg.mlp_keys:
        cnn, mlp = list(cfg.cnn_keys), list(cfg.mlp_keys)
    else:
        cnn, mlp = images, ([] if images else vectors)
    for k in cnn + mlp:
        if k not in spec:
            raise HeronError(f"observation key {k!r} not in {cfg.env_id}'s observations ({', '.join(spec)})")
    for k in cnn:
        if k not in images or spec[k][0][1:] != [denvs.SIZE, denvs.SIZE]:
            raise HeronError(f"--cnn-keys {k}: needs a [C, 64, 64] image, {cfg.env_id} gives {spec[k][0]}")
    for k in mlp:
        if k not in vectors:
            raise HeronError(f"--mlp-keys {k}: needs a vector, {cfg.env_id} gives {spec[k][0]}")
    if not cnn + mlp:
        raise HeronError(f"{cfg.ALGO} has nothing to encode for {cfg.env_id}: choose --cnn-keys or --mlp-keys")
    out: dict[str, Any]
    if isinstance(act_space, gym.spaces.Discrete):
        out = {"discrete": True, "action_dim": int(act_space.n)}
    elif (
        isinstance(act_space, gym.spaces.Box)
        and len(act_space.shape) == 1
        and np.all(np.isfinite(act_space.low))
        and np.all(np.isfinite(act_space.high))
    ):
        out = {
            "discrete": False,
            "action_dim": int(act_space.shape[0]),
            "action_low": torch.as_tensor(act_space.low, dtype=torch.float32),
            "action_high": torch.as_tensor(act_space.high, dtype=torch.float32),
        }
    else:
        raise HeronError(f"{cfg.ALGO} supports Discrete and bounded 1-D Box actions; {cfg.env_id} has {act_space}")
    return {"obs_spec": spec, "cnn_keys": cnn, "mlp_keys": mlp, **out}


def check(cfg: DreamerConfig) -> dict:
    """Reject an env or option the Dreamers cannot handle, before a run directory exists; returns
    the spaces a checkpoint saves (resume and eval compare them)."""
    if cfg.vector_mode == "native":
        require_vector_entry_point(cfg.env_id)
    env = env_fn(cfg)
    try:
        assert isinstance(env.observation_space, gym.spaces.Dict), "the Dreamers' env stack makes Dict observations"
        return spaces_of(cfg, env.observation_space, env.action_space)
    finally:
        env.close()


def obs_spec(spaces: dict) -> dict[str, tuple]:
    return {k: tuple(shape) for k, (shape, _) in spaces["obs_spec"].items()}


def to_env_actions(actions: torch.Tensor, spaces: dict) -> np.ndarray:
    """One-hot -> indices; [-1, 1] -> the action bounds."""
    if spaces["discrete"]:
        return actions.argmax(-1).cpu().numpy()
    low, high = spaces["action_low"].to(actions.device), spaces["action_high"].to(actions.device)
    return (low + (actions + 1.0) * 0.5 * (high - low)).cpu().numpy()


# -- imagination --------------------------------------------------------------------------------------
def imagine(
    actor: torch.nn.Module,
    rssm: Any,  # the algorithm's RSSM: imagine_step(h, z, action) -> (h, z)
    h: torch.Tensor,
    z: torch.Tensor,
    horizon: int,
    to_dynamics: Callable[[torch.Tensor], torch.Tensor] = lambda action: action,
    dynamics_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Both Dreamers' imagination from every posterior state (``h``, ``z`` [T, B, ...], detached
    here): at each of ``horizon`` steps the actor, from the detached state, picks an action, whose
    log-probability and the policy's entropy are kept (the actor loss scores this policy), and the
    prior steps on ``to_dynamics(action)``, with gradients only when ``dynamics_grad``. Returns the
    states [H + 1, M, F] (s_0 a posterior state .. s_H), log-probabilities and entropies [H, M]."""
    h_t, z_t = h.detach().flatten(0, 1), z.detach().flatten(0, 1)
    feats, log_probs, entropies = [torch.cat([z_t, h_t], -1)], [], []
    for _ in range(horizon):
        pi = actor(feats[-1].detach())
        action = pi.rsample()
        log_probs.append(pi.log_prob(action.detach()))
        entropies.append(pi.entropy())
        with torch.set_grad_enabled(dynamics_grad and torch.is_grad_enabled()):
            h_t, z_t = rssm.imagine_step(h_t, z_t, to_dynamics(action))
        feats.append(torch.cat([z_t, h_t], -1))
    return torch.stack(feats), torch.stack(log_probs), torch.stack(entropies)


# -- the policy ---------------------------------------------------------------------------------------
class DreamerPolicy(Policy):
    """``predict(obs)`` for dict observations (one, or a batch of [B, ...] per key); carries the
    player's state (RSSM state and previous action) between calls, ``reset()`` at episode starts.

    The player: ``act(obs, state, deterministic, is_first)`` and ``initial_state(batch, device)``
    (zeros for DreamerV2, the learned initial state for DreamerV3)."""

    def __init__(self, player: Any, spaces: dict, device: str | torch.device = "cpu"):
        super().__init__(player, (), player.state_size, device)
        self.spaces = spaces
        self.keys = list(spaces["cnn_keys"]) + list(spaces["mlp_keys"])
        self.spec = obs_spec(spaces)

    def on_host(self) -> Policy:
        """Itself: the player (RSSM, encoder and actor, hundreds of units wide) is not the few small
        products that a CPU copy runs faster than the accelerator."""
        return self

    def reset(self, batch: int = 1) -> None:
        self.state = self.actor.initial_state(batch, self.device)

    def predict(self, obs: dict[str, np.ndarray], deterministic: bool = True) -> np.ndarray:  # type: ignore[override]  # Dict observations
        if not isinstance(obs, dict):
            raise ValueError(f"expected a dict of observations with keys {self.keys}")
        first = np.asarray(obs[self.keys[0]])
        single = first.shape == self.spec[self.keys[0]]
        x = {k: torch.as_tensor(np.asarray(obs[k]), device=self.device) for k in self.keys}
        if single:
            x = {k: v.unsqueeze(0) for k, v in x.items()}
        batch = x[self.keys[0]].shape[0]
        if self.state is None or self.state.shape[0] != batch:
            self.reset(batch)
        action, self.state = self.actor.act(x, self.state, deterministic)
        out = to_env_actions(action, self.spaces)
        return out[0] if single else out


def load_player(player: Any, state: dict, device: str | torch.device = "cpu") -> Policy:
    """The policy of a checkpoint's ``actor`` entry (the player's weights)."""
    player.load_state_dict(state["actor"])
    return DreamerPolicy(player, state["spaces"], device)


# -- the replay ---------------------------------------------------------------------------------------
def replay(cfg: DreamerConfig, run: Run, spaces: dict) -> EpisodeBuffer:
    fields = {
        k: (tuple(shape), np.dtype(dt))
        for k, (shape, dt) in spaces["obs_spec"].items()
        if k in spaces["cnn_keys"] or k in spaces["mlp_keys"]
    }
    fields.update(
        action=((spaces["action_dim"],), np.float32),
        reward=((), np.float32),
        is_first=((), np.bool_),
        is_terminal=((), np.bool_),
    )
    folder = "buffer" if run.world.is_main else f"buffer/rank{run.world.rank}"  # each rank its own files
    memmap_dir = str(run.run_dir / folder) if cfg.memmap_buffer else None
    # this process's share of --buffer-size, for its envs, sampled with its own stream
    return EpisodeBuffer(
        run.local(cfg.buffer_size),
        run.local(cfg.num_envs),
        fields,
        cfg.sequence_length,
        cfg.prioritize_ends,
        memmap_dir=memmap_dir,
        seed=run.rank_seed(),
        cross_episodes=cfg.buffer_type == "sequential",
    )


# -- the loop -----------------------------------------------------------------------------------------
@dataclass
class Learner:
    """An algorithm's part of the loop (module doc)."""

    agent: torch.nn.Module
    player: Any  # the algorithm's Player (act, initial_state, state_size)
    optimizers: dict[str, torch.optim.Optimizer]
    update: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]
    due: Callable[[int, int, int], int]  # (global step, previous step, gradient steps so far) -> steps due now
    after_update: Callable[[int], None]  # called with the count of gradient steps after each one
    warn_terminations: bool = False  # DreamerV2 without a continue model: say once that terminations go unseen


def train(cfg: DreamerConfig, run: Run, make_learner: Callable[[Run, dict], Learner]) -> dict:
    """Collect experience with the player, store whole episodes, and take the gradient steps the
    learner says are due once ``--learning-starts`` agent steps of random actions are stored."""
    device = run.device
    N = run.local(cfg.num_envs)  # this process's envs (all of them without torchrun)
    envs = run.own(
        denvs.NativeStates(cfg.env_id, N, run.env_seed(N))
        if cfg.vector_mode == "native"
        else VecEnv(cfg.env_id, N, run.env_seed(N), cfg.vector_mode, env_fn=functools.partial(env_fn, cfg))
    )
    spaces = spaces_of(cfg, envs.single_observation_space, envs.single_action_space)
    keys = list(spaces["cnn_keys"]) + list(spaces["mlp_keys"])
    A, discrete = spaces["action_dim"], spaces["discrete"]
    np_rng = np.random.default_rng(run.rank_seed())  # random actions before learning starts
    rb = replay(cfg, run, spaces)
    learner = make_learner(run, spaces)
    agent, player, optimizers = learner.agent, learner.player, learner.optimizers

    def sample_batch() -> dict[str, torch.Tensor]:
        """[T, B, ...] tensors on the device; images stay uint8 until there."""
        data = rb.sample(cfg.per_rank_batch_size)
        return {
            k: torch.from_numpy(np.ascontiguousarray(np.swapaxes(v, 0, 1))).to(device, non_blocking=True)
            for k, v in data.items()
        }

    def policy_state() -> dict:
        return {"actor": player.state_dict(), "spaces": spaces}

    def full_state() -> dict:
        return {
            **policy_state(),
            "agent": agent.state_dict(),
            **{k: o.state_dict() for k, o in optimizers.items()},
            "n_updates": n_updates,
            "rng": rng_state(np_rng),
            "envs": envs.state_dict(),
        }

    def buffer_state() -> dict:
        state = rb.state_dict()
        # an env whose episode has just started holds only its first entry: resume replays that reset
        fresh = envs.episode_lengths == 0
        state["staging"] = [None if fresh[i] else s for i, s in enumerate(state["staging"])]
        return state

    def checkpoint_state() -> tuple[dict, dict]:
        return full_state(), buffer_state()

    # -- start or resume ------------------------------------------------------------------------------
    global_step, n_updates = 0, 0
    obs = envs.reset()
    if run.resume_state is not None:
        s = run.resume_state
        agent.load_state_dict(s["agent"])
        for k, o in optimizers.items():
            o.load_state_dict(s[k])
        if run.resume_buffer is None:
            raise HeronError(f"{run.run_dir}: the latest checkpoint has no replay buffer file")
        rb.load_state_dict(run.resume_buffer)
        set_rng_state(s["rng"], np_rng)
        obs = envs.load_state_dict(s["envs"])
        global_step, n_updates = int(s["step"]), int(s["n_updates"])
        run.resume_buffer = None  # the mapped file is in place now

    def first_entries(o: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {
            **{k: o[k] for k in keys},
            "action": np.zeros((N, A), np.float32),
            "reward": np.zeros(N, np.float32),
            "is_first": np.ones(N, bool),
            "is_terminal": np.zeros(N, bool),
        }

    rb.add(first_entries(obs), np.zeros(N, bool))
    is_first = torch.ones(N, dtype=torch.bool, device=device)
    p_state = torch.zeros(N, player.state_size, device=device)  # is_first: the player starts it afresh
    policy = DreamerPolicy(player, spaces, device)
    metrics: dict[str, torch.Tensor] = {}
    warned_terminal = not learner.warn_terminations
    warned_short = cfg.buffer_type == "sequential"

    # -- the loop -------------------------------------------------------------------------------------
    while global_step < cfg.total_steps:
        if global_step < cfg.learning_starts:
            # uniform random actions from the run's seeded generator (saved in checkpoints)
            if discrete:
                env_actions = np_rng.integers(0, A, size=N)
                actions = np.eye(A, dtype=np.float32)[env_actions]
            else:
                actions = np_rng.uniform(-1.0, 1.0, size=(N, A)).astype(np.float32)
                env_actions = to_env_actions(torch.from_numpy(actions), spaces)
        else:
            obs_t = {k: torch.as_tensor(obs[k], device=device) for k in keys}
            actions_t, p_state = player.act(obs_t, p_state, False, is_first)
            actions = actions_t.cpu().numpy().astype(np.float32)
            env_actions = to_env_actions(actions_t, spaces)
        step = envs.step(env_actions)
        done = step.terminated | step.truncated
        # a native env's reset rows are no transition (step.valid), and its episodes begin there (step.started)
        rb.add(
            {
                **{k: step.next_obs[k] for k in keys},
                "action": actions,
                "reward": step.rewards,
                "is_first": np.zeros(N, bool),
                "is_terminal": step.terminated,
            },
            done,
            mask=step.valid,
        )
        started = done if step.started is None else step.started
        if started.any():
            rb.add(first_entries(step.obs), np.zeros(N, bool), mask=started)
        is_first = torch.as_tensor(started, device=device)
        if not warned_terminal and step.terminated.any():
            warned_terminal = True
            run.logger.warn(
                f"{cfg.env_id} ends episodes by termination but --use-continues is off: imagined "
                "returns will not see those ends (pass --use-continues)"
            )
        if not warned_short and rb.short_episodes:
            warned_short = True
            run.logger.warn(
                f"{cfg.env_id} ended an episode shorter than --sequence-length {cfg.sequence_length}: "
                "the episode buffer never samples such episodes (--buffer-type sequential does)"
            )
        obs = step.obs
        prev_step, global_step = global_step, global_step + cfg.num_envs  # every rank's envs
        for _, ret, length in step.episodes:
            run.logger.episode(global_step, ret, length)

        # -- training (under torchrun every rank must be able to sample, or none trains: one collective
        # per step)
        if global_step >= cfg.learning_starts and dist.all_ranks(rb.sampleable()):
            for _ in range(learner.due(global_step, prev_step, n_updates)):
                metrics = run.watch(learner.update(sample_batch()), global_step)
                n_updates += 1
                learner.after_update(n_updates)

        run.after_step(
            global_step,
            prev_step,
            metrics,
            {"charts/gradient_steps": n_updates, "charts/buffer_steps": len(rb)},
            policy,
            policy_state,
            checkpoint_state,
        )

    return run.finish(global_step, policy, policy_state, checkpoint_state)
