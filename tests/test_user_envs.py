"""Users' own environments: ``--env-id module:EnvId`` through the CLI (train, resume, eval in new
processes), ``heron.train(algo, env=callable)``, and ``heron check-env`` on a good env and on
broken ones. The user's module is tests/user_envs.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import user_envs
import yaml

import heron
from heron.cli import main
from heron.envs import ids as envids

TESTS = Path(__file__).resolve().parent
TINY = [
    "--total-steps",
    "400",
    "--learning-starts",
    "100",
    "--batch-size",
    "32",
    "--buffer-size",
    "1000",
    "--hidden-sizes",
    "16",
    "16",
    "--eval-every",
    "0",
    "--eval-episodes",
    "2",
    "--progress",
    "none",
]
TINY_KW = dict(
    total_steps=300,
    learning_starts=100,
    batch_size=32,
    buffer_size=1000,
    hidden_sizes=(16, 16),
    eval_every=0,
    eval_episodes=2,
    progress="none",
    torch_threads=1,
)


def _heron(args, cwd, env=None):
    """The installed ``heron`` command, as a user runs it from the directory holding their module."""
    exe = Path(sys.executable).parent / "heron"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "heron"]
    # the user's module is found through the working directory, not through PYTHONPATH
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != TESTS]
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(paths), **(env or {})}
    return subprocess.run(cmd + args, cwd=cwd, capture_output=True, text=True, env=environ, timeout=300)


def test_module_env_id_trains_resumes_and_evaluates_through_the_cli(tmp_path):
    run = tmp_path / "run"
    p = _heron(["train", "sac", "--env-id", "user_envs:Target-v0", *TINY, "--run-dir", str(run)], TESTS)
    assert p.returncode == 0, p.stderr
    assert yaml.safe_load((run / "config.yaml").read_text())["env_id"] == "user_envs:Target-v0"
    p = _heron(["train", "--resume", str(run), "--total-steps", "600"], TESTS)
    assert p.returncode == 0, p.stderr
    p = _heron(["eval", str(run), "--episodes", "2", "--json"], TESTS)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["steps"] == 600 and out["env_id"] == "user_envs:Target-v0" and out["episodes"] == 2
    assert -500 <= out["mean_return"] <= 0  # 50 steps of -|distance|, at most 10 each
    # from elsewhere the module is not importable: one line that says how to make it so
    p = _heron(["eval", str(run)], tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert "cannot import module 'user_envs'" in p.stderr and "PYTHONPATH" in p.stderr
    p = _heron(
        ["eval", str(run), "--episodes", "1"],
        tmp_path,
        env={"PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(TESTS)]))},
    )
    assert p.returncode == 0, p.stderr


def test_module_env_id_tunes_in_worker_processes_and_exports(tmp_path):
    """``heron tune`` and ``heron export`` take a user's env like ``heron train``: the tune workers
    (new processes) import the module from the working directory, and the exported policy is
    checked against the run on the user's env."""
    pytest.importorskip("optuna")
    pytest.importorskip("onnxruntime")
    out = tmp_path / "study"
    p = _heron(
        [
            "tune",
            "sac",
            "--env-id",
            "user_envs:Target-v0",
            "--trials",
            "2",
            "--jobs",
            "2",
            "--threads",
            "1",
            "--pruner",
            "none",
            "--out",
            str(out),
            *TINY[:-4],
        ],
        TESTS,
    )
    assert p.returncode == 0, p.stderr
    assert yaml.safe_load((out / "best.yaml").read_text())["env_id"] == "user_envs:Target-v0"
    trial = out / "trials" / "trial_0000"
    onnx = tmp_path / "policy.onnx"
    p = _heron(["export", str(trial), "--format", "onnx", "--out", str(onnx)], TESTS)
    assert p.returncode == 0, p.stderr
    assert json.loads(onnx.with_name("policy.onnx.json").read_text())["env_id"] == "user_envs:Target-v0"


