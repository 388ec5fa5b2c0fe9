"""What the side-by-side scripts in benchmarks/ must get right without training anything: the
peer's settings built from heron's resolved config (a silent mismatch would compare unlike runs),
and the reuse of a heron run made elsewhere only when it learns as the script's config would."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from cli_helpers import load_script

from heron.config import to_dict

ROOT = Path(__file__).resolve().parent.parent


def _script(name):
    return load_script(f"benchmarks/{name}.py")


@pytest.fixture(scope="module")
def curves():
    return _script("offpolicy_curves_vs_sb3")


def _args(curves, tmp_path, *extra):
    return curves.parse_args(["--env-id", "Pendulum-v1", "--total-steps", "20000", "--out", str(tmp_path), *extra])


def test_sb3_settings_follow_heron_td3_preset(curves, tmp_path):
    args = _args(curves, tmp_path, "--set", "gamma=0.98", "hidden_sizes=400,300")
    settings = curves.sb3_settings(curves.heron_config(args, 1, tmp_path))
    assert settings == dict(
        learning_rate=1e-3,
        buffer_size=1_000_000,
        learning_starts=25_000,
        batch_size=256,
        tau=0.005,
        gamma=0.98,
        train_freq=1,
        gradient_steps=1,
        policy_kwargs=dict(net_arch=[400, 300]),
        policy_delay=2,
        target_policy_noise=0.2,
        target_noise_clip=0.5,
        exploration_noise=0.1,
    )


def test_sb3_settings_refuse_what_sb3_cannot_run(curves, tmp_path):
    sac = _args(curves, tmp_path, "--algo", "sac")  # CleanRL's defaults: q-lr 1e-3, delayed actor updates
    with pytest.raises(SystemExit, match="one learning rate.*policy_frequency=1"):
        curves.sb3_settings(curves.heron_config(sac, 1, tmp_path))
    matched = _args(curves, tmp_path, "--algo", "sac", "--set", "policy_lr=3e-4", "q_lr=3e-4", "policy_frequency=1")
    settings = curves.sb3_settings(curves.heron_config(matched, 1, tmp_path))
    assert settings["ent_coef"] == "auto_0.2" and settings["target_update_interval"] == 1
    assert settings["learning_rate"] == 3e-4 and settings["learning_starts"] == 5000
    with pytest.raises(SystemExit, match="heron config: --gamma must be in"):
        curves.heron_config(_args(curves, tmp_path, "--set", "gamma=2"), 1, tmp_path)
    normalized = _args(curves, tmp_path, "--set", "obs_norm=true")
    with pytest.raises(SystemExit, match="no obs_norm"):
        curves.sb3_settings(curves.heron_config(normalized, 1, tmp_path))


def test_sb3_settings_follow_heron_crossq_preset(curves, tmp_path):
    """--algo crossq: heron's SAC with --preset crossq, and sb3-contrib's CrossQ built from it (no
    tau: neither has target networks)."""
    args = _args(curves, tmp_path, "--algo", "crossq", "--set", "critic_hidden_sizes=256,256")
    cfg = curves.heron_config(args, 1, tmp_path)
    assert cfg.crossq and cfg.policy_frequency == 3 and curves.heron_algo(args) == "sac"
    assert curves.sb3_settings(cfg) == dict(
        learning_rate=1e-3,
        buffer_size=1_000_000,
        learning_starts=5000,
        batch_size=256,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        ent_coef="auto_0.2",
        policy_delay=3,
        policy_kwargs=dict(
            net_arch={"pi": [256, 256], "qf": [256, 256]},
            batch_norm_momentum=0.01,
            renorm_warmup_steps=100_000,
            optimizer_kwargs=dict(betas=(0.5, 0.999)),
        ),
    )
    assert curves.run_dir_of(args, "heron", 1).name == "heron_crossq_Pendulum-v1_s1"


def test_a_heron_run_is_reused_only_with_the_same_learning_config(curves, tmp_path):
    args = _args(curves, tmp_path)
    run_dir = curves.run_dir_of(args, "heron", 1)
    assert curves.check_heron_dir(args, 1, run_dir) is None  # nothing there: it will be trained
    run_dir.mkdir(parents=True)
    made_elsewhere = to_dict(curves.heron_config(args, 1, run_dir))
    made_elsewhere.update(total_steps=1_000_000, run_dir="/elsewhere", device="auto", checkpoint_every=50_000)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(made_elsewhere))
    assert curves.check_heron_dir(args, 1, run_dir)["total_steps"] == 1_000_000
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**made_elsewhere, "exploration_noise": 0.2}))
    with pytest.raises(SystemExit, match="differs in exploration_noise"):
        curves.check_heron_dir(args, 1, run_dir)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**made_elsewhere, "total_steps": 10_000}))
    with pytest.raises(SystemExit, match="fewer than --total-steps"):
        curves.check_heron_dir(args, 1, run_dir)


def test_refusals_are_one_line_with_exit_code_2(curves, tmp_path, capsys):
    assert curves.main(["--env-id", "Nope-v9", "--out", str(tmp_path), "--libs", "heron"]) == 2
    assert curves.main(["--algo", "sac", "--env-id", "Pendulum-v1", "--out", str(tmp_path), "--libs", "sb3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "unknown environment id 'Nope-v9'" in err[0] and "SB3 cannot run" in err[1]
    assert not any(tmp_path.iterdir())  # refused before any run folder was made


def test_permutation_p_counts_the_splits_at_least_as_far_apart(curves):
    # {1, 2} vs {3, 4}: of the 6 ways to split the four values 2 + 2, only this one and its mirror
    # are 2 apart in means
    assert curves.permutation_p([1, 2], [3, 4]) == pytest.approx(2 / 6)
    # the order of the groups does not matter; with all values equal every split is as far apart
    assert curves.permutation_p([3, 4], [1, 2]) == pytest.approx(2 / 6)
    assert curves.permutation_p([5, 5], [5, 5]) == 1.0
    # 3 + 3 with every heron seed below every SB3 seed: 2 of C(6, 3) = 20 splits
    assert curves.permutation_p([1, 2, 3], [10, 11, 12]) == pytest.approx(0.1)


def test_report_summarises_finished_runs_and_plots_both_libraries(curves, tmp_path, capsys):
    # fake runs: heron seeds 1-2 and SB3 seed 1 finished at 20k, SB3 seed 2 stopped at 10k
    finals = {("heron", 1): 100.0, ("heron", 2): 200.0, ("sb3", 1): 400.0}
    for lib in ("heron", "sb3"):
        for seed in (1, 2):
            run_dir = tmp_path / f"{lib}_td3_Pendulum-v1_s{seed}"
            run_dir.mkdir()
            rows = [(10_000, 10.0 * seed)] + ([(20_000, finals[lib, seed])] if (lib, seed) in finals else [])
            (run_dir / "eval.csv").write_text(
                "step,mean_return,std_return,episodes\n" + "".join(f"{st},{r},0,10\n" for st, r in rows)
            )
    png = tmp_path / "curves.png"
    argv = [
        "--env-id",
        "Pendulum-v1",
        "--total-steps",
        "20000",
        "--out",
        str(tmp_path),
        "--seeds",
        "1",
        "2",
        "--report-only",
        "--plot",
        str(png),
    ]
    assert curves.main(argv) == 0
    out = capsys.readouterr().out
    assert "| 20,000 | 150 ± 71 | 400 ± 0 | 100, 200 | 400, - |" in out  # sample std: 50 * sqrt(2)
    # the summary holds only finished runs (SB3 seed 2 is left out), and one SB3 seed gives no p
    assert "| final evaluation | 150 ± 71 (2) | 400 ± 0 (1) |  |" in out
    assert png.stat().st_size > 10_000


def test_permutation_p_draws_random_splits_past_the_exact_limit(curves):
    heron, sb3 = [1.0, 2.0, 3.0, 4.0, 5.0], [3.0, 4.0, 5.0, 6.0, 7.0]
    exact = curves.permutation_p(heron, sb3)  # C(10, 5) = 252 splits: 32 as far apart
    assert exact == pytest.approx(32 / 252)
    assert abs(curves.permutation_p(heron, sb3, exact_up_to=251) - exact) < 0.05  # 251 random splits
    # 11 + 11 seeds (705,432 splits, past the default limit), fully apart: exactly 2 / 705,432
    assert curves.permutation_p(list(range(11)), list(range(100, 111))) < 1e-3


def test_plot_with_nothing_to_draw_is_a_one_line_refusal(curves, tmp_path, capsys):
    argv = [
        "--env-id",
        "Pendulum-v1",
        "--total-steps",
        "20000",
        "--out",
        str(tmp_path),
        "--report-only",
        "--plot",
        str(tmp_path / "curves.png"),
    ]
    assert curves.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["offpolicy_curves_vs_sb3: --plot: nothing to plot: no evaluations"]
    assert not (tmp_path / "curves.png").exists()


# heron's CLI as the GPU scripts (benchmarks/gpu_check.sh, gpu_vs_leanrl.sh) call it, on a machine
# without a GPU: the flags are parsed and checked as for a real run (CUDA reported present), the
# resolved config recorded, and a metrics.csv written in its place: 1,000 env steps/s
_HERON_STUB = """
import csv, json, os, sys, types
from pathlib import Path
import torch
torch.cuda.is_available = lambda: True
import heron.api as api
from heron.cli import main

