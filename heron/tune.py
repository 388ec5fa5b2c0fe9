"""``heron tune ALGO``: a hyperparameter search with Optuna (TPE sampler, median pruner fed by the
periodic deterministic evaluations), every trial an ordinary heron run directory.

The study lives in an RDB storage: ``OUT/study.db`` (SQLite) unless ``--storage`` names another
(a PostgreSQL URL lets several machines join one study: each runs the same command). Trials are
counted in the storage, so the same command given again continues the study: finished and pruned
trials are kept, a trial cut short by Ctrl-C or a lost machine is marked failed (heartbeats) and
another takes its place. ``--jobs K`` runs K worker processes on this machine, the cores divided
among them.

A trial's objective is the final deterministic evaluation of its run (``mean_return``). Each
periodic evaluation is reported to the pruner, which ends the trials that do worse than the median
of the earlier trials at the same step.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from heron import registry
from heron.errors import Diverged, HeronError, install_hint

TOP = 10  # trials in the printed table


# -- the search space --------------------------------------------------------------------------------
def load_space(algo: str, space_file: str | None = None) -> dict[str, dict]:
    """The algorithm's ``SEARCH_SPACE`` with a YAML file's entries on top (an entry ``null`` removes
    one), each checked against the algorithm's config fields."""
    module = registry.get(algo)
    space = dict(module.SEARCH_SPACE)
    if space_file:
        from heron.runtime.rundir import read_yaml

        data = read_yaml(space_file)
        for name, spec in data.items():
            if spec is None:
                space.pop(name, None)
            else:
                space[name] = spec
    fields = {f.name for f in dataclasses.fields(module.Config)}
    for name, spec in space.items():
        where = f"search space entry {name!r}" + (f" ({space_file})" if space_file else "")
        if name not in fields:
            raise HeronError(f"{where}: {algo} has no option {name!r}")
        if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in ("log", "range", "int", "choices"):
            raise HeronError(
                f"{where}: give one of log: [low, high], range: [low, high], int: [low, high], "
                f"choices: [...]; got {spec!r}"
            )
        kind, value = next(iter(spec.items()))
        if kind == "choices":
            if not isinstance(value, list) or not value:
                raise HeronError(f"{where}: choices must be a non-empty list")
        elif not (
            isinstance(value, list)
            and len(value) == 2
            and all(isinstance(v, (int, float)) for v in value)
            and value[0] < value[1]
            and (kind != "log" or value[0] > 0)
        ):
            raise HeronError(
                f"{where}: {kind} needs [low, high] with low < high" + (" and low > 0" if kind == "log" else "")
            )
    if not space:
        raise HeronError(f"the search space of {algo} is empty")
    return space


def _encode(choice: Any) -> Any:
    """Optuna's categorical choices are scalars: a list (network sizes) travels as "256,256"."""
    return ",".join(str(v) for v in choice) if isinstance(choice, (list, tuple)) else choice


def _decode(value: Any) -> Any:
    if isinstance(value, str) and "," in value:
        return tuple(int(v) for v in value.split(","))
    return value


def sample(trial: Any, space: dict[str, dict]) -> dict[str, Any]:
    params = {}
    for name, spec in space.items():
        kind, value = next(iter(spec.items()))
        if kind == "log":
            params[name] = trial.suggest_float(name, float(value[0]), float(value[1]), log=True)
        elif kind == "range":
            params[name] = trial.suggest_float(name, float(value[0]), float(value[1]))
        elif kind == "int":
            params[name] = trial.suggest_int(name, int(value[0]), int(value[1]))
        else:
            params[name] = _decode(trial.suggest_categorical(name, [_encode(c) for c in value]))
    return params


# -- the study ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Options:
    algo: str
    env_id: str | None
    trials: int
    out: Path
    study: str
    storage: str
    presets: tuple[str, ...] = ()
    config_file: str | None = None
    space_file: str | None = None
    seed: int = 0
    startup_trials: int = 5
    pruner: str = "median"
    threads: int = 1
    overrides: dict = dataclasses.field(default_factory=dict)  # fixed options of every trial (config flags)
    argv: list = dataclasses.field(default_factory=list)  # the command's arguments, for the workers


def _optuna():
    try:
        import optuna
    except ImportError:
        raise HeronError(f"heron tune needs optuna: {install_hint('tune')}") from None
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a trial stopped by Ctrl-C: heron says so in one line
    return optuna


