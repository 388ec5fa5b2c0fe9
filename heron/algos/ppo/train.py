"""PPO, read top to bottom (DI-engine's PPO, with every option it names; the loop follows CleanRL's ppo.py).

One iteration: collect ``--num-steps`` x ``--num-envs`` steps, then ``--update-epochs`` epochs of
``--num-minibatches`` minibatches. Before every epoch (``--recompute-adv``) the current critic
re-values the data and the advantages are recomputed. Two modes:

* on-policy: GAE(lambda) advantages; the ratio is taken against the policy that collected the data.
* off-policy (DI-engine's off-policy PPO): the newest ``--replay-rollouts`` rollouts are kept;
  minibatches are drawn from all of them; the ratio is taken against each sample's STORED
  behaviour log-prob (importance ratio), and values learn from n-step targets (``--nstep``),
  which, unlike GAE(lambda), do not assume the data came from the current policy's critic.

Data is handled as sequences ``[B, L, ...]`` throughout: the feed-forward networks are trained on
L = 1 slices, the recurrent ones on whole per-env rollouts (L = ``--num-steps``) from the hidden
state stored at the rollout's start, minibatching by envs. The update step is a pure tensor
function ``minibatch -> metrics`` (no ``.item()``), so ``--compile`` can wrap it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from heron.accel.acting import Policy
from heron.accel.step import build_step
from heron.algos import offpolicy
from heron.algos.ppo import losses
from heron.algos.ppo.acting import RolloutActing
from heron.algos.ppo.config import Config
from heron.algos.ppo.networks import ActorCritic
from heron.algos.ppo.spaces import make_envs, spaces_of
from heron.errors import HeronError
from heron.ops import dist
from heron.ops.adam import adam
from heron.ops.rng import set_rng_state
from heron.rl.buffers import RolloutBuffer
from heron.rl.returns import RewardScaler, gae, nstep_returns
from heron.rl.schedules import set_lr
from heron.runtime.run import Run

if TYPE_CHECKING:
    from heron.accel.precision import Precision


@dataclass
class Nets:
    """What a gradient step works on."""

    model: ActorCritic
    opt: torch.optim.Optimizer


def _build(cfg: Config, spaces: dict) -> ActorCritic:
    return ActorCritic(
        spaces,
        tuple(cfg.hidden_sizes),
        cfg.shared_network,
        cfg.recurrent,
        cfg.rnn_hidden_size,
        cfg.obs_norm,
        cfg.value_norm,
        cfg.state_dependent_std,
        cfg.init_log_std,
    )


def _obs_dtype(spaces: dict) -> torch.dtype:
    return torch.uint8 if spaces["obs_dtype"] == "uint8" else torch.float32


def load_policy(cfg: Config, state: dict, device: str | torch.device = "cpu") -> Policy:
    model = _build(cfg, state["spaces"])
    model.load_state_dict(state["actor"])
    return Policy(model, tuple(state["spaces"]["obs_shape"]), model.state_size, device, _obs_dtype(state["spaces"]))


# -- re-valuing stored data and computing targets ----------------------------------------------------
def as_sequences(data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rollouts [k, T, N, ...] -> per-env sequences [k*N, T, ...]; state0 [k, N, S] -> [k*N, S]."""
    return {
        name: (t.flatten(0, 1) if name == "state0" else t.transpose(1, 2).flatten(0, 1)) for name, t in data.items()
    }


@torch.no_grad()
def value_pass(model: ActorCritic, seq: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """V(obs_t) and V(next_obs_t), [k*N, T] on the raw scale, with the CURRENT critic.

    V(next_obs_t) is the next step's value, except where the episode was cut at t (truncated: the
    final observation, valued from the recurrent state after step t) or the sequence ends at t
    (valued the same way). Terminated steps need no next value (GAE and n-step ignore it)."""
    B, T = seq["obs"].shape[:2]
    need = seq["truncated"].clone()
    need[:, -1] = True
    if model.direct_ok():
        # a feed-forward MLP critic: every obs and next obs in one forward, and the next obs's value
        # taken where needed; no gather of the needed rows and no host sync to count them, a third
        # of the operations (this runs before every epoch, --recompute-adv)
        both = model.mlp_values(torch.cat([seq["obs"], seq["next_obs"]]))  # [2B, T]
        values, following = both[:B], both[B:]  # [B, T] each
        next_values = torch.where(need, following, torch.cat([values[:, 1:], values[:, -1:]], 1))
        return model.value_norm.denormalize(values), model.value_norm.denormalize(next_values)
    chunk = max(1, 1024 // T)  # sequences per forward, to bound activation memory (images)
    value_parts, state_parts = [], []
    for i in range(0, seq["obs"].shape[0], chunk):
        v, st = model.values(seq["obs"][i : i + chunk], seq["state0"][i : i + chunk], seq["starts"][i : i + chunk])
        value_parts.append(v)
        state_parts.append(st)
    values, states = torch.cat(value_parts), torch.cat(state_parts)  # [k*N, T], [k*N, T, S]
    next_values = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], 1)
    rows, cols = need.nonzero(as_tuple=True)
    for i in range(0, len(rows), 1024):
        part = (rows[i : i + 1024], cols[i : i + 1024])
        no_starts = torch.zeros(len(part[0]), 1, dtype=torch.bool, device=values.device)
        v, _ = model.values(seq["next_obs"][part][:, None], states[part], no_starts)
        next_values[part] = v[:, 0]
    return model.value_norm.denormalize(values), model.value_norm.denormalize(next_values)


