"""``heron train|eval|check-env|list|plot``. No per-algorithm branches: flags come from each algorithm's
Config dataclass (kebab-case field names, help from field metadata).

Every user error is one line on stderr and exit code 2; a run ended by a fault (heron.runtime.faults)
is one line too: 3 when it diverged, 1 when an env crashed or a write failed; a stop request 130.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import sys
import typing
from pathlib import Path
from typing import Any

from heron import registry
from heron.config import field_types, flag, type_name
from heron.errors import Fault, HeronError, Interrupted, first_line
from heron.ops import dist
from heron.runtime.memory import keep_freed_memory

USAGE = """usage: heron <command> ...

commands:
  train ALGO [flags]                      train an algorithm (heron train ALGO --help lists its flags)
  train --resume RUN_DIR [--total-steps N] [--torch-threads N] [--eval-async M]
                                          continue a run from its latest checkpoint
  eval RUN_DIR [--episodes N] [--video] [--json] [--checkpoint latest|best] [--envs N]
  check-env ENV_ID [--steps N] [--json]   will this env train with heron, and with which algorithms?
  list                                    algorithms and their presets
  plot RUN_DIR [RUN_DIR ...] [--out FILE] learning curves of one or more runs (--bands: mean over seeds)
  bench SUITE [--seeds 1 2 3] [--parallel K] [--out DIR]
                                          a benchmark suite, resumable (heron bench --list)
  tune ALGO [--env-id ENV] --trials N [--jobs K] [--storage URL] [--study NAME] [config flags]
                                          a hyperparameter search with Optuna (pruned on evaluations)
  export RUN_DIR --format onnx|torchscript [--out FILE] [--checkpoint latest|best]
                                          the deterministic policy as a standalone file
"""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors become HeronError (one line, exit 2 in main)."""

    def error(self, message: str) -> typing.NoReturn:
        raise HeronError(message)


