"""Learning curves from run directories (``heron plot``). Needs matplotlib (extra ``plot``)."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from heron.errors import HeronError, install_hint
from heron.runtime.logger import complete_rows

Curve = tuple[list[int], list[float]]  # steps, values
EvalCurve = tuple[list[int], list[float], list[float]]  # steps, mean returns, std returns


def read_metrics(run_dir: str | Path) -> dict[str, Curve]:
    """Every metric of a run's metrics.csv (``step,wall_time,metric,value``) as name -> (steps, values)."""
    metrics: dict[str, Curve] = {}
    for step, _, name, value in complete_rows(Path(run_dir) / "metrics.csv", 4):
        try:
            point = int(step), float(value)
        except ValueError:
            continue
        steps, values = metrics.setdefault(name, ([], []))
        steps.append(point[0])
        values.append(point[1])
    return metrics


def read_metric(run_dir: str | Path, metric: str) -> Curve:
    return read_metrics(run_dir).get(metric, ([], []))


def read_eval(run_dir: str | Path) -> EvalCurve:
    """Steps, mean and std returns of a run's eval.csv (``step,mean_return,std_return,episodes,wall_time``)."""
    steps, means, stds = [], [], []
    for row in complete_rows(Path(run_dir) / "eval.csv", 5):
        try:
            step, mean, std = int(row[0]), float(row[1]), float(row[2])
        except ValueError:
            continue
        steps.append(step)
        means.append(mean)
        stds.append(std)
    order = sorted(range(len(steps)), key=steps.__getitem__)  # a replayed evaluation (--eval-async) lands late
    return [steps[i] for i in order], [means[i] for i in order], [stds[i] for i in order]


def _load(run_dirs: list[str], metric: str) -> list[tuple[str, Curve, EvalCurve]]:
    """(label, metric curve, eval curve) per run, after the checks that keep a typo or an empty run from
    producing a blank figure (which would silently replace a good one)."""
    data = []
    names: set[str] = set()
    for run_dir in run_dirs:
        if not Path(run_dir).is_dir():
            raise HeronError(f"{run_dir} is not a run directory")
        metrics, evals = read_metrics(run_dir), read_eval(run_dir)
        if not metrics and not evals[0]:
            raise HeronError(f"{run_dir} has no logged data yet")
        names |= metrics.keys()
        data.append((Path(run_dir).name, metrics.get(metric, ([], [])), evals))
    if names and metric not in names:
        close = difflib.get_close_matches(metric, names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        where = f"{run_dirs[0]} has" if len(run_dirs) == 1 else "these runs have"
        raise HeronError(f"unknown metric {metric!r}{hint}; {where}: {', '.join(sorted(names))}")
    if not any(curve[0] or evals[0] for _, curve, evals in data):
        raise HeronError(f"nothing to plot: no {metric!r} points and no evaluations in {', '.join(run_dirs)}")
    return data


def _figure():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise HeronError(f"heron plot needs matplotlib: {install_hint('plot')}") from None
    return plt


def band_of(
    curves: Sequence[tuple[Sequence[float], Sequence[float]]],
) -> tuple[list[float], list[float], list[float], int]:
    """The evaluation curves of several runs (seeds), given as (steps, returns) pairs, on the union
    of their evaluation steps: steps, mean and standard deviation over the runs that reach each
    step (each run's curve interpolated between its own evaluations, never extrapolated), and the
    number of runs with data."""
    import numpy as np

    arrays = [(np.asarray(s, float), np.asarray(m, float)) for s, m in curves if len(s)]
    if not arrays:
        return [], [], [], 0
    grid = np.unique(np.concatenate([s for s, _ in arrays]))
    stack = np.full((len(arrays), len(grid)), np.nan)
    for i, (s, m) in enumerate(arrays):
        inside = (grid >= s[0]) & (grid <= s[-1])
        stack[i, inside] = np.interp(grid[inside], s, m)
    counts = (~np.isnan(stack)).sum(0)
    mean = np.nansum(stack, 0) / counts
    std = np.sqrt(np.nansum((stack - mean) ** 2, 0) / counts)
    return grid.tolist(), mean.tolist(), std.tolist(), len(arrays)


def plot_bands(
    groups: dict[str, list[str]],
    out: str,
    title: str = "deterministic evaluation",
    references: Sequence[tuple[str, float]] = (),
) -> str:
    """One line per group of runs (``label -> run directories``, e.g. the seeds of one algorithm):
    the mean evaluation return with a band of one standard deviation over the runs; each of
    ``references`` (label, return), a published figure, as a dashed horizontal line."""
    curves = {label: [read_eval(d)[:2] for d in dirs] for label, dirs in groups.items()}
    if not any(steps for pairs in curves.values() for steps, _ in pairs):
        raise HeronError(f"nothing to plot: no evaluations in {', '.join(d for ds in groups.values() for d in ds)}")
    return plot_curve_bands(curves, out, title, references)


def plot_curve_bands(
    groups: Mapping[str, Sequence[tuple[Sequence[float], Sequence[float]]]],
    out: str,
    title: str = "deterministic evaluation",
    references: Sequence[tuple[str, float]] = (),
) -> str:
    """``plot_bands`` for curves given as (steps, returns) pairs, ``label -> one pair per seed``."""
    plt = _figure()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = 0
    for label, curves in groups.items():
        steps, mean, std, n = band_of(curves)
        if not steps:
            continue
        (line,) = ax.plot(steps, mean, label=f"{label} ({n} seed{'s' if n > 1 else ''})")
        ax.fill_between(
            steps,
            [m - s for m, s in zip(mean, std)],
            [m + s for m, s in zip(mean, std)],
            color=line.get_color(),
            alpha=0.2,
        )
        drawn += 1
    if not drawn:
        plt.close(fig)
        raise HeronError("nothing to plot: no evaluations")
    for (label, value), style in zip(references, ("--", ":", "-.", (0, (5, 5)))):
        ax.axhline(value, color="0.35", linestyle=style, linewidth=1.2, label=label)
    ax.set(title=title, xlabel="env steps", ylabel="mean evaluation return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, plt, out)


def plot_runs(run_dirs: list[str], out: str | None = None, metric: str = "charts/episodic_return") -> str:
    plt = _figure()
    data = _load(run_dirs, metric)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, (steps, values), (es, em, sd) in data:
        if steps:
            ax1.plot(steps, values, alpha=0.8, label=label)
        if es:
            ax2.errorbar(es, em, yerr=sd, capsize=3, label=label)
    ax1.set(title=metric, xlabel="env steps")
    ax2.set(title="deterministic evaluation", xlabel="env steps", ylabel="mean return")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, plt, out or str(Path(run_dirs[0]) / "returns.png"))


def _save(fig: Any, plt: Any, out: str) -> str:
    # Written beside the target and renamed: a kill or a full disk mid-write leaves the old image whole. The
    # temporary name keeps the suffix so that matplotlib picks the same format.
    path = Path(out)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}{path.suffix or '.png'}")
    try:
        fig.savefig(tmp, dpi=100)
        os.replace(tmp, path)
    except (OSError, ValueError) as exc:
        tmp.unlink(missing_ok=True)
        raise HeronError(f"cannot write {out}: {getattr(exc, 'strerror', None) or exc}") from None
    finally:
        plt.close(fig)
    return out
