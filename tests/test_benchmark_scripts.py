"""What the side-by-side scripts in benchmarks/ must get right without training anything: the
peer's settings built from heron's resolved config (a silent mismatch would compare unlike runs),
and the reuse of a heron run made elsewhere only when it learns as the script's config would."""

import importlib.util
from pathlib import Path

import pytest
import yaml

from heron.config import to_dict

ROOT = Path(__file__).resolve().parent.parent


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def curves():
    return _script("offpolicy_curves_vs_sb3")


def _args(curves, tmp_path, *extra):
    return curves.parse_args(["--env-id", "Pendulum-v1", "--total-steps", "20000", "--out", str(tmp_path), *extra])


def test_sb3_settings_follow_heron_td3_preset(curves, tmp_path):
    args = _args(curves, tmp_path, "--set", "gamma=0.98", "hidden_sizes=400,300")
    settings = curves.sb3_settings(curves.heron_config(args, 1, tmp_path))
    assert settings == dict(learning_rate=3e-4, buffer_size=1_000_000, learning_starts=25_000, batch_size=256,
                            tau=0.005, gamma=0.98, train_freq=1, gradient_steps=1,
                            policy_kwargs=dict(net_arch=[400, 300]), policy_delay=2, target_policy_noise=0.2,
                            target_noise_clip=0.5, exploration_noise=0.1)


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
            (run_dir / "eval.csv").write_text("step,mean_return,std_return,episodes\n"
                                              + "".join(f"{st},{r},0,10\n" for st, r in rows))
    png = tmp_path / "curves.png"
    argv = ["--env-id", "Pendulum-v1", "--total-steps", "20000", "--out", str(tmp_path), "--seeds", "1", "2",
            "--report-only", "--plot", str(png)]
    assert curves.main(argv) == 0
    out = capsys.readouterr().out
    assert "| 20,000 | 150 ± 50 | 400 ± 0 | 100, 200 | 400, - |" in out
    # the summary holds only finished runs (SB3 seed 2 is left out), and one SB3 seed gives no p
    assert "| final evaluation | 150 ± 50 (2) | 400 ± 0 (1) |  |" in out
    assert png.stat().st_size > 10_000


def test_permutation_p_draws_random_splits_past_the_exact_limit(curves):
    heron, sb3 = [1.0, 2.0, 3.0, 4.0, 5.0], [3.0, 4.0, 5.0, 6.0, 7.0]
    exact = curves.permutation_p(heron, sb3)  # C(10, 5) = 252 splits: 32 as far apart
    assert exact == pytest.approx(32 / 252)
    assert abs(curves.permutation_p(heron, sb3, exact_up_to=251) - exact) < 0.05  # 251 random splits
    # 11 + 11 seeds (705,432 splits, past the default limit), fully apart: exactly 2 / 705,432
    assert curves.permutation_p(list(range(11)), list(range(100, 111))) < 1e-3


def test_plot_with_nothing_to_draw_is_a_one_line_refusal(curves, tmp_path, capsys):
    argv = ["--env-id", "Pendulum-v1", "--total-steps", "20000", "--out", str(tmp_path), "--report-only",
            "--plot", str(tmp_path / "curves.png")]
    assert curves.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["offpolicy_curves_vs_sb3: --plot: nothing to plot: no evaluations"]
    assert not (tmp_path / "curves.png").exists()
