#!/usr/bin/env python
"""The docs' results tables, rendered from the benchmark results files in ``benchmarks/results/``:

* ``offpolicy_curves.csv``: curves beside Stable-Baselines3, recorded by
  ``offpolicy_curves_vs_sb3.py --results`` (each run's settings, per-seed figures, evaluation curve
  and command), shown as ``<!-- results-table NAME -->`` blocks (``TABLES``);
* ``learning.csv``: heron's runs at the suites' budgets (``--add-bench`` records a ``heron bench``
  results.csv), beside ``heron.bench.PUBLISHED``, as ``<!-- learning-table NAME -->`` blocks
  (``LEARNING_TABLES``);
* ``speed.csv``: one row per measurement of a speed comparison, as ``<!-- speed-table NAME ... -->``
  blocks (NAME: one or more rows' ``table`` or ``group``; ``readme``: the headline rows), each
  comparison (``claim``) shown once, by its latest row (``current_speed_rows``);
* ``summaries.csv``: figures kept as their summary (mean ± spread over seeds) where the per-seed
  data is not kept, one cell per line (table, row, column, value, seeds, machine, date, command),
  as ``<!-- summary-table NAME -->`` blocks (``SUMMARY_TABLES`` names each table's row labels).

A block is the text between its marker and ``<!-- /results-table -->`` (``/learning-table``,
``/speed-table``), in docs/ and the README, rewritten by this script:

so that a table is never typed by hand and never disagrees with the file. ``--check`` changes nothing
and exits 1 when a docs table is not what the results file gives (the test suite runs it);
``--plot`` also draws each table's curves (one panel per task, mean with a band of one standard
deviation over the seeds), and the Dreamer runs beside sheeprl that ``dreamer_curves.csv`` keeps
(``DREAMER_PLOTS``: each side's training return per bin, mean with a band of one standard deviation
over the seeds); ``--plot NAME ...`` draws only the images named.

    python benchmarks/results_tables.py            # rewrite the tables in docs/
    python benchmarks/results_tables.py --check    # are the docs current?
    python benchmarks/results_tables.py --plot     # and redraw the images
    python benchmarks/results_tables.py --plot dreamer-v3-cartpole dreamer-v3-pendulum
    python benchmarks/results_tables.py --add-bench bench/results.csv --machine "2-core AMD EPYC VM, CPU"
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the checkout's heron, also where another one is installed
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "offpolicy_curves.csv"
LEARNING = ROOT / "benchmarks" / "results" / "learning.csv"


class Column(NamedTuple):
    label: str
    lib: str  # "heron" or "sb3"
    overrides: frozenset[str]  # the run's --set items must include these
    unset: frozenset[str] = frozenset()  # and must not set these fields (a column of defaults)
    algo: str = ""  # the runs' algorithm, where it is not the table's (SAC beside CrossQ)


class Table(NamedTuple):
    algo: str
    preset: str
    tasks: tuple[tuple[str, int], ...]  # (env id, env steps)
    columns: tuple[Column, ...]
    compare: tuple[int, int]  # the two columns the permutation test sets against each other
    docs: tuple[str, ...]  # files (relative to the repository) that hold the table
    image: str  # the curves' image, relative to the repository


def _col(label: str, lib: str, *overrides: str, unset: tuple[str, ...] = (), algo: str = "") -> Column:
    return Column(label, lib, frozenset(overrides), frozenset(unset), algo)


SMALL_TASKS = (
    ("Pendulum-v1", 15_000),
    ("InvertedPendulum-v5", 20_000),
    ("Reacher-v5", 50_000),
    ("Hopper-v5", 100_000),
    ("HalfCheetah-v5", 100_000),
)

TABLES = {
    "td3-defaults": Table(
        algo="td3",
        preset="",
        tasks=SMALL_TASKS,
        columns=(
            _col("heron, lr 1e-3", "heron", "policy_lr=1e-3", "q_lr=1e-3"),
            _col("heron, lr 3e-4", "heron", "policy_lr=3e-4", "q_lr=3e-4"),
            _col("SB3, lr 1e-3", "sb3", "policy_lr=1e-3", "q_lr=1e-3"),
        ),
        compare=(0, 2),
        docs=("docs/algorithms/td3.md", "docs/benchmarks/index.md"),
        image="docs/images/td3_defaults.png",
    ),
    "td3-300k": Table(
        algo="td3",
        preset="mujoco",
        tasks=(("Hopper-v5", 300_000), ("Walker2d-v5", 300_000)),
        columns=(
            _col("heron, lr 1e-3", "heron", "policy_lr=1e-3", "q_lr=1e-3"),
            _col("heron, lr 3e-4", "heron", "policy_lr=3e-4", "q_lr=3e-4"),
        ),
        compare=(0, 1),
        docs=("docs/algorithms/td3.md",),
        image="docs/images/td3_300k.png",
    ),
    "sac-defaults": Table(
        algo="sac",
        preset="",
        tasks=SMALL_TASKS,
        columns=(
            _col("heron, defaults", "heron", unset=("policy_lr", "q_lr", "policy_frequency")),
            _col("SB3, defaults", "sb3", "policy_lr=3e-4", "q_lr=3e-4", "policy_frequency=1"),
        ),
        compare=(0, 1),
        docs=("docs/algorithms/sac.md", "docs/benchmarks/index.md"),
        image="docs/images/sac_defaults.png",
    ),
    # CrossQ beside sb3-contrib's (the same settings, 256-wide critics) and beside heron's SAC at its defaults
    "crossq-100k": Table(
        algo="crossq",
        preset="mujoco",
        tasks=(("Hopper-v5", 100_000), ("Walker2d-v5", 100_000)),
        columns=(
            _col("heron CrossQ, 256 critics", "heron", "critic_hidden_sizes=256,256"),
            _col("sb3-contrib CrossQ, 256 critics", "sb3", "critic_hidden_sizes=256,256"),
            _col("heron SAC, defaults", "heron", unset=("policy_lr", "q_lr", "policy_frequency"), algo="sac"),
        ),
        compare=(0, 1),
        docs=("docs/algorithms/sac.md", "docs/benchmarks/index.md"),
        image="docs/images/crossq_100k.png",
    ),
}


def read_rows(path: Path = RESULTS) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _permutation_p():
    spec = importlib.util.spec_from_file_location(
        "offpolicy_curves_vs_sb3", ROOT / "benchmarks" / "offpolicy_curves_vs_sb3.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.permutation_p


def select(rows: list[dict], table: Table, env_id: str, steps: int, column: Column) -> list[dict]:
    """The rows of one cell, one per seed, in seed order."""
    picked = [
        r
        for r in rows
        if r["algo"] == (column.algo or table.algo)
        and r["preset"] == table.preset
        and r["env_id"] == env_id
        and int(r["total_steps"]) == steps
        and r["lib"] == column.lib
        and column.overrides <= set(r["overrides"].split())
        and not column.unset & {item.split("=")[0] for item in r["overrides"].split()}
    ]
    return sorted(picked, key=lambda r: int(r["seed"]))


def _fmt(values: list[float]) -> str:
    return ".0f" if max(abs(v) for v in values) >= 100 else ".1f"


def _std(values: list[float]) -> float:
    """The sample standard deviation (n - 1), as heron bench and the learning tables give it."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def _cell(values: list[float], f: str) -> str:
    if len(values) == 1:  # one seed: no spread to show
        return f"{values[0]:{f}}"
    return f"{np.mean(values):{f}} ± {_std(values):{f}}" if values else "-"


