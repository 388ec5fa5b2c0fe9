#!/usr/bin/env python
"""DreamerV3's gradient step, heron's beside sheeprl 0.8.4's ``dreamer_v3``, on the same weights and
the same batch: where the two compute the same thing, their losses and gradients agree to float32
rounding; where they differ, the difference shows here rather than as noise in a learning curve.

    VENV/bin/python benchmarks/dreamer_v3_same_step.py             # CartPole's shapes (Discrete(2))
    VENV/bin/python benchmarks/dreamer_v3_same_step.py --continuous   # Pendulum's (Box(-1, 1, (1,)))

Run it with the Python of a venv that has sheeprl 0.8.4 (heron is imported from this checkout). One
process builds sheeprl's agent from its own configuration (``exp=dreamer_v3``, the sizes of heron's
``--preset vector``), copies its weights into heron's agent (sheeprl's joined input layers are heron's
split ones; its GRU reads cat(h, x), heron's cat(x, h)), and runs ``--steps`` gradient steps on each
side from the same batches, each with its own Adam, its slow critic and its return normaliser.

Sampling is the one thing the two cannot share (each draws its own random numbers), so here both
sides take the same deterministic stand-in: every latent state is its categoricals' probabilities
(a smooth function of the weights, so no draw can come out one way on one side and the other way on
the other), every discrete action its most likely one (with the straight-through gradient), every
continuous action the mean of its normal. Everything else runs as each library ships it.

The two-hot reward and value heads are the documented difference: by default heron encodes a target
over its symexp-spaced bins in raw units and predicts the bins' expected value (the official code's
``symexp_twohot``); sheeprl, and heron with ``--twohot-space symlog``, interpolate symlog(target)
between equally spaced symlog points and predict symexp of their expected position. Both libraries
start those heads at zero weights (so that they predict 0); here their output layers get the same
random weights on both sides (``--head-std``), so that from the first step the imagined returns,
their normaliser and the advantages are not all 0. The script runs heron twice, with each
``--twohot-space``. For each model (world model, actor, critic) it prints the relative difference of
the gradients each optimizer applies (after clipping), ``|g_heron - g_sheeprl| / |g_sheeprl|``, and
the losses side by side, step by step; ``--record benchmarks/results/summaries.csv`` keeps the
largest differences (table ``dreamer-v3-same-step``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from datetime import date
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
for _path in (Path(__file__).resolve().parent, Path(__file__).resolve().parents[1]):  # the benchmarks, heron
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from dreamer_learning_vs_sheeprl import SHEEPRL_KEYS  # noqa: E402
from dreamer_v3_vs_sheeprl import SIZES  # noqa: E402

OBS_DIM = 4
# sheeprl's metric -> heron's
LOSSES = {
    "Loss/world_model_loss": "losses/world_model_loss",
    "Loss/observation_loss": "losses/observation_loss",
    "Loss/reward_loss": "losses/reward_loss",
    "Loss/continue_loss": "losses/continue_loss",
    "State/kl": "losses/kl",
    "Loss/policy_loss": "losses/actor_loss",
    "Loss/value_loss": "losses/critic_loss",
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--continuous", action="store_true", help="1-dimensional actions in [-1, 1] (Pendulum's)")
    p.add_argument("--sizes", choices=sorted(SIZES), default="vector")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--sequence-length", type=int, default=32)
    p.add_argument("--steps", type=int, default=3, help="gradient steps on each side")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--record",
        default="",
        help="put the result in this summaries CSV "
        "(benchmarks/results/summaries.csv), in place of the same command's rows",
    )
    p.add_argument("--machine", default="2-core AMD EPYC VM, CPU", help="the machine, as --record writes it")
    p.add_argument(
        "--head-std",
        type=float,
        default=0.1,
        help="the reward and value heads' output weights (both sides; 0: the zero start they ship with)",
    )
    return p.parse_args(argv)


# -- deterministic stand-ins for the draws ------------------------------------------------------------
def expected_onehot(logits):
    """A categorical's 'sample' that is its probabilities (straight-through: value and gradient)."""
    return logits.softmax(-1)


def mode_st(probs):
    """The most likely one-hot, with the straight-through gradient of the probabilities."""
    import torch.nn.functional as F

    return F.one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype) + (probs - probs.detach())


