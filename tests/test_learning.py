"""Learning inside the suite: SAC and TD3 solve Pendulum-v1 within 10,000 steps, two thirds of
``--preset pendulum``'s 15,000 (mean deterministic evaluation >= -200 over 30 episodes with fixed
start seeds; SB3 and CleanRL reach about -110 here; seeds 1-3 of each scored -135 to -145 at 10,000,
docs/benchmarks/index.md). Ten episodes are too few: their start states happened to be hard ones, where
even a near-optimal policy scores about -180."""

import pytest
import toy_envs  # noqa: F401 (registers heron-test/ envs at import, as the suite's other modules do)

import heron


@pytest.mark.learning
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_pendulum(algo, tmp_path):
    result = heron.train(algo, presets=["pendulum"], total_steps=10_000, progress="none", run_dir=str(tmp_path / algo))
    assert result["step"] == 10_000
    assert result["mean_return"] >= -200, result


@pytest.mark.learning
@pytest.mark.parametrize(
    "presets,flags",
    [
        # on-policy, the zoo's CartPole block: by two processes in test_torchrun.py. In bf16-mixed it
        # solves CartPole too (500.0; one process and two), checked by hand: the suite cannot spare a minute
        (["classic"], {"mode": "off-policy"}),
        (["classic", "recurrent"], {}),  # LSTM
    ],
    ids=["off-policy", "lstm"],
)
def test_ppo_cartpole(presets, flags, tmp_path):
    """CartPole-v1 solved within 100k steps (100,096: whole 256-step iterations): mean
    deterministic evaluation >= 475 over 10 episodes. SB3 with the zoo settings reaches 500 there."""
    result = heron.train("ppo", presets=presets, progress="none", eval_every=0, run_dir=str(tmp_path / "p"), **flags)
    assert result["step"] <= 100_096
    assert result["mean_return"] >= 475, result


@pytest.mark.learning
def test_dreamer_v2_two_goals(tmp_path):
    """DreamerV2 from vectors on heron-test/TwoGoals-v0 (tests/toy_envs.py: walk to the end of a
    corridor that the observation names; +1 there, -1 at the other end). A random policy scores
    0.02 +- 0.86. With these settings seeds 0-9 scored 0.9-1.0 over 10 deterministic episodes at
    1,200 steps (about 30 s each here), with either --lambda-rewards (current: nine 1.0 and one
    0.9; next: ten 1.0), so the check asks for >= 0.8. The faster world-model rate
    and the larger entropy bonus keep the actor from settling on one direction before the model
    knows both ends (at a world-model rate of 3e-4 and an entropy bonus of 3e-3, 4 of 6 seeds
    learned). A short episode is 5 replay entries, so sequences run across episodes
    (--buffer-type sequential)."""
    result = heron.train(
        "dreamer_v2",
        env_id="heron-test/TwoGoals-v0",
        total_steps=1200,
        learning_starts=500,
        pretrain_steps=100,
        train_every=2,
        per_rank_batch_size=16,
        sequence_length=16,
        buffer_type="sequential",
        hidden_size=64,
        recurrent_state_size=64,
        dense_units=64,
        mlp_layers=2,
        stochastic_size=8,
        discrete_size=8,
        use_continues=True,
        gamma=0.9,
        critic_target_update_freq=20,
        world_lr=1e-3,
        actor_lr=3e-4,
        critic_lr=3e-4,
        actor_ent_coef=3e-2,
        eval_every=0,
        eval_episodes=10,
        progress="none",
        run_dir=str(tmp_path / "d"),
    )
    assert result["step"] == 1200
    assert result["mean_return"] >= 0.8, result


@pytest.mark.learning
def test_dreamer_v3_two_goals(tmp_path):
    """DreamerV3 on the same corridor as DreamerV2 above, with its own losses and heads, one gradient
    step every 2 env steps. At the paper's learning rates 2 of 3 seeds (0-2) failed to learn both ends
    in 1,200 steps (1.0, 0.4, -0.6); with the rates of the DreamerV2 check (world model 1e-3, actor and
    critic 3e-4) seeds 0-3 all scored 1.0 over 10 deterministic episodes (50-80 s each here), so the
    check asks for >= 0.8."""
    result = heron.train(
        "dreamer_v3",
        env_id="heron-test/TwoGoals-v0",
        total_steps=1200,
        learning_starts=500,
        pretrain_steps=100,
        replay_ratio=0.5,
        per_rank_batch_size=16,
        sequence_length=16,
        buffer_type="sequential",
        hidden_size=64,
        recurrent_state_size=64,
        dense_units=64,
        mlp_layers=2,
        stochastic_size=8,
        discrete_size=8,
        gamma=0.9,
        world_lr=1e-3,
        actor_lr=3e-4,
        critic_lr=3e-4,
        eval_every=0,
        eval_episodes=10,
        progress="none",
        run_dir=str(tmp_path / "d"),
    )
    assert result["step"] == 1200
    assert result["mean_return"] >= 0.8, result


@pytest.mark.learning
def test_dreamer_v2_cartpole(tmp_path):
    """DreamerV2 from CartPole-v1's vectors, the model of the sheeprl comparison (docs/benchmarks/index.md:
    dense 64 x 2, 16 x 16 latents, GRU 128, continue model) with shorter windows (8 x 32) and one
    gradient step per env step: 800 random steps, 100 pretraining steps, 1,500 steps in all (about
    90 s on one core). Deterministic evaluation over 10 episodes, seeds 0-4: 372, 353, 286, 425, 277.
    Before heron's DreamerV2 was aligned with sheeprl's and the official one, it scored 129, 209,
    184, 336, 215 with the same settings and its sequential buffer (its default episode buffer did
    far worse: CartPole's first episodes are shorter than a window), so the check asks for >= 250
    on seed 1 (353 against 209). It runs on heron's default replay (sequential)."""
    result = heron.train(
        "dreamer_v2",
        env_id="CartPole-v1",
        total_steps=1500,
        learning_starts=800,
        pretrain_steps=100,
        train_every=1,
        per_rank_batch_size=8,
        sequence_length=32,
        hidden_size=128,
        recurrent_state_size=128,
        dense_units=64,
        mlp_layers=2,
        stochastic_size=16,
        discrete_size=16,
        use_continues=True,
        eval_every=0,
        eval_episodes=10,
        torch_threads=1,
        progress="none",
        seed=1,
        run_dir=str(tmp_path / "d"),
    )
    assert result["step"] == 1500
    assert result["mean_return"] >= 250, result
