"""The CLI: bad input is one line on stderr with exit code 2 and no traceback; eval --json; list;
help; config files and presets."""

import json
import os
import subprocess
import sys

import pytest
import yaml
from cli_helpers import cli_error as _error

import heron
from heron.cli import main

TINY_FLAGS = [
    "--total-steps",
    "600",
    "--learning-starts",
    "200",
    "--batch-size",
    "32",
    "--buffer-size",
    "2000",
    "--hidden-sizes",
    "32",
    "32",
    "--eval-every",
    "0",
    "--eval-episodes",
    "1",
    "--progress",
    "none",
]


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["train", "sacc"], "unknown algorithm 'sacc' (did you mean sac?)"),
        (["train", "sac", "--env-id", "Pendulm-v1"], "did you mean Pendulum-v1"),
        (["train", "sac", "--polcy-lr", "1e-3"], "unknown flag --polcy-lr (did you mean --policy-lr?)"),
        (["train", "sac", "--policy-lr", "-1e-3"], "--policy-lr must be positive"),
        (["train", "td3", "--q-lr", "0"], "--q-lr must be positive"),
        (["train", "sac", "--eval-envs", "0"], "--eval-envs must be positive"),
        (["train", "sac", "--batch-size", "512", "--buffer-size", "256"], "larger than --buffer-size"),
        (["train", "sac", "--gamma", "1.5"], "--gamma must be in [0, 1]"),
        (["train", "sac", "--batch-size", "abc"], "--batch-size expects an integer"),
        (["train", "sac", "--autotune", "maybe"], "--autotune expects true/false"),
        (["train", "sac", "--recurrent", "transformer"], "--recurrent must be one of none, lstm, gru"),
        (["train", "sac", "--device", "tpu"], "--device must be auto, cpu or cuda"),
        (["train", "sac", "--burn-in", "2"], "--burn-in applies to sequences"),
        (["train", "sac", "--recurrent", "gru", "--learning-starts", "4"], "--learning-starts must be at least"),
        (["train", "sac", "--autotune", "true", "--alpha", "0"], "--alpha must be >= 0 (> 0 with --autotune"),
        (["train", "sac", "--env-id", "CartPole-v1"], "sac needs a continuous (Box) action space"),
        (["train", "td3", "--env-id", "CartPole-v1"], "td3 needs a continuous (Box) action space"),
        (["train", "sac", "--preset", "nosuch"], "unknown preset 'nosuch'"),
        (["train", "sac", "--config", "/nonexistent/cfg.yaml"], "config file not found"),
        (["train", "--resume", "/nonexistent/run"], "run directory not found"),
        (["eval", "/nonexistent/run"], "run directory not found"),
        (["eval", "/nonexistent/run", "--envs", "0"], "--envs must be positive"),
        (["frobnicate"], "unknown command 'frobnicate'"),
        (["train", "sac", "--track"], "--track needs wandb"),
        (["train", "td3", "--n-step", "0"], "--n-step must be positive, got 0"),
        (["train", "sac", "--n-step", "3", "--recurrent", "gru"], "--n-step applies to feed-forward SAC"),
        (["train", "td3", "--vector-mode", "native"], "Pendulum-v1 has no vector entry point"),
        (["train", "sac", "--vector-mode", "natve"], "--vector-mode must be one of sync, async, native"),
        (["train", "ppo", "--dual-clip", "0.5"], "--dual-clip must be greater than 1"),
        (
            ["train", "ppo", "--recurrent", "lstm", "--num-envs", "3", "--num-minibatches", "2"],
            "--num-envs (3) must be a multiple of --num-minibatches (2)",
        ),
        (["train", "ppo", "--mode", "offpolicy"], "--mode must be one of on-policy, off-policy"),
        (["train", "ppo", "--env-id", "Pendulum-v1", "--env-backend", "envpool"], "--env-backend envpool is for Atari"),
        (["train", "ppo", "--gae-lambda", "2"], "--gae-lambda must be in [0, 1]"),
        (["train", "ppo", "--num-steps", "0"], "--num-steps must be positive"),
        (["train", "ppo", "--env-id", "ALE/Pongg-v5"], "did you mean ALE/Pong-v5"),
        (["train", "sac", "--cuda-graphs", "--device", "cpu"], "--cuda-graphs needs a CUDA device"),
        (["train", "td3", "--act-on-host"], "argument: --act-on-host was removed: acting stays on the training device"),
        (["train", "sac", "--act-on-host", "false"], "--act-on-host was removed"),
        (["train", "td3", "--cuda-graphs", "--compile", "--device", "cpu"], "--cuda-graphs needs a CUDA device"),
        (["train", "ppo", "--cuda-graphs", "--device", "cpu"], "--cuda-graphs needs a CUDA device"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, needle, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if argv[-1] == "--track":
        try:
            import wandb  # noqa: F401

            pytest.skip("wandb is installed here")
        except ImportError:
            argv = argv + TINY_FLAGS
    line = _error(capsys, argv)
    assert needle in line
    assert not (tmp_path / "runs").exists()  # nothing is created for rejected input


def test_malformed_config_file(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("batch_size: [1, 2\n  gamma: :")
    assert "malformed config file" in _error(capsys, ["train", "sac", "--config", str(bad)])
    bad.write_text("- just\n- a list\n")
    assert "malformed config file" in _error(capsys, ["train", "sac", "--config", str(bad)])
    bad.write_text("batch_sise: 3\n")
    assert "unknown option 'batch_sise' (did you mean batch-size?)" in _error(
        capsys, ["train", "sac", "--config", str(bad)]
    )


def test_corrupt_checkpoint_and_missing_checkpoint(capsys, tmp_path):
    run = tmp_path / "run"
    heron.train(
        "sac",
        env_id="Pendulum-v1",
        run_dir=str(run),
        total_steps=400,
        learning_starts=200,
        batch_size=32,
        buffer_size=1000,
        hidden_sizes=(16,),
        eval_every=0,
        eval_episodes=1,
        progress="none",
    )
    ckpts = sorted((run / "checkpoints").glob("step_*[0-9].pt"))
    good = ckpts[-1].read_bytes()
    ckpts[-1].write_bytes(good[: len(good) // 2])
    assert "corrupt or unreadable checkpoint" in _error(capsys, ["eval", str(run)])
    assert "corrupt or unreadable checkpoint" in _error(capsys, ["train", "--resume", str(run)])
    ckpts[-1].write_bytes(good)  # nothing saved was lost by the failed attempts
    assert main(["eval", str(run), "--episodes", "1", "--json"]) == 0
    capsys.readouterr()
    empty = tmp_path / "empty"
    (empty / "checkpoints").mkdir(parents=True)
    (empty / "config.yaml").write_text((run / "config.yaml").read_text())
    assert "has no checkpoint" in _error(capsys, ["eval", str(empty)])
    assert "no config.yaml" in _error(capsys, ["eval", str(tmp_path)])
    # a checkpoint that unpickles arbitrary objects is refused by weights_only loading
    import pickle

    ckpts[-1].write_bytes(pickle.dumps(os.system))
    assert "corrupt or unreadable checkpoint" in _error(capsys, ["eval", str(run)])


def test_train_then_eval_json_and_new_run_dir_guard(capsys, tmp_path):
    run = tmp_path / "run"
    assert main(["train", "td3", *TINY_FLAGS, "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2", "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    result = json.loads(out[0])
    assert {"mean_return", "std_return", "episodes", "env_id", "steps"} <= result.keys()
    assert result["episodes"] == 2 and result["env_id"] == "Pendulum-v1" and result["steps"] == 600
    assert main(["eval", str(run), "--episodes", "2", "--envs", "1", "--json"]) == 0  # one after another
    alone = json.loads(capsys.readouterr().out)
    assert alone["returns"] == pytest.approx(result["returns"], rel=1e-5)  # the same episodes, from the same starts
    assert "already holds checkpoints" in _error(capsys, ["train", "td3", *TINY_FLAGS, "--run-dir", str(run)])
    assert main(["eval", str(run), "--episodes", "1", "--checkpoint", "best"]) == 0
    assert "td3 on Pendulum-v1 @ 600 steps" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    assert main(["plot", str(run), "--out", str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").stat().st_size > 1000
    capsys.readouterr()
    pytest.importorskip("pygame")
    assert main(["eval", str(run), "--episodes", "1", "--video", "--json"]) == 0
    video = json.loads(capsys.readouterr().out)["video"]
    assert video.endswith(".mp4") and os.path.getsize(video) > 1000


def test_config_file_reproduces_a_run_and_presets_apply_in_order(tmp_path):
    run = tmp_path / "a"
    assert main(["train", "sac", *TINY_FLAGS, "--seed", "3", "--tau", "0.01", "--run-dir", str(run)]) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["algo"] == "sac" and saved["tau"] == 0.01 and saved["seed"] == 3
    cfg = heron.api.make_config("sac", config_file=str(run / "config.yaml"))
    assert cfg.tau == 0.01 and cfg.seed == 3 and cfg.run_dir == ""  # a fresh run directory
    cfg = heron.api.make_config("sac", presets=["mujoco", "debug"], config_file=str(run / "config.yaml"))
    assert cfg.total_steps == 1500  # debug (last) wins over mujoco, presets over the file
    cfg = heron.api.make_config("sac", presets=["debug", "mujoco"], total_steps=42)
    assert cfg.learning_starts == 5000 and cfg.total_steps == 42  # flags win over presets


def test_help_lists_every_hyperparameter_with_default(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "sac", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    import dataclasses

    from heron.algos.sac import Config

    for f in dataclasses.fields(Config):
        assert f"--{f.name.replace('_', '-')}" in out, f.name
    assert "(default: 0.0003)" in out and "--preset" in out and "--config" in out


def test_a_repeated_preset_flag_adds_to_the_list(capsys):
    """``--preset classic --preset recurrent`` is ``--preset classic recurrent`` (argparse's default
    kept only the last flag, silently dropping the zoo's CartPole block)."""
    outs = []
    for argv in (["--preset", "classic", "--preset", "recurrent"], ["--preset", "classic", "recurrent"]):
        with pytest.raises(SystemExit) as exc:
            main(["train", "ppo", *argv, "--help"])
        assert exc.value.code == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]
    assert "(default: 0.001)" in outs[0] and "(default: 'lstm')" in outs[0]  # classic's rate, recurrent's core


def test_list_shows_algorithms_and_presets(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "sac" in out and "td3" in out and "debug" in out and "mujoco" in out and "original" in out


def test_console_script_entry_point(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "heron", "train", "sac", "--nope"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_cuda_requests_without_cuda_are_rejected_before_anything_is_written(capsys, tmp_path, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    monkeypatch.chdir(tmp_path)
    assert "CUDA is not available" in _error(capsys, ["train", "sac", "--device", "cuda"])
    assert "CUDA is not available" in _error(capsys, ["train", "td3", "--buffer-device", "cuda:0"])
    assert not (tmp_path / "runs").exists()


def test_missing_simulator_dependency_is_one_line(capsys):
    try:
        import Box2D  # noqa: F401

        pytest.skip("Box2D is installed here")
    except ImportError:
        pass
    assert "cannot make CarRacing-v3" in _error(capsys, ["train", "sac", "--env-id", "CarRacing-v3"])


def test_resume_can_change_the_thread_count(capsys, tmp_path):
    """--torch-threads and --eval-async on resume (another machine, a neighbour): recorded in config.yaml;
    a bad value is a one-line error that leaves the run as it was."""
    run = tmp_path / "run"
    assert main(["train", "td3", *TINY_FLAGS, "--torch-threads", "2", "--run-dir", str(run)]) == 0
    saved = (run / "config.yaml").read_text()
    assert "--torch-threads must be >= 0" in _error(
        capsys, ["train", "--resume", str(run), "--total-steps", "700", "--torch-threads", "-1"]
    )
    assert (run / "config.yaml").read_text() == saved
    assert (
        main(["train", "--resume", str(run), "--total-steps", "700", "--torch-threads", "1", "--eval-async", "off"])
        == 0
    )
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["torch_threads"] == 1 and cfg["total_steps"] == 700 and cfg["eval_async"] == "off"
    assert (
        "a resumed run keeps its config.yaml; resume takes only --total-steps, --torch-threads and --eval-async"
        in _error(capsys, ["train", "--resume", str(run), "--num-envs", "2"])
    )


def test_resuming_a_finished_run_needs_a_larger_target(capsys, tmp_path):
    run = tmp_path / "run"
    assert main(["train", "td3", *TINY_FLAGS, "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert "already reached 600 steps" in _error(capsys, ["train", "--resume", str(run)])


def test_a_removed_option_in_a_saved_config_is_left_out(capsys, tmp_path):
    """A run (or a --config file) made when heron had --act-on-host resumes and reads without it;
    asked for anew it is refused with what to do instead (test_bad_input_is_one_line_exit_2)."""
    run = tmp_path / "run"
    assert main(["train", "td3", *TINY_FLAGS, "--run-dir", str(run)]) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**saved, "act_on_host": True}))  # as an older heron wrote it
    assert heron.api.make_config("td3", config_file=str(run / "config.yaml")).tau == saved["tau"]
    assert main(["train", "--resume", str(run), "--total-steps", "700"]) == 0
    assert "act_on_host" not in yaml.safe_load((run / "config.yaml").read_text())


def test_a_missing_extra_is_named_with_the_packages_it_installs():
    from heron.errors import install_hint

    hint = install_hint("tune")  # from a checkout, or the packages themselves (heron is not on PyPI)
    assert hint.startswith("pip install -e '.[tune]' in heron's checkout, or: pip install ")
    assert "optuna" in hint