def patch_sampling() -> None:
    import sheeprl.algos.dreamer_v3.agent as sheeprl_agent
    import torch

    import heron.algos.dreamer.distributions as shared_dists
    import heron.algos.dreamer.networks as shared
    import heron.algos.dreamer_v3.distributions as v3dists

    def sheeprl_latent(logits, discrete=32, sample=True):
        logits = logits.view(*logits.shape[:-1], -1, discrete)
        if sample:
            return expected_onehot(logits)
        return torch.nn.functional.one_hot(logits.argmax(-1), discrete).to(logits.dtype)

    sheeprl_agent.compute_stochastic_state = sheeprl_latent
    torch.distributions.OneHotCategoricalStraightThrough.rsample = lambda self, shape=(): mode_st(self.probs)
    torch.distributions.Normal.rsample = lambda self, shape=(): self.loc.expand(self._extended_shape(torch.Size(shape)))
    shared.st_sample = lambda logits, uniform=None: expected_onehot(logits)
    shared_dists.OneHotST.rsample = lambda self: mode_st(self.logits.exp())
    v3dists.Normal.rsample = lambda self: self.mean


# -- the two agents -----------------------------------------------------------------------------------
def sheeprl_config(args):
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf
    from sheeprl.utils.utils import dotdict

    sizes = SIZES[args.sizes]
    overrides = [
        "exp=dreamer_v3",
        "env=gym",
        "env.id=CartPole-v1",
        "env.num_envs=1",
        "env.capture_video=False",
        "fabric.accelerator=cpu",
        "fabric.devices=1",
        "fabric.precision=32-true",
        "~fabric.callbacks",
        "num_threads=1",
        f"seed={args.seed}",
        "algo.compile.enabled=False",
        "algo.run_test=False",
        "algo.cnn_keys.encoder=[]",
        "algo.cnn_keys.decoder=[]",
        "algo.mlp_keys.encoder=[state]",
        "algo.mlp_keys.decoder=[state]",
        f"algo.per_rank_batch_size={args.batch_size}",
        f"algo.per_rank_sequence_length={args.sequence_length}",
        "buffer.memmap=False",
        "checkpoint.save_last=False",
        "model_manager.disabled=True",
        "metric.log_level=0",
        f"log_root={tempfile.mkdtemp(prefix='sheeprl_same_step_')}",
    ]
    overrides += [f"{key}={sizes[k]}" for k, keys in SHEEPRL_KEYS.items() if k in sizes for key in keys]
    with initialize_config_module(config_module="sheeprl.configs", version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    return dotdict(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True))


def heron_config(args, scfg, twohot_space: str):
    """heron's Config at the same sizes, with every hyperparameter read from sheeprl's configuration
    (they are the same by default; reading them keeps the check honest if one side's changes)."""
    from heron.algos.dreamer_v3.config import Config

    a, wm = scfg.algo, scfg.algo.world_model
    return Config(
        **SIZES[args.sizes],
        per_rank_batch_size=args.batch_size,
        sequence_length=args.sequence_length,
        twohot_space=twohot_space,
        gamma=a.gamma,
        lmbda=a.lmbda,
        horizon=a.horizon,
        unimix=a.unimix,
        bins=wm.reward_model.bins,
        kl_dynamic=wm.kl_dynamic,
        kl_representation=wm.kl_representation,
        kl_free_nats=wm.kl_free_nats,
        kl_regularizer=wm.kl_regularizer,
        continue_scale_factor=wm.continue_scale_factor,
        actor_ent_coef=a.actor.ent_coef,
        moments_decay=a.actor.moments.decay,
        moments_limit=1.0 / a.actor.moments.max,
        moments_low=a.actor.moments.percentile.low,
        moments_high=a.actor.moments.percentile.high,
        critic_tau=a.critic.tau,
        world_lr=wm.optimizer.lr,
        actor_lr=a.actor.optimizer.lr,
        critic_lr=a.critic.optimizer.lr,
        world_eps=wm.optimizer.eps,
        actor_eps=a.actor.optimizer.eps,
        critic_eps=a.critic.optimizer.eps,
        world_clip_gradients=wm.clip_gradients,
        actor_clip_gradients=a.actor.clip_gradients,
        critic_clip_gradients=a.critic.clip_gradients,
        min_std=a.actor.min_std,
        max_std=a.actor.max_std,
        init_std=a.actor.init_std,
        action_clip=a.actor.action_clip,
    )


# sheeprl's world-model names -> heron's, for the layers both lay out alike (by prefix)
WORLD_RENAMES = (
    ("rssm.initial_recurrent_state", "rssm.initial_h"),
    ("rssm.recurrent_model.mlp._model.1.", "rssm.in_norm."),
    ("rssm.recurrent_model.rnn.layer_norm.", "rssm.gru.norm."),
    ("rssm.representation_model._model.1.", "rssm.post_norm."),
    ("rssm.representation_model._model.3.", "rssm.post_out."),
    ("rssm.transition_model._model.", "rssm.prior."),
    ("encoder.mlp_encoder.model._model.", "encoder.mlp."),
    ("observation_model.mlp_decoder.model._model.", "decoder.mlp."),
    ("observation_model.mlp_decoder.heads.", "decoder.heads."),
    ("reward_model._model.", "reward."),
    ("continue_model._model.", "continue_model."),
)


