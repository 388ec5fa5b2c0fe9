"""The docs' results tables are generated from benchmarks/results/ (benchmarks/results_tables.py):
they must be what the results file gives, and the figures in them what the rows hold."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("results_tables", ROOT / "benchmarks" / "results_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_tables_are_the_results_files(capsys):
    assert _script().main(["--check"]) == 0, capsys.readouterr().err


def test_a_table_gives_each_cell_mean_and_spread_over_its_seeds():
    tables = _script()
    table = tables.Table(algo="td3", preset="", tasks=(("Pendulum-v1", 15_000), ("Reacher-v5", 50_000)),
                         columns=(tables._col("a", "heron", "policy_lr=1e-3"), tables._col("b", "sb3")),
                         compare=(0, 1), docs=(), image="")

    def row(env, steps, lib, seed, final, mean, overrides=""):
        return dict(algo="td3", preset="", env_id=env, total_steps=str(steps), lib=lib, seed=str(seed),
                    overrides=overrides, final_eval=str(final), mean_eval=str(mean))

    rows = [row("Pendulum-v1", 15_000, "heron", 1, -150, -500, "learning_starts=1000 policy_lr=1e-3"),
            row("Pendulum-v1", 15_000, "heron", 2, -250, -700, "policy_lr=1e-3"),
            row("Pendulum-v1", 15_000, "heron", 3, -999, -999, "policy_lr=3e-4"),  # another column's
            row("Pendulum-v1", 10_000, "heron", 4, -999, -999, "policy_lr=1e-3"),  # another budget
            row("Pendulum-v1", 15_000, "sb3", 1, -180, -600), row("Pendulum-v1", 15_000, "sb3", 2, -200, -620),
            row("Reacher-v5", 50_000, "sb3", 1, -4.25, -6.0)]
    text = tables.render(table, rows)
    # heron: mean(-150, -250) = -200, population std 50; SB3: -190 +- 10; 2 + 2 seeds: p over the 6 splits
    assert "| Pendulum-v1, 15k | -200 ± 50 | -190 ± 10 | 1.00 |" in text
    assert "| Pendulum-v1, 15k | -600 ± 100 | -610 ± 10 | 1.00 |" in text
    assert "| Reacher-v5, 50k | - | -4.2 ± 0.0 |  |" in text  # small returns keep a decimal; one seed: no p
