"""A user's env that misbehaves on cue, for the fault tests (``--env-id fault_envs:Faulty``).

``HERON_TEST_OBS_DIM``: observation size (default 3). ``HERON_TEST_FAULT=KIND@K``: from the K-th
step of an env instance, ``raise`` an error in step, ``exit`` its process (an async worker dying),
or return an infinite reward (``inf``). With ``HERON_TEST_FAULT_ONCE=FILE`` the fault happens once
(the file records it), so that the resumed run trains on. ``HERON_TEST_FAULT_RANK=R``: only in
rank R of a torchrun job. ``HERON_TEST_FAULT_IN=eval_worker``: only in the evaluation worker
process (``--eval-async``).
"""

import os

import gymnasium as gym
import numpy as np


class Faulty(gym.Env):
    """Move a point towards 0: obs the position (repeated), reward -|position|; 50-step episodes."""

    def __init__(self):
        self.dim = int(os.environ.get("HERON_TEST_OBS_DIM", "3"))
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (self.dim,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        kind, _, at = os.environ.get("HERON_TEST_FAULT", "").partition("@")
        if os.environ.get("HERON_TEST_FAULT_RANK", os.environ.get("RANK", "0")) != os.environ.get("RANK", "0"):
            kind = ""
        if os.environ.get("HERON_TEST_FAULT_IN") == "eval_worker" and not os.environ.get("HERON_EVAL_WORKER"):
            kind = ""  # only in the evaluation worker process (--eval-async)
        self.kind, self.at, self.steps = kind, int(at or 0), 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.t = float(self.np_random.uniform(-2, 2)), 0
        return np.full(self.dim, self.pos, np.float32), {}

    def step(self, action):
        self.steps += 1
        self.t += 1
        self.pos = float(np.clip(self.pos + 0.2 * float(action[0]), -10, 10))
        reward = -abs(self.pos)
        if self.kind and self.steps >= self.at and self._first_time():
            if self.kind == "raise":
                raise RuntimeError(f"simulator exploded at step {self.steps}")
            if self.kind == "exit":
                os._exit(9)
            reward = float("inf")
        return np.full(self.dim, self.pos, np.float32), reward, False, self.t >= 50, {}

    def _first_time(self):
        once = os.environ.get("HERON_TEST_FAULT_ONCE")
        if not once:
            return True
        if os.path.exists(once):
            return False
        open(once, "w").close()
        return True