def to_heron_names(sheeprl: dict, z_dim: int, deter: int, layers: int) -> dict:
    """sheeprl's tensors (weights or gradients, keyed ``world.<name>``, ``actor.<name>``,
        ``critic.<name>``) under heron's names and layout: sheeprl's joined input layers are heron's
        split ones, and its GRU reads cat(h, x) where heron's reads cat(x, h). ``layers``: the MLPs' hidden
    layers (the actor's output layer is heron's ``net.<3 x layers>``)."""
    import torch

    out = {}
    for name, t in sheeprl.items():
        part, _, rest = name.replace("_forward_module.", "").partition(".")
        if part == "actor":
            out["actor." + rest.replace("model._model.", "net.").replace("mlp_heads.0.", f"net.{3 * layers}.")] = t
        elif part == "critic":
            out["critic." + rest.removeprefix("_model.")] = t
        elif rest == "rssm.recurrent_model.mlp._model.0.weight":  # Linear(cat(z, a))
            out["world.rssm.in_z.weight"], out["world.rssm.in_a.weight"] = t[:, :z_dim], t[:, z_dim:]
        elif rest == "rssm.representation_model._model.0.weight":  # Linear(cat(h, e))
            out["world.rssm.post_h.weight"], out["world.rssm.post_e.weight"] = t[:, :deter], t[:, deter:]
        elif rest == "rssm.recurrent_model.rnn.linear.weight":
            out["world.rssm.gru.linear.weight"] = torch.cat([t[:, deter:], t[:, :deter]], 1)
        else:
            prefix, renamed = next(((a, b) for a, b in WORLD_RENAMES if rest.startswith(a)), (None, None))
            if prefix is None:
                raise KeyError(f"no heron name for sheeprl's {name}")
            out["world." + renamed + rest.removeprefix(prefix)] = t
    return out


def grad_recorder(optimizer, named: dict, log: list) -> None:
    """Record the gradients ``optimizer`` applies (after clipping) at each of its steps."""
    ids = {id(p): n for n, p in named.items()}

    def hook(opt, args, kwargs):
        log.append(
            {
                ids[id(p)]: p.grad.detach().clone()
                for g in opt.param_groups
                for p in g["params"]
                if p.grad is not None and id(p) in ids
            }
        )

    optimizer.register_step_pre_hook(hook)


class Aggregator:
    disabled = False

    def __init__(self):
        self.values = {}

    def update(self, name, value):
        self.values[name] = float(value)


