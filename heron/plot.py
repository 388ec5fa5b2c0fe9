"""Learning curves from run directories (``heron plot``). Needs matplotlib (extra ``plot``)."""

from __future__ import annotations

import csv
from pathlib import Path

from heron.config import HeronError


def read_metric(run_dir: str | Path, metric: str) -> tuple[list[int], list[float]]:
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        raise HeronError(f"{run_dir} has no metrics.csv")
    steps, values = [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["metric"] == metric:
                steps.append(int(row["step"]))
                values.append(float(row["value"]))
    return steps, values


def read_eval(run_dir: str | Path) -> tuple[list[int], list[float], list[float]]:
    path = Path(run_dir) / "eval.csv"
    if not path.is_file():
        return [], [], []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return ([int(r["step"]) for r in rows], [float(r["mean_return"]) for r in rows],
            [float(r["std_return"]) for r in rows])


def plot_runs(run_dirs: list[str], out: str | None = None, metric: str = "charts/episodic_return") -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise HeronError("heron plot needs matplotlib: pip install 'heron[plot]'") from None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for run_dir in run_dirs:
        label = Path(run_dir).name
        steps, values = read_metric(run_dir, metric)
        if steps:
            ax1.plot(steps, values, alpha=0.8, label=label)
        es, em, sd = read_eval(run_dir)
        if es:
            ax2.errorbar(es, em, yerr=sd, capsize=3, label=label)
    ax1.set(title=metric, xlabel="env steps")
    ax2.set(title="deterministic evaluation", xlabel="env steps", ylabel="mean return")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    out = out or str(Path(run_dirs[0]) / "returns.png")
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