def open_study(opts: Options, worker: int = 0) -> Any:
    optuna = _optuna()
    storage: Any = opts.storage
    if storage.startswith(("sqlite", "postgresql", "mysql")):
        # heartbeats: a trial whose process died (SIGKILL, a lost machine) is marked failed by the next
        # worker instead of counting as running forever
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            storage = optuna.storages.RDBStorage(
                storage,
                heartbeat_interval=30,
                grace_period=90,
                engine_kwargs={"connect_args": {"timeout": 60}} if storage.startswith("sqlite") else {},
            )
    sampler = optuna.samplers.TPESampler(seed=opts.seed + worker, n_startup_trials=opts.startup_trials)
    pruner = (
        optuna.pruners.MedianPruner(n_startup_trials=opts.startup_trials, n_warmup_steps=0)
        if opts.pruner == "median"
        else optuna.pruners.NopPruner()
    )
    try:
        return optuna.create_study(
            study_name=opts.study,
            storage=storage,
            sampler=sampler,
            pruner=pruner,
            direction="maximize",
            load_if_exists=True,
        )
    except Exception as exc:  # a bad URL, an unreachable server, a missing driver
        raise HeronError(
            f"cannot open study {opts.study!r} at {opts.storage}: {str(exc).splitlines()[0][:200]}"
        ) from None


def counted(study: Any) -> int:
    """Trials that count towards --trials: finished and pruned ones."""
    optuna = _optuna()
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return len(study.get_trials(deepcopy=False, states=states))


def running(study: Any) -> int:
    return len(study.get_trials(deepcopy=False, states=(_optuna().trial.TrialState.RUNNING,)))


def objective(opts: Options, space: dict[str, dict]):
    optuna = _optuna()
    from heron import api

    def run_trial(trial: Any) -> float:
        params = sample(trial, space)
        run_dir = opts.out / "trials" / f"trial_{trial.number:04d}"
        trial.set_user_attr("run_dir", str(run_dir))
        if run_dir.exists():  # a number reused after a crash of the storage's writer: start it clean
            shutil.rmtree(run_dir)
        kwargs = {
            **opts.overrides,
            **params,
            "run_dir": str(run_dir),
            "progress": "none",
            "torch_threads": opts.threads,
        }
        if opts.env_id:
            kwargs["env_id"] = opts.env_id
        total = [None]

        def report(result: dict) -> None:
            trial.report(result["mean_return"], result["step"])
            if total[0] is not None and result["step"] < total[0] and trial.should_prune():
                raise optuna.TrialPruned(f"pruned at step {result['step']} ({result['mean_return']:.1f})")

        cfg = api.make_config(opts.algo, opts.presets, opts.config_file, **kwargs)
        total[0] = cfg.total_steps
        try:
            result = api.train(opts.algo, opts.presets, opts.config_file, callback=report, **kwargs)
        except (HeronError, Diverged) as exc:  # a combination the config refuses, or one that diverged
            trial.set_user_attr("error", str(exc))
            raise optuna.TrialPruned(f"{type(exc).__name__}: {exc}") from None
        value = float(result["mean_return"])
        if not math.isfinite(value):
            raise optuna.TrialPruned("non-finite return")
        return value

    return run_trial


def work(opts: Options, worker: int = 0, echo: Any = print) -> None:
    """One worker: trials until the study holds ``opts.trials`` finished or pruned ones."""
    space = load_space(opts.algo, opts.space_file)
    study = open_study(opts, worker)
    run_trial = objective(opts, space)

    def report_trial(study: Any, trial: Any) -> None:
        state = trial.state.name.lower()
        value = f" {trial.value:.2f}" if trial.value is not None else ""
        echo(f"[trial {trial.number}] {state}{value}; {counted(study)}/{opts.trials} trials")

    # One trial at a time while the study needs one that no other worker is running, so that it ends
    # at --trials with several workers too. While the others' trials would complete it, wait: one of
    # them may fail (or its worker die, found by the heartbeats) and leave a trial to run.
    optuna = _optuna()
    while counted(study) < opts.trials:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)  # (only where the storage keeps heartbeats)
        if counted(study) + running(study) < opts.trials:
            study.optimize(run_trial, n_trials=1, callbacks=[report_trial], catch=(), gc_after_trial=True)
        else:
            time.sleep(2.0)