class Run:
    def __init__(self, algo, cfg):
        self.evaluations = types.SimpleNamespace(on_eval=None)  # api.train hands it the callback
        with open(os.environ["CALLS"], "a") as f:
            f.write(json.dumps(dict(algo=algo.__name__.rsplit(".", 1)[-1], **{k: getattr(cfg, k, None) for k in (
                "run_dir", "cuda_graphs", "compile", "act_ahead", "fused_update", "eval_async", "eval_every",
                "checkpoint_every", "env_id", "env_backend", "num_envs", "num_steps", "torch_threads", "recompute_adv",
                "precision")})) + "\\n")
        Path(cfg.run_dir).mkdir(parents=True)
        with open(Path(cfg.run_dir) / "metrics.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "wall_time", "metric", "value"])
            for step in (5000, 10000, 15000, 20480, 40960):
                w.writerow([step, step / 1000, "losses/x", 0.0])
            w.writerow([40960, 99.0, "eval/mean_return", 0.0])  # the final evaluation: outside the window

api.Run.start = Run
api.check_env_id = lambda env_id: None  # HalfCheetah-v5, the scripts' env: no need to build it here
api._run = lambda module, run: {}
sys.exit(main(sys.argv[1:]))
"""

# one of LeanRL's scripts as gpu_vs_leanrl.sh runs it: its env steps, counted by the script's
# stand-in for wandb, at 500 a second, and its own 'speed' figure
_LEANRL_STUB = """
import os, sys, time
with open(os.environ["CALLS"] + ".leanrl", "a") as f:
    f.write(" ".join(sys.argv) + " PYTHONPATH=" + os.environ.get("PYTHONPATH", "") + "\\n")
t0 = time.time()
with open(os.environ["LEANRL_STEPS"], "a") as f:
    for n in range(1000, 20001, 1000):
        f.write(f"steps,{n},{t0 + n / 500:.3f},\\n")
    f.write(f"speed,20000,{t0 + 40:.3f},498.0\\n")
"""


def _stubbed(tmp_path, **env):
    """The environment to run a GPU script in, here: python3's pip and version prints do nothing,
    its heron and LeanRL calls go to the stubs above, the DreamerV3 step benchmark's calls are
    recorded (in CALLS.dv3) and answered with a ratio of 2, and everything else goes to this Python."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "heron_stub.py").write_text(_HERON_STUB)
    (tmp_path / "leanrl_stub.py").write_text(_LEANRL_STUB)
    (bin_dir / "python3").write_text(
        "#!/bin/bash\n"
        '[ "$1 $2" = "-m pip" ] || [ "$1" = -c ] && exit 0\n'  # the install, and the versions printed
        f'[ "$1 $2" = "-m heron" ] && {{ shift 2; exec {sys.executable} {tmp_path / "heron_stub.py"} "$@"; }}\n'
        f'case "$1" in .leanrl/*) exec {sys.executable} {tmp_path / "leanrl_stub.py"} "$@";; esac\n'
        '[ "$1" = benchmarks/dreamer_v3_vs_sheeprl.py ] && '
        '{ echo "$*" >> "$CALLS.dv3"; echo \'{"ratio_sheeprl_over_heron": 2.0}\'; exit 0; }\n'
        f'exec {sys.executable} "$@"\n'
    )
    (bin_dir / "nvidia-smi").write_text("#!/bin/bash\necho 'a stub GPU, 1 MiB'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        CALLS=str(tmp_path / "calls.jsonl"),
        OUT=str(tmp_path / "out"),
        GPU_CHECK_SITE=str(tmp_path / "site"),
        GPU_CHECK_RUNS=str(tmp_path / "runs"),
        PYTHONPATH=str(ROOT),
        **env,
    )


def _run_script(tmp_path, script, *args, **env):
    """Runs benchmarks/SCRIPT in tmp_path with the stubs; the heron configs it asked for, in order."""
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / script), *args],
        cwd=tmp_path,
        env=_stubbed(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]


