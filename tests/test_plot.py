"""``heron plot`` fails loudly on a typo or an empty run and never replaces a good image with a blank or
half-written one; CSVs torn by a killed training process still plot. Hand-written CSVs, no training."""

import pytest
from cli_helpers import cli_error as _error

from heron.cli import main

pytest.importorskip("matplotlib")

METRICS = "step,wall_time,metric,value\n"
EVAL = "step,mean_return,std_return,episodes,wall_time\n"


def _run(tmp_path, name, metrics=METRICS, eval_csv=None):
    run = tmp_path / name
    run.mkdir()
    (run / "metrics.csv").write_text(metrics)
    if eval_csv is not None:
        (run / "eval.csv").write_text(eval_csv)
    return run


def _returns(steps=(100, 200, 300)):
    return METRICS + "".join(
        f"{s},1700.{s},charts/episodic_return,{-s / 10}\n"
        f"{s},1700.{s},losses/qf_loss,{s / 1000}\n{s},1700.{s},charts/SPS,55\n"
        for s in steps
    )


def test_unknown_metric_names_the_existing_ones_and_keeps_the_image(tmp_path, capsys):
    run = _run(tmp_path, "run", _returns())
    assert main(["plot", str(run)]) == 0
    before = (run / "returns.png").read_bytes()
    err = _error(capsys, ["plot", str(run), "--metric", "losses/qf_los"])
    assert "unknown metric 'losses/qf_los' (did you mean losses/qf_loss?)" in err
    assert f"{run} has: charts/SPS, charts/episodic_return, losses/qf_loss" in err
    assert (run / "returns.png").read_bytes() == before
    assert [p.name for p in run.iterdir() if p.suffix == ".png"] == ["returns.png"]  # no temporary file left


@pytest.mark.parametrize("metrics", [None, METRICS, METRICS + "100,17"])
def test_run_without_data_is_an_error_and_writes_no_image(tmp_path, capsys, metrics):
    run = tmp_path / "empty"
    run.mkdir()
    if metrics is not None:
        (run / "metrics.csv").write_text(metrics)
    (run / "eval.csv").write_text(EVAL)
    assert f"{run} has no logged data yet" in _error(capsys, ["plot", str(run)])
    assert not list(tmp_path.rglob("*.png"))


def test_torn_last_rows_are_skipped(tmp_path, capsys):
    run = _run(tmp_path, "run", _returns() + "400,1700.4,charts/episodic_re", EVAL + "300,-20.5,3.1,5,1700.3\n400,-1")
    out = tmp_path / "curves.png"
    assert main(["plot", str(run), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out) and out.stat().st_size > 1000
    # torn rows in the middle (a run resumed after a kill appends after them) and a bad number are skipped too
    run2 = _run(
        tmp_path,
        "run2",
        METRICS + "100,1700.1,charts/episodic_re\n100,1700.1,charts/episodic_return,x\n"
        "200,1700.2,charts/episodic_return,-12.5\n",
        EVAL + "100,-1\n200,-20.5,3.1,5,1700.3\n",
    )
    assert main(["plot", str(run2)]) == 0
    from heron.plot import read_eval, read_metric

    assert read_metric(run2, "charts/episodic_return") == ([200], [-12.5])
    assert read_eval(run2) == ([200], [-20.5], [3.1])


def test_runs_without_the_metric_are_left_out(tmp_path, capsys):
    has = _run(tmp_path, "has", _returns())
    lacks = _run(tmp_path, "lacks", METRICS + "100,1700.1,charts/SPS,55\n", EVAL + "100,-20.5,3.1,5,1700.3\n")
    out = tmp_path / "both.png"
    assert main(["plot", str(lacks), str(has), "--metric", "losses/qf_loss", "--out", str(out)]) == 0
    assert out.stat().st_size > 1000
    # evaluations alone (no metrics logged yet) plot as well
    only_eval = tmp_path / "only_eval"
    only_eval.mkdir()
    (only_eval / "eval.csv").write_text(EVAL + "100,-20.5,3.1,5,1700.3\n")
    assert main(["plot", str(only_eval)]) == 0
    assert (only_eval / "returns.png").stat().st_size > 1000


def test_unwritable_out_is_one_line(tmp_path, capsys):
    run = _run(tmp_path, "run", _returns())
    err = _error(capsys, ["plot", str(run), "--out", str(tmp_path / "missing" / "curves.png")])
    assert "cannot write" in err and "missing" in err
    assert not list(tmp_path.rglob("*.png"))
    assert "not a run directory" in _error(capsys, ["plot", str(tmp_path / "nope")])