def render(table: Table, rows: list[dict]) -> str:
    """The markdown of one table: the final evaluation and the mean of the evaluations (the area under
    the curve over its length) for every task and column, mean ± std over the seeds."""
    permutation_p = _permutation_p()
    a, b = table.compare
    heads = [c.label for c in table.columns]
    lines = []
    seeds: set[int] = set()
    tasks = [(e, s) for e, s in table.tasks if any(select(rows, table, e, s, c) for c in table.columns)]
    for figure, title in (("final_eval", "Final evaluation"), ("mean_eval", "Mean of the evaluations")):
        lines += [
            f"| {title} | " + " | ".join(heads) + f" | p ({heads[a]} vs {heads[b]}) |",
            "|---|" + "---:|" * (len(heads) + 1),
        ]
        for env_id, steps in tasks:
            cells = [[float(r[figure]) for r in select(rows, table, env_id, steps, c)] for c in table.columns]
            seeds |= {int(r["seed"]) for c in table.columns for r in select(rows, table, env_id, steps, c)}
            f = _fmt([v for vals in cells for v in vals] or [0.0])
            p = f"{permutation_p(cells[a], cells[b]):.2f}" if len(cells[a]) >= 2 and len(cells[b]) >= 2 else ""
            lines.append(f"| {env_id}, {steps // 1000}k | " + " | ".join(_cell(v, f) for v in cells) + f" | {p} |")
        lines.append("")
    counts = sorted({len(select(rows, table, e, s, c)) for e, s in tasks for c in table.columns})
    plural = "" if counts == [1] else "s"
    listed = f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, sorted(seeds)))}"
    lines.append(
        f"Mean ± sample standard deviation over {'/'.join(map(str, counts))} seed{plural} per cell "
        f"({listed}); p: the exact permutation test of the two columns' "
        "per-seed figures. Rows and curves: `benchmarks/results/offpolicy_curves.csv`, with the "
        "command of each run."
    )
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
            new = BLOCK.sub(lambda m: m.group(1) + body + m.group(4) if m.group("name") == name else m.group(0), text)  # noqa: B023
            if new != text:
                stale.append(f"{doc} ({name})")
                if not check:
                    path.write_text(new)
    return stale


