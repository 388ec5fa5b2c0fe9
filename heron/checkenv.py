"""``heron check-env ENV_ID``: will this environment train with heron, and with which algorithms?

Three layers, each reported line by line:

1. Gymnasium's own checker (``gymnasium.utils.env_checker.check_env``): the API, seeding, spaces.
   Its errors fail the check; its warnings are listed.
2. heron's requirements on what a rollout of random actions actually returns: observations of the
   declared dtype and shape inside the declared space (heron converts observations by the declared
   dtype, so float images declared uint8 would be truncated silently), finite scalar rewards,
   boolean terminated/truncated, and episodes that end (an evaluation runs to the episode's end).
3. Each algorithm's own check of the spaces: the function ``heron train`` calls before it makes a
   run directory, so "yes" here means the run starts.

A problem in any layer is a FAIL; the command exits 1 when there is one, 0 otherwise (an unknown id
or an import error is bad input: one line, exit 2).
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from heron import registry
from heron.config import apply_overrides
from heron.envs.ids import check_env_id
from heron.envs.make import make_env
from heron.errors import HeronError, first_line

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Finding:
    ok: bool
    what: str
    detail: str = ""
    notes: list[str] = field(default_factory=list)  # e.g. Gymnasium's warnings under its checker


@dataclass
class Report:
    env_id: str
    observation_space: str = ""
    action_space: str = ""
    rollout: str = ""
    findings: list[Finding] = field(default_factory=list)
    algos: dict[str, str] = field(default_factory=dict)  # algo -> "" (trains) or the reason it cannot

    @property
    def problems(self) -> int:
        return sum(not f.ok for f in self.findings)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"problems": self.problems}

    def text(self) -> str:
        lines = [
            f"heron check-env {self.env_id}",
            f"  observation space  {self.observation_space}",
            f"  action space       {self.action_space}",
        ]
        if self.rollout:
            lines.append(f"  rollout            {self.rollout}")
        lines.append("")
        for f in self.findings:
            lines.append(f"  {'ok  ' if f.ok else 'FAIL'}  {f.what}" + (f": {f.detail}" if f.detail else ""))
            lines += [f"          {note}" for note in f.notes]
        lines += ["", "  algorithms"]
        width = max(map(len, self.algos), default=0)
        for algo, reason in self.algos.items():
            lines.append(f"    {algo:<{width}}  {'yes' if not reason else 'no: ' + reason}")
        lines.append("")
        lines.append(
            "  no problems found"
            if not self.problems
            else f"  {self.problems} problem{'s' if self.problems > 1 else ''} found (FAIL above)"
        )
        return "\n".join(lines)


def check(env_id: str, steps: int = 500, seed: int = 0) -> Report:
    """Check ``env_id`` (any id ``heron train`` takes, ``module:EnvId`` included)."""
    if steps <= 0:
        raise HeronError(f"--steps must be positive, got {steps}")
    check_env_id(env_id)
    report = Report(env_id)
    env = _make(env_id, report)
    if env is None:
        return report
    try:
        report.observation_space, report.action_space = str(env.observation_space), str(env.action_space)
        report.findings.append(_gymnasium_checker(env_id))
        with warnings.catch_warnings():  # Gymnasium's passive checker repeats what its checker listed above
            warnings.simplefilter("ignore")
            report.findings += _rollout(env, steps, seed, report)
            report.findings += _action_findings(env.action_space)
            for algo in registry.ALGOS:
                report.algos[algo] = _algo_reason(algo, env_id)
            for label, (algo, preset) in VARIANTS.items():
                report.algos[label] = _algo_reason(algo, env_id, preset)
            vector = _vector_finding(env_id, steps, seed)
            if vector is not None:
                report.findings.append(vector)
    finally:
        env.close()
    if all(report.algos.values()):
        report.findings.append(Finding(False, "algorithms", "no heron algorithm can train on these spaces"))
    return report


def _make(env_id: str, report: Report) -> gym.Env | None:
    try:
        return make_env(env_id, flatten_dict=False)
    except HeronError:
        raise
    except Exception as exc:  # the user's constructor raised
        report.findings.append(Finding(False, "make", first_line(exc)))
        return None


def _gymnasium_checker(env_id: str) -> Finding:
    from gymnasium.utils.env_checker import check_env

    env = make_env(env_id, flatten_dict=False)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                check_env(env.unwrapped, skip_render_check=True, skip_close_check=True)
                error = ""
            except Exception as exc:
                error = first_line(exc)
    finally:
        env.close()
    notes = []
    for w in caught:
        text = _ANSI.sub("", str(w.message)).strip().removeprefix("WARN: ")
        text = " ".join(text.split())
        if text not in notes:
            notes.append(text)
    return Finding(not error, "Gymnasium's env checker", error, [f"warning: {n}" for n in notes])


class _First:
    """The first problem of a kind, with where it happened (later ones are counted, not listed)."""

    def __init__(self) -> None:
        self.problem, self.count = "", 0

    def add(self, problem: str) -> None:
        self.count += 1
        self.problem = self.problem or problem

    def finding(self, what: str, ok_detail: str = "") -> Finding:
        if not self.count:
            return Finding(True, what, ok_detail)
        more = f" ({self.count - 1} more like it)" if self.count > 1 else ""
        return Finding(False, what, self.problem + more)


def _check_obs(obs: Any, space: gym.Space, where: str, dtype: _First, inside: _First, key: str = "") -> None:
    name = f"observation[{key!r}]" if key else "observation"
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, dict) or set(obs) != set(space.spaces):
            got = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
            inside.add(f"{where} returned {got}, the Dict space has keys {sorted(space.spaces)}")
            return
        for k, sub in space.spaces.items():
            _check_obs(obs[k], sub, where, dtype, inside, k)
        return
    if isinstance(space, gym.spaces.Box):
        arr = np.asarray(obs)
        if arr.dtype != space.dtype:
            dtype.add(
                f"{where} returned {name} of dtype {arr.dtype}; the observation space declares {space.dtype} "
                f"(heron converts by the declared dtype)"
            )
        if arr.shape != space.shape:
            inside.add(f"{where} returned {name} of shape {arr.shape}; the observation space declares {space.shape}")
            return
        bad = ~np.isfinite(arr) if arr.dtype.kind == "f" else np.zeros(arr.shape, bool)
        bad |= (arr < space.low) | (arr > space.high)
        if bad.any():
            i = tuple(int(j) for j in np.argwhere(bad)[0])
            idx = i[0] if len(i) == 1 else i
            inside.add(
                f"{where} returned {name}[{idx}] = {arr[i]:.6g}, outside [{space.low[i]:.6g}, {space.high[i]:.6g}]"
            )
        return
    if not space.contains(obs):
        inside.add(f"{where} returned {name} {obs!r}, not in {space}")


def _rollout(env: gym.Env, steps: int, seed: int, report: Report) -> list[Finding]:
    """``steps`` random actions from reset(seed); what came back, checked against the spaces."""
    dtype, inside, rewards, flags, crash = _First(), _First(), _First(), _First(), _First()
    space = env.observation_space
    env.action_space.seed(seed)
    lengths: list[int] = []
    episodes, length, t = 0, 0, 0
    try:
        obs, _ = env.reset(seed=seed)
        _check_obs(obs, space, "reset()", dtype, inside)
        for t in range(1, steps + 1):
            obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            _check_obs(obs, space, f"step {t}", dtype, inside)
            if not isinstance(reward, (int, float, np.integer, np.floating)) or isinstance(reward, (bool, np.bool_)):
                rewards.add(f"step {t} returned a reward of type {type(reward).__name__}, not a number")
            elif not np.isfinite(reward):
                rewards.add(f"step {t} returned the reward {reward}")
            for name, value in (("terminated", terminated), ("truncated", truncated)):
                if not isinstance(value, (bool, np.bool_)):
                    flags.add(f"step {t} returned {name} of type {type(value).__name__}, not bool")
            length += 1
            if terminated or truncated:
                episodes, lengths, length = episodes + 1, lengths + [length], 0
                obs, _ = env.reset()
                _check_obs(obs, space, f"reset() after step {t}", dtype, inside)
    except Exception as exc:  # the env itself raised under random actions
        crash.add(f"at step {t}: {first_line(exc)}")
    report.rollout = f"{t} random steps, {episodes} episodes ended" + (
        f" (mean length {np.mean(lengths):.0f})" if lengths else ""
    )
    out = [
        dtype.finding("observation dtype", "as declared"),
        inside.finding("observations inside the observation space", "every one"),
        rewards.finding("rewards", "finite numbers"),
        flags.finding("terminated / truncated", "booleans"),
    ]
    if crash.count:
        out.append(crash.finding("random actions"))
    elif not episodes:
        out.append(
            Finding(
                False,
                "episodes end",
                f"none ended in {steps} random steps: give the env a time limit "
                "(gym.register(..., max_episode_steps=N) or --max-episode-steps where the algorithm has it); "
                "evaluations run each episode to its end",
            )
        )
    else:
        out.append(Finding(True, "episodes end"))
    return out


def _vector_finding(env_id: str, steps: int, seed: int, num_envs: int = 4) -> Finding | None:
    """For an id with a vector entry point: what ``--vector-mode native`` will read of it (its
    autoreset mode and outputs; for a tensor env, that its steps keep the tensor contract), from
    ``steps`` random steps of ``num_envs`` envs; None otherwise."""
    from heron.envs.native import NativeVecEnv, require_vector_entry_point

    try:
        require_vector_entry_point(env_id)
    except HeronError:
        return None
    what = "vector env (--vector-mode native)"
    try:
        envs = NativeVecEnv(env_id, num_envs, seed, keep_tensors=True, train_device=None)
    except HeronError as exc:
        return Finding(False, what, str(exc))
    except Exception as exc:
        return Finding(False, what, f"cannot build it: {first_line(exc)}")
    try:
        envs.reset()  # (a tensor env's device is the one a run would train on: --device)
        space = envs.single_action_space
        space.seed(seed)
        episodes = reset_rows = 0
        for _ in range(max(1, steps // num_envs)):
            actions = np.stack([space.sample() for _ in range(num_envs)])
            step = envs.step(torch.as_tensor(actions) if envs.tensors else actions)
            episodes += len(step.episodes)
            reset_rows += 0 if step.valid is None else int((~step.valid).sum())
    except HeronError as exc:
        return Finding(False, what, str(exc))
    except Exception as exc:
        return Finding(False, what, f"a step failed: {first_line(exc)}")
    finally:
        envs.close()
    outputs = "torch.Tensor observations" if envs.tensors else "numpy.ndarray observations"
    if envs.tensors:
        outputs += f" on {envs.device}, read as tensors (the tensor contract holds)"
    return Finding(
        True,
        what,
        f"{envs.mode.value} autoreset, {outputs}; {episodes} episode(s) ended "
        f"in {max(1, steps // num_envs)} steps of {num_envs} envs"
        + (f", {reset_rows} reset row(s) left out" if reset_rows else ""),
    )


def _action_findings(space: gym.Space) -> list[Finding]:
    if not isinstance(space, gym.spaces.Box):
        return []
    if np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high)):
        return [Finding(True, "action bounds", "finite")]
    return [
        Finding(
            False,
            "action bounds",
            "not finite: sac, td3, dreamer_v2 and dreamer_v3 squash their actions "
            "into the bounds, so they need finite ones (ppo clips its Gaussian samples to them)",
        )
    ]


# Methods an algorithm's preset turns it into, checked with that preset: label -> (algorithm, preset)
VARIANTS = {"sac --preset crossq": ("sac", "crossq")}


def _algo_reason(algo: str, env_id: str, preset: str = "") -> str:
    """ "" when ``heron train ALGO [--preset PRESET] --env-id ENV_ID`` passes its pre-run checks,
    else why not."""
    module = registry.get(algo)
    cfg = dataclasses.replace(module.Config(), env_id=env_id)
    if preset:
        cfg = apply_overrides(cfg, module.PRESETS[preset], f"preset {preset}")
    try:
        module.check(cfg)
    except HeronError as exc:
        return str(exc)
    except Exception as exc:
        return first_line(exc)
    return ""