def test_gpu_check_times_the_runs_its_labels_name(tmp_path):
    """GPU time is costly: gpu_check.sh's timed runs must pass heron the flags their labels
    and file names say (--act-ahead, --compile, --cuda-graphs), each in a run directory of its own,
    and read their rates from the window it states."""
    calls = _run_script(
        tmp_path,
        "gpu_check.sh",
        "sps",
        SPS_ALGOS="td3 ppo",
        SPS_GRAPHS="true",
        SPS_ACT_AHEAD="true false",
        SPS_COMPILE="true",
        SPS_SECONDS="60",
    )
    lines = (tmp_path / "out" / "sps.txt").read_text().splitlines()[1:]
    assert len(calls) == len(lines) == 3, lines  # TD3 acting ahead and behind; PPO
    assert [c["run_dir"] for c in calls] == [
        str(tmp_path / "runs" / n)
        for n in ("td3-true-auto-compiled", "td3-true-auto-compiled-behind", "ppo-true-auto-compiled")
    ]
    for call, line in zip(calls, lines):
        assert line.startswith(f"{call['algo']} --cuda-graphs true --eval-async auto"), line
        assert call["cuda_graphs"] and call["eval_async"] == "auto" and call["checkpoint_every"] == 10000
        assert "--compile true" in line and call["compile"]
        if call["algo"] == "td3":
            assert f"--act-ahead {str(call['act_ahead']).lower()}" in line
            assert call["act_ahead"] == ("behind" not in call["run_dir"])
            assert line.endswith("(exit 0): 1000 env steps/s over steps 10000-40960"), line
        else:
            assert "--act-ahead" not in line
            assert line.endswith("(exit 0): 1000 env steps/s over steps 20480-40960"), line


