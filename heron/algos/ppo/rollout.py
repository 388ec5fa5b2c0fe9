"""PPO's data collection: ``Rollouts.collect`` plays ``--num-steps`` steps of every env with the
current policy (``heron.algos.ppo.acting.RolloutActing``) and stores them, ``[T, N, ...]``, in the
rollout buffer: the newest rollout on-policy, the newest ``--replay-rollouts`` in the off-policy
mode (DI-engine's off-policy PPO), with the recurrent state at the rollout's start
(``--recurrent``) and, for a native vector env in next-step autoreset mode, which rows hold no
transition (``valid``: the step that only reset an env)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from heron.algos.ppo.acting import RolloutActing
from heron.algos.ppo.agent import obs_dtype
from heron.algos.ppo.config import Config
from heron.algos.ppo.networks import ActorCritic
from heron.ops import dist
from heron.rl.buffers import RolloutBuffer
from heron.rl.returns import RewardScaler
from heron.runtime.run import Run


class Rollouts:
    """The rollout buffer and what fills it: the acting object, the reward scale (``--reward-scale``)
    and the envs."""

    def __init__(self, cfg: Config, run: Run, envs: Any, model: ActorCritic, spaces: dict):
        self.cfg, self.run, self.envs, self.model = cfg, run, envs, model
        self.device, self.T, self.N = run.device, cfg.num_steps, run.local(cfg.num_envs)  # N: this process's envs
        # a native vector env in next-step autoreset mode spends one step per finished episode on its
        # reset: that row holds no transition (``Step.valid``) and no minibatch draws it
        self.masked = cfg.vector_mode == "native"
        head = model.pi_head
        act_shape = {
            "discrete": (),
            "multidiscrete": (len(spaces["action"].get("nvec", ())),),
            "box": (len(spaces["action"].get("low", ())),),
        }[head.kind]
        f32, obs_shape = torch.float32, tuple(spaces["obs_shape"])
        self.buf = RolloutBuffer(
            cfg.replay_rollouts if cfg.mode == "off-policy" else 1,
            self.T,
            self.N,
            {
                "obs": (obs_shape, obs_dtype(spaces)),
                "next_obs": (obs_shape, obs_dtype(spaces)),
                "actions": (act_shape, f32 if head.kind == "box" else torch.int64),
                "logp": ((), f32),
                "values": ((), f32),
                "rewards": ((), f32),
                "terminated": ((), torch.bool),
                "truncated": ((), torch.bool),
                "starts": ((), torch.bool),
                **({"valid": ((), torch.bool)} if self.masked else {}),
            },
            {"state0": ((model.state_size,), f32)},
            self.device,
        )
        moments = dist.global_moments if run.world.distributed else None
        self.scaler = RewardScaler(self.N, cfg.gamma, moments=moments) if cfg.reward_scale else None
        self.acting = RolloutActing(model, self.N, self.device, cfg)
        self.rollout_obs = torch.empty(0)  # the latest rollout's observations (``collect``)

    def collect(
        self, obs: Any, state: torch.Tensor, starts: Any, global_step: int
    ) -> tuple[Any, torch.Tensor, Any, int]:
        """One rollout from ``obs`` (``starts``: which of them begin an episode) and the recurrent
        ``state`` before them, into the buffer; returns where it leaves off: the obs to act on next,
        their starts, the state and the env step count."""
        envs, T, N, device, model, scaler = self.envs, self.T, self.N, self.device, self.model, self.scaler
        w = self.buf.writing()
        w["state0"].copy_(state)
        # each step's tensors and arrays are kept in lists and written to the buffer once per rollout
        # (one stack per field, not nine indexed copies per env step; envs return new arrays per step)
        seen: dict[str, list[Any]] = {name: [] for name in ("obs", "actions", "logp", "values")}
        got: dict[str, list[Any]] = {
            name: [] for name in ("rewards", "starts", "terminated", "truncated") + (("valid",) if self.masked else ())
        }
        finals = []  # (step, envs, their final obs) where episodes ended: the only next_obs not the next obs
        self.acting.rollout(model.pi_head.noise((T, N), device))  # the rollout's sampling noise, one draw
        for t in range(T):
            if model.state_size:  # a fresh recurrent state where an episode starts
                state = state * (~torch.as_tensor(starts, device=device)).unsqueeze(-1).float()
            obs_t, to_env, actions, logp, v, state = self.acting.act(t, obs, state)
            step = envs.step(to_env)
            global_step += self.cfg.num_envs  # every rank's envs
            done = step.terminated | step.truncated
            valid = (torch.ones_like(done) if envs.tensors else np.ones(N, bool)) if step.valid is None else step.valid
            for name, value in zip(seen, (obs_t, actions, logp, v)):
                seen[name].append(value)
            rewards = scaler(step.rewards, done) if scaler else step.rewards
            for name, value in zip(got, (rewards, starts, step.terminated, step.truncated, valid)):
                got[name].append(value)
            if done.any():  # (a tensor env's: tensors on its device)
                ended = done.nonzero().flatten() if envs.tensors else np.flatnonzero(done)
                finals.append(
                    (torch.full((len(ended),), t), torch.as_tensor(ended).cpu(), torch.as_tensor(step.next_obs[ended]))
                )
            obs, starts = step.obs, done if step.started is None else step.started
            for _, ret, length in step.episodes:
                self.run.logger.episode(global_step, ret, length)
        for name, parts in seen.items():  # [T, N, ...]
            on_device = torch.is_tensor(parts[0])  # (from numpy acting: arrays)
            stacked = torch.stack(parts) if on_device else torch.from_numpy(np.stack(parts)).to(device)
            w[name].copy_(stacked if name != "values" else model.value_norm.denormalize(stacked))
        for name, arrays in got.items():
            w[name].copy_(torch.stack(arrays) if envs.tensors else torch.from_numpy(np.stack(arrays)))
        # next_obs_t is obs_{t+1} except at the last step and where an episode ended: a copy where the
        # rollout already is (on a GPU: frames uploaded once, not twice), then the exceptions
        w["next_obs"][:-1].copy_(w["obs"][1:])
        w["next_obs"][-1].copy_(torch.as_tensor(step.next_obs))
        if finals:
            rows, cols, final = (torch.cat(part) for part in zip(*finals))
            w["next_obs"][rows, cols] = final.to(device, w["next_obs"].dtype)
        self.buf.commit()
        self.rollout_obs = w["obs"]  # [T, N, ...]: the rollout's observations, in the buffer
        return obs, state, starts, global_step
