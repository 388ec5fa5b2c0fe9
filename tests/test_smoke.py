"""Every flag through the real code path at least once (seconds-long runs)."""

import csv

import pytest

import heron


def _metrics(run_dir):
    with open(f"{run_dir}/metrics.csv") as f:
        return {r["metric"] for r in csv.DictReader(f)}


SAC_METRICS = {
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/SPS",
    "losses/qf1_values",
    "losses/qf2_values",
    "losses/qf1_loss",
    "losses/qf2_loss",
    "losses/qf_loss",
    "losses/actor_loss",
    "losses/alpha",
    "losses/alpha_loss",
}


@pytest.mark.parametrize(
    "algo,flags",
    [
        ("sac", dict(obs_norm=True, max_grad_norm=1.0, lr_schedule="linear", gradient_steps=2, progress="log")),
        ("sac", dict(recurrent="lstm", sequence_length=6, burn_in=2, rnn_hidden_size=16, lr_schedule="cosine")),
        ("sac", dict(recurrent="gru", num_envs=2, vector_mode="async", sequence_length=4, rnn_hidden_size=16)),
        (
            "sac",
            dict(
                autotune=False,
                alpha=0.1,
                target_network_frequency=2,
                policy_frequency=1,
                buffer_device="cpu",
                target_entropy_scale=0.5,
                torch_threads=1,
                torch_deterministic=False,
                keep_checkpoints=1,
                checkpoint_every=200,
                eval_every=300,
            ),
        ),
        (
            "td3",
            dict(
                obs_norm=True,
                max_grad_norm=1.0,
                exploration_noise=0.2,
                policy_noise=0.1,
                noise_clip=0.3,
                num_envs=3,
                gradient_steps=2,
                policy_frequency=3,
                progress="bar",
                wandb_project="unused",
            ),
        ),
    ],
)
def test_flags(algo, flags, tiny, tmp_path):
    result = heron.train(algo, run_dir=str(tmp_path / "r"), **{**tiny, **flags})
    assert result["step"] >= tiny["total_steps"]
    names = _metrics(tmp_path / "r")
    expected = SAC_METRICS if algo == "sac" else SAC_METRICS - {"losses/alpha", "losses/alpha_loss"}
    if flags.get("autotune") is False:
        expected = expected - {"losses/alpha_loss"}
    assert expected <= names, expected - names
    if flags.get("keep_checkpoints") == 1:
        steps = sorted((tmp_path / "r" / "checkpoints").glob("step_*[0-9].pt"))
        buffers = sorted((tmp_path / "r" / "checkpoints").glob("step_*.buffer.pt"))
        assert len(steps) == 1 and len(buffers) == 1 and steps[0].name == "step_000000600.pt"
    if flags.get("eval_every"):
        assert (tmp_path / "r" / "eval.csv").read_text().count("\n") == 3  # header, 300, 600 (also the final one)
    heron.load(tmp_path / "r", device="cpu").predict([0.0, 1.0, 0.0])


def test_presets_debug_and_original(tmp_path):
    r = heron.train(
        "td3",
        presets=["debug", "original"],
        hidden_sizes=(32, 32),
        total_steps=400,
        learning_starts=200,
        progress="none",
        run_dir=str(tmp_path / "t"),
    )
    assert r["step"] == 400


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_compile_update_step(algo, tmp_path, tiny):
    r = heron.train(algo, compile=True, run_dir=str(tmp_path / "c"), **{**tiny, "total_steps": 300})
    assert r["step"] == 300


def test_capture_video_and_plot(tmp_path, tiny):
    pytest.importorskip("pygame")
    heron.train("sac", capture_video=True, run_dir=str(tmp_path / "v"), **tiny)
    videos = list((tmp_path / "v" / "videos").glob("*.mp4"))
    assert videos and videos[0].stat().st_size > 1000
    assert (tmp_path / "v" / "eval.csv").read_text().count("\n") == 2  # header and one final evaluation
    pytest.importorskip("matplotlib")
    from heron.plot import plot_runs

    out = plot_runs([str(tmp_path / "v")], str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").stat().st_size > 1000 and out.endswith("p.png")


def test_the_progress_bar_is_drawn_at_most_every_tenth_of_a_second_and_ends_full(tmp_path):
    from heron.runtime.logger import Logger

    logger = Logger(tmp_path, total_steps=5000, progress="bar", tensorboard=False)
    drawn = []
    update = logger._bar.update
    logger._bar.update = lambda task, **kw: (drawn.append(kw["completed"]), update(task, **kw))
    try:
        for step in range(1, 5001):
            logger.progress(step)
        assert drawn[0] == 1 and drawn[-1] == 5000  # the first step and the last are always drawn
        assert len(drawn) < 100  # not every step: 5,000 steps take far less than 10 s here
        assert logger._bar.tasks[0].completed == 5000
    finally:
        logger.close()
