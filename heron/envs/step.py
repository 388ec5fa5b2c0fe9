"""What one step of heron's vector envs returns (``heron.envs.make.VecEnv``, ``heron.envs.atari``'s
EnvPool): the layout every algorithm's loop reads, described in ``heron.envs.make``; and how an
env's own failure reaches the run (``env_call``: an ``EnvCrashed`` naming the env)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from heron.errors import EnvCrashed, Fault, HeronError, first_line


@dataclass
class Step:
    obs: np.ndarray  # [N, *obs_shape] what to act on next (first obs of a new episode where one ended)
    next_obs: np.ndarray  # [N, *obs_shape] the true next observation (final obs where an episode ended)
    rewards: np.ndarray  # [N] float32
    terminated: np.ndarray  # [N] bool: the MDP ended; no bootstrap
    truncated: np.ndarray  # [N] bool: cut by a time limit; bootstrap from next_obs
    episodes: list[tuple[int, float, int]] = field(default_factory=list)  # (env, return, length) ended
    # [N] bool, or None when every row is one: False where the row is no transition (the step after an
    # episode's end in a next-step autoreset vector env, which only reset that env: heron.envs.native)
    valid: np.ndarray | None = None
    # [N] bool, or None when it is where an episode ended (terminated | truncated): where ``obs`` begins
    # an episode. A next-step autoreset env's episodes begin at its reset rows, not where they ended
    started: np.ndarray | None = None


def env_call(env_id: str, what: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, an env's step or reset: an exception from it (the env raised, its
    worker process died) becomes EnvCrashed naming the env; heron's own errors pass through."""
    try:
        return fn(*args, **kwargs)
    except (HeronError, Fault, KeyboardInterrupt):
        raise
    except Exception as exc:
        died = isinstance(exc, (EOFError, BrokenPipeError, ConnectionResetError))
        reason = "its worker process died" if died else first_line(exc)
        raise EnvCrashed(f"env {env_id} crashed in {what}: {reason}") from exc
