import os

import process_state
import pytest


def pytest_configure(config):
    """Under pytest-xdist (`.ci/run` uses `-n 2`) each worker gets its own share of the cores, so a
    training in one worker never competes with the other for a core: heron sizes its torch threads
    (and a child process its own) from this affinity, and two-thread torch stalls when a core it
    counted on is taken."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker and count > 1 and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) >= count:
            os.sched_setaffinity(0, cores[int(worker.removeprefix("gw")) % count :: count])


# Small, fast settings shared by smoke tests (a few seconds per run on 2 cores).
TINY = dict(
    env_id="Pendulum-v1",
    total_steps=600,
    learning_starts=200,
    batch_size=32,
    buffer_size=2000,
    hidden_sizes=(32, 32),
    eval_every=0,
    eval_episodes=1,
    log_every=100,
    progress="none",
)


@pytest.fixture
def tiny():
    return dict(TINY)


# -- every test leaves the process as it found it (tests/process_state.py) ----------------------
_STATE_KEY = pytest.StashKey()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_STATE_KEY] = process_state.snapshot()
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    before = item.stash.get(_STATE_KEY, None)
    if before is not None:
        changed = process_state.differences(before, process_state.snapshot())
        if changed:
            raise AssertionError(
                "the test left process-wide state changed (tests/process_state.py):\n  " + "\n  ".join(changed)
            )
    return result


# -- the order: pytest-randomly shuffles it on every run ------------------------------------------
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """After the shuffle, the learning tests (the longest, a minute or more each) go first, in their
    shuffled order, so that pytest-xdist's workers never wait on one started last."""
    items.sort(key=lambda item: item.get_closest_marker("learning") is None)


def pytest_terminal_summary(terminalreporter, config):
    seed = getattr(config.option, "randomly_seed", None)
    if isinstance(seed, int) and config.pluginmanager.hasplugin("randomly"):
        terminalreporter.write_line(
            f"test order: pytest-randomly seed {seed}; "
            f"this order again: python -m pytest -p randomly --randomly-seed={seed} ..."
        )
