"""The ways a run or a command ends other than normally, each with its exit code in the CLI.

* ``HeronError``: bad input (an unknown env, flag or algorithm, an impossible value, an unsupported
  space, a corrupt checkpoint): one line, exit code 2, nothing already saved lost.
* ``Fault``: a run ended by something other than bad input, after keeping what can be kept
  (docs/guide/runs.md, "Faults and what heron does"): ``Diverged`` exits 3, ``EnvCrashed`` and
  ``WriteFailed`` 1. A stop request (SIGINT/SIGTERM) exits 130.

This module imports nothing from heron, so that any module can raise these.
"""

from __future__ import annotations

import re


class HeronError(Exception):
    """A user error: bad input, an impossible value, a missing file. The CLI prints it on one line
    and exits with code 2; the Python API lets it propagate."""


class Fault(Exception):
    """A run ended by a fault (not bad input); the message is one line."""

    exit_code = 1


class Diverged(Fault):
    """A loss, gradient norm or parameter became NaN or infinite."""

    exit_code = 3


class EnvCrashed(Fault):
    """An environment raised, or its worker process died."""


class WriteFailed(Fault):
    """A checkpoint or log could not be written (disk full, I/O error)."""


class Interrupted(Exception):
    """Training stopped by SIGINT/SIGTERM after a checkpoint of the current step was written (exit
    code 130)."""


def install_hint(extra: str) -> str:
    """How to install one of heron's optional extras: from heron's checkout, or the packages it
    names (read from the installed metadata, so that the two never disagree)."""
    from importlib import metadata

    try:
        requirements = metadata.requires("heron") or []
    except metadata.PackageNotFoundError:  # running from a checkout that is not installed
        requirements = []
    marker = re.compile(r"extra\s*==\s*['\"]" + re.escape(extra) + r"['\"]")
    packages = [r.split(";")[0].strip() for r in requirements if marker.search(r)]
    hint = f"pip install -e '.[{extra}]' in heron's checkout"
    return hint + (
        f", or: pip install {' '.join(repr(p) if any(c in p for c in '[<>=') else p for p in packages)}"
        if packages
        else ""
    )


def first_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message (200 characters at most)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200]}" if text else type(exc).__name__
