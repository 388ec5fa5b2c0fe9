"""The guard in conftest.py (tests/process_state.py) names what a test leaves changed, and passes
what packages do once on import. Each case makes a change, checks that it is named, and undoes it
before the test ends (the guard runs around these tests too)."""

import os
import sys
import threading

import gymnasium as gym
import process_state
import pytest
import torch


def _changes(make, undo):
    before = process_state.snapshot()
    make()
    try:
        return process_state.differences(before, process_state.snapshot())
    finally:
        undo()


def test_a_stand_in_imported_from_a_folder_taken_off_sys_path_is_named(tmp_path, monkeypatch):
    (tmp_path / "envpool").mkdir()
    (tmp_path / "envpool" / "__init__.py").write_text("STAND_IN = True\n")

    def make():
        monkeypatch.syspath_prepend(str(tmp_path))
        import envpool  # noqa: F401

        monkeypatch.undo()  # sys.path as before: the module stays behind

    found = _changes(make, lambda: sys.modules.pop("envpool"))
    assert len(found) == 1 and found[0].startswith("sys.modules['envpool'] is ") and "would not find" in found[0]


def test_a_module_made_by_hand_or_removed_is_named():
    import types

    found = _changes(
        lambda: sys.modules.__setitem__("gym_fake_for_test", types.ModuleType("gym_fake_for_test")),
        lambda: sys.modules.pop("gym_fake_for_test"),
    )
    assert found == [
        "sys.modules['gym_fake_for_test'] was made by hand (no import spec) and left there: "
        "later imports of 'gym_fake_for_test' get it"
    ]
    module = sys.modules["process_state"]
    found = _changes(lambda: sys.modules.pop("process_state"), lambda: sys.modules.__setitem__("process_state", module))
    assert found == ["sys.modules['process_state'] was removed (a later import makes a second copy of its classes)"]


def test_torch_settings_environment_and_cwd_are_named(tmp_path):
    threads, cwd = torch.get_num_threads(), os.getcwd()

    def make():
        torch.set_num_threads(2 if threads == 1 else 1)
        torch.set_default_dtype(torch.float64)
        os.environ["HERON_GUARD_TEST"] = "1"
        os.chdir(tmp_path)

    def undo():
        torch.set_num_threads(threads)
        torch.set_default_dtype(torch.float32)
        del os.environ["HERON_GUARD_TEST"]
        os.chdir(cwd)

    found = "\n".join(_changes(make, undo))
    for what in (
        "torch.get_num_threads()",
        "torch.get_default_dtype(): torch.float32 -> torch.float64",
        "os.environ['HERON_GUARD_TEST']: None -> '1'",
        "os.getcwd()",
    ):
        assert what in found


def test_a_registered_id_is_named_but_a_plugins_string_entry_point_is_not():
    def make():
        gym.register("heron-test/GuardCase-v0", entry_point=lambda: gym.make("Pendulum-v1"))
        gym.register("heron-test/GuardPlugin-v0", entry_point="gymnasium.envs.classic_control:PendulumEnv")

    def undo():
        gym.registry.pop("heron-test/GuardCase-v0")
        gym.registry.pop("heron-test/GuardPlugin-v0")

    found = _changes(make, undo)
    assert len(found) == 1 and "ids added ['heron-test/GuardCase-v0']" in found[0]


def test_a_thread_left_running_is_named():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="left-behind", daemon=True)

    def undo():
        stop.set()
        thread.join()

    assert _changes(thread.start, undo) == ["thread 'left-behind' (daemon=True) still running"]


def test_a_signal_handler_is_named():
    import signal

    old = signal.getsignal(signal.SIGUSR1)
    found = _changes(lambda: signal.signal(signal.SIGUSR1, lambda *_: None), lambda: signal.signal(signal.SIGUSR1, old))
    assert len(found) == 1 and found[0].startswith("signal handler for SIGUSR1")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_child_process_left_running_is_named():
    import subprocess

    child = None

    def make():
        nonlocal child
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    def undo():
        child.kill()
        child.wait()

    found = _changes(make, undo)
    assert len(found) == 1 and found[0].startswith(f"child process {child.pid} still running")