def test_gpu_check_times_dreamer_v3_as_its_labels_name(tmp_path):
    """gpu_check.sh dreamer-v3: each size and mode once, on CUDA; "recorded" is heron's
    --cuda-graphs against sheeprl's --sheeprl-compile and "eager" neither; each line of the summary
    names its size and mode and ends with the benchmark's ratio."""
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "dreamer-v3"],
        cwd=tmp_path,
        env=_stubbed(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    calls = (tmp_path / "calls.jsonl.dv3").read_text().splitlines()
    lines = (tmp_path / "out" / "dreamer_v3.txt").read_text().splitlines()[1:]
    expected = [("S", "eager"), ("vector", "eager"), ("S", "recorded"), ("vector", "recorded")]
    assert len(calls) == len(lines) == len(expected), (calls, lines)
    for call, line, (size, mode) in zip(calls, lines, expected):
        argv = call.split()
        assert argv[argv.index("--device") + 1] == "cuda" and argv[argv.index("--sizes") + 1] == size
        assert ("--cuda-graphs" in argv) == ("--sheeprl-compile" in argv) == (mode == "recorded"), call
        assert line == f'{size} {mode} (exit 0): {{"ratio_sheeprl_over_heron": 2.0}}', line
    # and the benchmark takes those flags (parsed by its own parser, in a process of their own)
    parse = (
        "import sys; sys.path.insert(0, 'benchmarks'); import dreamer_v3_vs_sheeprl as b; "
        "[b.parser().parse_args(line.split()[1:]) for line in sys.stdin.read().splitlines()]"
    )
    parsed = subprocess.run(
        [sys.executable, "-c", parse], cwd=ROOT, input="\n".join(calls), capture_output=True, text=True, timeout=60
    )
    assert parsed.returncode == 0, parsed.stderr


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--cuda-graphs"], "--cuda-graphs and --sheeprl-compile need --device cuda"),
        (["--sheeprl-compile"], "--cuda-graphs and --sheeprl-compile need --device cuda"),
        (["--device", "cuda", "--cuda-graphs", "--warmup", "3"], "give --warmup 4 or more"),
        (["--device", "cuda", "--flops"], "--flops compares the step with this CPU core's rate"),
    ],
)
def test_dreamer_v3_step_benchmark_refuses_settings_it_cannot_time(argv, needle):
    """Refused before anything is built (exit 2): a mistake found on the GPU costs device time."""
    done = subprocess.run(
        [sys.executable, "benchmarks/dreamer_v3_vs_sheeprl.py", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and needle in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_gpu_vs_leanrl_runs_each_mode_as_named_and_prints_the_ratio(tmp_path):
    """gpu_vs_leanrl.sh's modes combine by name: features-* turns evaluation and checkpoints on,
    *compiled* --compile, *behind* acting ahead off and *autograd* the hand-written step off; each
    run's rate is read from metrics.csv past START, LeanRL's from its counted env steps, and the
    summary gives each heron mode over LeanRL."""
    modes = ("graphs", "features-compiled-behind", "features-autograd")
    calls = _run_script(
        tmp_path, "gpu_vs_leanrl.sh", ALGOS="sac", HERON_MODES=" ".join(modes), HERON_SECONDS="60", LEANRL_SECONDS="60"
    )
    assert [c["run_dir"] for c in calls] == [str(tmp_path / "runs" / f"vs-sac-{m}") for m in modes]
    graphs, compiled_behind, autograd = calls
    assert all(c["cuda_graphs"] and c["algo"] == "sac" for c in calls)
    assert (graphs["eval_every"], graphs["checkpoint_every"]) == (0, 0)
    assert compiled_behind["eval_every"] == compiled_behind["checkpoint_every"] == autograd["eval_every"] == 10000
    assert [c["compile"] for c in calls] == [False, True, False]
    assert [c["act_ahead"] for c in calls] == [True, False, True]
    assert [c["fused_update"] for c in calls] == [True, True, False]
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "sac heron: 1000 env steps/s over steps 10000-40960" in summary, summary
    assert "sac LeanRL: 500 env steps/s over steps 7000-20000 (26.0 s); its own figure 498" in summary, summary
    for label in ("heron", "heron-features-compiled-behind", "heron-features-autograd"):
        assert f"sac: {label} 1000, LeanRL 500: 2.00x" in summary, summary


def test_gpu_vs_leanrl_runs_atari_pong_on_both_sides(tmp_path):
    """ALGOS=atari: heron's PPO from Pong frames on ALE's vector env (--preset atari, 8 threads), then
    LeanRL's Atari script on its EnvPool and gym stand-ins (ALE's vector env under EnvPool's API)."""
    modes = ("graphs", "features-once-tf32")
    calls = _run_script(
        tmp_path,
        "gpu_vs_leanrl.sh",
        ALGOS="atari",
        HERON_MODES=" ".join(modes),
        ATARI_SECONDS="60",
        LEANRL_SECONDS="60",
    )
    assert [c["run_dir"] for c in calls] == [str(tmp_path / "runs" / f"vs-atari-{m}") for m in modes]
    for c in calls:
        assert c["algo"] == "ppo" and c["cuda_graphs"] and c["env_id"] == "PongNoFrameskip-v4"
        assert (c["env_backend"], c["num_envs"], c["num_steps"], c["torch_threads"]) == ("ale", 8, 128, 8)
    assert (calls[0]["eval_every"], calls[0]["checkpoint_every"]) == (0, 0)
    assert (calls[1]["eval_every"], calls[1]["checkpoint_every"]) == (250_000, 100_000)  # the preset's evaluations
    # "once": advantages computed once per rollout, as LeanRL's PPO; "tf32": its TF32 matrix products
    assert (calls[0]["recompute_adv"], calls[0]["precision"]) == (True, "32")
    assert (calls[1]["recompute_adv"], calls[1]["precision"]) == (False, "tf32")
    leanrl = (tmp_path / "calls.jsonl.leanrl").read_text().split()
    assert leanrl[1] == ".leanrl/leanrl/ppo_atari_envpool_torchcompile.py"  # (leanrl[0]: the stub)
    assert " ".join(leanrl[2:7]) == "--compile --cudagraphs --env-id Pong-v5 --total-timesteps"
    assert leanrl[-1].split("=", 1)[1].split(":")[0] == str(ROOT / "benchmarks" / "leanrl_stubs")


def test_envpool_stand_in_gives_leanrl_the_old_gym_api(tmp_path, monkeypatch):
    """benchmarks/leanrl_stubs/envpool: ALE's vector env under EnvPool's make and old Gym API, as
    LeanRL's Atari script reads it: obs from reset, (obs, clipped float32 reward, done, info with the
    raw reward, the game's end and lives) from step, env steps counted in $LEANRL_STEPS."""
    pytest.importorskip("ale_py")
    monkeypatch.setenv("LEANRL_STEPS", str(tmp_path / "steps.csv"))
    monkeypatch.setenv("LEANRL_EVERY", "8")
    stubs = ROOT / "benchmarks" / "leanrl_stubs"
    monkeypatch.syspath_prepend(str(stubs))
    for name in ("envpool", "gym"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    # the stand-ins leave sys.modules with the test: a later importorskip("envpool") must not find them
    loaded = set(sys.modules)
    try:
        import envpool
        import gym

        _play_pong_through_the_stand_in(envpool, gym, tmp_path)
    finally:
        for name in set(sys.modules) - loaded:
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(stubs)):
                del sys.modules[name]


def _play_pong_through_the_stand_in(envpool, gym, tmp_path):
    envs = envpool.make("Pong-v5", env_type="gym", num_envs=2, episodic_life=True, reward_clip=True, seed=1)
    assert isinstance(envs.action_space, gym.spaces.Discrete) and envs.action_space.n == 6
    wrapped = gym.Wrapper(envs)
    obs = wrapped.reset()
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    rewards = []
    for _ in range(300):  # Pong: the computer scores within the first few hundred steps
        obs, reward, done, info = wrapped.step(np.zeros(2, np.int64))
        assert reward.dtype == np.float32 and done.dtype == bool and obs.shape == (2, 4, 84, 84)
        assert set(info) >= {"reward", "terminated", "lives"}
        np.testing.assert_array_equal(reward, np.sign(info["reward"]))
        rewards.append(info["reward"])
    assert np.min(rewards) == -1  # a point lost
    envs.close()
    counted = [line.split(",")[1] for line in (tmp_path / "steps.csv").read_text().splitlines()]
    assert counted[:2] == ["8", "16"] and counted[-1] == "600"


def test_ppo_phases_account_for_each_iteration(tmp_path):
    """benchmarks/ppo_phases.py (for GPU machines: where PPO's time goes from Atari frames)
    wraps heron's PPO loop from outside: its phases must cover each iteration, with the env's
    steps counted apart from the acting around them."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "ppo_phases.py"),
            "--skip",
            "1",
            "--",
            "--preset",
            "debug",
            "--total-steps",
            "1024",
            "--num-envs",
            "2",
            "--num-steps",
            "64",
            "--eval-every",
            "0",
            "--checkpoint-every",
            "0",
            "--torch-threads",
            "1",
            "--progress",
            "none",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("7 iterations of 128 env steps"))
    rows = {line[:20].strip(): line.split() for line in lines[head + 2 : head + 8]}
    assert list(rows) == [
        "env steps",
        "acting and storing",
        "value passes",
        "advantages",
        "gradient steps",
        "after_step",
    ]
    shares = [float(r[-1].rstrip("%")) for r in rows.values()]
    assert abs(sum(shares) - 100) < 0.5 and all(s > 0 for s in shares[:5]), rows


def test_atari_pipeline_times_both_rollout_loops():
    """benchmarks/atari_pipeline.py (would two env halves stepped in turn pay?): both loops and the
    envs alone run and are reported, with their ratio."""
    pytest.importorskip("ale_py")
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "atari_pipeline.py"),
            "--device",
            "cpu",
            "--num-envs",
            "2",
            "--steps",
            "20",
            "--rounds",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("  ")]
    assert [" ".join(r[:-2]) for r in rows[:4]] == [
        "envs alone, 2 envs",
        "envs alone, 1 envs",
        "act, then step 2 envs",
        "two halves of 1 in turn",
    ]
    assert all(float(r[-2]) > 0 for r in rows[:4]) and rows[4][:3] == ["two", "halves", "/"]


def test_cpu_profile_splits_a_training_by_kind_of_work():
    """benchmarks/cpu_profile.py: the profiled window of a training, split into matrix products,
    other torch operators and what runs outside torch, the shares adding up."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "cpu_profile.py"),
            "--skip",
            "150",
            "--window",
            "100",
            "--",
            "td3",
            "--env-id",
            "Pendulum-v1",
            "--total-steps",
            "300",
            "--learning-starts",
            "100",
            "--eval-every",
            "0",
            "--checkpoint-every",
            "0",
            "--eval-episodes",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("100 profiled iterations"))
    shares = {
        line[:32].strip(): float(line.split()[-1].rstrip("%")) for line in lines[head + 1 :] if line.endswith("%")
    }
    assert {"matrix products", "outside torch (env, Python)", "other torch operators"} <= set(shares), shares
    assert abs(sum(shares.values()) - 100) < 0.5 and shares["matrix products"] > 0


def test_dreamer_v3_published_scores_are_the_last_tenth_of_each_run(tmp_path, capsys, monkeypatch):
    published = _script("dreamer_v3_published")
    runs = [
        {"task": "atari_pong", "seed": 0, "xs": [100, 500, 920, 1000], "ys": [-21, -10, 2, 4]},
        {"task": "atari_pong", "seed": 1, "xs": [300, 899, 950], "ys": [-21, 5, -6]},
    ]
    # the budget is the largest frame count (1000): the episodes from frame 900 on count
    assert published.final_scores(runs) == [3, -6]
    files: dict[str, list] = {}
    for bench, task in published.TASKS.values():  # every task of the suites gets the same two runs
        files.setdefault(bench, []).extend(dict(run, task=task) for run in runs)
    for bench, rows in files.items():
        with gzip.open(tmp_path / f"{bench}-dreamerv3.json.gz", "wt") as f:
            json.dump(rows, f)
    monkeypatch.setattr(sys, "argv", ["dreamer_v3_published.py", str(tmp_path)])
    published.main()
    assert "| PongNoFrameskip-v4 | atari100k-dreamerv3.json.gz | 2 | 1,000 | -1.5 ± 6.4 |" in capsys.readouterr().out


def test_dreamer_v3_same_step_puts_every_sheeprl_weight_on_its_heron_parameter(monkeypatch):
    """The step comparison copies sheeprl's weights into heron's agent by name: every parameter of
    heron's gets one of its shape, the joined input layers split, the GRU's inputs swapped."""
    import torch

    from heron.algos.dreamer_v3.config import Config
    from heron.algos.dreamer_v3.train import build

    monkeypatch.setattr(sys, "path", list(sys.path))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # the script sets them at import
        monkeypatch.setenv(var, "1")
    before = set(sys.modules)
    try:
        same = _script("dreamer_v3_same_step")
    finally:  # the benchmark modules it imports leave with the test
        for name in set(sys.modules) - before:
            if name.startswith("dreamer_"):
                del sys.modules[name]
    d, z, h, e, bins = 64, 256, 128, 64, 255
    mlp = {
        "_model.0.weight": (d, None),
        "_model.1.weight": (d,),
        "_model.1.bias": (d,),
        "_model.3.weight": (d, d),
        "_model.4.weight": (d,),
        "_model.4.bias": (d,),
    }

    def trunk(prefix, fan_in):
        return {prefix + k: (v[0], fan_in) if len(v) == 2 and v[1] is None else v for k, v in mlp.items()}

    for discrete, actions in ((True, 2), (False, 1)):
        shapes = {
            **trunk("world.encoder._forward_module.mlp_encoder.model.", 4),
            "world.rssm.initial_recurrent_state": (h,),
            "world.rssm.recurrent_model._forward_module.mlp._model.0.weight": (d, z + actions),
            "world.rssm.recurrent_model._forward_module.mlp._model.1.weight": (d,),
            "world.rssm.recurrent_model._forward_module.mlp._model.1.bias": (d,),
            "world.rssm.recurrent_model._forward_module.rnn.linear.weight": (3 * h, h + d),
            "world.rssm.recurrent_model._forward_module.rnn.layer_norm.weight": (3 * h,),
            "world.rssm.recurrent_model._forward_module.rnn.layer_norm.bias": (3 * h,),
            **{
                f"world.rssm.{m}._forward_module._model.{k}": s
                for m, fan_in in (("representation_model", h + e), ("transition_model", h))
                for k, s in (
                    ("0.weight", (128, fan_in)),
                    ("1.weight", (128,)),
                    ("1.bias", (128,)),
                    ("3.weight", (z, 128)),
                    ("3.bias", (z,)),
                )
            },
            **trunk("world.observation_model._forward_module.mlp_decoder.model.", z + h),
            "world.observation_model._forward_module.mlp_decoder.heads.0.weight": (4, d),
            "world.observation_model._forward_module.mlp_decoder.heads.0.bias": (4,),
            **trunk("world.reward_model._forward_module.", z + h),
            "world.reward_model._forward_module._model.6.weight": (bins, d),
            "world.reward_model._forward_module._model.6.bias": (bins,),
            **trunk("world.continue_model._forward_module.", z + h),
            "world.continue_model._forward_module._model.6.weight": (1, d),
            "world.continue_model._forward_module._model.6.bias": (1,),
            **trunk("actor._forward_module.model.", z + h),
            "actor._forward_module.mlp_heads.0.weight": (2 if discrete else 2 * actions, d),
            "actor._forward_module.mlp_heads.0.bias": (2 if discrete else 2 * actions,),
            **trunk("critic._forward_module.", z + h),
            "critic._forward_module._model.6.weight": (bins, d),
            "critic._forward_module._model.6.bias": (bins,),
        }
        sheeprl = {name: torch.randn(shape) for name, shape in shapes.items()}
        mapped = same.to_heron_names(sheeprl, z, h, 2)
        spaces = {
            "obs_spec": {"state": [[4], "float32"]},
            "cnn_keys": [],
            "mlp_keys": ["state"],
            "discrete": discrete,
            "action_dim": actions,
        }
        agent = build(Config(**same.SIZES["vector"]), spaces)
        assert {n: tuple(t.shape) for n, t in mapped.items()} == {
            n: tuple(p.shape) for n, p in agent.named_parameters() if not n.startswith("target_critic.")
        }
        gru = sheeprl["world.rssm.recurrent_model._forward_module.rnn.linear.weight"]  # sheeprl: cat(h, x)
        assert torch.equal(mapped["world.rssm.gru.linear.weight"], torch.cat([gru[:, h:], gru[:, :h]], 1))
        joined = sheeprl["world.rssm.recurrent_model._forward_module.mlp._model.0.weight"]  # cat(z, a)
        assert torch.equal(mapped["world.rssm.in_a.weight"], joined[:, z:])


def test_dreamer_learning_records_each_side_in_place_of_the_tasks_rows(tmp_path, monkeypatch):
    """--record writes a bin's figure per side (a --variant as a third column) from --record-from
    on, with the command that makes them (the kept runs' file, relative to the checkout), where the
    task's old rows were."""
    import argparse
    import csv

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))  # as when run as a script
    learning = _script("dreamer_learning_vs_sheeprl")
    path = tmp_path / "summaries.csv"
    path.write_text(
        "table,row,column,value,seeds,machine,recorded,command,note\n"
        'dreamer-v3-twohot,"Pendulum-v1 (old) | 1 | 1 | 0-1",heron,1,1,m,,c,n\n'
        "other,x,heron,2,1,m,,c,n\n"
    )
    args = argparse.Namespace(
        algo="dreamer_v3",
        task="pendulum",
        seeds=[1, 2],
        steps=2000,
        bin=1000,
        eval_every=2500,
        heron_flags="",
        sheeprl_flags="",
        variant="--twohot-space symlog",
        record_from=1000,
        skip_heron=False,
        skip_sheeprl=False,
        record_table="dreamer-v3-twohot",
        machine="m",
        runs=str(Path(learning.__file__).resolve().parent / "results" / "dreamer_curves.csv"),
    )
    side = {"mean": -700.0, "se": 12.25, "n": 2}
    rows = [{"steps": f"{lo}-{lo + 1000}", "heron": side, "sheeprl": side, "variant": side} for lo in (0, 1000)]
    had = "results_tables" in sys.modules
    try:
        learning.record(args, rows, path)
    finally:  # the module it imports leaves with the test
        if not had:
            sys.modules.pop("results_tables", None)
    got = list(csv.DictReader(path.open(newline="")))
    label = "Pendulum-v1 (vectors, continuous) | 2,000 | 2 + 2 + 2 | 1,000-2,000"
    assert [(r["table"], r["row"], r["column"], r["value"]) for r in got[:3]] == [
        ("dreamer-v3-twohot", label, side_name, "-700.0 ± 12.2")
        for side_name in ("heron", "sheeprl 0.8.4", "heron --twohot-space symlog")
    ]
    assert got[3]["table"] == "other" and len(got) == 4
    assert got[0]["command"] == (
        "python benchmarks/dreamer_learning_vs_sheeprl.py --algo dreamer_v3 --task pendulum "
        "--seeds 1 2 --steps 2000 --eval-every 2500 --bin 1000 "
        '--variant="--twohot-space symlog" --runs benchmarks/results/dreamer_curves.csv'
    )


