"""Stand-in for EnvPool, for LeanRL's Atari script (benchmarks/gpu_vs_leanrl.sh puts this folder on
its PYTHONPATH). EnvPool's wheel (64 MB) does not fit a device call beside ALE's and OpenCV's, so
the Atari envs come from ALE's own vector env (ale-py 0.12, a port of EnvPool's Atari env, the one
heron's --env-backend ale steps): the same preprocessing (no-op starts, fire reset, frame skip 4
with max-pooling, 84x84 grayscale, a stack of 4), a lost life ending the episode, rewards clipped
to their sign, a finished env reset at its next step (EnvPool's order), one thread per env; no
sticky actions (EnvPool's default). make(..., env_type="gym") gives the old Gym API that script
reads: reset() -> obs, step(a) -> (obs, reward, done, info) with info's raw "reward",
"terminated" (the game is over) and "lives". It notes (env steps, time) in $LEANRL_STEPS each
time the count passes a multiple of $LEANRL_EVERY."""

import os
import re
import time

import gymnasium
import numpy as np

_log = open(os.environ.get("LEANRL_STEPS", os.devnull), "a", buffering=1)
_every = int(os.environ.get("LEANRL_EVERY", "1024"))


class _Atari:
    def __init__(self, task_id, num_envs, seed=42, episodic_life=False, reward_clip=False, **kwargs):
        from ale_py.vector_env import AtariVectorEnv

        game = re.sub(r"(?<!^)(?=[A-Z])", "_", task_id.split("-")[0]).lower()  # SpaceInvaders-v5 -> space_invaders
        self.envs = AtariVectorEnv(
            game,
            num_envs,
            num_threads=num_envs,
            episodic_life=episodic_life,
            reward_clipping=False,
            repeat_action_probability=0.0,
            noop_max=30,
            use_fire_reset=True,
            frameskip=4,
            img_height=84,
            img_width=84,
            grayscale=True,
            stack_num=4,
            maxpool=True,
            autoreset_mode=gymnasium.vector.AutoresetMode.NEXT_STEP,
        )
        self.num_envs, self.seed, self.clip = num_envs, seed, reward_clip
        self.action_space = self.envs.single_action_space
        self.observation_space = self.envs.single_observation_space
        self.steps = 0

    def reset(self):
        obs, _ = self.envs.reset(seed=self.seed)
        return obs

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.envs.step(np.asarray(actions))
        reward = np.asarray(reward, np.float32)  # EnvPool gives float32 (ALE int32)
        info = dict(info)
        info["reward"] = reward
        info["terminated"] = (terminated | truncated) & (np.asarray(info["lives"]) == 0)  # the game is over
        before, self.steps = self.steps, self.steps + self.num_envs
        if self.steps // _every > before // _every:
            _log.write(f"steps,{self.steps},{time.time():.3f},\n")
        return obs, np.sign(reward) if self.clip else reward, terminated | truncated, info

    def close(self):
        self.envs.close()


def make(task_id, env_type="gym", num_envs=1, **kwargs):
    if env_type != "gym":
        raise ValueError("this stand-in gives the Gym API alone")
    return _Atari(task_id, num_envs, **kwargs)
