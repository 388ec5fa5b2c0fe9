"""heron.runtime.cores: other processes' load from /proc, the automatic thread count, and the
governor that follows the load during a run."""

import os
import subprocess
import sys
import time

import pytest
import torch

from heron.runtime import cores

linux = pytest.mark.skipif(
    not os.path.exists("/proc/stat") or not hasattr(os, "sched_setaffinity"), reason="reads Linux's /proc"
)


def test_other_load_is_busy_ticks_less_this_process_over_the_window(monkeypatch):
    ticks = iter([(1000, 4000), (1300, 4400)])  # (busy, total) ticks of two cores
    own = iter([300, 450])
    monkeypatch.setattr(cores, "_cpu_ticks", lambda cpus: next(ticks))
    monkeypatch.setattr(cores, "_own_ticks", lambda: next(own))
    meter = cores.LoadMeter([0, 1])
    # 300 of the 400 ticks busy, 150 of them this process's: 150 / 400 of two cores
    assert meter.others() == pytest.approx(0.75)


def test_a_core_others_use_part_of_the_time_counts_as_taken():
    assert [cores.busy_cores(x) for x in (None, 0.0, 0.35, 0.45, 1.0, 1.35, 1.5)] == [0, 0, 0, 1, 1, 1, 2]


def test_automatic_threads_leave_out_busy_cores_ranks_and_async_workers(monkeypatch):
    monkeypatch.setattr(cores, "usable_cpus", lambda: list(range(8)))
    assert cores.choose_threads(3, 4, "async", 2, busy=5) == 3  # asked for: kept
    assert cores.choose_threads(0, 1, "sync") == 4  # at most 4
    assert cores.choose_threads(0, 1, "sync", busy=6) == 2
    assert cores.choose_threads(0, 2, "async", 2, busy=1) == 1  # 8 // 2 ranks - 2 workers - 1 busy
    assert cores.choose_threads(0, 1, "sync", busy=9) == 1  # never below one


class _Readings:
    def __init__(self, values):
        self.values, self.cpus = list(values), [0, 1]

    def others(self):
        return self.values.pop(0)


@pytest.fixture
def clock(monkeypatch):
    """The governor's clock, moved by hand; torch's thread count restored afterwards."""
    now, before = [0.0], torch.get_num_threads()
    monkeypatch.setattr(cores, "_now", lambda: now[0])
    yield now
    torch.set_num_threads(before)


def test_governor_changes_the_count_only_when_two_readings_agree(clock):
    torch.set_num_threads(2)
    gov = cores.ThreadGovernor(ceiling=2)
    gov.meter = _Readings([1.0, 0.0, 1.0, 1.2, 0.1, 0.0])
    notes, threads = [], []
    for _ in range(6):
        assert gov.poll() is None  # nothing read before the window has passed
        clock[0] += cores.WINDOW
        notes.append(gov.poll())
        threads.append(torch.get_num_threads())
    assert [n is not None for n in notes] == [False, False, False, True, False, True]
    assert threads == [2, 2, 2, 1, 1, 2]
    assert "2 -> 1" in notes[3] and "1.2 of 2 cores busy" in notes[3] and "1 -> 2" in notes[5]


def test_governor_leaves_the_async_env_workers_their_cores(clock):
    torch.set_num_threads(2)
    gov = cores.ThreadGovernor(ceiling=2, workers=2)
    gov.meter = _Readings([0.2, 0.2, 1.0, 1.0])
    gov.meter.cpus = [0, 1, 2, 3]
    threads = []
    for _ in range(4):
        clock[0] += cores.WINDOW
        gov.poll()
        threads.append(torch.get_num_threads())
    assert threads == [2, 2, 2, 1]  # 4 cores - 2 workers - 1 busy


def test_governor_never_goes_above_its_ceiling(clock):
    torch.set_num_threads(1)
    gov = cores.ThreadGovernor(ceiling=1)
    gov.meter = _Readings([0.0, 0.0, 0.0])
    for _ in range(3):
        clock[0] += cores.WINDOW
        assert gov.poll() is None and torch.get_num_threads() == 1


def _spin(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


@linux
def test_a_busy_process_on_this_core_reads_as_other_load_and_this_runs_own_work_does_not():
    saved = os.sched_getaffinity(0)
    core = min(saved)
    os.sched_setaffinity(0, {core})
    spin = [sys.executable, "-c", "while True: pass"]  # inherits the one core
    child = stranger = None
    try:
        meter = cores.LoadMeter([core])
        time.sleep(0.5)
        if meter.others() > 0.3:  # what this test tells apart needs the core to itself when it idles
            pytest.skip("another process keeps this core busy (a training beside the tests)")
        _spin(0.5)  # this process keeps the core busy itself
        assert meter.others() < 0.5
        child = subprocess.Popen(spin)  # a process of this run's (an async env worker's place)
        time.sleep(0.3)  # its start-up
        meter.others()
        time.sleep(0.7)
        assert meter.others() < 0.5
        child.kill()
        child.wait()
        child = None
        # not ours: started by a shell that exits at once, so the spinner is nobody's child here
        out = subprocess.run(
            ["sh", "-c", '"$@" >/dev/null 2>&1 & echo $!', "sh", *spin], capture_output=True, text=True, check=True
        ).stdout
        stranger = int(out)
        time.sleep(0.3)
        meter.others()
        time.sleep(0.7)
        assert meter.others() > 0.7
    finally:
        if child is not None:
            child.kill()
            child.wait()
        if stranger is not None:
            os.kill(stranger, 9)
        os.sched_setaffinity(0, saved)


def test_a_run_starts_with_the_free_cores_and_says_why(monkeypatch, tmp_path, tiny, capsys):
    import heron

    before = torch.get_num_threads()
    monkeypatch.setattr(cores, "usable_cpus", lambda: [0, 1])
    monkeypatch.setattr(cores, "others_now", lambda: 0.9)
    during = []  # the count the run trains with, read at its final evaluation
    try:
        torch.set_num_threads(2)
        heron.train(
            "td3",
            run_dir=str(tmp_path / "busy"),
            callback=lambda _: during.append(torch.get_num_threads()),
            **{**tiny, "progress": "log"},
        )
        assert during == [1] and torch.get_num_threads() == 2  # the caller's count back once it returned
        assert "note: other processes keep 0.9 of 2 cores busy: 1 torch thread(s), not 2" in capsys.readouterr().out
        monkeypatch.setattr(cores, "others_now", lambda: pytest.fail("a fixed count reads no load"))
        heron.train(
            "td3",
            run_dir=str(tmp_path / "fixed"),
            callback=lambda _: during.append(torch.get_num_threads()),
            **{**tiny, "torch_threads": 1, "progress": "log"},
        )
        assert during == [1, 1] and torch.get_num_threads() == 2 and "busy" not in capsys.readouterr().out
    finally:
        torch.set_num_threads(before)
