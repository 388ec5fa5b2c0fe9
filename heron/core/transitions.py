"""What one step of heron's vector envs returns (``heron.core.envs.VecEnv``, ``heron.core.atari``'s
EnvPool): the layout every algorithm's loop reads, described in ``heron.core.envs``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Step:
    obs: np.ndarray  # [N, *obs_shape] what to act on next (first obs of a new episode where one ended)
    next_obs: np.ndarray  # [N, *obs_shape] the true next observation (final obs where an episode ended)
    rewards: np.ndarray  # [N] float32
    terminated: np.ndarray  # [N] bool: the MDP ended; no bootstrap
    truncated: np.ndarray  # [N] bool: cut by a time limit; bootstrap from next_obs
    episodes: list[tuple[int, float, int]] = field(default_factory=list)  # (env, return, length) ended
    # [N] bool, or None when every row is one: False where the row is no transition (the step after an
    # episode's end in a next-step autoreset vector env, which only reset that env: heron.core.native)
    valid: np.ndarray | None = None
    # [N] bool, or None when it is where an episode ended (terminated | truncated): where ``obs`` begins
    # an episode. A next-step autoreset env's episodes begin at its reset rows, not where they ended
    started: np.ndarray | None = None