def make_batches(args, action_dim: int):
    """``args.steps`` batches in sheeprl's layout ([T, B, ...], ``actions[t]`` taken at observation t) and
    heron's (``action[t]`` the one that led to observation t). Sequence 0 holds an episode end at T/2
    (terminated for discrete actions, as CartPole's; a time limit for continuous ones, as Pendulum's)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(args.seed)
    T, B, out = args.sequence_length, args.batch_size, []
    for _ in range(args.steps):
        state = rng.normal(size=(T, B, OBS_DIM)).astype(np.float32) * 2.0
        if args.continuous:
            actions = rng.uniform(-1, 1, (T, B, action_dim)).astype(np.float32)
            rewards = rng.uniform(-16.0, 0.0, (T, B)).astype(np.float32)
        else:
            actions = np.eye(action_dim, dtype=np.float32)[rng.integers(0, action_dim, (T, B))]
            rewards = np.ones((T, B), np.float32)
        terminated, is_first = np.zeros((T, B), np.float32), np.zeros((T, B), np.float32)
        is_first[T // 2, 0] = 1.0
        terminated[T // 2 - 1, 0] = 0.0 if args.continuous else 1.0
        sheeprl = {
            "state": torch.as_tensor(state),
            "actions": torch.as_tensor(actions),
            "rewards": torch.as_tensor(rewards)[..., None],
            "terminated": torch.as_tensor(terminated)[..., None],
            "truncated": torch.zeros(T, B, 1),
            "is_first": torch.as_tensor(is_first)[..., None],
        }
        prev = np.concatenate([np.zeros_like(actions[:1]), actions[:-1]])
        heron = {
            "state": torch.as_tensor(state),
            "action": torch.as_tensor(prev),
            "reward": torch.as_tensor(rewards),
            "is_first": torch.as_tensor(is_first).bool(),
            "is_terminal": torch.as_tensor(terminated).bool(),
        }
        out.append((sheeprl, heron))
    return out


def run_sheeprl(args, scfg, batches, action_dim):
    import gymnasium as gym
    import hydra
    import numpy as np
    import torch
    from lightning.fabric import Fabric
    from sheeprl.algos.dreamer_v3.agent import build_agent
    from sheeprl.algos.dreamer_v3.dreamer_v3 import train
    from sheeprl.algos.dreamer_v3.utils import Moments

    fabric: Fabric = hydra.utils.instantiate(scfg.fabric, strategy="auto", _convert_="all")
    fabric.launch()
    fabric.seed_everything(args.seed)
    space = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)})
    world, actor, critic, target_critic, _ = build_agent(fabric, (action_dim,), args.continuous, scfg, space)
    modules = {"world": world, "actor": actor, "critic": critic}
    with torch.no_grad():  # the reward and value heads' zero output layers: the same random weights on both sides
        generator = torch.Generator().manual_seed(args.seed)
        for head in (world.reward_model, critic):
            last = [m for m in head.modules() if isinstance(m, torch.nn.Linear)][-1]
            last.weight.copy_(torch.randn(last.weight.shape, generator=generator) * args.head_std)
    weights = {f"{k}.{n}": p.detach().clone() for k, m in modules.items() for n, p in m.named_parameters()}
    opts = [
        hydra.utils.instantiate(c.optimizer, params=m.parameters(), _convert_="all")
        for c, m in ((scfg.algo.world_model, world), (scfg.algo.actor, actor), (scfg.algo.critic, critic))
    ]
    grads = {k: [] for k in modules}
    for (k, m), opt in zip(modules.items(), opts):
        grad_recorder(opt, {f"{k}.{n}": p for n, p in m.named_parameters()}, grads[k])
    world_opt, actor_opt, critic_opt = fabric.setup_optimizers(*opts)
    a = scfg.algo.actor.moments
    moments = Moments(a.decay, a.max, a.percentile.low, a.percentile.high)
    metrics = []
    for i, (batch, _) in enumerate(batches):
        tau = 1.0 if i == 0 else scfg.algo.critic.tau  # its main loop, before each `train`
        for cp, tcp in zip(critic.module.parameters(), target_critic.parameters()):
            tcp.data.copy_(tau * cp.data + (1 - tau) * tcp.data)
        agg = Aggregator()
        train(
            fabric,
            world,
            actor,
            critic,
            target_critic,
            world_opt,
            actor_opt,
            critic_opt,
            {k: v.clone() for k, v in batch.items()},
            agg,
            scfg,
            args.continuous,
            (action_dim,),
            moments,
        )
        metrics.append(agg.values | {"moments/low": float(moments.low), "moments/high": float(moments.high)})
    return weights, grads, metrics


def run_heron(args, scfg, batches, action_dim, weights, twohot: str):
    import torch

    from heron.accel.precision import Precision
    from heron.algos.dreamer_v3.train import build, make_optimizers, make_update

    cfg = heron_config(args, scfg, twohot)
    spaces = {
        "obs_spec": {"state": [[OBS_DIM], "float32"]},
        "cnn_keys": [],
        "mlp_keys": ["state"],
        "discrete": not args.continuous,
        "action_dim": action_dim,
    }
    if args.continuous:
        spaces.update(action_low=torch.tensor([-1.0]), action_high=torch.tensor([1.0]))
    agent = build(cfg, spaces)
    state = to_heron_names(weights, cfg.stochastic_size * cfg.discrete_size, cfg.recurrent_state_size, cfg.mlp_layers)
    own = dict(agent.named_parameters())
    missing = set(own) - set(state) - {n for n in own if n.startswith("target_critic.")}
    assert not missing, f"not copied from sheeprl: {sorted(missing)}"
    with torch.no_grad():
        for n, t in state.items():
            assert own[n].shape == t.shape, (n, own[n].shape, t.shape)
            own[n].copy_(t)
        agent.target_critic.load_state_dict(agent.critic.state_dict())
    optimizers = make_optimizers(cfg, agent)
    grads = {k: [] for k in ("world", "actor", "critic")}
    for k, opt in zip(grads, optimizers.values()):
        grad_recorder(opt, {f"{k}.{n}": p for n, p in getattr(agent, k).named_parameters()}, grads[k])
    update = make_update(cfg, agent, spaces, *optimizers.values(), Precision("32", torch.device("cpu")))
    metrics = []
    for _, batch in batches:
        out = update({k: v.clone() for k, v in batch.items()})
        with torch.no_grad():  # the slow critic, as the loop's after_update does
            for slow, fast in zip(agent.target_critic.parameters(), agent.critic.parameters()):
                slow.lerp_(fast, cfg.critic_tau)
        metrics.append(
            {k: float(v) for k, v in out.items()}
            | {"moments/low": float(agent.moments.low), "moments/high": float(agent.moments.high)}
        )
    return grads, metrics, cfg


def compare(args, sheeprl_run, heron_run) -> list[dict]:
    import torch

    _, s_grads, s_metrics = sheeprl_run
    h_grads, h_metrics, cfg = heron_run
    rows = []
    for i in range(args.steps):
        row = {"step": i + 1}
        for k in ("world", "actor", "critic"):
            s = to_heron_names(
                s_grads[k][i], cfg.stochastic_size * cfg.discrete_size, cfg.recurrent_state_size, cfg.mlp_layers
            )
            h = h_grads[k][i]
            assert set(s) == set(h), (k, sorted(set(s) ^ set(h)))
            gs = torch.cat([s[n].flatten() for n in sorted(s)])
            gh = torch.cat([h[n].flatten() for n in sorted(s)])
            row[f"grad_rel_diff/{k}"] = float((gh - gs).norm() / gs.norm())
        for s_name, h_name in LOSSES.items():
            row[h_name] = [round(h_metrics[i][h_name], 6), round(s_metrics[i][s_name], 6)]
        for name in ("moments/low", "moments/high"):
            row[name] = [round(h_metrics[i][name], 6), round(s_metrics[i][name], 6)]
        rows.append(row)
    return rows


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from torch.distributions import Distribution

    patch_sampling()
    scfg = sheeprl_config(args)
    Distribution.set_default_validate_args(scfg.distribution.validate_args)
    action_dim = 1 if args.continuous else 2
    batches = make_batches(args, action_dim)
    sheeprl_run = run_sheeprl(args, scfg, batches, action_dim)
    results = {}
    for twohot in ("raw", "symlog"):
        results[twohot] = compare(args, sheeprl_run, run_heron(args, scfg, batches, action_dim, sheeprl_run[0], twohot))
    summary = {}
    for twohot, rows in results.items():
        print(f"two-hot heads {HEADS[twohot]}, {KIND[args.continuous]} actions:")
        for row in rows:
            print(json.dumps(row))
        summary[twohot] = {k: max(row[f"grad_rel_diff/{k}"] for row in rows) for k in ("world", "actor", "critic")}
    print(
        f"largest relative gradient difference over {args.steps} steps: "
        + "; ".join(f"{HEADS[t]}: " + ", ".join(f"{k} {v:.1e}" for k, v in m.items()) for t, m in summary.items())
    )
    if args.record:
        record(Path(args.record), args, summary)
    if not all(math.isfinite(v) for m in summary.values() for v in m.values()):
        raise SystemExit(1)


HEADS = {"raw": "heron's default (raw: the official code's)", "symlog": "heron's --twohot-space symlog (sheeprl's)"}
KIND = {False: "discrete", True: "continuous"}


def record(path: Path, args, summary: dict) -> None:
    """Put the largest differences in the summaries file (table ``dreamer-v3-same-step``), in place of
    the rows of the same kind of actions."""
    from results_tables import record_summaries

    command = (
        "VENV/bin/python benchmarks/dreamer_v3_same_step.py"
        + (" --continuous" if args.continuous else "")
        + ("" if args.steps == 3 else f" --steps {args.steps}")
    )
    note = (
        f"largest |g_heron - g_sheeprl| / |g_sheeprl| over {args.steps} gradient steps, each model's gradient "
        "as its optimizer applies it; the same weights and batches, deterministic stand-ins for the draws; "
        "VENV has sheeprl 0.8.4"
    )
    names = {"world": "world model", "actor": "actor", "critic": "critic"}
    new = [
        {
            "table": "dreamer-v3-same-step",
            "row": f"{KIND[args.continuous]} | {HEADS[t]}",
            "column": names[k],
            "value": f"{v:.1e}",
            "seeds": str(args.seed),
            "machine": args.machine,
            "recorded": date.today().isoformat(),
            "command": command,
            "note": note,
        }
        for t, m in summary.items()
        for k, v in m.items()
    ]
    record_summaries(
        new, lambda r: r["table"] == "dreamer-v3-same-step" and r["row"].startswith(KIND[args.continuous] + " |"), path
    )


if __name__ == "__main__":
    main()