def targets(
    seq: dict[str, torch.Tensor],
    values: torch.Tensor,
    next_values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    nstep: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, value targets) [k*N, T]: GAE(lambda), or with ``nstep`` > 0 n-step returns and
    A = G - V (off-policy mode). The estimators take time-major [T, k*N]."""
    r, term, trunc = seq["rewards"].T, seq["terminated"].T, seq["truncated"].T
    if nstep:
        returns = nstep_returns(r, next_values.T, term, trunc, gamma, nstep).T
        return returns - values, returns
    adv = gae(r, values.T, next_values.T, term, trunc, gamma, gae_lambda).T
    return adv, adv + values


def make_update(cfg: Config, model: ActorCritic, opt: torch.optim.Optimizer, prec: Precision):
    """One gradient step on a minibatch of sequences [B, L]: ``update(minibatch) -> metrics``. Under
    torchrun each rank holds its share of the minibatch, with the global minibatch's advantage
    statistics (``adv_mean``, ``adv_std``: ``dist.mean_std``), and the gradients are averaged, so
    the step equals one process's on the whole minibatch."""
    head = model.pi_head
    weights = list(model.parameters())

    def update(mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        params, values, _ = model(mb["obs"], mb["state0"], mb["starts"])  # [B, L, P], [B, L]
        logp, entropy = head.log_prob(params, mb["actions"]), head.entropy(params).mean()
        adv = losses.advantages(mb, cfg.norm_adv)  # over the global minibatch (torchrun: its statistics come with it)
        pg_loss, approx_kl, clipfrac = losses.policy_loss(logp, mb["logp"], adv, cfg.clip_coef, cfg.dual_clip)
        v_loss = losses.value_loss(values, mb["values_n"], mb["returns_n"], cfg.clip_coef, cfg.clip_vloss)
        loss = pg_loss - cfg.ent_coef * entropy + cfg.vf_coef * v_loss
        prec.optimize(opt, loss, weights, cfg.max_grad_norm)  # (torchrun: the global gradient)
        prec.update()
        return {
            "losses/policy_loss": pg_loss.detach(),
            "losses/value_loss": v_loss.detach(),
            "losses/entropy": entropy.detach(),
            "losses/approx_kl": approx_kl,
            "losses/clipfrac": clipfrac,
        }

    return update


def train(cfg: Config, run: Run) -> dict:
    device = run.device
    envs = run.own(make_envs(cfg, run))
    spaces = spaces_of(cfg, envs.single_observation_space, envs.single_action_space)
    model = _build(cfg, spaces).to(device)
    run.sync_start(model=model)
    run.precision.apply(model)  # --precision: autocast around its layers
    head = model.pi_head
    opt = adam(model.parameters(), cfg.learning_rate, eps=1e-5)  # eps 1e-5: the PPO baselines value
    T, N, S = cfg.num_steps, run.local(cfg.num_envs), model.state_size  # N: this process's envs
    off_policy, recurrent = cfg.mode == "off-policy", cfg.recurrent != "none"
    # a native vector env in next-step autoreset mode spends one step per finished episode on its
    # reset: that row holds no transition (``Step.valid``) and no minibatch draws it
    masked = cfg.vector_mode == "native"
    iterations = -(-cfg.total_steps // (T * cfg.num_envs))
    act_shape = {
        "discrete": (),
        "multidiscrete": (len(spaces["action"].get("nvec", ())),),
        "box": (len(spaces["action"].get("low", ())),),
    }[head.kind]
    f32, obs_dt = torch.float32, _obs_dtype(spaces)
    obs_shape = tuple(spaces["obs_shape"])
    buf = RolloutBuffer(
        cfg.replay_rollouts if off_policy else 1,
        T,
        N,
        {
            "obs": (obs_shape, obs_dt),
            "next_obs": (obs_shape, obs_dt),
            "actions": (act_shape, f32 if head.kind == "box" else torch.int64),
            "logp": ((), f32),
            "values": ((), f32),
            "rewards": ((), f32),
            "terminated": ((), torch.bool),
            "truncated": ((), torch.bool),
            "starts": ((), torch.bool),
            **({"valid": ((), torch.bool)} if masked else {}),
        },
        {"state0": ((S,), f32)},
        device,
    )
    scaler = (
        RewardScaler(N, cfg.gamma, moments=dist.global_moments if run.world.distributed else None)
        if cfg.reward_scale
        else None
    )
    # sequences (recurrent) or steps per minibatch: this process's share of each global minibatch
    mb_units = (N if recurrent else T * N) // cfg.num_minibatches

    update = build_step(
        cfg,
        make_update(cfg, model, opt, run.precision),
        "ppo",
        Nets(model, opt),
        run.precision,
        log=run.logger.print,
        optimizers=(opt,),
    )

    def as_units(seq: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Minibatch units: whole sequences (recurrent) or single steps [k*N*T, 1, ...]."""
        if recurrent:
            return seq
        return {
            name: (t[:, None].expand(-1, T, 0).flatten(0, 1) if name == "state0" else t.flatten(0, 1).unsqueeze(1))
            for name, t in seq.items()
        }

    # -- checkpoints ------------------------------------------------------------------------------------
    def policy_state() -> dict:
        return {"actor": model.state_dict(), "spaces": spaces}

    def full_state() -> dict:
        """The state at the end of the latest iteration (an env crash mid-rollout checkpoints that)."""
        return {**policy_state(), **offpolicy.snapshot({"opt": opt}, iteration, None, envs), **boundary}

    def checkpoint_state() -> tuple[dict, dict | None]:
        return full_state(), buf.state_dict()

    global_step, iteration = 0, 0
    obs = envs.reset()
    state = torch.zeros(N, S, device=device)
    # the obs we act on begins an episode (a tensor env's flags: tensors on its device)
    starts = torch.ones(N, dtype=torch.bool, device=envs.device) if envs.tensors else np.ones(N, bool)
    if run.resume_state is not None:
        s = run.resume_state
        model.load_state_dict(s["actor"])
        opt.load_state_dict(s["opt"])
        if scaler:
            scaler.load_state_dict(s["scaler"])
        if off_policy:
            if run.resume_buffer is None:
                raise HeronError(f"{run.run_dir}: the latest checkpoint has no rollout replay file")
            buf.load_state_dict(run.resume_buffer)
        set_rng_state(s["rng"])
        obs = envs.load_state_dict(s["envs"])  # every env begins an episode (or replays its reset)
        global_step, iteration = int(s["step"]), int(s["n_updates"])
        state = s["rnn_state"].to(device)
    policy = Policy(model, obs_shape, S, device, obs_dt)
    metrics: dict[str, torch.Tensor] = {}
    acting = RolloutActing(model, N, device, cfg)

    def at_boundary() -> dict:
        """What changes during a rollout, as it stands between iterations (``full_state`` saves it)."""
        return {"scaler": scaler.state_dict() if scaler else None, "rnn_state": state.cpu()}

    boundary = at_boundary()
    while global_step < cfg.total_steps:
        lr = cfg.learning_rate * ((1.0 - iteration / iterations) if cfg.anneal_lr else 1.0)
        set_lr(opt, lr)
        prev_step = global_step

        # -- collect a rollout ----------------------------------------------------------------------
        w = buf.writing()
        w["state0"].copy_(state)
        # each step's tensors and arrays are kept in lists and written to the buffer once per rollout
        # (one stack per field, not nine indexed copies per env step; envs return new arrays per step)
        seen: dict[str, list[Any]] = {name: [] for name in ("obs", "actions", "logp", "values")}
        got: dict[str, list[Any]] = {
            name: [] for name in ("rewards", "starts", "terminated", "truncated") + (("valid",) if masked else ())
        }
        finals = []  # (step, envs, their final obs) where episodes ended: the only next_obs not the next obs
        acting.rollout(head.noise((T, N), device))  # the rollout's sampling noise, one draw
        for t in range(T):
            if S:  # a fresh recurrent state where an episode starts
                state = state * (~torch.as_tensor(starts, device=device)).unsqueeze(-1).float()
            obs_t, to_env, actions, logp, v, state = acting.act(t, obs, state)
            step = envs.step(to_env)
            global_step += cfg.num_envs  # every rank's envs
            done = step.terminated | step.truncated
            valid = (torch.ones_like(done) if envs.tensors else np.ones(N, bool)) if step.valid is None else step.valid
            for name, value in zip(seen, (obs_t, actions, logp, v)):
                seen[name].append(value)
            for name, value in zip(
                got,
                (
                    scaler(step.rewards, done) if scaler else step.rewards,
                    starts,
                    step.terminated,
                    step.truncated,
                    valid,
                ),
            ):
                got[name].append(value)
            if done.any():  # (a tensor env's: tensors on its device)
                ended = done.nonzero().flatten() if envs.tensors else np.flatnonzero(done)
                finals.append(
                    (torch.full((len(ended),), t), torch.as_tensor(ended).cpu(), torch.as_tensor(step.next_obs[ended]))
                )
            obs, starts = step.obs, done if step.started is None else step.started
            for _, ret, length in step.episodes:
                run.logger.episode(global_step, ret, length)
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
        buf.commit()

        # -- learn ----------------------------------------------------------------------------------
        seq = as_sequences(buf.stored())
        real = seq["valid"] if masked else None  # [k*N, T]: the rows that are transitions
        sums: dict[str, torch.Tensor] = {}
        n_mb = 0
        for epoch in range(cfg.update_epochs):
            if epoch == 0 or cfg.recompute_adv:
                values, next_values = value_pass(model, seq)
                adv, returns = targets(
                    seq, values, next_values, cfg.gamma, cfg.gae_lambda, cfg.nstep if off_policy else 0
                )
                if epoch == 0:
                    seen_returns, seen_values = (
                        (returns, seq["values"]) if real is None else (returns[real], seq["values"][real])
                    )
                    dist.update_norm(model.value_norm, seen_returns)  # (identity when --value-norm is off)
                    explained = losses.explained_variance(seen_values, seen_returns)
                units = as_units(
                    {
                        **seq,
                        "adv": adv,
                        "returns_n": model.value_norm(returns),
                        "values_n": model.value_norm(seq["values"]),
                    }
                )
            if real is None:
                order = torch.randperm(units["adv"].shape[0], device=device)[: mb_units * cfg.num_minibatches]
            else:  # the transitions only, in minibatches of an equal share of them
                rows = units["valid"].flatten().nonzero().squeeze(1)
                mb_units = len(rows) // cfg.num_minibatches
                order = rows[torch.randperm(len(rows), device=device)[: mb_units * cfg.num_minibatches]]
            # one gather per field and epoch; minibatch j is then the slice [j * mb_units, (j + 1) * mb_units)
            shuffled = {
                k: units[k][order]
                for k in ("obs", "state0", "starts", "actions", "logp", "adv", "returns_n", "values_n")
            }
            batches = [slice(j * mb_units, (j + 1) * mb_units) for j in range(cfg.num_minibatches)]
            adv_stats = (
                dist.mean_std([shuffled["adv"][part] for part in batches])
                if cfg.norm_adv and run.world.distributed
                else None
            )  # one all-reduce for the epoch's minibatches
            for j, part in enumerate(batches):
                mb = {k: v[part] for k, v in shuffled.items()}
                if adv_stats:
                    mb["adv_mean"], mb["adv_std"] = adv_stats[j]
                out = run.watch(update(mb), global_step)
                sums = {k: sums.get(k, 0) + v for k, v in out.items()}
                n_mb += 1
            # one sync per epoch; under torchrun the global minibatch's KL, so every rank stops alike
            if cfg.target_kl and bool(dist.mean(out["losses/approx_kl"]) > cfg.target_kl):
                break
        # after learning: the rollout was collected and trained with one scale
        dist.update_norm(model.norm, model.norm_input(w["obs"]))
        metrics = {**{k: v / n_mb for k, v in sums.items()}, "losses/explained_variance": explained}
        iteration += 1
        boundary = at_boundary()

        run.after_step(
            global_step, prev_step, metrics, {"charts/learning_rate": lr}, policy, policy_state, checkpoint_state
        )

    return run.finish(global_step, policy, policy_state, checkpoint_state)
