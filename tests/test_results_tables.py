"""The docs' results tables are generated from benchmarks/results/ (benchmarks/results_tables.py):
they must be what the results file gives, and the figures in them what the rows hold."""

import pytest
from cli_helpers import load_script

import heron.bench  # noqa: F401  (the tables read its published figures; imported here, at collection)


def _script():
    return load_script("benchmarks/results_tables.py")


def test_the_docs_tables_are_the_results_files(capsys):
    assert _script().main(["--check"]) == 0, capsys.readouterr().err


def test_a_table_gives_each_cell_mean_and_spread_over_its_seeds():
    tables = _script()
    table = tables.Table(
        algo="td3",
        preset="",
        tasks=(("Pendulum-v1", 15_000), ("Reacher-v5", 50_000)),
        columns=(tables._col("a", "heron", "policy_lr=1e-3"), tables._col("b", "sb3")),
        compare=(0, 1),
        docs=(),
        image="",
    )

    def row(env, steps, lib, seed, final, mean, overrides=""):
        return dict(
            algo="td3",
            preset="",
            env_id=env,
            total_steps=str(steps),
            lib=lib,
            seed=str(seed),
            overrides=overrides,
            final_eval=str(final),
            mean_eval=str(mean),
        )

    rows = [
        row("Pendulum-v1", 15_000, "heron", 1, -150, -500, "learning_starts=1000 policy_lr=1e-3"),
        row("Pendulum-v1", 15_000, "heron", 2, -250, -700, "policy_lr=1e-3"),
        row("Pendulum-v1", 15_000, "heron", 3, -999, -999, "policy_lr=3e-4"),  # another column's
        row("Pendulum-v1", 10_000, "heron", 4, -999, -999, "policy_lr=1e-3"),  # another budget
        row("Pendulum-v1", 15_000, "sb3", 1, -180, -600),
        row("Pendulum-v1", 15_000, "sb3", 2, -200, -620),
        row("Reacher-v5", 50_000, "sb3", 1, -4.25, -6.0),
    ]
    text = tables.render(table, rows)
    # heron: mean(-150, -250) = -200, sample std 50 * sqrt(2) = 70.7; SB3: -190 +- 14.1; 2 + 2 seeds: p over
    # the 6 splits
    assert "| Pendulum-v1, 15k | -200 ± 71 | -190 ± 14 | 1.00 |" in text
    assert "| Pendulum-v1, 15k | -600 ± 141 | -610 ± 14 | 1.00 |" in text
    assert "| Reacher-v5, 50k | - | -4.2 |  |" in text  # small returns keep a decimal; one seed: no spread, no p


def test_a_column_of_defaults_leaves_out_runs_that_set_those_fields():
    tables = _script()
    table = tables.Table(
        algo="sac",
        preset="",
        tasks=(("Pendulum-v1", 15_000),),
        columns=(
            tables._col("defaults", "heron", unset=("policy_lr", "q_lr")),
            tables._col("sb3", "sb3", "policy_lr=3e-4"),
        ),
        compare=(0, 1),
        docs=(),
        image="",
    )

    def row(lib, seed, final, overrides):
        return dict(
            algo="sac",
            preset="",
            env_id="Pendulum-v1",
            total_steps="15000",
            lib=lib,
            seed=str(seed),
            overrides=overrides,
            final_eval=str(final),
            mean_eval=str(final),
        )

    rows = [
        row("heron", 1, -150, "learning_starts=1000"),
        row("heron", 2, -170, ""),
        row("heron", 3, -900, "learning_starts=1000 q_lr=3e-4"),  # not the defaults
        row("sb3", 1, -160, "learning_starts=1000 policy_lr=3e-4 q_lr=3e-4"),
    ]
    assert [r["seed"] for r in tables.select(rows, table, "Pendulum-v1", 15_000, table.columns[0])] == ["1", "2"]
    assert "| Pendulum-v1, 15k | -160 ± 14 | -160 |  |" in tables.render(table, rows)
    # a column of another algorithm's runs (heron's SAC beside CrossQ) takes those alone
    crossq = table._replace(
        algo="crossq", columns=(tables._col("crossq", "heron"), tables._col("sac", "heron", algo="sac"))
    )
    rows.append(dict(rows[1], algo="crossq", seed="4", final_eval="-140", mean_eval="-140"))
    assert [r["seed"] for r in tables.select(rows, crossq, "Pendulum-v1", 15_000, crossq.columns[0])] == ["4"]
    assert [r["seed"] for r in tables.select(rows, crossq, "Pendulum-v1", 15_000, crossq.columns[1])] == ["1", "2", "3"]


