
import pytest


# Small, fast settings shared by smoke tests (a few seconds per run on 2 cores).
TINY = dict(env_id="Pendulum-v1", total_steps=600, learning_starts=200, batch_size=32, buffer_size=2000,
            hidden_sizes=(32, 32), eval_every=0, eval_episodes=1, log_every=100, progress="none")


@pytest.fixture
def tiny():
    return dict(TINY)
