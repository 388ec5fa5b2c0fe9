"""PPO, read top to bottom (DI-engine's PPO, with every option it names; the loop follows CleanRL's ppo.py).

One iteration: collect ``--num-steps`` x ``--num-envs`` steps (``rollout.py``), then
``--update-epochs`` epochs of ``--num-minibatches`` minibatches of the clipped surrogate
(``learn.py``). Two modes:

* on-policy: GAE(lambda) advantages; the ratio is taken against the policy that collected the data.
* off-policy (DI-engine's off-policy PPO): the newest ``--replay-rollouts`` rollouts are kept;
  minibatches are drawn from all of them; the ratio is taken against each sample's STORED
  behaviour log-prob (importance ratio), and values learn from n-step targets (``--nstep``),
  which, unlike GAE(lambda), do not assume the data came from the current policy's critic.
"""

from __future__ import annotations

import numpy as np
import torch

from heron.accel.acting import Policy
from heron.accel.step import build_step
from heron.algos import offpolicy
from heron.algos.ppo.agent import Nets, build, load_policy, obs_dtype
from heron.algos.ppo.config import Config
from heron.algos.ppo.learn import Learning, make_update
from heron.algos.ppo.rollout import Rollouts
from heron.algos.ppo.spaces import make_envs, spaces_of
from heron.errors import HeronError
from heron.ops import dist
from heron.ops.adam import adam
from heron.ops.rng import set_rng_state
from heron.rl.schedules import set_lr
from heron.runtime.run import Run

__all__ = ["load_policy", "make_update", "train"]


def train(cfg: Config, run: Run) -> dict:
    device = run.device
    envs = run.own(make_envs(cfg, run))
    spaces = spaces_of(cfg, envs.single_observation_space, envs.single_action_space)
    model = build(cfg, spaces).to(device)
    run.sync_start(model=model)
    run.precision.apply(model)  # --precision: autocast around its layers
    opt = adam(model.parameters(), cfg.learning_rate, eps=1e-5)  # eps 1e-5: the PPO baselines value
    N, S = run.local(cfg.num_envs), model.state_size  # N: this process's envs
    iterations = -(-cfg.total_steps // (cfg.num_steps * cfg.num_envs))
    rollouts = Rollouts(cfg, run, envs, model, spaces)
    update = build_step(
        cfg,
        make_update(cfg, model, opt, run.precision),
        "ppo",
        Nets(model, opt),
        run.precision,
        log=run.logger.print,
        optimizers=(opt,),
    )
    learning = Learning(cfg, model, update, run, N, rollouts.masked)

    # -- checkpoints ------------------------------------------------------------------------------------
    def policy_state() -> dict:
        return {"actor": model.state_dict(), "spaces": spaces}

    def checkpoint_state() -> tuple[dict, dict | None]:
        """The state at the end of the latest iteration (an env crash mid-rollout checkpoints that)."""
        full = {**policy_state(), **offpolicy.snapshot({"opt": opt}, iteration, None, envs), **boundary}
        return full, rollouts.buf.state_dict()

    global_step, iteration = 0, 0
    obs = envs.reset()
    state = torch.zeros(N, S, device=device)
    # the obs we act on begins an episode (a tensor env's flags: tensors on its device)
    starts = torch.ones(N, dtype=torch.bool, device=envs.device) if envs.tensors else np.ones(N, bool)
    if run.resume_state is not None:
        s = run.resume_state
        model.load_state_dict(s["actor"])
        opt.load_state_dict(s["opt"])
        if rollouts.scaler:
            rollouts.scaler.load_state_dict(s["scaler"])
        if cfg.mode == "off-policy":
            if run.resume_buffer is None:
                raise HeronError(f"{run.run_dir}: the latest checkpoint has no rollout replay file")
            rollouts.buf.load_state_dict(run.resume_buffer)
        set_rng_state(s["rng"])
        obs = envs.load_state_dict(s["envs"])  # every env begins an episode (or replays its reset)
        global_step, iteration = int(s["step"]), int(s["n_updates"])
        state = s["rnn_state"].to(device)
    policy = Policy(model, tuple(spaces["obs_shape"]), S, device, obs_dtype(spaces))

    def at_boundary() -> dict:
        """What changes during a rollout, as it stands between iterations (``checkpoint_state`` saves it)."""
        return {"scaler": rollouts.scaler.state_dict() if rollouts.scaler else None, "rnn_state": state.cpu()}

    boundary = at_boundary()
    while global_step < cfg.total_steps:
        lr = cfg.learning_rate * ((1.0 - iteration / iterations) if cfg.anneal_lr else 1.0)
        set_lr(opt, lr)
        prev_step = global_step
        obs, state, starts, global_step = rollouts.collect(obs, state, starts, global_step)
        metrics = learning(rollouts.buf.stored(), global_step)
        # after learning: the rollout was collected and trained with one scale
        dist.update_norm(model.norm, model.norm_input(rollouts.rollout_obs))
        iteration += 1
        boundary = at_boundary()
        run.after_step(
            global_step, prev_step, metrics, {"charts/learning_rate": lr}, policy, policy_state, checkpoint_state
        )

    return run.finish(global_step, policy, policy_state, checkpoint_state)