def test_a_learning_table_gives_each_figure_over_the_seeds_that_have_it():
    tables = _script()

    def row(env, seed, final, best, train="", note=""):
        return dict(
            algo="ppo",
            env_id=env,
            total_steps="1000000",
            preset="mujoco",
            seed=str(seed),
            final_eval=str(final),
            best_eval=str(best),
            train_last10=str(train),
            note=note,
        )

    rows = [
        row("Hopper-v5", 1, 3000, 3100),
        row("Hopper-v5", 2, 3200, 3300, 2900),
        row("ALE/Pong-v5", 1, 5.8, "", note="stopped early"),
    ]
    text = tables.render_learning("ppo", rows)
    # final: mean 3100, sample std 141.4; training only from seed 2; a note becomes a footnote
    assert "| Hopper-v5 | 1M | 2 (1, 2) | 3100 ± 141 | 3200 ± 141 | 2900 (seeds 2) |" in text
    assert "| ALE/Pong-v5 | 1M¹ | 1 | 5.8 | - | - |" in text
    assert "¹ stopped early." in text


def test_a_note_that_several_rows_share_is_one_footnote():
    tables = _script()

    def row(env, seed, note):
        return dict(
            algo="td3",
            env_id=env,
            total_steps="1000000",
            preset="mujoco",
            seed=str(seed),
            final_eval="3000",
            best_eval="3100",
            train_last10="",
            note=note,
        )

    rows = [
        row("Hopper-v5", 1, "made at lr 3e-4"),
        row("HalfCheetah-v5", 1, "made at lr 3e-4"),
        row("Walker2d-v5", 1, "seed 1 only"),
    ]
    text = tables.render_learning("td3", rows)
    assert "| Hopper-v5 | 1M¹ |" in text and "| HalfCheetah-v5 | 1M¹ |" in text
    assert "| Walker2d-v5 | 1M² |" in text
    assert text.count("made at lr 3e-4.") == 1 and "<br>² seed 1 only." in text


def _speed_row(setting, metric="updates/s", **fields):
    """A row of speed.csv: heron against SB3 on machine m, in table t, unless ``fields`` say otherwise."""
    row = dict(
        group="g",
        setting=setting,
        machine="m",
        torch="",
        peer="SB3",
        peer_version="2.9.2",
        metric=metric,
        heron_value="",
        peer_value="",
        ratio="",
        rounds="3",
        heron_rounds="",
        peer_rounds="",
        recorded="",
        command="python x.py",
        note="n",
        headline="",
        table="t",
        summary="",
        claim="",
    )
    return row | fields


def test_a_speed_table_takes_ratios_as_stated_or_from_both_figures():
    tables = _script()
    rows = [
        _speed_row("rate", "env steps/s", heron_rounds="1200;1000", peer_value="800", recorded="2026-11-01"),
        _speed_row("time", "wall s", heron_value="10", peer_value="25"),  # a time: the other's over heron's
        _speed_row("stated", ratio="1.58", note="n; range 1.5-1.7"),
        _speed_row("stated too", ratio="1.2"),
        _speed_row("elsewhere", ratio="9", table="other"),
    ]
    text = tables.render_speed("t", rows)
    assert "| 1 | rate | 1200, 1000 | 800 | 1.50x, 1.25x | m | 2026-11-01 |" in text
    assert "| 2 | time | 10 | 25 | 2.50x | m | - |" in text
    assert "| 3 | stated | - | - | 1.58x | m | - |" in text and "elsewhere" not in text
    # each row's conditions and command, collapsed under the table: what rows of one metric share, once
    assert '??? note "Conditions and commands"' in text
    assert "    - **1**: env steps/s; SB3 2.9.2; 3 rounds; n: `python x.py`." in text
    assert "    - **3, 4**: updates/s; SB3 2.9.2; 3 rounds; n: `python x.py`; **3**: range 1.5-1.7." in text
    assert "| 5 | elsewhere |" in tables.render_speed("g", rows) and "| 5 |" in tables.render_speed("t other", rows)


