#!/usr/bin/env python
"""heron vs Stable-Baselines3: learning curves of TD3 or SAC at equal env steps, same config, same seeds.

``offpolicy_vs_sb3.py`` times the two libraries; this script asks whether they *learn* alike. Each
(library, seed) pair trains once, every ``--eval-every`` env steps its deterministic policy plays
``--eval-episodes`` episodes from the same start states on both sides (episode k of every evaluation
is reset with ``seed + 1_000_000 + k``, heron's evaluation seeds, through heron's own evaluation
loop), and the report sets the two curves side by side: the evaluation at each mark (mean and
standard deviation over seeds, and each seed's value), and the mean training-episode return over
the last 10% of the steps (CleanRL's figure).

The heron config comes from heron's own presets and overrides (``--preset mujoco`` by default: for
TD3 the paper's settings as its authors' code runs them, 25,000 random steps). SB3 is built from
that resolved config, field by field: learning starts (uniform random actions before it on both
sides), batch, buffer, gamma, tau, learning rate, network sizes, train frequency 1 and gradient
steps, TD3's policy delay, target smoothing noise and clip and Gaussian exploration noise (SB3
adds ``NormalActionNoise(sigma)`` to the action scaled to [-1, 1], so ``sigma`` is the fraction of
the half-range heron's ``exploration_noise`` is), SAC's entropy tuning from the same initial alpha
and target entropy. Settings SB3 cannot express (different actor and critic learning rates, SAC's
CleanRL-style delayed actor updates, observation normalization, gradient clipping, several envs)
stop the script with a one-line error rather than compare unlike runs; for SAC pass
``--set policy_lr=3e-4 q_lr=3e-4 policy_frequency=1`` (SB3's schedule).

Left as each library does it: SB3's critics see actions scaled to [-1, 1], heron's see them in env
units (the same thing on every MuJoCo locomotion env but Humanoid, whose bounds are +-0.4); for SAC,
heron squashes the log-std into [-5, 2] with tanh where SB3 clamps it to [-20, 2], and SB3 updates
the entropy coefficient before the critics, heron after the actor. ``tests/test_vs_sb3.py`` holds
heron's TD3 gradient step to SB3's exactly.

Runs are resumable and can be split over processes: each (library, seed) lives in its own folder
under ``--out``; a finished one is read back, a heron run that stopped continues from its
checkpoint, an SB3 run that stopped starts again. Two processes with different ``--libs`` or
``--seeds`` and the same ``--out`` use two cores (one torch thread each: ``--threads 1``). A heron
run made elsewhere with the same config (e.g. ``heron bench mujoco-td3``) can be reused by placing
(or linking) its run folder at the path the script prints; the script checks that its config matches
on every field that affects learning and reads its evaluations up to ``--total-steps``.

    python benchmarks/offpolicy_curves_vs_sb3.py --algo td3 --env-id Walker2d-v5 --total-steps 300000 \\
        --seeds 1 2 --out /tmp/curves_td3_w2d
    python benchmarks/offpolicy_curves_vs_sb3.py --algo crossq --env-id Hopper-v5 --total-steps 100000 \\
        --eval-every 5000 --set critic_hidden_sizes=256,256 --seeds 1 2 3 --out /tmp/curves_crossq
    python benchmarks/offpolicy_curves_vs_sb3.py --algo td3 --env-id Pendulum-v1 --total-steps 3000 \\
        --set learning_starts=500 --eval-every 1000 --eval-episodes 2 --seeds 1 --out /tmp/c   # smoke test
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

LIBS = ("heron", "sb3")
# fields that do not change what a run learns (where it writes, how often it logs or checkpoints, how
# long it goes on): a heron run that differs from the script's config only in these is reused
NOT_LEARNING = {
    "run_dir",
    "progress",
    "torch_threads",
    "checkpoint_every",
    "checkpoint_minutes",
    "keep_checkpoints",
    "log_every",
    "total_steps",
    "track",
    "wandb_project",
    "capture_video",
    "device",
    "dist_backend",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="heron vs Stable-Baselines3: TD3/SAC learning curves at equal env steps")
    p.add_argument(
        "--algo",
        choices=("td3", "sac", "crossq"),
        default="td3",
        help="crossq: heron's SAC with --preset crossq (before --preset) beside sb3-contrib's CrossQ",
    )
    p.add_argument("--env-id", default="Walker2d-v5")
    p.add_argument("--preset", default="mujoco", help="heron preset the config starts from ('' for none)")
    p.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="heron config overrides")
    p.add_argument("--total-steps", type=int, default=300_000)
    p.add_argument("--eval-every", type=int, default=10_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--libs", nargs="+", choices=LIBS, default=list(LIBS))
    p.add_argument("--threads", type=int, default=1, help="torch threads of each training")
    p.add_argument("--marks", type=int, default=10, help="rows of the report (evenly spaced marks)")
    p.add_argument("--out", required=True, help="folder of the runs (resumable)")
    p.add_argument("--report-only", action="store_true", help="train nothing; report what --out holds")
    p.add_argument(
        "--plot",
        metavar="PNG",
        help="also draw both libraries' evaluation curves (mean with a band of one "
        "std over the seeds, up to --total-steps) to this file",
    )
    p.add_argument(
        "--results",
        metavar="CSV",
        help="also record every finished run (its settings, per-seed figures, "
        "evaluation curve and this command) in this results file, replacing an earlier row of the same "
        "run; benchmarks/results_tables.py renders the docs' tables from it",
    )
    p.add_argument("--one", nargs=2, metavar=("LIB", "SEED"), help=argparse.SUPPRESS)  # internal
    args = p.parse_args(argv)
    if args.total_steps <= 0 or args.eval_every <= 0 or args.eval_episodes <= 0 or args.threads <= 0:
        p.error("--total-steps, --eval-every, --eval-episodes and --threads must be positive")
    if args.total_steps % args.eval_every:
        p.error("--total-steps must be a multiple of --eval-every (both sides evaluate at the same steps)")
    return args


def heron_config(args: argparse.Namespace, seed: int, run_dir: Path):
    from heron.api import make_config
    from heron.envs.ids import check_env_id
    from heron.errors import HeronError

    overrides = {}
    for item in args.set:
        field, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set takes FIELD=VALUE, got {item!r}")
        overrides[field] = value
    try:
        check_env_id(args.env_id)  # heron's one-line error for an id it cannot make, with close matches
        return make_config(
            heron_algo(args),
            (["crossq"] if args.algo == "crossq" else []) + ([args.preset] if args.preset else []),
            **overrides,
            env_id=args.env_id,
            seed=seed,
            total_steps=args.total_steps,
            eval_every=args.eval_every,
            eval_episodes=args.eval_episodes,
            torch_threads=args.threads,
            run_dir=str(run_dir),
            progress="log",
            device="cpu",
        )
    except HeronError as exc:
        raise SystemExit(f"heron config: {exc}") from None


def heron_algo(args: argparse.Namespace) -> str:
    return "sac" if args.algo == "crossq" else args.algo


def sb3_settings(cfg) -> dict:
    """SB3's constructor arguments for heron's resolved config; SystemExit where SB3 cannot match it."""
    unmatched = []
    if cfg.policy_lr != cfg.q_lr:
        unmatched.append(f"policy_lr {cfg.policy_lr} != q_lr {cfg.q_lr} (SB3 has one learning rate)")
    if cfg.num_envs != 1 or cfg.obs_norm or cfg.max_grad_norm or cfg.precision != "32" or cfg.n_step != 1:
        unmatched.append("num_envs 1, no obs_norm, no max_grad_norm, n_step 1 and precision 32 only")
    if getattr(cfg, "crossq", False):  # sb3-contrib's CrossQ: one actor step every policy_delay updates
        if cfg.lr_schedule != "constant" or cfg.gradient_steps != 1:
            unmatched.append("CrossQ here needs a constant learning rate and one gradient step per env step")
    elif hasattr(cfg, "autotune"):  # SAC
        if cfg.policy_frequency != 1 or cfg.lr_schedule != "constant" or cfg.recurrent != "none":
            unmatched.append(
                "SAC needs policy_frequency=1 (SB3 updates the actor every step), a constant "
                "learning rate and no recurrence"
            )
    if unmatched:
        raise SystemExit("SB3 cannot run this config: " + "; ".join(unmatched))
    s = dict(
        learning_rate=cfg.policy_lr,
        buffer_size=cfg.buffer_size,
        learning_starts=cfg.learning_starts,
        batch_size=cfg.batch_size,
        tau=cfg.tau,
        gamma=cfg.gamma,
        train_freq=1,
        gradient_steps=cfg.gradient_steps,
        policy_kwargs=dict(net_arch=list(cfg.hidden_sizes)),
    )
    if getattr(cfg, "crossq", False):
        del s["tau"]  # no target networks
        width = list(cfg.critic_hidden_sizes or cfg.hidden_sizes)
        s.update(
            ent_coef=f"auto_{cfg.alpha}" if cfg.autotune else cfg.alpha,
            policy_delay=cfg.policy_frequency,
            policy_kwargs=dict(
                net_arch={"pi": list(cfg.hidden_sizes), "qf": width},
                batch_norm_momentum=cfg.bn_momentum,
                renorm_warmup_steps=cfg.bn_warmup,
                optimizer_kwargs=dict(betas=(cfg.adam_beta1, 0.999)),
            ),
        )
    elif hasattr(cfg, "autotune"):  # SAC
        s.update(
            ent_coef=f"auto_{cfg.alpha}" if cfg.autotune else cfg.alpha,
            target_update_interval=cfg.target_network_frequency,
        )
    else:
        s.update(
            policy_delay=cfg.policy_frequency,
            target_policy_noise=cfg.policy_noise,
            target_noise_clip=cfg.noise_clip,
            exploration_noise=cfg.exploration_noise,
        )
    return s


def run_dir_of(args: argparse.Namespace, lib: str, seed: int) -> Path:
    return Path(args.out) / f"{lib}_{args.algo}_{args.env_id.replace('/', '-')}_s{seed}"


def read_evals(run_dir: Path, upto: int) -> dict[int, float]:
    path = run_dir / "eval.csv"
    if not path.exists():
        return {}
    with open(path, newline="") as f:
        return {int(r["step"]): float(r["mean_return"]) for r in csv.DictReader(f) if int(r["step"]) <= upto}


def read_training(run_dir: Path, upto: int) -> list[tuple[int, float]]:
    """(step, return) of the training episodes: heron's metrics.csv, or the SB3 run's train.csv."""
    rows = []
    heron_rows = run_dir / "metrics.csv"
    if heron_rows.exists():
        with open(heron_rows, newline="") as f:
            rows = [
                (int(r["step"]), float(r["value"]))
                for r in csv.DictReader(f)
                if r["metric"] == "charts/episodic_return"
            ]
    elif (run_dir / "train.csv").exists():
        with open(run_dir / "train.csv", newline="") as f:
            rows = [(int(r["step"]), float(r["return"])) for r in csv.DictReader(f)]
    return [(s, r) for s, r in rows if s <= upto]


def finished(args: argparse.Namespace, run_dir: Path) -> bool:
    return args.total_steps in read_evals(run_dir, args.total_steps)


# -- one training ------------------------------------------------------------------------------------
def check_heron_dir(args: argparse.Namespace, seed: int, run_dir: Path) -> dict | None:
    """The config of the heron run in ``run_dir`` (None if there is none), after checking that it
    learns as the script's config would: a run made elsewhere is reused only then."""
    import yaml

    from heron.config import to_dict

    if not (run_dir / "config.yaml").exists():
        return None
    have = yaml.safe_load((run_dir / "config.yaml").read_text())
    want = to_dict(heron_config(args, seed, run_dir))
    differ = sorted(k for k in want if k not in NOT_LEARNING and _norm(have.get(k)) != _norm(want[k]))
    if differ:
        raise SystemExit(
            f"{run_dir} holds a heron run whose config differs in {', '.join(differ)}: "
            "move it away or match the script's settings"
        )
    if have["total_steps"] < args.total_steps:
        raise SystemExit(f"{run_dir} stops at {have['total_steps']} steps, fewer than --total-steps")
    return have