def plot(table: Table, rows: list[dict]) -> str:
    from heron.plot import _figure, _save, band_of

    plt = _figure()
    tasks = [(e, s) for e, s in table.tasks if any(select(rows, table, e, s, c) for c in table.columns)]
    fig, axes = plt.subplots(1, len(tasks), figsize=(4 * len(tasks), 3.4), squeeze=False)
    for ax, (env_id, steps) in zip(axes[0], tasks):
        for column in table.columns:
            curves = []
            for r in select(rows, table, env_id, steps, column):
                pairs = [tuple(map(float, item.split(":"))) for item in r["evals"].split()]
                curves.append(([p[0] for p in pairs], [p[1] for p in pairs]))
            x, mean, std, n = band_of(curves)
            if not x:
                continue
            (line,) = ax.plot(x, mean, label=f"{column.label} ({n})")
            ax.fill_between(x, np.subtract(mean, std), np.add(mean, std), color=line.get_color(), alpha=0.2)
        ax.set(title=f"{env_id}", xlabel="env steps")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("mean evaluation return")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, plt, str(ROOT / table.image))


# -- Dreamer beside sheeprl: the kept runs' training curves (benchmarks/results/dreamer_curves.csv) -------
DREAMER_CURVES = ROOT / "benchmarks" / "results" / "dreamer_curves.csv"


class CurvePlot(NamedTuple):
    algo: str
    env_id: str
    total_steps: int
    sides: tuple[tuple[str, str, str], ...]  # (the file's side, its flags, the legend's label)
    bin: int  # env steps per point: a seed's training return in each bin, as the summary tables bin it
    title: str
    image: str


_V3_SIDES = (("heron", "", "heron"), ("sheeprl", "", "sheeprl 0.8.4"))
DREAMER_PLOTS = {  # drawn by --plot from the runs dreamer_learning_vs_sheeprl.py --runs keeps
    "dreamer-v3-cartpole": CurvePlot(
        "dreamer_v3",
        "CartPole-v1",
        total_steps=10_000,
        sides=_V3_SIDES,
        bin=1000,
        title="DreamerV3 on CartPole-v1",
        image="docs/images/dreamer_v3_cartpole_vs_sheeprl.png",
    ),
    "dreamer-v3-pendulum": CurvePlot(
        "dreamer_v3",
        "Pendulum-v1",
        total_steps=10_000,
        sides=_V3_SIDES,
        bin=1000,
        title="DreamerV3 on Pendulum-v1",
        image="docs/images/dreamer_v3_pendulum_vs_sheeprl.png",
    ),
}


def _dreamer_script():
    spec = importlib.util.spec_from_file_location(
        "dreamer_learning_vs_sheeprl", ROOT / "benchmarks" / "dreamer_learning_vs_sheeprl.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def curve_bands(spec: CurvePlot, rows: list[dict]) -> dict[str, tuple[list[int], list[float], list[float], list[int]]]:
    """Per side (its label): the bins' upper ends, and per bin the mean and the standard deviation
    over the seeds of each seed's training return there (``per_bin`` of the benchmark: the mean of
    its episodes that ended in the bin, else its last finished episode's), and the seeds."""
    per_bin = _dreamer_script().per_bin
    bands = {}
    for side, flags, label in spec.sides:
        picked = sorted(
            (
                r
                for r in rows
                if r["algo"] == spec.algo
                and r["env_id"] == spec.env_id
                and int(r["total_steps"]) == spec.total_steps
                and r["side"] == side
                and r["flags"] == flags
            ),
            key=lambda r: int(r["seed"]),
        )
        if not picked:
            continue
        seeds = [
            per_bin(
                [(int(s), float(v)) for s, v in (item.split(":") for item in r["train"].split())],
                spec.total_steps,
                spec.bin,
            )
            for r in picked
        ]
        x, mean, std = [], [], []
        for i, hi in enumerate(range(spec.bin, spec.total_steps + spec.bin, spec.bin)):
            values = [s[i] for s in seeds if s[i] is not None]
            if values:
                x.append(min(hi, spec.total_steps))
                mean.append(float(np.mean(values)))
                std.append(float(np.std(values)))  # over the seeds, as heron.plot.band_of gives the other images'
        bands[label] = (x, mean, std, [int(r["seed"]) for r in picked])
    return bands


def _seed_span(seeds: list[int]) -> str:
    return (
        f"{seeds[0]}-{seeds[-1]}"
        if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1))
        else ", ".join(map(str, seeds))
    )


def plot_curves(spec: CurvePlot, rows: list[dict]) -> str:
    from heron.plot import _figure, _save

    bands = curve_bands(spec, rows)
    if not bands:
        raise SystemExit(f"{DREAMER_CURVES.relative_to(ROOT)} has no run for {spec.title}")
    plt = _figure()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for label, (x, mean, std, seeds) in bands.items():
        (line,) = ax.plot(x, mean, label=f"{label} (seeds {_seed_span(seeds)})")
        ax.fill_between(x, np.subtract(mean, std), np.add(mean, std), color=line.get_color(), alpha=0.2)
    ax.set(
        title=f"{spec.title}: mean, band of one std over seeds",
        xlabel="env steps",
        ylabel=f"training episode return (per {spec.bin:,} steps)",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, plt, str(ROOT / spec.image))