def test_a_comparison_measured_again_shows_once_by_its_latest_row_and_date():
    tables = _script()
    rows = [
        _speed_row("SAC, float32", ratio="1.40", recorded="2026-11-20"),
        _speed_row("TD3, float32", ratio="1.30", recorded="2026-11-20"),
        _speed_row("SAC, float32", ratio="1.73", recorded="2026-11-27", machine="m2"),
        _speed_row("SAC, float32", ratio="1.10", recorded="2026-11-25"),  # older than the one above
        # the same comparison in other words (its claim says so), recorded the same day, later in the file
        _speed_row("SAC, float32, SB3's schedule", ratio="1.58", recorded="2026-11-27", claim="SAC, float32"),
        _speed_row("SAC, float32", ratio="2.00", recorded="2026-11-28", peer="LeanRL"),  # another peer's comparison
    ]
    text = tables.render_speed("t", rows)
    assert "| 1 | SAC, float32 | - | - | 1.58x | m | 2026-11-27 |" in text  # where the comparison first stood
    assert "| 2 | TD3, float32 | - | - | 1.30x | m | 2026-11-20 |" in text
    assert "| 3 | SAC, float32 | - | - | 2.00x | m | 2026-11-28 |" in text
    assert not any(old in text for old in ("1.40x", "1.73x", "1.10x", "| 4 |"))


def test_the_readme_quotes_its_headlines_like_for_like():
    tables = _script()

    def row(setting, ratio, **fields):
        sheeprl = dict(group="gpu", peer="sheeprl", peer_version="0.8.4", recorded="2026-11-23", summary=setting)
        return _speed_row(setting, "s per gradient step", ratio=ratio, **(sheeprl | fields))

    graphed = row("DreamerV2, heron graphed, sheeprl eager", "4.40", headline="yes")
    eager = row("DreamerV2, both eager", "1.16")
    other = row("DreamerV3, both eager", "0.90")  # another algorithm: not what the headline speaks for
    with pytest.raises(SystemExit, match=r"leaves out 'DreamerV2, both eager' \(1\.16x\)"):
        tables.render_speed("readme", [graphed, eager, other])
    eager["headline"] = "yes"
    text = tables.render_speed("readme", [graphed, eager, other])
    assert "| DreamerV2, both eager | m | - | - | 1.16x | 2026-11-23 |" in text and "DreamerV3" not in text
    assert text.index("1.16x") < text.index("4.40x")  # the weaker first
    published = row("DreamerV2, against its published figure", "1.05", headline="yes", peer_version="published")
    with pytest.raises(SystemExit, match="against a published figure"):
        tables.render_speed("readme", [eager, published])
    again = row("DreamerV2, both eager", "1.20", headline="yes", recorded="2026-12-01")
    text = tables.render_speed("readme", [eager, again])
    assert "1.20x | 2026-12-01 |" in text and "1.16x" not in text  # a headline measured again: its latest figure


def test_a_bench_results_file_is_recorded_in_the_learning_file(tmp_path, monkeypatch):
    from heron.bench import RESULTS_HEADER

    tables = _script()
    learning = tmp_path / "learning.csv"
    learning.write_text(
        "algo,env_id,total_steps,preset,seed,final_eval,best_eval,train_last10,eval_episodes,machine,"
        "heron_version,recorded,command,note\n"
        "sac,Hopper-v5,1000000,mujoco,1,1.0,2.0,3.0,10,old,,,old,\n"
        "sac,Hopper-v5,1000000,mujoco,2,5.0,6.0,7.0,10,old,,,old,\n"
    )
    monkeypatch.setattr(tables, "LEARNING", learning)
    values = dict(
        suite="mujoco-sac",
        algo="sac",
        env_id="Hopper-v5",
        seed="1",
        steps="1000000",
        final_return="3100.04",
        final_std="40",
        best_return="3500",
        wall_s="3600",
        heron_version="0.1.0",
        git_commit="abc1234",
        train_return="3000",
    )
    results = tmp_path / "results.csv"
    results.write_text(",".join(RESULTS_HEADER) + "\n" + ",".join(values[k] for k in RESULTS_HEADER) + "\n")
    assert tables.add_bench_results(results, "a machine") == 1
    rows = tables.read_rows(learning)
    assert [(r["seed"], r["final_eval"], r["machine"]) for r in rows] == [
        ("2", "5.0", "old"),
        ("1", "3100.0", "a machine"),
    ]
    assert rows[1]["command"] == "heron bench mujoco-sac --only Hopper --seeds 1 --out bench"
    assert rows[1]["eval_episodes"] == "10" and rows[1]["train_last10"] == "3000.0"