def train_heron(args: argparse.Namespace, seed: int, run_dir: Path) -> None:
    import heron

    have = check_heron_dir(args, seed, run_dir)
    if have is None:
        cfg = heron_config(args, seed, run_dir)
        heron.train(heron_algo(args), **{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)})
    elif have["total_steps"] > args.total_steps:  # a longer run made elsewhere that is not far enough yet
        raise SystemExit(
            f"{run_dir} ({have['total_steps']} steps) has no evaluation at {args.total_steps} yet: "
            "continue it with heron train --resume first"
        )
    else:
        heron.resume(run_dir)


def _norm(v):
    return list(v) if isinstance(v, (tuple, list)) else v


class SB3Policy:
    """An SB3 model behind the interface heron's evaluation loop plays (``heron.runtime.episodes``):
    its deterministic actions, from the same start states as heron's."""

    def __init__(self, model):
        self.model = model

    def predict(self, obs, deterministic=True):
        return self.model.predict(obs, deterministic=True)[0]

    def reset(self):
        pass


def train_sb3(args: argparse.Namespace, seed: int, run_dir: Path) -> None:
    import torch
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.noise import NormalActionNoise

    from heron.envs.make import make_env
    from heron.runtime.episodes import EVAL_SEED_OFFSET, evaluate

    torch.set_num_threads(args.threads)
    cfg = heron_config(args, seed, run_dir)
    settings = sb3_settings(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("eval.csv", "train.csv"):  # an SB3 run that stopped starts again
        (run_dir / name).unlink(missing_ok=True)
    (run_dir / "sb3_settings.json").write_text(json.dumps(settings, indent=2) + "\n")
    env = make_vec_env(lambda: make_env(args.env_id), n_envs=1, seed=seed)
    if args.algo == "td3":
        sigma = settings.pop("exploration_noise")
        A = env.action_space.shape[0]
        model = TD3(
            "MlpPolicy",
            env,
            action_noise=NormalActionNoise(np.zeros(A), sigma * np.ones(A)),
            seed=seed,
            device="cpu",
            verbose=0,
            **settings,
        )
    else:
        if args.algo == "crossq":
            from sb3_contrib import CrossQ as maximum_entropy  # SAC's interface, with batch renormalisation
        else:
            maximum_entropy = SAC
        model = maximum_entropy(
            "MlpPolicy",
            env,
            target_entropy=-cfg.target_entropy_scale * env.action_space.shape[0],
            seed=seed,
            device="cpu",
            verbose=0,
            **settings,
        )

    class Record(BaseCallback):
        def __init__(self):
            super().__init__()
            self.evals = open(run_dir / "eval.csv", "w", newline="")
            self.train = open(run_dir / "train.csv", "w", newline="")
            csv.writer(self.evals).writerow(["step", "mean_return", "std_return", "episodes"])
            csv.writer(self.train).writerow(["step", "return", "length"])

        def _on_step(self) -> bool:
            step = self.model.num_timesteps
            for info in self.locals["infos"]:
                if "episode" in info:
                    csv.writer(self.train).writerow([step, info["episode"]["r"], info["episode"]["l"]])
            if step % args.eval_every == 0:
                returns = evaluate(SB3Policy(model), args.env_id, args.eval_episodes, seed + EVAL_SEED_OFFSET)
                csv.writer(self.evals).writerow([step, returns.mean(), returns.std(), len(returns)])
                self.evals.flush()
                self.train.flush()
                print(
                    f"sb3 {args.algo} {args.env_id} seed {seed}: step {step}, evaluation {returns.mean():.1f}",
                    flush=True,
                )
            return True

        def _on_training_end(self) -> None:
            self.evals.close()
            self.train.close()

    model.set_logger(Logger(folder=None, output_formats=[]))  # no empty SB3-<date> folder left in the temp dir
    model.learn(total_timesteps=args.total_steps, callback=Record())
    env.close()


# -- report ------------------------------------------------------------------------------------------
def permutation_p(a: list[float], b: list[float], exact_up_to: int = 200_000) -> float:
    """Two-sided exact permutation test of a difference in means: the share of all ways to split the
    pooled per-seed values into groups of ``len(a)`` and ``len(b)`` whose difference in means is at
    least as large (in absolute value) as the observed one. With few seeds the smallest p it can
    give is ``1 / C(n, len(a))``, twice that for groups of one size (0.07 for 4 + 2 seeds, 0.33 for
    2 + 2, 0.008 for 4 + 5): read it with that in mind. Past ``exact_up_to`` splits (more than about
    20 seeds in all) it draws that many random splits instead, from a fixed seed."""
    from itertools import combinations
    from math import comb

    pooled = np.asarray(list(a) + list(b), float)
    n, k = len(pooled), len(a)
    observed = abs(np.mean(a) - np.mean(b))
    if comb(n, k) <= exact_up_to:
        masks = np.zeros((comb(n, k), n), bool)
        for row, idx in enumerate(combinations(range(n), k)):
            masks[row, list(idx)] = True
    else:
        rng = np.random.default_rng(0)
        masks = np.argsort(rng.random((exact_up_to, n)), axis=1) < k
    first = (masks * pooled).sum(1) / k
    second = (~masks * pooled).sum(1) / (n - k)
    return float(np.mean(np.abs(first - second) >= observed - 1e-9))


def run_figures(args: argparse.Namespace, lib: str, seed: int, evals: dict[int, float]) -> dict | None:
    """One finished run's figures (None while it has no evaluation at --total-steps): the final and
    best evaluation, the mean of the evaluations (the area under the curve over its length) and the
    mean training return over the last 10% of the steps (None if no episode ended there)."""
    if args.total_steps not in evals:
        return None
    train = [r for st, r in read_training(run_dir_of(args, lib, seed), args.total_steps) if st > 0.9 * args.total_steps]
    return dict(
        final_eval=evals[args.total_steps],
        mean_eval=float(np.mean(list(evals.values()))),
        best_eval=max(evals.values()),
        train_last10=float(np.mean(train)) if train else None,
    )


RESULT_FIELDS = (
    "algo",
    "env_id",
    "total_steps",
    "preset",
    "overrides",
    "lib",
    "seed",
    "final_eval",
    "mean_eval",
    "best_eval",
    "train_last10",
    "evals",
    "eval_episodes",
    "peer",
    "recorded",
    "command",
)


def record_results(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Write every finished run of --out to the --results file; an earlier row of the same run (algo,
    env, steps, preset, overrides, library, seed) is replaced. Returns the number of rows written."""
    import datetime
    import shlex

    path = Path(args.results)
    key_fields = ("algo", "env_id", "total_steps", "preset", "overrides", "lib", "seed")
    rows = []
    if path.exists():
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        if rows and set(rows[0]) != set(RESULT_FIELDS):
            raise SystemExit(f"--results: {path} has other columns than this script writes ({', '.join(rows[0])})")
    peer = ""
    if "sb3" in args.libs:
        package = "sb3-contrib" if args.algo == "crossq" else "stable-baselines3"
        try:
            from importlib.metadata import version

            peer = f"{package} {version(package)}"
        except Exception:  # not installed: --report-only of runs made elsewhere
            peer = package
    given, kept = list(sys.argv[1:] if argv is None else argv), []
    while given:  # the command that trains (and reports): without --report-only and the results file
        item = given.pop(0)
        if item == "--results":
            given = given[1:]
        elif item != "--report-only" and not item.startswith("--results="):
            kept.append(item)
    command = "python benchmarks/offpolicy_curves_vs_sb3.py " + shlex.join(kept)
    new = []
    for lib in args.libs:
        for seed in args.seeds:
            evals = read_evals(run_dir_of(args, lib, seed), args.total_steps)
            fig = run_figures(args, lib, seed, evals)
            if fig is None:
                continue
            new.append(
                dict(
                    algo=args.algo,
                    env_id=args.env_id,
                    total_steps=args.total_steps,
                    preset=args.preset,
                    overrides=" ".join(sorted(args.set)),
                    lib=lib,
                    seed=seed,
                    **{k: "" if v is None else f"{v:.2f}" for k, v in fig.items()},
                    evals=" ".join(f"{k}:{v:.2f}" for k, v in sorted(evals.items())),
                    eval_episodes=args.eval_episodes,
                    peer=peer if lib == "sb3" else "",
                    recorded=datetime.date.today().isoformat(),
                    command=command,
                )
            )
    keys = {tuple(str(r[k]) for k in key_fields) for r in new}
    rows = [r for r in rows if tuple(r[k] for k in key_fields) not in keys] + new
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=RESULT_FIELDS)
        w.writeheader()
        w.writerows(rows)
    return len(new)


def _std(values: list[float]) -> float:
    """The sample standard deviation over seeds (n - 1), as heron bench gives it."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def _fmt(values: list[float]) -> str:
    """The number format of a table of returns: no decimals where returns run to the hundreds, one
    where they are small (Reacher's -4.2 against -5.1)."""
    return ".0f" if not values or max(abs(v) for v in values) >= 100 else ".1f"


def report(args: argparse.Namespace, cfg) -> None:
    step = args.total_steps // args.marks
    marks = [m for m in range(step, args.total_steps + 1, step) if m % args.eval_every == 0] or [args.total_steps]
    curves = {lib: {s: read_evals(run_dir_of(args, lib, s), args.total_steps) for s in args.seeds} for lib in LIBS}
    f = _fmt([v for lib in LIBS for c in curves[lib].values() for v in c.values()])
    print(
        f"\n{args.algo.upper()} on {args.env_id}, {args.total_steps:,} env steps, seeds {args.seeds}; deterministic "
        f"evaluation of {args.eval_episodes} episodes every {args.eval_every:,} steps, the same start states on "
        f"both sides; learning starts at {cfg.learning_starts:,}"
    )
    print("\n| Steps | heron (mean ± std over seeds) | SB3 | heron per seed | SB3 per seed |")
    print("|---:|---:|---:|---|---|")
    for m in marks:
        cells = []
        for lib in LIBS:
            vals = [curves[lib][s][m] for s in args.seeds if m in curves[lib][s]]
            cells.append(f"{np.mean(vals):{f}} ± {_std(vals):{f}}" if vals else "")
        per = [
            ", ".join(f"{curves[lib][s][m]:{f}}" if m in curves[lib][s] else "-" for s in args.seeds) for lib in LIBS
        ]
        print(f"| {m:,} | {cells[0]} | {cells[1]} | {per[0]} | {per[1]} |")
    print()
    rows = {
        "final evaluation": [],
        "training return, last 10% of the steps": [],
        "mean of the evaluations": [],
        "best evaluation": [],
    }
    per_seed: dict[str, list[list[float]]] = {key: [] for key in rows}
    for lib in LIBS:
        figures = [run_figures(args, lib, s, curves[lib][s]) for s in args.seeds]
        figures = [fig for fig in figures if fig]  # unfinished runs would pull the figures toward their early steps
        for key, name in zip(rows, ("final_eval", "train_last10", "mean_eval", "best_eval")):
            vals = [fig[name] for fig in figures if fig[name] is not None]
            rows[key].append(f"{np.mean(vals):{f}} ± {_std(vals):{f}} ({len(vals)})" if vals else "")
            per_seed[key].append(vals)
    print("| Figure | heron | SB3 | p (permutation test) |")
    print("|---|---:|---:|---:|")
    for key, cells in rows.items():
        a, b = per_seed[key]
        p = f"{permutation_p(a, b):.2f}" if len(a) >= 2 and len(b) >= 2 else ""
        print(f"| {key} | {cells[0]} | {cells[1]} | {p} |")
    if args.plot:  # every run with evaluations, finished or not: the legend counts the seeds
        from heron.errors import HeronError
        from heron.plot import plot_curve_bands

        groups = {
            {"sb3": "SB3"}.get(lib, lib): [(sorted(c), [c[k] for k in sorted(c)]) for c in curves[lib].values() if c]
            for lib in LIBS
        }
        try:
            print("plot:", plot_curve_bands(groups, args.plot, f"{args.algo.upper()} {args.env_id}, heron and SB3"))
        except HeronError as exc:  # no matplotlib, no evaluations yet
            raise SystemExit(f"--plot: {exc}") from None
    print(
        "\n(mean ± std over the finished seeds, their number in brackets; 'mean of the evaluations' is the area under "
        "the evaluation curve divided by its length; p: the chance that seed-to-seed noise alone splits the "
        "pooled per-seed figures into groups this far apart, over every split of the seeds)"
    )


def main(argv: list[str] | None = None) -> int:
    """Refusals (``SystemExit`` with a message: a config SB3 cannot run, a heron run that does not
    match, a bad env id) print that one line and exit 2; argparse's own errors exit 2 as well."""
    args = parse_args(argv)
    try:
        return _main(args, argv)
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        print(f"offpolicy_curves_vs_sb3: {exc.code}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace, argv: list[str] | None) -> int:
    if args.one:
        lib, seed = args.one[0], int(args.one[1])
        run_dir = run_dir_of(args, lib, seed)
        (train_heron if lib == "heron" else train_sb3)(args, seed, run_dir)
        return 0
    cfg = heron_config(args, args.seeds[0], Path(args.out))  # a bad id or override stops here
    if "sb3" in args.libs and not args.report_only:
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            raise SystemExit("this benchmark needs stable-baselines3: pip install 'stable-baselines3>=2.3'") from None
        sb3_settings(cfg)  # before any training: a config SB3 cannot match stops here
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        for seed in args.seeds:
            for lib in args.libs:  # one after the other, never in parallel
                run_dir = run_dir_of(args, lib, seed)
                if lib == "heron":
                    check_heron_dir(args, seed, run_dir)
                if finished(args, run_dir):
                    print(f"[{lib} seed {seed}] finished earlier: {run_dir}", flush=True)
                    continue
                print(f"[{lib} seed {seed}] training -> {run_dir}", flush=True)
                cmd = [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    *(sys.argv[1:] if argv is None else argv),
                    "--one",
                    lib,
                    str(seed),
                ]
                code = subprocess.run(cmd).returncode
                if code:
                    print(
                        f"[{lib} seed {seed}] training ended with exit code {code} (its output is above); "
                        "the same command continues",
                        file=sys.stderr,
                    )
                    return code
    report(args, cfg)
    if args.results:
        print(f"results: {record_results(args, argv)} finished run(s) recorded in {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