# -- learning results at the suites' budgets (benchmarks/results/learning.csv) ----------------------
MUJOCO = ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5")


def _atari(env_id: str) -> bool:
    return env_id.startswith("ALE/") or "NoFrameskip" in env_id


LEARNING_TABLES = {  # name -> (algorithms, which envs, with an algorithm column)
    "readme": (("sac", "td3", "ppo"), lambda e: e in MUJOCO or e == "PongNoFrameskip-v4", True),
    "sac": (("sac",), lambda e: True, False),
    "td3": (("td3",), lambda e: True, False),
    "ppo": (("ppo",), lambda e: True, False),
    "ppo-mujoco": (("ppo",), lambda e: not _atari(e), False),
    "ppo-atari": (("ppo",), _atari, False),
}
SUPERSCRIPTS = " ¹²³⁴⁵⁶⁷⁸⁹"
LEARNING_BLOCK = re.compile(
    r"(<!-- learning-table (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /learning-table -->)", re.S
)


def _steps(n: int) -> str:
    return (
        f"{n / 1e6:g}M"
        if n >= 1_000_000 and n % 1_000_000 == 0
        else (f"{n / 1e6:.2f}M" if n >= 1_000_000 else f"{n // 1000}k")
    )


def _figure(values: list[float]) -> str:
    if not values:
        return "-"
    f = _fmt(values)
    return f"{np.mean(values):{f}} ± {_std(values):{f}}" if len(values) > 1 else f"{values[0]:{f}}"


def render_learning(name: str, rows: list[dict]) -> str:
    """One learning table: per (algorithm, env, budget) the final, best and training return, mean ±
    sample standard deviation over the seeds, beside the published figures (``heron.bench.PUBLISHED``)."""
    if name not in LEARNING_TABLES:
        raise SystemExit(f"unknown learning table {name!r}: one of {', '.join(LEARNING_TABLES)}")
    from heron.bench import PUBLISHED

    algos, envs, with_algo = LEARNING_TABLES[name]
    groups: dict[tuple[str, str, int], list[dict]] = {}
    for r in rows:
        if r["algo"] in algos and envs(r["env_id"]):
            groups.setdefault((r["algo"], r["env_id"], int(r["total_steps"])), []).append(r)
    order = sorted(
        groups, key=lambda k: (algos.index(k[0]), k[1] not in MUJOCO, MUJOCO.index(k[1]) if k[1] in MUJOCO else 0, k[1])
    )
    head = (["Algorithm"] if with_algo else []) + [
        "Env",
        "Env steps",
        "Seeds",
        "Final",
        "Best",
        "Training (last 10%)",
        "Published",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * (len(head) - 1) + "---|"]
    notes = []
    for key in order:
        algo, env, steps = key
        group = sorted(groups[key], key=lambda r: int(r["seed"]))

        def vals(field: str, group: list[dict] = group) -> list[float]:
            return [float(r[field]) for r in group if r[field] != ""]

        def figure(field: str, group: list[dict] = group) -> str:  # a figure some seeds lack says over which seeds
            got = [r for r in group if r[field] != ""]
            text = _figure(vals(field))
            if got and len(got) < len(group):
                text += (
                    f" (seeds {', '.join(r['seed'] for r in got)})"
                    if len(got) <= 3
                    else (f" (seeds {got[0]['seed']}-{got[-1]['seed']})")
                )
            return text

        seeds = [int(r["seed"]) for r in group]
        span = (
            "1"
            if len(seeds) == 1
            else (
                f"{len(seeds)} ({seeds[0]}-{seeds[-1]})"
                if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1))
                else f"{len(seeds)} ({', '.join(map(str, seeds))})"
            )
        )
        published = "; ".join(f"{fig} ({src})" for src, fig in PUBLISHED.get((algo, env), [])) or "-"
        mark = ""
        for note in sorted({r["note"] for r in group if r.get("note")}):
            if note not in notes:  # a note that several rows share: one footnote, its mark on each
                notes.append(note)
            mark += SUPERSCRIPTS[notes.index(note) + 1]
        cells = ([{"sac": "SAC", "td3": "TD3", "ppo": "PPO"}.get(algo, algo)] if with_algo else []) + [
            env,
            _steps(steps) + mark,
            span,
            figure("final_eval"),
            figure("best_eval"),
            figure("train_last10"),
            published,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "Final: the deterministic evaluation at the end of training; best: the highest periodic "
        "evaluation; training: the mean return of the training episodes that ended in the last 10% "
        "of the steps (CleanRL's figure). Mean ± sample standard deviation over the seeds. Runs: "
        "`benchmarks/results/learning.csv`, with the machine and the command of each."
    )
    for i, note in enumerate(notes, 1):
        lines.append(f"<br>{SUPERSCRIPTS[i]} {note}." if i > 1 else f"\n{SUPERSCRIPTS[i]} {note}.")
    return "\n".join(lines) + "\n"