def test_a_summary_table_lays_out_its_cells_and_blanks_repeated_labels(monkeypatch):
    tables = _script()
    monkeypatch.setitem(tables.SUMMARY_TABLES, "t", ("Env", "Bin"))

    def cell(row, column, value, table="t"):
        return dict(table=table, row=row, column=column, value=value)

    rows = [
        cell("A | 1", "heron", "1 ± 2"),
        cell("A | 1", "peer", "3"),
        cell("A | 2", "heron", "4"),
        cell("B | 2", "peer", "5"),
        cell("A | 1", "heron", "9", table="other"),
    ]
    text = tables.render_summary("t", rows)
    assert text.splitlines()[:5] == [
        "| Env | Bin | heron | peer |",
        "|---|---|---:|---:|",
        "| A | 1 | 1 ± 2 | 3 |",
        "|  | 2 | 4 | - |",
        "| B | 2 | - | 5 |",
    ]
    with pytest.raises(SystemExit, match="has 1 labels, the table 2"):
        tables.render_summary("t", [cell("A", "heron", "1")])
    with pytest.raises(SystemExit, match="no row"):
        tables.render_summary("t", [])


def test_recorded_summaries_replace_a_benchmarks_rows_where_they_were(tmp_path, capsys):
    tables = _script()
    path = tmp_path / "summaries.csv"
    header = "table,row,column,value,seeds,machine,recorded,command,note\n"
    old = ["a,x | 1,heron,1,1,m,,c,n", "b,x | 1,heron,2,1,m,,c,n", "b,x | 2,heron,3,1,m,,c,n", "c,y,peer,4,1,m,,c,n"]
    path.write_text(header + "\n".join(old) + "\n")
    new = [
        dict(
            table="b",
            row=f"x | {i}",
            column="heron",
            value=str(10 + i),
            seeds="1-2",
            machine="m",
            recorded="",
            command="c2",
            note="n",
        )
        for i in (1, 2, 3)
    ]
    tables.record_summaries(new, lambda r: r["table"] == "b", path)
    lines = path.read_text().splitlines()
    assert [line.split(",")[:4] for line in lines[1:]] == [
        ["a", "x | 1", "heron", "1"],
        ["b", "x | 1", "heron", "11"],
        ["b", "x | 2", "heron", "12"],
        ["b", "x | 3", "heron", "13"],
        ["c", "y", "peer", "4"],
    ]
    tables.record_summaries(new[:1], lambda r: False, path)  # nothing replaced: at the end
    assert path.read_text().splitlines()[-1].startswith("b,x | 1,heron,11")
    assert "recorded 1 rows" in capsys.readouterr().out


def test_a_dreamer_curve_bins_each_seeds_training_return_and_spreads_it_over_the_seeds():
    tables = _script()
    spec = tables.CurvePlot("dreamer_v3", "CartPole-v1", 3000, (("heron", "", "heron"),), 1000, "t", "")

    def run(seed, train, side="heron", flags="", steps=3000):
        return dict(
            algo="dreamer_v3",
            env_id="CartPole-v1",
            total_steps=str(steps),
            side=side,
            flags=flags,
            seed=str(seed),
            train=train,
        )

    rows = [
        run(2, "500:10.00 900:30.00 2500:50.00"),  # bin 2 ends no episode: its last one's return, 30
        run(1, "400:20.00 1500:40.00 2200:60.00"),
        run(3, "100:999.00", side="sheeprl"),  # another side's
        run(4, "100:999.00", flags="--x 1"),  # a variant's
        run(5, "100:999.00", steps=5000),  # another budget's
    ]
    x, mean, std, seeds = tables.curve_bands(spec, rows)["heron"]
    assert x == [1000, 2000, 3000] and seeds == [1, 2]
    # per bin, seed 1: 20, 40, 60; seed 2: mean(10, 30) = 20, 30, 50
    assert mean == [20.0, 35.0, 55.0] and std == [0.0, 5.0, 5.0]
