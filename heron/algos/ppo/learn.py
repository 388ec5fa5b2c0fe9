"""PPO's learning from stored rollouts: value targets (GAE(lambda), or n-step returns in the
off-policy mode), the clipped-surrogate gradient step ``make_update`` on a minibatch, and the epochs
of minibatches (``Learning``).

Data is handled as sequences ``[B, L, ...]``: the feed-forward networks learn from L = 1 slices,
the recurrent ones from whole per-env rollouts (L = ``--num-steps``) from the hidden state stored
at the rollout's start, minibatching by envs. The gradient step is a pure tensor function
``minibatch -> metrics`` (no ``.item()``), so ``--compile`` and ``--cuda-graphs`` can wrap it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from heron.algos.ppo import losses
from heron.algos.ppo.config import Config
from heron.algos.ppo.networks import ActorCritic
from heron.ops import dist
from heron.rl.returns import gae, nstep_returns
from heron.runtime.run import Run

if TYPE_CHECKING:
    from heron.accel.precision import Precision


def as_sequences(data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rollouts [k, T, N, ...] -> per-env sequences [k*N, T, ...]; state0 [k, N, S] -> [k*N, S]."""
    return {
        name: (t.flatten(0, 1) if name == "state0" else t.transpose(1, 2).flatten(0, 1)) for name, t in data.items()
    }


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


class Learning:
    """``learning(stored, global_step) -> metrics``: ``--update-epochs`` epochs of
    ``--num-minibatches`` minibatches over the stored rollouts [k, T, N, ...]. Before every epoch
    (``--recompute-adv``; else the first only) the current critic re-values the data and the targets
    are computed again; ``--target-kl`` ends the epochs early."""

    def __init__(self, cfg: Config, model: ActorCritic, update, run: Run, num_envs: int, masked: bool):
        self.cfg, self.model, self.update, self.run, self.masked = cfg, model, update, run, masked
        self.recurrent, self.T = cfg.recurrent != "none", cfg.num_steps
        self.nstep = cfg.nstep if cfg.mode == "off-policy" else 0
        # sequences (recurrent) or steps per minibatch: this process's share of each global minibatch
        self.mb_units = (num_envs if self.recurrent else self.T * num_envs) // cfg.num_minibatches

    def as_units(self, seq: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Minibatch units: whole sequences (recurrent) or single steps [k*N*T, 1, ...]."""
        if self.recurrent:
            return seq
        T = self.T
        return {
            name: (t[:, None].expand(-1, T, 0).flatten(0, 1) if name == "state0" else t.flatten(0, 1).unsqueeze(1))
            for name, t in seq.items()
        }

    def __call__(self, stored: dict[str, torch.Tensor], global_step: int) -> dict[str, torch.Tensor]:
        cfg, model, run = self.cfg, self.model, self.run
        device = stored["obs"].device
        seq = as_sequences(stored)
        real = seq["valid"] if self.masked else None  # [k*N, T]: the rows that are transitions
        sums: dict[str, torch.Tensor] = {}
        n_mb, mb_units = 0, self.mb_units
        for epoch in range(cfg.update_epochs):
            if epoch == 0 or cfg.recompute_adv:
                values, next_values = model.sequence_values(seq)
                adv, returns = targets(seq, values, next_values, cfg.gamma, cfg.gae_lambda, self.nstep)
                if epoch == 0:
                    seen_returns, seen_values = (
                        (returns, seq["values"]) if real is None else (returns[real], seq["values"][real])
                    )
                    dist.update_norm(model.value_norm, seen_returns)  # (identity when --value-norm is off)
                    explained = losses.explained_variance(seen_values, seen_returns)
                units = self.as_units(
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
                out = run.watch(self.update(mb), global_step)
                sums = {k: sums.get(k, 0) + v for k, v in out.items()}
                n_mb += 1
            # one sync per epoch; under torchrun the global minibatch's KL, so every rank stops alike
            if cfg.target_kl and bool(dist.mean(out["losses/approx_kl"]) > cfg.target_kl):
                break
        return {**{k: v / n_mb for k, v in sums.items()}, "losses/explained_variance": explained}