def rewrite_blocks(block: re.Pattern, render: Callable[[str], str], check: bool) -> list[str]:
    """Rewrite (or, with ``check``, compare) every block ``block`` matches in the README and the
    docs, its body rendered from the block's name; returns the files that were out of date."""
    stale = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text()
        new = block.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), text)
        if new != text:
            stale.append(str(path.relative_to(ROOT)))
            if not check:
                path.write_text(new)
    return stale


# -- speed beside the peers and between heron's own settings (benchmarks/results/speed.csv) -------------
SPEED = ROOT / "benchmarks" / "results" / "speed.csv"
SPEED_BLOCK = re.compile(
    r"(<!-- speed-table (?P<name>[\w-]+(?: [\w-]+)*) -->\n)(?P<body>.*?)(<!-- /speed-table -->)", re.S
)


def _values(row: dict, side: str) -> list[float]:
    """A side's figure: its value, else the mean of its rounds."""
    if row[f"{side}_value"].strip():
        return [float(row[f"{side}_value"])]
    return [float(v) for v in row[f"{side}_rounds"].split(";") if v.strip()]


def _is_time(metric: str) -> bool:
    return metric.startswith(("s ", "ms ", "wall s", "training s")) or metric in ("s", "ms")


def _ratios(row: dict) -> list[float]:
    """heron over the peer, above 1 when heron is faster (a time: the peer's over heron's): the
    stated ratios, or one per stated figure; none where a side has no figure."""
    if row["ratio"].strip():
        return [float(r) for r in row["ratio"].split(";") if r.strip()]
    heron, peer = _values(row, "heron"), _values(row, "peer")
    if not heron or len(peer) != 1 or not _is_rate_or_time(row["metric"]):
        return []
    return [peer[0] / h if _is_time(row["metric"]) else h / peer[0] for h in heron]


def speed_ratio(row: dict) -> str:
    return ", ".join(f"{r:.2f}x" for r in _ratios(row))


def _is_rate_or_time(metric: str) -> bool:
    return "/s" in metric or _is_time(metric)


def _rounds(row: dict, side: str) -> list[str]:
    return [v.strip() for v in row[f"{side}_rounds"].split(";") if v.strip()]


def _side(row: dict, side: str) -> str:
    """A side's figure as a table shows it: its value, else its rounds."""
    return row[f"{side}_value"].strip() or ", ".join(_rounds(row, side)) or "-"


def _claim(row: dict) -> str:
    """What a row measures, in short: its ``claim``, else its ``setting``."""
    return row.get("claim", "").strip() or row["setting"].strip()


def _published(row: dict) -> bool:
    """Set against a figure the peer published, from another machine, not one measured beside heron."""
    return "published" in row["peer_version"].lower()


def current_speed_rows(rows: list[dict]) -> list[dict]:
    """One row per claim: rows of one table with the same claim (one setting measured against one
    peer, beside heron or by the peer's published figure) are the same comparison measured again,
    and the current one is the latest recorded (of one day, the later in the file); it takes the
    place of the claim's first row. The others stay in speed.csv as its history."""
    current: dict[tuple[str, str, str, bool], tuple[tuple[str, int], dict]] = {}
    order: list[tuple[str, str, str, bool]] = []
    for i, r in enumerate(rows):
        key = (r.get("table", "").strip() or r["group"].strip(), _claim(r), r["peer"].strip(), _published(r))
        if key not in current:
            order.append(key)
        when = (r.get("recorded", "").strip(), i)
        if key not in current or when >= current[key][0]:
            current[key] = (when, r)
    return [current[key][1] for key in order]


def _family(row: dict) -> tuple[str, str, str, str]:
    """The rows a headline speaks for: the same group, peer, algorithm and machine."""
    return (row["group"].strip(), row["peer"].strip(), row["setting"].split(",")[0].strip(), row["machine"].strip())


