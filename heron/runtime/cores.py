"""Cores for torch's intra-op threads (``--torch-threads 0``): how many of this process's cores
other processes keep busy, and a thread count that follows it during a run.

torch's intra-op threads meet at a barrier after each operation. When one of them shares a core
with another busy process, every barrier waits for the scheduler to run that thread again, a
time slice far longer than a 256-wide layer takes. A SAC or TD3 update on a 2-core machine with
one other training on it became many times slower that way (two threads); with one thread it stays
at full speed on the free core. So the automatic count leaves out the cores others are using,
when the run starts and, through ``ThreadGovernor``, while it runs.

The load is read from Linux's /proc (elsewhere nothing is measured and the count is the cores').
Busy time of the cores this process may run on, less this run's own (all threads of this process
and of its descendants, such as async env workers), over a window: what other processes used, in
cores.
"""

from __future__ import annotations

import os
import time

import torch

MAX_THREADS = 4  # small RL networks gain little beyond this
BUSY = 0.4  # a core another process uses this much of (time-sliced) is not free
WINDOW = 5.0  # seconds of load per governor reading; a change needs two readings in a row
_now = time.monotonic  # the governor's clock (tests replace it)
_STAT_FIELDS = 8  # /proc/stat: user nice system idle iowait irq softirq steal (guest is in user)


def usable_cpus() -> list[int]:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _cpu_ticks(cpus: list[int]) -> tuple[int, int] | None:
    """(busy, total) clock ticks of these cores since boot, or None without /proc/stat."""
    wanted, busy, total = {f"cpu{c}" for c in cpus}, 0, 0
    try:
        with open("/proc/stat") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] in wanted:
                    ticks = [int(v) for v in fields[1 : 1 + _STAT_FIELDS]]
                    total += sum(ticks)
                    busy += sum(ticks) - ticks[3] - ticks[4]  # less idle and iowait
    except (OSError, ValueError, IndexError):
        return None
    return (busy, total) if total else None


def _proc_ticks(pid: int | str, reaped: bool = False) -> int:
    """utime + stime of one process (fields 14 and 15 of proc(5)), plus cutime + cstime (its
    children that ended and were waited for) when ``reaped``; 0 when it has gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the command name may hold spaces
        return sum(int(v) for v in fields[11 : 15 if reaped else 13])
    except (OSError, ValueError, IndexError):
        return 0


def _children(pid: int | str) -> list[str]:
    """Live child processes of ``pid`` (any of its threads may have started them)."""
    found: list[str] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += f.read().split()
    except OSError:
        pass
    return found


def _own_ticks() -> int | None:
    """Clock ticks this run has used, user and system: this process (every thread of it), the
    processes it started that still run (async env workers and theirs) and those that ended."""
    if not os.path.exists("/proc/self/stat"):
        return None
    total, todo = _proc_ticks("self", reaped=True), _children("self")
    while todo:
        pid = todo.pop()
        total += _proc_ticks(pid, reaped=True)
        todo += _children(pid)
    return total


class LoadMeter:
    """``others()``: the cores (of ``usable_cpus``) that other processes kept busy since the previous
    reading, on average, or None where it cannot be measured."""

    def __init__(self, cpus: list[int] | None = None):
        self.cpus = cpus or usable_cpus()
        self.last, self.since = self._read(), time.monotonic()

    def _read(self) -> tuple[int, int, int] | None:
        cpu, own = _cpu_ticks(self.cpus), _own_ticks()
        return None if cpu is None or own is None else (*cpu, own)

    def elapsed(self) -> float:
        return time.monotonic() - self.since

    def others(self) -> float | None:
        now = self._read()
        last, self.last, self.since = self.last, now, time.monotonic()
        if now is None or last is None or now[1] <= last[1]:
            return None
        busy = (now[0] - last[0]) - (now[2] - last[2])
        return max(0.0, busy) / (now[1] - last[1]) * len(self.cpus)


def busy_cores(others: float | None) -> int:
    """Whole cores taken by ``others`` (a core used 40% of the time by another process is taken)."""
    return 0 if others is None else int(others + 1 - BUSY)


# Started when heron is imported: by the time a run opens (torch's import alone takes a second or
# two), the window shows what else is running without making the run wait for a measurement.
_STARTUP = LoadMeter()


def others_now(min_window: float = 0.25) -> float | None:
    """Other processes' load, in cores, over the time since the last reading (at least
    ``min_window`` seconds: the rest is waited)."""
    wait = min_window - _STARTUP.elapsed()
    if wait > 0:
        time.sleep(wait)
    return _STARTUP.others()


def env_workers(num_envs: int, vector_mode: str) -> int:
    """Cores a rank's env workers keep: one per env in async subprocesses, none in process."""
    return num_envs if vector_mode == "async" else 0


def choose_threads(requested: int, num_envs: int, vector_mode: str, local_ranks: int = 1, busy: int = 0) -> int:
    """Intra-op threads: ``requested`` when it is > 0, else one per free core, at most MAX_THREADS.
    The cores are shared among the ranks on this machine, then each rank's async env workers take
    theirs (``num_envs``: this rank's envs), and ``busy`` cores are kept by other processes."""
    if requested > 0:
        return requested
    free = len(usable_cpus()) // max(local_ranks, 1) - env_workers(num_envs, vector_mode) - busy
    return max(1, min(free, MAX_THREADS))


class ThreadGovernor:
    """``--torch-threads 0`` during a run: ``poll()`` (cheap; once per env step) reads the load every
    WINDOW seconds and sets torch's thread count to the free cores, at most ``ceiling`` (the count
    on an idle machine), when two readings in a row agree. Returns a note when it changed the count.
    ``workers``: cores this run's async env workers keep (their ticks count as the run's own).

    Only for one rank per machine: other ranks' processes would read as other load."""

    def __init__(self, ceiling: int, workers: int = 0):
        self.ceiling, self.workers, self.meter = ceiling, workers, LoadMeter()
        self.next_reading = _now() + WINDOW
        self.pending: int | None = None

    def poll(self) -> str | None:
        now = _now()
        if now < self.next_reading:
            return None
        self.next_reading = now + WINDOW
        others = self.meter.others()
        if others is None:
            return None
        want = max(1, min(self.ceiling, len(self.meter.cpus) - self.workers - busy_cores(others)))
        have = torch.get_num_threads()
        if want == have or self.pending != want:
            self.pending = None if want == have else want
            return None
        self.pending = None
        torch.set_num_threads(want)
        why = (
            f"other processes keep {others:.1f} of {len(self.meter.cpus)} cores busy, and a torch thread "
            "that shares a core stalls every operation"
            if want < have
            else "the other processes' load has gone"
        )
        return (
            f"torch threads {have} -> {want}: {why} (--torch-threads N fixes the count; the float results "
            "of a run depend on it)"
        )