def run_tune(opts: Options, jobs: int = 1, plot: bool = False, echo: Any = print) -> int:
    """The command: ``jobs`` workers (this process alone when 1), then the report."""
    if opts.trials <= 0:
        raise HeronError(f"--trials must be positive, got {opts.trials}")
    if jobs < 1:
        raise HeronError(f"--jobs must be at least 1, got {jobs}")
    _optuna()
    from heron import api

    load_space(opts.algo, opts.space_file)
    cfg = api.make_config(
        opts.algo, opts.presets, opts.config_file, **({"env_id": opts.env_id} if opts.env_id else {}), **opts.overrides
    )
    if not cfg.eval_every and opts.pruner == "median":
        echo("heron tune: note: --eval-every 0: no evaluations before the end, so nothing to prune on")
    from heron.envs.ids import check_env_id
    from heron.runtime import evalworker

    check_env_id(cfg.env_id)
    registry.get(opts.algo).check(cfg)
    evalworker.check(registry.get(opts.algo), cfg, False)
    opts.out.mkdir(parents=True, exist_ok=True)
    study = open_study(opts)
    done = counted(study)
    echo(
        f"heron tune {opts.algo} {cfg.env_id}: study {opts.study!r} at {opts.storage}; {done}/{opts.trials} "
        f"trials done; {jobs} job(s), {opts.threads} torch thread(s) each; trials in {opts.out / 'trials'}"
    )
    code = 0
    if done < opts.trials:
        try:
            if jobs == 1:
                work(opts, 0, echo)
            else:
                code = _workers(opts, jobs, echo)
        except KeyboardInterrupt:
            code = 130
        except _optuna().exceptions.OptunaError as exc:
            raise HeronError(str(exc).splitlines()[0]) from None
        except Exception as exc:
            from heron.errors import Interrupted

            if not isinstance(exc, Interrupted):
                raise
            code = 130
    report(opts, plot, echo)
    if code == 130:
        echo("heron tune: stopped; the finished trials are kept: give the same command to continue the study")
    return code


def _workers(opts: Options, jobs: int, echo: Any) -> int:
    """``jobs`` child processes running this command as ``--worker K``, all on the same storage."""
    argv = [sys.executable, "-m", "heron", "tune", *opts.argv]
    env = {**os.environ, "OMP_NUM_THREADS": str(opts.threads)}
    procs = [subprocess.Popen(argv + ["--worker", str(k)], env=env, start_new_session=True) for k in range(jobs)]
    stopping = False

    def forward(signum, frame):
        nonlocal stopping
        stopping = True
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        codes = [p.wait() for p in procs]
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if stopping:
        return 130
    bad = [c for c in codes if c not in (0,)]
    if bad:
        echo(f"heron tune: {len(bad)} worker(s) ended with exit {bad[0]}")
        return 1
    return 0


# -- the report --------------------------------------------------------------------------------------
def report(opts: Options, plot: bool = False, echo: Any = print) -> None:
    """The top trials as a table, the best trial's config as ``OUT/best.yaml`` and, with ``plot``,
    Optuna's optimization history and parameter importances as PNGs."""
    optuna = _optuna()
    study = open_study(opts)
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
    states: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        states[t.state.name.lower()] = states.get(t.state.name.lower(), 0) + 1
    echo(f"study {opts.study!r}: " + ", ".join(f"{n} {s}" for s, n in sorted(states.items())))
    if not complete:
        echo("no finished trial yet")
        return
    top = sorted(complete, key=lambda t: t.value, reverse=True)[:TOP]
    names = list(top[0].params)
    lines = ["| trial | return | " + " | ".join(names) + " |", "|---:|---:|" + "---|" * len(names)]
    for t in top:
        cells = [_show(t.params.get(n)) for n in names]
        lines.append(f"| {t.number} | {t.value:.2f} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    (opts.out / "top_trials.md").write_text(table)
    echo(table.rstrip())
    best = top[0]
    src = Path(best.user_attrs.get("run_dir", "")) / "config.yaml"
    if src.is_file():
        import yaml

        from heron.runtime.rundir import read_yaml

        data = read_yaml(src)
        data.pop("run_dir", None)
        data.update(progress="auto", torch_threads=0)  # the trial's were the tuner's choices
        text = (
            f"# heron tune: best of study {opts.study!r} (trial {best.number}, return {best.value:.2f}).\n"
            f"# heron train {opts.algo} --config {opts.out / 'best.yaml'}\n" + yaml.safe_dump(data, sort_keys=False)
        )
        (opts.out / "best.yaml").write_text(text)
        echo(f"best: trial {best.number}, return {best.value:.2f}; config {opts.out / 'best.yaml'}")
    if plot:
        _plots(study, opts.out, echo)


def _show(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _plots(study: Any, out: Path, echo: Any) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from optuna.visualization import matplotlib as ovm
    except ImportError:
        raise HeronError(f"--plot needs matplotlib: {install_hint('plot')}") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna marks its matplotlib plots experimental
        for name, draw in (
            ("optimization_history", ovm.plot_optimization_history),
            ("param_importances", ovm.plot_param_importances),
        ):
            try:
                ax = draw(study)
            except (ValueError, RuntimeError) as exc:  # importances need two finished trials that differ
                echo(f"no {name.replace('_', ' ')} plot: {exc}")
                continue
            fig: Any = ax.figure if hasattr(ax, "figure") else ax[0].figure  # type: ignore[index]  # optuna: Axes or an array of them
            fig.tight_layout()
            fig.savefig(out / f"{name}.png", dpi=100)
            plt.close(fig)
            echo(str(out / f"{name}.png"))
