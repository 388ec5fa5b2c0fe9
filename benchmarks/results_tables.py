#!/usr/bin/env python
"""The docs' results tables, rendered from the benchmark results files.

``offpolicy_curves_vs_sb3.py --results benchmarks/results/offpolicy_curves.csv`` records every
finished run there (its settings, per-seed figures, evaluation curve and the command that made it).
This script turns those rows into the tables the docs show, between the markers

    <!-- results-table NAME -->
    ...
    <!-- /results-table -->

so that a table is never typed by hand and never disagrees with the file. ``--check`` changes nothing
and exits 1 when a docs table is not what the results file gives (the test suite runs it);
``--plot`` also draws each table's curves (one panel per task, mean with a band of one standard
deviation over the seeds).

    python benchmarks/results_tables.py            # rewrite the tables in docs/
    python benchmarks/results_tables.py --check    # are the docs current?
    python benchmarks/results_tables.py --plot     # and redraw the images
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import re
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "offpolicy_curves.csv"


class Column(NamedTuple):
    label: str
    lib: str  # "heron" or "sb3"
    overrides: frozenset[str]  # the run's --set items must include these


class Table(NamedTuple):
    algo: str
    preset: str
    tasks: tuple[tuple[str, int], ...]  # (env id, env steps)
    columns: tuple[Column, ...]
    compare: tuple[int, int]  # the two columns the permutation test sets against each other
    docs: tuple[str, ...]  # files (relative to the repository) that hold the table
    image: str  # the curves' image, relative to the repository


def _col(label: str, lib: str, *overrides: str) -> Column:
    return Column(label, lib, frozenset(overrides))


SMALL_TASKS = (("Pendulum-v1", 15_000), ("InvertedPendulum-v5", 20_000), ("Reacher-v5", 50_000),
               ("Hopper-v5", 100_000), ("HalfCheetah-v5", 100_000))

TABLES = {
    "td3-defaults": Table(
        algo="td3", preset="", tasks=SMALL_TASKS,
        columns=(_col("heron, lr 1e-3", "heron", "policy_lr=1e-3", "q_lr=1e-3"),
                 _col("heron, lr 3e-4", "heron", "policy_lr=3e-4", "q_lr=3e-4"),
                 _col("SB3, lr 1e-3", "sb3", "policy_lr=1e-3", "q_lr=1e-3")),
        compare=(0, 2), docs=("docs/td3.md", "docs/benchmarks.md"), image="docs/images/td3_defaults.png"),
}


def read_rows(path: Path = RESULTS) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _permutation_p():
    spec = importlib.util.spec_from_file_location("offpolicy_curves_vs_sb3",
                                                  ROOT / "benchmarks" / "offpolicy_curves_vs_sb3.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.permutation_p


def select(rows: list[dict], table: Table, env_id: str, steps: int, column: Column) -> list[dict]:
    """The rows of one cell, one per seed, in seed order."""
    picked = [r for r in rows if r["algo"] == table.algo and r["preset"] == table.preset and r["env_id"] == env_id
              and int(r["total_steps"]) == steps and r["lib"] == column.lib
              and column.overrides <= set(r["overrides"].split())]
    return sorted(picked, key=lambda r: int(r["seed"]))


def _fmt(values: list[float]) -> str:
    return ".0f" if max(abs(v) for v in values) >= 100 else ".1f"


def _cell(values: list[float], f: str) -> str:
    return f"{np.mean(values):{f}} ± {np.std(values):{f}}" if values else "-"


def render(table: Table, rows: list[dict]) -> str:
    """The markdown of one table: the final evaluation and the mean of the evaluations (the area under
    the curve over its length) for every task and column, mean ± std over the seeds."""
    permutation_p = _permutation_p()
    a, b = table.compare
    heads = [c.label for c in table.columns]
    lines = []
    seeds: set[int] = set()
    for figure, title in (("final_eval", "Final evaluation"), ("mean_eval", "Mean of the evaluations")):
        lines += [f"| {title} | " + " | ".join(heads) + f" | p ({heads[a]} vs {heads[b]}) |",
                  "|---|" + "---:|" * (len(heads) + 1)]
        for env_id, steps in table.tasks:
            cells = [[float(r[figure]) for r in select(rows, table, env_id, steps, c)] for c in table.columns]
            seeds |= {int(r["seed"]) for c in table.columns for r in select(rows, table, env_id, steps, c)}
            f = _fmt([v for vals in cells for v in vals] or [0.0])
            p = f"{permutation_p(cells[a], cells[b]):.2f}" if len(cells[a]) >= 2 and len(cells[b]) >= 2 else ""
            lines.append(f"| {env_id}, {steps // 1000}k | " + " | ".join(_cell(v, f) for v in cells) + f" | {p} |")
        lines.append("")
    counts = sorted({len(select(rows, table, e, s, c)) for e, s in table.tasks for c in table.columns})
    lines.append(f"Mean ± standard deviation over {'/'.join(map(str, counts))} seeds per cell "
                 f"(seeds {', '.join(map(str, sorted(seeds)))}); p: the exact permutation test of the two columns' "
                 "per-seed figures. Rows and curves: `benchmarks/results/offpolicy_curves.csv`, with the "
                 "command of each run.")
    return "\n".join(lines)


BLOCK = re.compile(r"(<!-- results-table (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results-table -->)", re.S)


def update_docs(rows: list[dict], check: bool) -> list[str]:
    """Rewrite (or, with check, compare) every table block in the docs; the files that differ."""
    stale = []
    for name, table in TABLES.items():
        body = render(table, rows) + "\n"
        for doc in table.docs:
            path = ROOT / doc
            text = path.read_text()
            blocks = [m for m in BLOCK.finditer(text) if m.group("name") == name]
            if not blocks:
                raise SystemExit(f"{doc} has no '<!-- results-table {name} -->' block")
            new = BLOCK.sub(lambda m: m.group(1) + body + m.group(4) if m.group("name") == name else m.group(0), text)
            if new != text:
                stale.append(f"{doc} ({name})")
                if not check:
                    path.write_text(new)
    return stale


def plot(table: Table, rows: list[dict]) -> str:
    from heron.plot import _figure, _save, band_of

    plt = _figure()
    fig, axes = plt.subplots(1, len(table.tasks), figsize=(4 * len(table.tasks), 3.4))
    for ax, (env_id, steps) in zip(np.atleast_1d(axes), table.tasks):
        for column in table.columns:
            curves = []
            for r in select(rows, table, env_id, steps, column):
                pairs = [tuple(map(float, item.split(":"))) for item in r["evals"].split()]
                curves.append(([p[0] for p in pairs], [p[1] for p in pairs]))
            x, mean, std, n = band_of(curves)
            if not x:
                continue
            line, = ax.plot(x, mean, label=f"{column.label} ({n})")
            ax.fill_between(x, np.subtract(mean, std), np.add(mean, std), color=line.get_color(), alpha=0.2)
        ax.set(title=f"{env_id}", xlabel="env steps")
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("mean evaluation return")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, plt, str(ROOT / table.image))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="render the docs' results tables from benchmarks/results/")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a docs table is not current")
    p.add_argument("--plot", action="store_true", help="also redraw each table's curves image")
    args = p.parse_args(argv)
    rows = read_rows()
    stale = update_docs(rows, check=args.check)
    if args.check:
        if stale:
            print("results tables out of date (python benchmarks/results_tables.py rewrites them): "
                  + ", ".join(stale), file=sys.stderr)
            return 1
        return 0
    print("rewrote: " + (", ".join(stale) if stale else "nothing (all current)"))
    if args.plot:
        for table in TABLES.values():
            print("plot:", plot(table, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