def readme_speed_rows(rows: list[dict]) -> list[dict]:
    """The README's headline rows, like for like: each is the current figure of its claim, measured
    beside heron on the same machine (not against a published figure), and quoted with the weakest
    ratio of the current rows it speaks for (the same group, peer, algorithm and machine: the eager
    step beside the graphed one, the weaker task beside the stronger), weakest first."""
    current = current_speed_rows(rows)
    picked = [r for r in current if r.get("headline", "").strip() == "yes"]
    for r in picked:
        if _published(r):
            raise SystemExit(f"speed.csv: the headline {_claim(r)!r} is set against a published figure")
    families: dict[tuple[str, str, str, str], list[dict]] = {}
    for r in picked:
        families.setdefault(_family(r), [])
    for r in current:
        if _family(r) in families and not _published(r) and _ratios(r):
            families[_family(r)].append(r)
    out = []
    for family, members in families.items():
        quoted = [r for r in picked if _family(r) == family]
        if not members:
            raise SystemExit(f"speed.csv: the headline {_claim(quoted[0])!r} has no ratio")
        weakest = min(members, key=lambda r: min(_ratios(r)))
        if not any(r is weakest for r in quoted):
            raise SystemExit(
                f"speed.csv: the headline {_claim(quoted[0])!r} ({speed_ratio(quoted[0])}) leaves out "
                f"{_claim(weakest)!r} ({speed_ratio(weakest)}), the weakest ratio of its comparison"
            )
        out += sorted(quoted, key=lambda r: min(_ratios(r)))
    return out


def _machine(machine: str) -> str:
    """A machine as a table names it; the page's list of machines describes each."""
    gpu = re.search(r"\b[HAB]\d{2,3}\b", machine)
    if gpu:
        return gpu.group(0)
    if "EPYC" in machine:
        host = re.search(r"Zen \d", machine)
        return f"CPU, {host.group(0)}" if host else "CPU"
    return machine or "-"


def render_speed(name: str, rows: list[dict]) -> str:
    """The current row of each claim of the speed tables NAME (one or more ``table`` or ``group``
    names; ``readme``: the headline rows), with its date, then each row's conditions and command,
    numbered, in a collapsed block."""
    if name == "readme":  # short: what each row compares, in its own words; the details on the speed page
        picked = readme_speed_rows(rows)
        if not picked:
            raise SystemExit(f"speed table 'readme': no row of {SPEED.relative_to(ROOT)} is a headline")
        lines = [
            "| Comparison | Machine | heron | other | heron / other | Recorded |",
            "|---|---|---:|---:|---:|---|",
        ]
        lines += [
            f"| {r['summary']} | {r['machine']} | {_side(r, 'heron')} | {_side(r, 'peer')} | {speed_ratio(r)} "
            f"| {r['recorded'] or '-'} |"
            for r in picked
        ]
        lines += [
            "",
            "Above 1: heron is faster. For each algorithm against each library, the weakest current ratio "
            "is among those quoted. Each row's conditions and command: `docs/benchmarks/speed.md`, from "
            "`benchmarks/results/speed.csv`.",
        ]
        return "\n".join(lines) + "\n"
    names = name.split()
    picked = [r for r in current_speed_rows(rows) if {r.get("table", "").strip(), r["group"].strip()} & set(names)]
    if not picked:
        raise SystemExit(f"speed table {name!r}: no row of {SPEED.relative_to(ROOT)} has that table or group")
    lines = [
        "| | Comparison | heron | other | heron / other | Machine | Recorded |",
        "|---:|---|---:|---:|---:|---|---|",
    ]
    groups: dict[tuple[str, ...], list[tuple[int, list[str], str]]] = {}  # what rows share is said once
    for i, r in enumerate(picked, 1):
        claim = _claim(r)
        if _published(r):
            claim += f" (against {r['peer']}'s {re.sub(r'[()]', '', r['peer_version']).strip()} figure)"
        lines.append(
            f"| {i} | {claim} | {_side(r, 'heron')} | {_side(r, 'peer')} | {speed_ratio(r) or '-'} "
            f"| {_machine(r['machine'])} | {r['recorded'] or '-'} |"
        )
        external = "" if r["peer"].startswith("heron") else f"{r['peer']} {r['peer_version']}"
        key = (r.get("table", "").strip(), r["metric"].strip(), external)  # one line per table, metric and peer
        groups.setdefault(key, []).append((i, _conditions(r), r["command"].strip()))
    lines += ["", '??? note "Conditions and commands"']
    for members in groups.values():
        shared = [c for c in members[0][1] if all(c in own for _, own, _ in members)]
        commands: dict[str, list[int]] = {}
        for i, own, command in members:
            if command or "command" not in " ".join(own):
                commands.setdefault(command, []).append(i)
        text = f"    - **{_numbers([i for i, _, _ in members])}**: " + "; ".join(shared)
        one = len(commands) == 1 and len(next(iter(commands.values()))) == len(members)  # one command for all
        if one:
            text += f": `{next(iter(commands))}`" if next(iter(commands)) else "; command not recorded"
        own_rest: dict[str, list[int]] = {}  # each row's own conditions; rows with the same, once
        for i, own, _ in members if len(members) > 1 else ():
            own_rest.setdefault("; ".join(c for c in own if c not in shared), []).append(i)
        text += "".join(f"; **{_numbers(at)}**: {rest}" for rest, at in own_rest.items() if rest)
        if commands and not one:
            text += "; " + ", ".join(
                (f"`{command}`" if command else "command not recorded")
                + (f" ({_numbers(at)})" if len(members) > 1 else "")
                for command, at in commands.items()
            )
        lines.append(text + ".")
    return "\n".join(lines) + "\n"