def _reject_unknown(unknown: list[str], known: list[str], why: str = "") -> None:
    """A one-line error for the first unknown argument: a near-miss gets 'did you mean', any other
    flag ``why`` it is not taken (when given)."""
    if not unknown:
        return
    bad = unknown[0]
    if bad.startswith("-"):
        close = difflib.get_close_matches(bad.split("=")[0], known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else (f": {why}" if why else "")
        raise HeronError(f"unknown flag {bad}{hint}")
    raise HeronError(f"unexpected argument {bad!r}")


def _negative_values(argv: list[str]) -> list[str]:
    """Write ``--flag -1e-3`` as ``--flag=-1e-3``: argparse would read the value as a flag."""
    out, i = [], 0
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("--") and "=" not in tok and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            try:
                float(argv[i + 1])
            except ValueError:
                pass
            else:
                out.append(f"{tok}={argv[i + 1]}")
                i += 2
                continue
        out.append(tok)
        i += 1
    return out


def config_parser(algo: str, cls: type, defaults: Any) -> _Parser:
    """A parser with one flag per Config field; values stay strings (coerced by apply_overrides)
    and absent flags are absent from the namespace."""
    p = _Parser(
        prog=f"heron train {algo}",
        add_help=True,
        argument_default=argparse.SUPPRESS,
        description=f"Train {algo}. Order of precedence: defaults < --config < --preset < flags.",
    )
    p.add_argument("--config", metavar="FILE.yaml", help="read options from a YAML file (e.g. a run's config.yaml)")
    p.add_argument(
        "--preset",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="named overlays applied in order (repeating the flag adds to the list)",
    )
    types = field_types(cls)
    for f in dataclasses.fields(cls):
        kind = types[f.name]
        default = getattr(defaults, f.name)
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        help_text = f"{f.metadata.get('help', '')} (default: {shown!r})".replace("%", "%%")
        kwargs: dict[str, Any] = {"help": help_text, "dest": f.name}
        if kind is bool:
            kwargs.update(nargs="?", const="true", metavar="true|false")
        elif typing.get_origin(kind) is tuple:
            kwargs.update(nargs="+", metavar="KEY" if typing.get_args(kind)[0] is str else "INT")
        elif f.metadata.get("choices"):
            kwargs.update(metavar="|".join(map(str, f.metadata["choices"])))
        else:
            kwargs.update(metavar=type_name(kind).split()[-1].upper())
        p.add_argument(f"--{flag(f.name)}", **kwargs)
    for name in getattr(cls, "REMOVED", {}):  # refused with what to do instead (apply_overrides)
        p.add_argument(f"--{flag(name)}", dest=name, nargs="?", const="true", help=argparse.SUPPRESS)
    return p


def cmd_train(argv: list[str]) -> int:
    from heron import api

    if not argv or argv[0] in ("-h", "--help"):
        print(
            "usage: heron train ALGO [flags]  |  heron train --resume RUN_DIR [--total-steps N] [--torch-threads N] "
            "[--eval-async auto|on|off]\n"
            f"algorithms: {', '.join(registry.ALGOS)}; see heron train ALGO --help"
        )
        return 0 if argv else 2
    if argv[0] == "--resume" or argv[0].startswith("--resume="):
        p = _Parser(prog="heron train --resume")
        p.add_argument("--resume", required=True, metavar="RUN_DIR")
        p.add_argument("--total-steps", type=int)
        p.add_argument("--torch-threads", type=int)
        p.add_argument("--eval-async", choices=["auto", "on", "off"])
        args, unknown = p.parse_known_args(argv)
        _reject_unknown(
            unknown,
            ["--resume", "--total-steps", "--torch-threads", "--eval-async"],
            "a resumed run keeps its config.yaml; resume takes only --total-steps, --torch-threads and --eval-async",
        )
        if args.total_steps is not None and args.total_steps <= 0:
            raise HeronError(f"--total-steps must be positive, got {args.total_steps}")
        api.resume(args.resume, args.total_steps, torch_threads=args.torch_threads, eval_async=args.eval_async)
        return 0
    algo, rest = argv[0], _negative_values(argv[1:])
    module = registry.get(algo)
    pre = _Parser(add_help=False, argument_default=argparse.SUPPRESS)
    pre.add_argument("--config")
    pre.add_argument("--preset", nargs="+", action="extend")  # --preset a --preset b: both, in order
    early, _ = pre.parse_known_args(rest)
    presets = getattr(early, "preset", [])
    config_file = getattr(early, "config", None)
    try:
        base = api.make_config(algo, presets, config_file)
    except HeronError:
        if "-h" not in rest and "--help" not in rest:
            raise
        base = module.Config()  # help still shows, with the plain defaults
    parser = config_parser(algo, module.Config, base)
    args, unknown = parser.parse_known_args(rest)
    _reject_unknown(unknown, [o for a in parser._actions for o in a.option_strings])
    overrides = {k: v for k, v in vars(args).items() if k not in ("config", "preset")}
    api.train(algo, presets=presets, config_file=config_file, **overrides)
    return 0


def cmd_eval(argv: list[str]) -> int:
    from heron import api

    p = _Parser(prog="heron eval", description="Run a saved policy deterministically.")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--episodes", type=int, default=None, help="episodes to run (default: the run's --eval-episodes)")
    p.add_argument("--video", action="store_true", help="record a video into RUN_DIR/videos/")
    p.add_argument("--json", action="store_true", help="print one JSON object on one line")
    p.add_argument("--checkpoint", default="latest", help="latest, best, or a checkpoint file (default: latest)")
    p.add_argument("--seed", type=int, default=None, help="first episode seed (default: the run's eval seed)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto)")
    p.add_argument(
        "--envs", type=int, default=None, help="episodes played at once, one env each (default: the run's --eval-envs)"
    )
    args, unknown = p.parse_known_args(argv)
    _reject_unknown(unknown, ["--episodes", "--video", "--json", "--checkpoint", "--seed", "--device", "--envs"])
    out = api.evaluate(args.run_dir, args.episodes, args.checkpoint, args.seed, args.video, args.device, envs=args.envs)
    if args.json:
        print(json.dumps(out))
    else:
        video = out.get("video")
        print(
            f"{out['algo']} on {out['env_id']} @ {out['steps']} steps: {out['mean_return']:.2f} +- "
            f"{out['std_return']:.2f} over {out['episodes']} episodes" + (f"; video {video}" if video else "")
        )
    return 0


def cmd_check_env(argv: list[str]) -> int:
    from heron.checkenv import check

    p = _Parser(
        prog="heron check-env",
        description="Check that an environment trains with heron, and with "
        "which algorithms: Gymnasium's env checker, a rollout of random actions checked against the "
        "spaces, each algorithm's own requirements. Exit 0 when nothing failed, 1 otherwise.",
    )
    p.add_argument("env_id", metavar="ENV_ID", help="a Gymnasium id, module:EnvId, or module:factory")
    p.add_argument("--steps", type=int, default=500, help="random steps of the rollout (default: 500)")
    p.add_argument("--seed", type=int, default=0, help="seed of the rollout (default: 0)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args, unknown = p.parse_known_args(argv)
    _reject_unknown(unknown, ["--steps", "--seed", "--json"])
    report = check(args.env_id, args.steps, args.seed)
    print(json.dumps(report.to_dict()) if args.json else report.text())
    return 1 if report.problems else 0


def cmd_list(argv: list[str]) -> int:
    from rich.console import Console
    from rich.table import Table

    if argv:
        _reject_unknown(argv, [])
    table = Table(title="heron algorithms")
    table.add_column("algo")
    table.add_column("description")
    table.add_column("presets")
    for name in registry.ALGOS:
        module = registry.get(name)
        table.add_row(name, module.DESCRIPTION, ", ".join(module.PRESETS))
    Console().print(table)
    return 0


def cmd_plot(argv: list[str]) -> int:
    from heron.plot import plot_runs

    p = _Parser(prog="heron plot", description="Plot episodic and evaluation returns of runs.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", default=None, help="output PNG (default: RUN_DIR/returns.png of the first run)")
    p.add_argument("--metric", default="charts/episodic_return", help="metric from metrics.csv to plot")
    p.add_argument(
        "--bands",
        action="store_true",
        help="the evaluation returns of runs with the same algorithm "
        "and env (seeds) as one line: their mean with a band of one standard deviation",
    )
    args, unknown = p.parse_known_args(argv)
    _reject_unknown(unknown, ["--out", "--metric", "--bands"])
    if args.bands:
        from heron.plot import plot_bands
        from heron.runtime.rundir import read_config

        groups: dict[str, list[str]] = {}
        for run_dir in args.run_dirs:
            algo, data = read_config(run_dir)
            groups.setdefault(f"{algo} {data.get('env_id', '?')}", []).append(run_dir)
        out = plot_bands(groups, args.out or str(Path(args.run_dirs[0]) / "returns_bands.png"))
    else:
        out = plot_runs(args.run_dirs, args.out, args.metric)
    print(out)
    return 0


def cmd_bench(argv: list[str]) -> int:
    from heron import bench

    p = _Parser(
        prog="heron bench",
        allow_abbrev=False,
        description="Run a benchmark suite: every entry once per seed, each an "
        "ordinary run directory under OUT/SUITE. Give the same command again to continue: finished runs "
        "are skipped, stopped ones resume from their latest checkpoint. Writes OUT/results.csv, "
        "OUT/SUITE.md (mean and std over seeds beside the published figures) and OUT/plots/SUITE/*.png.",
    )
    p.add_argument("suite", nargs="?", metavar="SUITE", help=f"one of: {', '.join(bench.SUITES)}")
    p.add_argument("--seeds", type=int, nargs="+", default=[1], metavar="SEED", help="seeds (default: 1)")
    p.add_argument(
        "--parallel", type=int, default=1, metavar="K", help="runs at once, the cores divided among them (default: 1)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="torch threads per run (default: 0, the free cores divided among the --parallel runs)",
    )
    p.add_argument("--out", default="bench", metavar="DIR", help="output folder (default: bench)")
    p.add_argument(
        "--steps", type=int, default=None, metavar="N", help="total steps of every run instead of the suite's"
    )
    p.add_argument(
        "--only",
        nargs="+",
        default=[],
        metavar="TEXT",
        help="only the entries whose algorithm or env id contains one of these",
    )
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto)")
    p.add_argument(
        "--precision",
        default="32",
        help="every run's --precision (default: 32); runs at another "
        "precision go under SUITE.PRECISION (their own folder, rows and table)",
    )
    p.add_argument(
        "--status-every",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds between progress lines (default: 60; 0: none)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the commands that would run, run nothing")
    p.add_argument("--list", action="store_true", help="list the suites and their entries")
    p.add_argument("--report", action="store_true", help="only write the tables and plots from OUT/results.csv")
    args, unknown = p.parse_known_args(argv)
    _reject_unknown(unknown, [o for a in p._actions for o in a.option_strings])
    if args.list:
        for name, entries in bench.SUITES.items():
            print(f"{name}:")
            for e in entries:
                print(f"  {e.algo:<11} {e.env_id:<22} --preset {' '.join(e.presets):<20} {e.total_steps:>11,} steps")
        return 0
    if args.report:
        suites = [bench.suite_label(args.suite, args.precision)] if args.suite else None
        for path in bench.write_report(args.out, suites):
            print(path)
        return 0
    if not args.suite:
        raise HeronError(f"name a suite: heron bench SUITE (one of {', '.join(bench.SUITES)}), or --list")
    return bench.run_suite(
        args.suite,
        args.seeds,
        args.out,
        args.parallel,
        args.steps,
        args.only,
        args.device,
        args.status_every,
        args.dry_run,
        args.threads,
        echo=lambda line: print(line, flush=True),
        precision=args.precision,
    )


def cmd_tune(argv: list[str]) -> int:
    from heron import tune
    from heron.runtime.cores import busy_cores, choose_threads, others_now

    p = _Parser(
        prog="heron tune",
        allow_abbrev=False,
        description="Search hyperparameters with Optuna (TPE, "
        "median pruning on the periodic evaluations); every trial is a run directory under OUT/trials. "
        "Any other flag is an option of every trial (heron train ALGO --help): --total-steps, --eval-every, "
        "... Give the same command again to continue the study.",
    )
    p.add_argument("algo", metavar="ALGO")
    p.add_argument(
        "--trials", type=int, required=True, metavar="N", help="finished or pruned trials the study should hold"
    )
    p.add_argument("--jobs", type=int, default=1, metavar="K", help="worker processes on this machine (default: 1)")
    p.add_argument(
        "--storage",
        default=None,
        metavar="URL",
        help="Optuna RDB storage (default: sqlite:///OUT/study.db; "
        "a PostgreSQL URL to share the study between machines)",
    )
    p.add_argument("--study", default=None, metavar="NAME", help="study name (default: ALGO-ENV)")
    p.add_argument("--out", default=None, metavar="DIR", help="study folder (default: tune/STUDY)")
    p.add_argument("--space", default=None, metavar="FILE.yaml", help="search-space entries over the algorithm's")
    p.add_argument("--preset", nargs="+", action="extend", default=[], metavar="NAME", help="presets of every trial")
    p.add_argument("--config", default=None, metavar="FILE.yaml", help="a config file of every trial")
    p.add_argument("--seed", type=int, default=0, help="the sampler's seed (default: 0)")
    p.add_argument("--pruner", default="median", choices=["median", "none"], help="default: median")
    p.add_argument(
        "--startup-trials",
        type=int,
        default=5,
        metavar="N",
        help="trials sampled at random and never pruned before TPE and the pruner start (default: 5)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="torch threads per trial (default: the free cores divided among the jobs)",
    )
    p.add_argument("--plot", action="store_true", help="write the optimization history and parameter importances")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args, rest = p.parse_known_args(argv)
    module = registry.get(args.algo)
    cfg_parser = config_parser(f"{args.algo} (trial options)", module.Config, module.Config())
    trial_args, unknown = cfg_parser.parse_known_args(_negative_values(rest))
    _reject_unknown(unknown, [o for a in p._actions + cfg_parser._actions for o in a.option_strings])
    overrides = {k: v for k, v in vars(trial_args).items() if k not in ("config", "preset")}
    env_id = overrides.pop("env_id", None)
    study = args.study or f"{args.algo}-{env_id or module.Config().env_id}".replace("/", "_").replace(":", "_")
    out = Path(args.out or Path("tune") / study)
    if args.startup_trials < 0:
        raise HeronError(f"--startup-trials must be >= 0, got {args.startup_trials}")
    threads = args.threads or choose_threads(0, 0, "sync", args.jobs, busy_cores(others_now()))  # the free cores
    opts = tune.Options(
        args.algo,
        env_id,
        args.trials,
        out,
        study,
        args.storage or f"sqlite:///{out.resolve() / 'study.db'}",
        tuple(args.preset),
        args.config,
        args.space,
        args.seed,
        args.startup_trials,
        args.pruner,
        threads,
        overrides,
        [a for a in argv],
    )
    echo = lambda line: print(line, flush=True)  # noqa: E731
    if args.worker is not None:
        tune.work(opts, args.worker, echo)
        return 0
    return tune.run_tune(opts, args.jobs, args.plot, echo)


def cmd_export(argv: list[str]) -> int:
    from heron.export import FORMATS, export

    p = _Parser(
        prog="heron export",
        allow_abbrev=False,
        description="Write a run's deterministic policy "
        "(observation normalization included) as a standalone ONNX or TorchScript file, with a .json "
        "sidecar naming its inputs and outputs, and check it against the run's policy.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--format", default="onnx", metavar="|".join(FORMATS), help="default: onnx")
    p.add_argument("--out", default=None, metavar="FILE", help="default: RUN_DIR/export/policy.onnx (or .pt)")
    p.add_argument("--checkpoint", default="latest", help="latest, best, or a checkpoint file (default: latest)")
    p.add_argument(
        "--verify",
        type=int,
        default=64,
        metavar="N",
        help="random observations to compare the file's actions with the policy's on (default: 64; 0: no check)",
    )
    args, unknown = p.parse_known_args(argv)
    _reject_unknown(unknown, [o for a in p._actions for o in a.option_strings])
    info = export(args.run_dir, args.format, args.out, args.checkpoint, args.verify)
    ins = ", ".join(f"{i['name']} {i['dtype']}{i['shape']}" for i in info["inputs"])
    outs = ", ".join(f"{o['name']} {o['dtype']}{o['shape']}" for o in info["outputs"])
    checked = (
        f"; matches the policy on {info['verified_on']} observations (max diff {info['max_abs_diff']:.2g})"
        if "max_abs_diff" in info
        else ""
    )
    print(f"{info['path']}: {info['algo']} {info['env_id']} @ {info['step']} steps; in: {ins}; out: {outs}{checked}")
    return 0


COMMANDS = {
    "train": cmd_train,
    "eval": cmd_eval,
    "check-env": cmd_check_env,
    "list": cmd_list,
    "plot": cmd_plot,
    "bench": cmd_bench,
    "tune": cmd_tune,
    "export": cmd_export,
}


def entry() -> int:
    """The ``heron`` command (and ``python -m heron``): a process of its own, whose allocator it may
    set for training (``heron.runtime.memory``; a library call leaves the caller's alone), then ``main``.

    Under torchrun a rank ends with ``os._exit`` once ``main`` has returned: by then the run has
    closed its logs, checkpoints, envs and process group, and what is left is the interpreter's
    teardown, where torch's distributed objects have aborted a finished rank now and then
    ("terminate called without an active exception", exit -6), failing a job that succeeded."""
    keep_freed_memory()
    code = main()
    if _rank() is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    command = argv[0]
    rank = _rank()
    try:
        if command not in COMMANDS:
            close = difflib.get_close_matches(command, COMMANDS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise HeronError(f"unknown command {command!r}{hint}; choose from {', '.join(COMMANDS)}")
        return COMMANDS[command](argv[1:])
    # Under torchrun rank 0 reports for the job: bad input is the same on every rank, and what one
    # rank finds is shared (dist.agree); another rank speaks only of its own faults.
    except HeronError as exc:
        if not rank:
            print(f"heron: error: {exc}", file=sys.stderr)
        return 2
    except Fault as exc:
        if not rank or not isinstance(exc, dist.SharedFault):
            print(f"heron: error: {_on(rank)}{exc}", file=sys.stderr)
        return exc.exit_code
    except Interrupted as exc:
        if not rank:
            print(f"heron: {exc}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        if not rank:
            print("heron: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if rank is None:
            raise
        # a collective failed: another process of the job died or left it
        print(
            f"heron: error: {_on(rank)}another process of this torchrun job failed or left it "
            f"({first_line(exc)[:160]})",
            file=sys.stderr,
        )
        return 1


def _rank() -> int | None:
    """This process's rank under torchrun with several processes, else None."""
    try:
        world = dist.from_env()
    except HeronError:
        return None
    return world.rank if world.distributed else None


def _on(rank: int | None) -> str:
    return f"rank {rank}: " if rank else ""
