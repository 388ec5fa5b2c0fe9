"""A user's own environment module, as heron sees it: ``--env-id user_envs:Target-v0`` imports this
module (which registers Target-v0 with Gymnasium) and trains on it; ``user_envs:make_target`` and
``user_envs:WrongDtype`` name a factory function and an env class directly. The broken envs are
what ``heron check-env`` must name."""

import gymnasium as gym
import numpy as np


class Target(gym.Env):
    """Move a point on a line to a target: obs [position, target], action a step in [-1, 1],
    reward -|position - target| after the step. Episodes are truncated after 50 steps (by the
    class itself, so that the class alone is a complete env; the registration adds a TimeLimit)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(-5.0, 5.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = float(self.np_random.uniform(-2, 2))
        self.target = float(self.np_random.uniform(-2, 2))
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return np.array([self.pos, self.target], np.float32)

    def step(self, action):
        self.pos = float(np.clip(self.pos + 0.5 * float(np.clip(action[0], -1, 1)), -5, 5))
        self.t += 1
        return self._obs(), -abs(self.pos - self.target), False, self.t >= 50, {}

    def render(self):
        frame = np.zeros((32, 32, 3), np.uint8)
        frame[:, int((self.pos + 5) / 10 * 31)] = 255
        return frame


gym.register("Target-v0", entry_point=Target, max_episode_steps=50)


def make_target():
    """A factory a user hands to ``heron.train(algo, env=make_target)``."""
    return Target()


class Remembering(Target):
    """Its first observation drifts with every reset the instance has had, whatever the seed: an
    env whose episodes depend on what it played before (as PyBullet's locomotion envs do)."""

    resets = 0

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        self.resets += 1
        self.pos = float(np.clip(self.pos + 0.1 * self.resets, -5, 5))
        return self._obs(), info


class Endless(Target):
    """Never ends an episode: nothing to evaluate to the end."""

    def step(self, action):
        obs, reward, terminated, _, info = super().step(action)
        return obs, reward, terminated, False, info


class WrongDtype(Target):
    """Declares float32 observations, returns float64 ones."""

    def _obs(self):
        return np.array([self.pos, self.target], np.float64)


class InfiniteBounds(Target):
    """Continuous actions without finite bounds: nothing to squash a tanh policy into."""

    def __init__(self, render_mode=None):
        super().__init__(render_mode)
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)


class OutOfSpace(Target):
    """Reports positions shifted by 11, outside the declared observation box [-5, 5]."""

    def _obs(self):
        return np.array([self.pos + 11.0, self.target], np.float32)


def make_number():
    """A factory that forgot to return an env."""
    return 3


TARGET_CONSTANT = 5  # an attribute that is not an env factory