def _numbers(numbers: list[int]) -> str:
    """1, 2, 3, 5 as 1-3, 5."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][-1] + 1:
            spans[-1].append(n)
        else:
            spans.append([n])
    return ", ".join(f"{s[0]}-{s[-1]}" if len(s) > 2 else ", ".join(map(str, s)) for s in spans)


def _clauses(text: str) -> list[str]:
    """A note's clauses: its parts between '; ' outside parentheses."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and text.startswith("; ", i):
            out.append(text[start:i])
            start = i + 2
    return [c.strip() for c in [*out, text[start:]] if c.strip()]


def _conditions(r: dict) -> list[str]:
    """What a reader needs to know of a row beside its table line: the metric, the peer's version,
    the rounds and the row's own conditions (the page describes the machines)."""
    parts = [r["metric"].strip()]
    if r["peer"].strip() and not r["peer"].startswith("heron"):
        parts.append(f"{r['peer'].strip()} {r['peer_version'].strip()}".strip())
    if r["rounds"].strip():
        parts.append(f"{r['rounds'].strip()} rounds" if r["rounds"].strip() != "1" else "one round")
    for side, who in (("heron", "heron"), ("peer", "other")):
        if r[f"{side}_value"].strip() and _rounds(r, side):
            parts.append(f"{who} per round {', '.join(_rounds(r, side))}")
    return list(dict.fromkeys(parts + _clauses(r["note"].strip().rstrip("."))))  # a clause said twice, once


LEARNING_FIELDS = (
    "algo",
    "env_id",
    "total_steps",
    "preset",
    "seed",
    "final_eval",
    "best_eval",
    "train_last10",
    "eval_episodes",
    "machine",
    "heron_version",
    "recorded",
    "command",
    "note",
)