def test_dreamer_learning_command_names_the_sides_it_skips(monkeypatch):
    """A table without a side is remade by a command that skips it: the recorded command says so."""
    import argparse

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    learning = _script("dreamer_learning_vs_sheeprl")
    args = argparse.Namespace(
        algo="dreamer_v3",
        task="cartpole",
        seeds=[1],
        steps=1000,
        bin=500,
        eval_every=5000,
        heron_flags="",
        sheeprl_flags="",
        variant="--world-lr 3e-4",
        skip_heron=False,
        skip_sheeprl=True,
    )
    assert learning.command_of(args) == (
        "python benchmarks/dreamer_learning_vs_sheeprl.py --algo dreamer_v3 "
        '--task cartpole --seeds 1 --steps 1000 --variant="--world-lr 3e-4" '
        "--skip-sheeprl"
    )


def test_dreamer_learning_keeps_runs_and_takes_them_instead_of_running_again(tmp_path, monkeypatch, capsys):
    """--runs keeps each finished run's returns; a later command with the same settings takes them
    from there (no process started) and gives the same table; other flags are other runs."""
    import argparse
    import csv

    learning = _script("dreamer_learning_vs_sheeprl")
    first, runs = tmp_path / "first", tmp_path / "curves.csv"
    (first / "heron_1").mkdir(parents=True)
    (first / "heron_1" / "metrics.csv").write_text(
        "step,metric,value\n200,charts/episodic_return,-1500.5\n400,charts/episodic_return,-1300.25\n"
        "400,losses/kl,1.0\n1200,charts/episodic_return,-900\n"
    )
    (first / "heron_1" / "eval.csv").write_text("step,mean_return\n2000,-700.5\n")
    (first / "sheeprl_1.log").write_text(
        "Rank-0: policy_step=200, reward_env_0=-1400.0\nRank-0: policy_step=1400, reward_env_0=[-800.5]\n"
    )
    for side in ("heron_1", "sheeprl_1"):
        (first / f"{side}.done").touch()
    common = [
        "--algo",
        "dreamer_v3",
        "--task",
        "pendulum",
        "--seeds",
        "1",
        "--steps",
        "2000",
        "--bin",
        "1000",
        "--runs",
        str(runs),
        "--machine",
        "m",
    ]

    def main(*argv):
        monkeypatch.setattr(sys, "argv", ["dreamer_learning_vs_sheeprl.py", *common, *argv])
        learning.main()
        return json.loads((Path(argv[argv.index("--out") + 1])).read_text())

    made = main("--work-dir", str(first), "--out", str(tmp_path / "first.json"), "--plot", str(tmp_path / "a.png"))
    kept = list(csv.DictReader(runs.open(newline="")))
    assert [(r["side"], r["seed"], r["train"], r["evals"]) for r in kept] == [
        ("heron", "1", "200:-1500.50 400:-1300.25 1200:-900.00", "2000:-700.50"),
        ("sheeprl", "1", "200:-1400.00 1400:-800.50", ""),
    ]
    assert kept[0]["command"].endswith("--task pendulum --seeds 1 --steps 2000 --bin 1000")

    started = []
    monkeypatch.setattr(learning, "run_jobs", lambda jobs, parallel: started.extend(jobs))
    again = main(
        "--work-dir",
        str(tmp_path / "second"),
        "--out",
        str(tmp_path / "second.json"),
        "--plot",
        str(tmp_path / "b.png"),
    )
    assert started == [] and "kept in" in capsys.readouterr().out
    assert again["table"] == made["table"]
    assert made["table"][0]["heron"] == {"mean": -1400.4, "se": 0.0, "n": 1}  # (-1500.5 - 1300.25) / 2
    assert made["table"][1]["sheeprl"] == {"mean": -800.5, "se": 0.0, "n": 1}
    args = argparse.Namespace(
        algo="dreamer_v3",
        task="pendulum",
        steps=2000,
        eval_every=5000,
        eval_episodes=10,
        heron_flags="--twohot-space symlog",
        sheeprl_flags="",
        variant="",
    )
    assert learning.run_key(args, "heron", 1) not in learning.load_runs(runs)
    assert learning.run_key(args, "sheeprl", 1) in learning.load_runs(runs)


def test_step_paths_refuses_what_it_cannot_time_and_reads_its_window(capsys):
    """benchmarks/step_paths.py: a learning phase shorter than two losses rows, or no rounds, is
    refused before any training; the window starts one row after --learning-starts."""
    step_paths = _script("step_paths")
    for argv in (["--total-steps", "2500", "--learning-starts", "2000", "--log-every", "500"], ["--rounds", "0"]):
        with pytest.raises(SystemExit) as exc:
            step_paths.parse_args(argv)
        assert exc.value.code == 2
    args = step_paths.parse_args(["--total-steps", "10000", "--learning-starts", "2000", "--log-every", "500"])
    assert step_paths.window(args) == (2500, 10000)
    capsys.readouterr()
