"""Allocator settings for training processes.

glibc serves every allocation above 32 MiB with a fresh ``mmap`` and unmaps it on free, so a
training step that builds and drops large activations (DreamerV2 decodes 800 64x64 images per
step) page-faults its whole working set in again at every step, a large part of the step time
on a CPU. ``keep_freed_memory()`` makes glibc serve those from its heap and keep what is freed, so
that after the first step the same pages are reused. The process's peak footprint is unchanged;
it is just not handed back between steps. PPO on Atari frames, whose minibatch activations are tens
of MB, page-faulted thousands of times per vector step on a CPU without it, and its vector steps
were measurably longer.

The ``heron`` command sets it for its own process (``heron.cli.entry``). ``heron.train()`` does not:
glibc cannot report these settings, so a library call could not put the caller's back. A script
that trains through the API in a process of its own can call ``keep_freed_memory()`` first."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_done = False


def keep_freed_memory() -> bool:
    """Disable glibc's mmap for large blocks and heap trimming (Linux/glibc only; a no-op
    elsewhere). Returns whether it took effect."""
    global _done
    if _done or not sys.platform.startswith("linux"):
        return _done
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
    except (OSError, AttributeError):  # musl or another libc without mallopt
        return False
    _done = bool(ok)
    return _done