def add_bench_results(results: Path, machine: str, note: str = "") -> int:
    """Record the finished runs of a ``heron bench`` results.csv in learning.csv: a row of the same
    (algorithm, env, budget, seed) is replaced. Returns the number of rows written."""
    import datetime

    from heron import registry
    from heron.bench import SUITES, read_results
    from heron.config import apply_overrides

    rows = read_rows(LEARNING)
    new = []
    for r in read_results(results):
        entry = next((e for e in SUITES.get(r["suite"], []) if e.env_id == r["env_id"] and e.label == r["algo"]), None)
        if entry is None:
            raise SystemExit(f"{results}: suite {r['suite']} has no {r['algo']} on {r['env_id']}")
        cfg = registry.get(entry.algo).Config()
        for preset in entry.presets:
            cfg = apply_overrides(cfg, registry.get(entry.algo).PRESETS[preset], f"preset {preset}")
        short = entry.env_id.split("/")[-1].split("-v")[0].replace("NoFrameskip", "")
        new.append(
            dict(
                algo=r["algo"],
                env_id=r["env_id"],
                total_steps=r["steps"],
                preset=" ".join(entry.presets),
                seed=r["seed"],
                final_eval=f"{r['final_return']:.1f}",
                best_eval=f"{r['best_return']:.1f}",
                train_last10="" if r["train_return"] is None else f"{r['train_return']:.1f}",
                eval_episodes=cfg.eval_episodes,
                machine=machine,
                heron_version=r["git_commit"] or r["heron_version"],
                recorded=datetime.date.today().isoformat(),
                command=f"heron bench {r['suite']} --only {short} --seeds {r['seed']} --out bench",
                note=note,
            )
        )
    key = ("algo", "env_id", "total_steps", "seed")
    keys = {tuple(str(n[k]) for k in key) for n in new}
    rows = [r for r in rows if tuple(r[k] for k in key) not in keys] + new
    with open(LEARNING, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=LEARNING_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    return len(new)


# -- figures kept as summaries (benchmarks/results/summaries.csv) ------------------------------------
SUMMARIES = ROOT / "benchmarks" / "results" / "summaries.csv"
SUMMARY_BLOCK = re.compile(r"(<!-- summary-table (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /summary-table -->)", re.S)
SUMMARY_TABLES = {  # table -> the headers of its row labels (a row's labels are its "row", split at " | ")
    "dreamer-vs-sheeprl": ("Env", "Env steps", "Seeds", "Bin"),
    "dreamer-v3-vs-sheeprl": ("Env", "Env steps", "Seeds", "Bin"),
    "dreamer-v3-same-step": ("Actions", "Two-hot heads"),
    "dreamer-v3-twohot": ("Env", "Env steps", "Seeds", "Bin"),
    "dreamer-v3-lr": ("Env", "Env steps", "Seeds", "Bin"),
    "td3-walker2d-300k-vs-sb3": ("Figure",),
    "sac-halfcheetah-100k-vs-sb3": ("Figure",),
    "learning-check": ("Algorithm",),
    "recurrent-sac": ("Variant",),
    "recurrent-ppo": ("Policy", "Command"),
    "precision-learning": ("Algorithm", "Seeds"),
}


def record_summaries(new: list[dict], replaces: Callable[[dict], bool], path: Path = SUMMARIES) -> None:
    """Put ``new`` rows (dicts of the file's columns) in the summaries file, in place of the rows
    ``replaces`` picks (the figures a benchmark made before and now makes again): where the first of
    those was, else at the end."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    at = next((i for i, r in enumerate(rows) if replaces(r)), len(rows))
    kept = [r for r in rows[:at] if not replaces(r)], [r for r in rows[at:] if not replaces(r)]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(kept[0] + new + kept[1])
    print(f"recorded {len(new)} rows in {path}", flush=True)


def render_summary(name: str, rows: list[dict]) -> str:
    """One summary table: a line per ``row`` (labels in its first columns, a label equal to the line
    above's left blank), a column per ``column``, both in the file's order."""
    picked = [r for r in rows if r["table"] == name]
    if name not in SUMMARY_TABLES or not picked:
        raise SystemExit(
            f"summary table {name!r}: not in SUMMARY_TABLES or no row of {SUMMARIES.relative_to(ROOT)} has that table"
        )
    labels = SUMMARY_TABLES[name]
    lines_, columns = list(dict.fromkeys(r["row"] for r in picked)), list(dict.fromkeys(r["column"] for r in picked))
    cells = {(r["row"], r["column"]): r["value"] for r in picked}
    out = ["| " + " | ".join([*labels, *columns]) + " |", "|" + "---|" * len(labels) + "---:|" * len(columns)]
    above: list[str] = []
    for line in lines_:
        parts = [p.strip() for p in line.split(" | ")]
        if len(parts) != len(labels):
            raise SystemExit(f"summary table {name!r}: row {line!r} has {len(parts)} labels, the table {len(labels)}")
        keep = 0  # leading labels equal to the line above's are left blank
        while keep < len(parts) - 1 and keep < len(above) and parts[keep] == above[keep]:
            keep += 1
        shown = [""] * keep + parts[keep:]
        out.append("| " + " | ".join([*shown, *(cells.get((line, c), "-") for c in columns)]) + " |")
        above = parts
    out += ["", "From `benchmarks/results/summaries.csv`, with the machine and the command of each figure."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="render the docs' results tables from benchmarks/results/")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a docs table is not current")
    p.add_argument(
        "--plot",
        nargs="*",
        metavar="NAME",
        help="also redraw the curves images: those named (a results table, "
        f"or {', '.join(DREAMER_PLOTS)}), or all of them",
    )
    p.add_argument(
        "--add-bench",
        metavar="RESULTS_CSV",
        help="first record the finished runs of a heron bench "
        "results.csv in benchmarks/results/learning.csv (the same algorithm, env, budget and seed replaced)",
    )
    p.add_argument("--machine", default="", help="with --add-bench: the machine the runs ran on, in words")
    p.add_argument("--note", default="", help="with --add-bench: a condition a reader must know, if any")
    args = p.parse_args(argv)
    if args.add_bench:
        if not args.machine:
            raise SystemExit("--add-bench needs --machine (e.g. '2-core AMD EPYC VM, CPU')")
        print(f"recorded {add_bench_results(Path(args.add_bench), args.machine, args.note)} run(s) in {LEARNING}")
    rows = read_rows()
    learning, speed, summaries = read_rows(LEARNING), read_rows(SPEED), read_rows(SUMMARIES)
    stale = (
        update_docs(rows, check=args.check)
        + rewrite_blocks(LEARNING_BLOCK, lambda name: render_learning(name, learning), args.check)
        + rewrite_blocks(SPEED_BLOCK, lambda name: render_speed(name, speed), args.check)
        + rewrite_blocks(SUMMARY_BLOCK, lambda name: render_summary(name, summaries), args.check)
    )
    if args.check:
        if stale:
            print(
                "results tables out of date (python benchmarks/results_tables.py rewrites them): " + ", ".join(stale),
                file=sys.stderr,
            )
            return 1
        return 0
    print("rewrote: " + (", ".join(stale) if stale else "nothing (all current)"))
    if args.plot is not None:
        unknown = set(args.plot) - set(TABLES) - set(DREAMER_PLOTS)
        if unknown:
            raise SystemExit(f"--plot: no image named {', '.join(sorted(unknown))}")
        for name, table in TABLES.items():
            if not args.plot or name in args.plot:
                print("plot:", plot(table, rows))
        curves = read_rows(DREAMER_CURVES)
        for name, spec in DREAMER_PLOTS.items():
            if not args.plot or name in args.plot:
                print("plot:", plot_curves(spec, curves))
    return 0


if __name__ == "__main__":
    sys.exit(main())
