"""Tiny envs for tests, registered under the heron-test/ namespace."""

import gymnasium as gym
import numpy as np


class ConstantReward(gym.Env):
    """Reward 1 forever; never terminates (a TimeLimit truncates). Value of every state under any
    policy: 1 / (1 - gamma), if and only if truncation is bootstrapped."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), 1.0, False, False, {}


class Counter(gym.Env):
    """Observation = [step in episode]; terminates after `length` steps."""

    def __init__(self, length=3):
        self.length = length
        self.observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), float(self.t), self.t >= self.length, False, {}


class DictObs(gym.Env):
    """Dict observations: reward is -|action - target| where target is in the observation."""

    def __init__(self):
        self.observation_space = gym.spaces.Dict(
            {"target": gym.spaces.Box(-1, 1, (1,), np.float32), "noise": gym.spaces.Box(-1, 1, (2,), np.float32)}
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def _obs(self):
        self.target = self.np_random.uniform(-1, 1, 1).astype(np.float32)
        return {"target": self.target, "noise": self.np_random.uniform(-1, 1, 2).astype(np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        reward = -float(abs(action[0] - self.target[0]))
        return self._obs(), reward, False, False, {}


gym.register("heron-test/ConstantReward-v0", entry_point=ConstantReward, max_episode_steps=50)
gym.register("heron-test/Counter-v0", entry_point=Counter)
gym.register("heron-test/DictObs-v0", entry_point=DictObs, max_episode_steps=20)


class MultiDiscreteTarget(gym.Env):
    """MultiDiscrete([2, 3]) actions; reward 1 per dimension that matches the target in the obs."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 2, (2,), np.float32)
        self.action_space = gym.spaces.MultiDiscrete([2, 3])

    def _obs(self):
        self.target = np.array([self.np_random.integers(2), self.np_random.integers(3)])
        return self.target.astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        reward = float(np.sum(np.asarray(action) == self.target))
        return self._obs(), reward, False, False, {}


gym.register("heron-test/MultiDiscrete-v0", entry_point=MultiDiscreteTarget, max_episode_steps=10)


class ByteVector(gym.Env):
    """uint8 vector observations (as Atari's RAM): reward 1 when the action is the first byte's
    parity."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 255, (8,), np.uint8)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self):
        self.obs = self.np_random.integers(0, 256, 8, dtype=np.uint8)
        return self.obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self.obs[0] % 2)
        return self._obs(), reward, False, False, {}


gym.register("heron-test/ByteVector-v0", entry_point=ByteVector, max_episode_steps=20)


class DictImage(gym.Env):
    """Dict of a small channel-last uint8 image and a vector; reward 1 when the action is the sign
    of vec[0] (the image is noise)."""

    def __init__(self):
        self.observation_space = gym.spaces.Dict(
            {"pixels": gym.spaces.Box(0, 255, (36, 36, 3), np.uint8), "vec": gym.spaces.Box(-1, 1, (2,), np.float32)}
        )
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self):
        self.vec = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return {"pixels": self.np_random.integers(0, 256, (36, 36, 3), dtype=np.uint8), "vec": self.vec}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == int(self.vec[0] > 0))
        return self._obs(), reward, False, False, {}


gym.register("heron-test/DictImage-v0", entry_point=DictImage, max_episode_steps=10)


class TwoGoals(gym.Env):
    """A corridor of positions -4..4 starting at 0; the observation shows the position and which end
    is the goal this episode (random). Reaching the goal end: reward +1, the other end: -1; both
    terminate. A random policy scores about 0, the optimal one +1 in 4 steps: learning it takes
    multi-step credit assignment and conditioning on the goal."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)  # 0: left, 1: right

    def _obs(self):
        return np.array([self.pos / 4.0, self.goal], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.goal = 0, float(self.np_random.choice([-1.0, 1.0]))
        return self._obs(), {}

    def step(self, action):
        self.pos += 1 if int(action) == 1 else -1
        if abs(self.pos) == 4:
            return self._obs(), (1.0 if np.sign(self.pos) == self.goal else -1.0), True, False, {}
        return self._obs(), 0.0, False, False, {}


gym.register("heron-test/TwoGoals-v0", entry_point=TwoGoals, max_episode_steps=20)
