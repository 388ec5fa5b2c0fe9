import numpy as np
import pytest
import torch
import toy_envs  # noqa: F401

import heron


def test_train_returns_summary_and_load_predicts_single_and_batch(tmp_path, tiny):
    result = heron.train("sac", run_dir=str(tmp_path / "r"), **tiny)
    assert result["step"] == 600 and result["env_id"] == "Pendulum-v1" and np.isfinite(result["mean_return"])
    policy = heron.load(tmp_path / "r", device="cpu")
    assert policy.step == 600
    single = policy.predict(np.zeros(3, np.float32))
    batch = policy.predict(np.zeros((5, 3), np.float32))
    assert single.shape == (1,) and batch.shape == (5, 1)
    assert np.all(np.abs(batch) <= 2.0)  # rescaled to Pendulum's bounds
    np.testing.assert_allclose(batch[0], single, atol=1e-6)  # deterministic
    with pytest.raises(ValueError):
        policy.predict(np.zeros((2, 4), np.float32))
    best = heron.load(tmp_path / "r", which="best", device="cpu")
    assert best.predict(np.zeros(3)).shape == (1,)


def test_loaded_policy_reproduces_the_training_evaluation(tmp_path, tiny):
    result = heron.train("td3", run_dir=str(tmp_path / "r"), **{**tiny, "eval_episodes": 2})
    from heron.runtime.episodes import EVAL_SEED_OFFSET, evaluate

    returns = evaluate(
        heron.load(tmp_path / "r", device="cpu"), "Pendulum-v1", 2, tiny.get("seed", 1) + EVAL_SEED_OFFSET
    )
    assert returns.mean() == pytest.approx(result["mean_return"])


def test_observation_normalization_statistics_travel_with_the_policy(tmp_path, tiny):
    heron.train("sac", run_dir=str(tmp_path / "r"), obs_norm=True, **tiny)
    state = torch.load(sorted((tmp_path / "r" / "checkpoints").glob("step_*[0-9].pt"))[-1], weights_only=True)
    mean = state["actor"]["encoder.norm.mean"]
    assert state["actor"]["encoder.norm.count"] > 500 and mean.abs().sum() > 0
    policy = heron.load(tmp_path / "r", device="cpu")
    assert torch.equal(policy.actor.encoder.norm.mean, mean)


def test_dict_observations_train_and_predict(tmp_path, tiny):
    heron.train("td3", **{**tiny, "env_id": "heron-test/DictObs-v0", "run_dir": str(tmp_path / "d")})
    assert heron.load(tmp_path / "d", device="cpu").predict(np.zeros(3, np.float32)).shape == (1,)


def test_unknown_algorithm_raises_heron_error():
    with pytest.raises(heron.HeronError, match="unknown algorithm"):
        heron.train("ddpg")


@pytest.mark.parametrize("ends", ["returns", "raises"])
def test_a_run_leaves_the_callers_process_settings_as_it_found_them(tmp_path, tiny, monkeypatch, ends):
    """heron.train sets torch's threads, the deterministic mode, cuDNN's flags, the SIGINT handler
    and CUBLAS_WORKSPACE_CONFIG for its run and seeds the global generators; a notebook (or the next
    test) gets its own back, also when the run ends in an exception."""
    import os
    import random
    import signal

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    threads = torch.get_num_threads()
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        signal.getsignal(signal.SIGINT),
    )
    other = 2 if threads == 1 else 1
    during = []
    random.seed(7), np.random.seed(7), torch.manual_seed(7)
    draws = (random.random(), np.random.rand(), torch.rand(1).item())  # what the caller draws next
    random.seed(7), np.random.seed(7), torch.manual_seed(7)

    def callback(_):
        during.append(
            (
                torch.get_num_threads(),
                torch.are_deterministic_algorithms_enabled(),
                torch.backends.cudnn.deterministic,
                os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
                signal.getsignal(signal.SIGINT) is before[3],
            )
        )
        if ends == "raises":
            raise RuntimeError("the caller's callback failed")

    try:
        if ends == "raises":
            with pytest.raises(RuntimeError, match="callback failed"):
                heron.train(
                    "td3",
                    run_dir=str(tmp_path / "r"),
                    callback=callback,
                    **{**tiny, "torch_threads": other, "torch_deterministic": True},
                )
        else:
            heron.train(
                "td3",
                run_dir=str(tmp_path / "r"),
                callback=callback,
                **{**tiny, "torch_threads": other, "torch_deterministic": True},
            )
        assert during == [(other, True, True, ":4096:8", False)]
        assert torch.get_num_threads() == threads
        assert (
            torch.are_deterministic_algorithms_enabled(),
            torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark,
            signal.getsignal(signal.SIGINT),
        ) == before
        assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
        assert (random.random(), np.random.rand(), torch.rand(1).item()) == draws
    finally:
        torch.set_num_threads(threads)
