"""Stand-in for the old ``gym`` package, for LeanRL's Atari script (put on its PYTHONPATH by heron's
benchmarks/gpu_vs_leanrl.sh): its spaces are Gymnasium's, and its Wrapper passes everything
through to the EnvPool stand-in's old-API env."""

from gymnasium import spaces  # noqa: F401


class Wrapper:
    def __init__(self, env):
        self.env = env

    def __getattr__(self, name):
        return getattr(self.env, name)

    def reset(self, **kwargs):
        return self.env.reset(**kwargs)

    def step(self, action):
        return self.env.step(action)