@pytest.mark.parametrize(
    "env_id,needle",
    [
        ("no_such_module_xyz:Target-v0", "cannot import module 'no_such_module_xyz' for --env-id"),
        (
            "user_envs:Targt-v0",
            "user_envs registers no environment 'Targt-v0' and has no env factory of that name; did you mean Target-v0",
        ),
        ("user_envs:TARGET_CONSTANT", "user_envs registers no environment 'TARGET_CONSTANT'"),
    ],
)
def test_bad_module_env_ids_are_one_line_errors(capsys, tmp_path, env_id, needle):
    code = main(["train", "sac", "--env-id", env_id, "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    assert not (tmp_path / "r").exists()


def test_a_factory_or_an_env_class_named_by_module_name(tmp_path):
    r = heron.train("td3", env_id="user_envs:Target", run_dir=str(tmp_path / "cls"), **TINY_KW)
    assert r["step"] == 300 and r["env_id"] == "user_envs:Target"
    with pytest.raises(heron.HeronError, match="returned int, not a gymnasium.Env"):
        heron.train("td3", env_id="user_envs:make_number", run_dir=str(tmp_path / "n"), **TINY_KW)


def test_callable_env_through_the_api(tmp_path):
    run = tmp_path / "f"
    r = heron.train("sac", env=user_envs.make_target, run_dir=str(run), **TINY_KW)
    assert r["env_id"] == "user_envs:make_target"  # importable: recorded by its import path
    assert yaml.safe_load((run / "config.yaml").read_text())["env_id"] == "user_envs:make_target"
    assert heron.evaluate(run, episodes=2)["episodes"] == 2
    p = _heron(["eval", str(run), "--episodes", "1"], TESTS)  # a new process finds it again
    assert p.returncode == 0, p.stderr
    with pytest.raises(heron.HeronError, match="env or env_id"):
        heron.train("sac", env=user_envs.make_target, env_id="Pendulum-v1", **TINY_KW)


def test_callable_without_import_path_must_be_given_again(tmp_path):
    run = tmp_path / "lam"
    r = heron.train("sac", env=lambda: user_envs.make_target(), run_dir=str(run), **TINY_KW)
    env_id = r["env_id"]
    try:
        assert env_id.startswith("<callable ") and "lambda" in env_id
        # a new process: one line naming what to do
        p = _heron(["eval", str(run)], TESTS)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "heron.evaluate(run_dir, env=...)" in p.stderr
        before = sorted(f.name for f in run.rglob("*"))
        p = _heron(["train", "--resume", str(run), "--total-steps", "400"], TESTS)
        assert p.returncode == 2 and "heron.resume(run_dir, env=...)" in p.stderr, p.stderr
        assert sorted(f.name for f in run.rglob("*")) == before
        envids.forget_callable(env_id)  # as in a new process
        with pytest.raises(heron.HeronError, match="cannot be imported"):
            heron.evaluate(run, episodes=1)
        assert heron.evaluate(run, episodes=2, env=user_envs.make_target)["episodes"] == 2
        assert heron.resume(run, total_steps=400, env=user_envs.make_target)["step"] == 400
    finally:
        envids.forget_callable(env_id)  # given again above: the next test starts without it


def _check_env(capsys, env_id):
    code = main(["check-env", env_id, "--steps", "120"])
    return code, capsys.readouterr().out


def test_check_env_on_a_good_env(capsys):
    code, out = _check_env(capsys, "user_envs:Target-v0")
    assert code == 0, out
    assert "FAIL" not in out and "no problems found" in out
    for algo in ("sac", "td3", "ppo", "dreamer_v2", "dreamer_v3", "sac --preset crossq"):
        assert any(line.split() == [*algo.split(), "yes"] for line in out.splitlines()), out


@pytest.mark.parametrize(
    "env_id,fail",
    [
        (
            "user_envs:WrongDtype",
            "FAIL  observation dtype: reset() returned observation of dtype float64; "
            "the observation space declares float32",
        ),
        ("user_envs:InfiniteBounds", "FAIL  action bounds: not finite"),
        ("user_envs:OutOfSpace", "FAIL  observations inside the observation space: reset() returned observation[0] ="),
        ("user_envs:Endless", "FAIL  episodes end: none ended in 120 random steps"),
    ],
)
def test_check_env_names_what_is_broken(capsys, env_id, fail):
    code, out = _check_env(capsys, env_id)
    assert code == 1, out
    assert fail in out, out
    # Gymnasium's checker may fail too (it asserts the first observation is in the space); heron's
    # own checks name exactly the one problem
    fails = [line for line in out.splitlines() if line.lstrip().startswith("FAIL") and "Gymnasium" not in line]
    assert len(fails) == 1, out


def test_check_env_json_and_bad_input(capsys):
    assert main(["check-env", "user_envs:InfiniteBounds", "--steps", "60", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["problems"] == 1
    assert "not finite" in report["algos"]["sac"] and report["algos"]["ppo"] == ""
    assert "not finite" in report["algos"]["sac --preset crossq"]  # CrossQ squashes its actions as SAC does
    assert main(["check-env", "Pendulm-v1"]) == 2
    assert "did you mean Pendulum-v1" in capsys.readouterr().err


def test_an_evaluation_depends_on_the_policy_alone_even_where_an_env_remembers(tmp_path):
    """Some envs' episodes depend on what the instance played before, whatever the seed (PyBullet's
    locomotion envs do). Evaluations make their envs afresh, so the final evaluation of a run with
    earlier ones is what ``heron eval`` of its checkpoint gives."""
    r = heron.train(
        "td3",
        env_id="user_envs:Remembering",
        run_dir=str(tmp_path / "r"),
        **{**TINY_KW, "eval_every": 100, "eval_episodes": 3},
    )
    evaluations = len((tmp_path / "r" / "eval.csv").read_text().splitlines()) - 1
    assert evaluations == 3  # steps 100, 200 and 300 (the final one)
    again = heron.evaluate(tmp_path / "r", episodes=3)
    assert again["mean_return"] == pytest.approx(r["mean_return"], rel=1e-6)


def test_eval_envs_reaches_the_run_and_heron_eval_and_envs_overrides_it(tmp_path):
    """With an env that remembers its resets, episodes played one after another in one env return
    something else than episodes played together in fresh envs: that difference shows which way
    each path played them."""
    run = tmp_path / "r"
    r = heron.train(
        "td3", env_id="user_envs:Remembering", run_dir=str(run), **{**TINY_KW, "eval_episodes": 3, "eval_envs": 1}
    )
    default = heron.evaluate(run, episodes=3)  # the run's --eval-envs 1
    assert default["mean_return"] == pytest.approx(r["mean_return"], rel=1e-6)
    together = heron.evaluate(run, episodes=3, envs=3)
    assert together["returns"][0] == pytest.approx(default["returns"][0], rel=1e-6)  # a fresh env either way
    assert together["returns"][1:] != pytest.approx(default["returns"][1:], rel=1e-3)
