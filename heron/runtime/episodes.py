"""Evaluation episodes: a policy's deterministic returns on fresh envs, from fixed start states, with
a video of the first episode where asked (``VideoFile``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from heron.envs.make import make_env, obs_converter
from heron.envs.step import env_call
from heron.errors import HeronError
from heron.runtime.faults import close_bounded, inject

EVAL_SEED_OFFSET = 1_000_000  # evaluation episodes use seeds far from the training envs'
EVAL_EPISODE_CAP = 100_000  # agent steps; longer than any standard env's time limit (Atari: 27,000)


def evaluate(
    policy: Any,
    env_id: str,
    episodes: int | list[int],
    seed: int,
    video_path: str | None = None,
    flatten_dict: bool = True,
    max_episode_steps: int | None = None,
    env_fn: Callable[[str | None], gym.Env] | None = None,
    should_stop: Callable[[], bool] | None = None,
    at_once: int = 1,
) -> np.ndarray | None:
    """Run ``episodes`` episodes with ``policy.predict(obs, deterministic=True)`` and return their
    returns. Episode k starts from ``reset(seed=seed + k)``, and a policy that samples while acting
    deterministically (a Dreamer's latents) draws from ``policy.seed([seed + k])``: the same start
    states and draws at every evaluation, however the episodes are grouped or dealt to ranks, and
    independent of training's random state, so that evaluating never perturbs a run.
    ``env_fn(render_mode)`` replaces ``make_env`` (an algorithm's own wrapper stack); Dict
    observations reach the policy as dicts of arrays. When ``should_stop()`` turns true (a stop
    request) the evaluation ends at once and returns None, writing no video. An episode that has not
    ended after EVAL_EPISODE_CAP steps (an env without a time limit) is cut there, with a warning,
    instead of hanging the run. ``episodes`` may list the episode numbers k to play (a rank's share
    of an evaluation).

    ``at_once``: a policy that acts on batches (``policy.batched``: ``predict`` on [B, ...] and
    ``reset(B)``) plays up to this many episodes together, each in its own env instance, with one
    batched ``predict`` per step. The episodes and their start states are the same; the policy's
    per-call work (a forward pass; on a GPU its launches and host syncs) is paid once per step of
    the group instead of once per episode. A row whose episode has ended is still fed its last
    observation until the group ends, so a recurrent state keeps its row. With a video the episodes
    are played one after another in one env, and the frames go to the file as they are rendered.

    The envs are made afresh at every call: some envs' episodes depend on what the instance played
    before, whatever the seed (PyBullet's locomotion envs), and an evaluation must depend on the
    policy alone, so that ``heron eval`` of a checkpoint and a resumed run reproduce it."""
    render_mode = "rgb_array" if video_path else None
    numbers = list(range(episodes)) if isinstance(episodes, int) else list(episodes)
    together = 1 if video_path or not getattr(policy, "batched", False) else max(1, min(at_once, len(numbers)))
    envs: list[gym.Env] = []
    video: VideoFile | None = None

    def call(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return env_call(env_id, f"{what} (evaluation)", fn, *args, **kwargs)

    try:
        for _ in range(together):
            envs.append(
                env_fn(render_mode)
                if env_fn is not None
                else make_env(
                    env_id, render_mode=render_mode, flatten_dict=flatten_dict, max_episode_steps=max_episode_steps
                )
            )
        convert = obs_converter(envs[0].observation_space)
        if video_path:
            video = VideoFile(video_path, fps=envs[0].metadata.get("render_fps", 30))
        returns: list[float] = []
        for start in range(0, len(numbers), together):
            group = list(zip(envs, numbers[start : start + together]))
            obs = [convert(call("reset", env.reset, seed=seed + k)[0]) for env, k in group]
            if together > 1:
                policy.reset(len(group))
            else:
                policy.reset()
            if hasattr(policy, "seed"):  # a user's own policy may have no seed()
                policy.seed([seed + k for _, k in group])
            totals, live, t = np.zeros(len(group)), np.ones(len(group), bool), 0
            while live.any():
                if should_stop is not None and should_stop():
                    return None
                if t == EVAL_EPISODE_CAP:
                    print(
                        f"heron: warning: an evaluation episode of {env_id} ran {t} steps without ending: cut "
                        "there (give the env a time limit; heron check-env shows it)",
                        file=sys.stderr,
                        flush=True,
                    )
                    break
                t += 1
                if video is not None:
                    video.append(_render(envs[0], env_id))
                if together > 1:
                    actions = policy.predict(_stack(obs), deterministic=True)
                else:
                    actions = [policy.predict(obs[0], deterministic=True)]
                for i in np.flatnonzero(live):
                    o, reward, terminated, truncated, _ = call("step", group[i][0].step, actions[i])
                    obs[i] = convert(o)
                    totals[i] += float(reward)
                    live[i] = not (terminated or truncated)
            returns.extend(totals.tolist())
        if video is not None:
            video.commit()
    finally:
        if video is not None:
            video.discard()
        for env in envs:
            close_bounded(env.close, f"the {env_id} evaluation env")
    return np.asarray(returns, np.float64)


def _stack(obs: list[Any]) -> Any:
    """Per-env observations (arrays, or dicts of arrays) as one batch."""
    if isinstance(obs[0], dict):
        return {k: np.stack([o[k] for o in obs]) for k in obs[0]}
    return np.stack(obs)


def _render(env: gym.Env, env_id: str) -> np.ndarray:
    try:
        return env.render()  # type: ignore[return-value]  # made with render_mode="rgb_array"
    except Exception as exc:  # no OpenGL backend, no pygame, ...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HeronError(
            f"cannot render {env_id} for video: {reason} (for MuJoCo on a machine without "
            "EGL: apt-get install libosmesa6 and set MUJOCO_GL=osmesa)"
        ) from None


class VideoFile:
    """An mp4 written frame by frame, so that no evaluation's frames are held in memory (10 MuJoCo
    episodes are 10,000 frames of 480 x 480 x 3, 7 GB), into a temporary file that ``commit()``
    renames into place: an interrupted write (Ctrl-C, a kill, a stop request) never leaves a
    half-written mp4 under the final name, and ``discard()`` removes an uncommitted one."""

    def __init__(self, path: str, fps: int):
        import imageio.v2 as imageio

        self.final = Path(path)
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.final.with_name(f".{self.final.stem}.partial{os.getpid()}{self.final.suffix}")
        self.writer = imageio.get_writer(str(self.tmp), fps=fps, macro_block_size=1)
        self.frames = 0

    def append(self, frame: np.ndarray) -> None:
        self.writer.append_data(frame)
        self.frames += 1
        if self.frames == 2:
            inject("video")

    def commit(self) -> None:
        self.writer.close()
        os.replace(self.tmp, self.final)

    def discard(self) -> None:
        """Close the writer; the temporary file is removed unless ``commit()`` moved it."""
        self.writer.close()
        self.tmp.unlink(missing_ok=True)
