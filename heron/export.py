"""``heron export RUN``: a run's deterministic policy as a standalone ONNX or TorchScript file, for a
robot, a game or a web service: no heron, no Python training code needed to run it.

What is exported is what ``heron.load(RUN).predict(obs, deterministic=True)`` computes:

* input ``obs`` ``[batch, *obs_shape]``: float32, or uint8 for image observations, exactly as the
  environment gives them. Observation normalization (``--obs-norm``) and the uint8 scaling are in
  the graph, with the statistics of the checkpoint;
* output ``action`` ``[batch, *action_shape]``: what the environment takes. Continuous actions are
  within the action bounds (SAC/TD3: tanh of the mean rescaled; PPO: the Gaussian mean clipped).
  Discrete actions are int64 indices (the most probable), one per sub-space for MultiDiscrete;
* recurrent policies (``--recurrent lstm|gru``) also take ``state`` ``[batch, state_size]`` and
  return ``state_out``. Start an episode with zeros, and feed ``state_out`` back at the next step.

A Dreamer's policy (DreamerV2, DreamerV3) is the world model's filter and the actor: it takes one
input per observation key (``obs_<key>``, as the env gives it), ``state`` ``[batch, deter + stoch *
classes + action_dim]`` (h, z and the previous action; at an episode's start the sidecar's
``initial_state``: zeros for DreamerV2, the learned start for DreamerV3) and ``uniform`` ``[batch, stoch]``: one
draw in [0, 1) per categorical latent of the posterior, which the policy samples at every step (as
``heron eval`` and ``predict`` do; feed ``numpy.random.random``). It returns ``action`` and ``state_out``.

The batch dimension is dynamic. The ONNX file uses opset ``OPSET``. A sidecar ``FILE.json`` beside it
records the names, shapes and dtypes, the action space, the run's algorithm, env and step.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from heron import __version__
from heron.errors import HeronError, install_hint

OPSET = 17
FORMATS = ("onnx", "torchscript")
DREAMERS = ("dreamer_v2", "dreamer_v3")


class ExportedPolicy(nn.Module):
    """A loaded policy's actor as ``forward(obs) -> action`` (``forward(obs, state) -> (action,
    state)`` when recurrent), deterministic."""

    actor: Any  # a trained actor: act(obs, state, deterministic) -> (actions, state)

    def __init__(self, actor: nn.Module, state_size: int):
        super().__init__()
        self.actor, self.state_size = actor, state_size

    def forward(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> Any:
        if self.state_size == 0:
            empty = torch.zeros(obs.shape[0], 0, dtype=torch.float32, device=obs.device)
            return self.actor.act(obs, empty, True)[0]
        return self.actor.act(obs, state, True)


class ExportedDreamer(nn.Module):
    """A Dreamer's player as ``forward(*obs in key order, state, uniform) -> (env action, state)``."""

    player: Any  # the Dreamer's Player
    low: torch.Tensor  # buffers (Box actions)
    high: torch.Tensor

    def __init__(self, player: nn.Module, spaces: dict):
        super().__init__()
        self.player, self.keys = player, list(spaces["cnn_keys"]) + list(spaces["mlp_keys"])
        self.discrete = bool(spaces["discrete"])
        if not self.discrete:
            self.register_buffer("low", torch.as_tensor(spaces["action_low"], dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(spaces["action_high"], dtype=torch.float32))

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        obs = dict(zip(self.keys, inputs[: len(self.keys)]))
        state, uniform = inputs[len(self.keys) :]
        action, state = self.player.act(obs, state, True, uniform=uniform)
        if self.discrete:  # one-hot -> index, [-1, 1] -> the bounds: heron.algos.dreamer.spaces.to_env_actions
            return action.argmax(-1), state
        return self.low + (action + 1.0) * 0.5 * (self.high - self.low), state


def _dreamer_inputs(policy: Any, n: int, rng: np.random.Generator) -> list[tuple[str, torch.Tensor]]:
    """Random inputs of an exported Dreamer policy: observations, the initial state, uniform draws."""
    spec = policy.spaces["obs_spec"]
    inputs = []
    for key in list(policy.spaces["cnn_keys"]) + list(policy.spaces["mlp_keys"]):
        shape, dtype = spec[key]
        dt = torch.uint8 if str(dtype) == "uint8" else torch.float32
        inputs.append((f"obs_{key}", _observations(tuple(shape), dt, n, rng)))
    inputs.append(("state", policy.actor.initial_state(n, "cpu")))
    inputs.append(("uniform", torch.as_tensor(rng.random((n, policy.actor.rssm.stoch)).astype(np.float32))))
    return inputs


def export(
    run_dir: str | Path, fmt: str = "onnx", out: str | Path | None = None, checkpoint: str = "latest", verify: int = 64
) -> dict:
    """Write the policy of ``run_dir`` as ``fmt`` and, with ``verify`` > 0, check the file against
    the policy on that many random observations. Returns the sidecar's description (with ``path``,
    and ``max_abs_diff`` when verified)."""
    from heron import api

    if fmt not in FORMATS:
        raise HeronError(f"unknown --format {fmt!r}; choose from {', '.join(FORMATS)}")
    if verify < 0:
        raise HeronError(f"--verify must be >= 0, got {verify}")
    algo, cfg, state = api.load_checkpoint(run_dir, checkpoint)
    from heron import registry

    policy = registry.get(algo).load_policy(cfg, state, "cpu")
    dreamer = algo in DREAMERS
    if dreamer:
        module: nn.Module = ExportedDreamer(policy.actor, state["spaces"]).eval()
        named = _dreamer_inputs(policy, 2, np.random.default_rng(0))
        recurrent = True
    else:
        module = ExportedPolicy(policy.actor, policy.state_size).eval()
        recurrent = policy.state_size > 0
        named = [("obs", _observations(policy.obs_shape, policy.obs_dtype, 2, np.random.default_rng(0)))]
        if recurrent:
            named.append(("state", torch.zeros(2, policy.state_size)))
    inputs = tuple(t for _, t in named)
    path = Path(out) if out else Path(run_dir) / "export" / f"policy.{'onnx' if fmt == 'onnx' else 'pt'}"
    path.parent.mkdir(parents=True, exist_ok=True)
    names_in = [name for name, _ in named]
    names_out = ["action", "state_out"] if recurrent else ["action"]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on constants: the graph is checked below
        expected = module(*inputs)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            if fmt == "torchscript":
                traced = torch.jit.trace(module, inputs, check_trace=False)
                torch.jit.save(traced, str(tmp))
            else:
                torch.onnx.export(
                    module,
                    inputs,
                    str(tmp),
                    input_names=names_in,
                    output_names=names_out,
                    dynamic_axes={n: {0: "batch"} for n in names_in + names_out},
                    opset_version=OPSET,
                    dynamo=False,
                )
            tmp.replace(path)
        except Exception as exc:
            tmp.unlink(missing_ok=True)
            raise HeronError(f"cannot export {run_dir} as {fmt}: {str(exc).strip().splitlines()[0][:200]}") from None
    action = expected[0] if recurrent else expected
    info = {
        "format": fmt,
        "path": str(path),
        "opset": OPSET if fmt == "onnx" else None,
        "algo": algo,
        "env_id": cfg.env_id,
        "step": int(state["step"]),
        "checkpoint": checkpoint,
        "heron_version": __version__,
        "deterministic": True,
        "inputs": [
            {"name": name, "shape": ["batch", *t.shape[1:]], "dtype": str(t.dtype).split(".")[-1]} for name, t in named
        ],
        "outputs": [
            {"name": "action", "shape": ["batch", *action.shape[1:]], "dtype": str(action.dtype).split(".")[-1]}
        ]
        + ([{"name": "state_out", "shape": ["batch", policy.state_size], "dtype": "float32"}] if recurrent else []),
        "action_space": _action_space(algo, state["spaces"]),
    }
    if dreamer:  # where every episode starts (DreamerV2: zeros; DreamerV3: its learned initial state)
        info["initial_state"] = policy.actor.initial_state(1, "cpu")[0].tolist()
    if verify:
        info["max_abs_diff"] = (
            check_dreamer(path, fmt, module, policy, verify) if dreamer else check(path, fmt, policy, verify)
        )
        info["verified_on"] = verify
    path.with_name(path.name + ".json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def _observations(shape: tuple[int, ...], dtype: torch.dtype, n: int, rng: np.random.Generator) -> torch.Tensor:
    if dtype == torch.uint8:
        return torch.as_tensor(rng.integers(0, 256, (n, *shape), dtype=np.uint8))
    return torch.as_tensor(rng.normal(0.0, 1.0, (n, *shape)).astype(np.float32))


def _action_space(algo: str, spaces: dict) -> dict:
    if algo == "ppo":
        action = spaces["action"]
        return {k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in action.items()}
    if spaces.get("discrete"):
        return {"kind": "discrete", "n": int(spaces["action_dim"])}
    low, high = spaces.get("action_low"), spaces.get("action_high")
    as_list = lambda v: v.tolist() if isinstance(v, (torch.Tensor, np.ndarray)) else v  # noqa: E731
    return {"kind": "box", "low": as_list(low), "high": as_list(high)}


def run_exported(
    path: str | Path,
    fmt: str,
    obs: np.ndarray | dict,
    state: np.ndarray | None = None,
    uniform: np.ndarray | None = None,
) -> list[np.ndarray]:
    """The exported file's outputs on a batch: onnxruntime for ONNX, ``torch.jit.load`` for
    TorchScript. ``obs``: an array, or for DreamerV2 a dict of arrays in the run's key order."""
    feed = {f"obs_{k}": v for k, v in obs.items()} if isinstance(obs, dict) else {"obs": obs}
    if state is not None:
        feed["state"] = state
    if uniform is not None:
        feed["uniform"] = uniform
    if fmt == "torchscript":
        module = torch.jit.load(str(path))
        with torch.no_grad():
            out = module(*(torch.as_tensor(v) for v in feed.values()))
        return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]
    try:
        import onnxruntime as ort
    except ImportError:
        raise HeronError(
            f"checking an ONNX export needs onnxruntime: {install_hint('export')} (or --verify 0 to skip the check)"
        ) from None
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def check(path: Path, fmt: str, policy: Any, n: int) -> float:
    """The largest difference between the file's actions (and states) and the policy's on ``n``
    random observations, over two steps for recurrent policies; a HeronError when they disagree."""
    rng = np.random.default_rng(1)
    obs = [_observations(policy.obs_shape, policy.obs_dtype, n, rng).numpy() for _ in range(2)]
    recurrent = policy.state_size > 0
    policy.reset(n)
    state = np.zeros((n, policy.state_size), np.float32) if recurrent else None
    worst = 0.0
    for step_obs in obs if recurrent else obs[:1]:
        want = policy.predict(step_obs, deterministic=True)
        got = run_exported(path, fmt, step_obs, state)
        if recurrent:
            state = got[1]
            worst = max(worst, float(np.abs(got[1] - policy.state.cpu().numpy()).max()))
        if np.issubdtype(want.dtype, np.integer):
            if not np.array_equal(got[0], want):
                raise HeronError(
                    f"{path}: the exported policy chose other actions than the run's policy on "
                    f"{int((got[0] != want).any(-1).sum() if want.ndim > 1 else (got[0] != want).sum())} "
                    f"of {n} observations"
                )
        else:
            worst = max(worst, float(np.abs(got[0] - want).max()))
    scale = 1e-4 * max(1.0, float(np.abs(want).max())) if not np.issubdtype(want.dtype, np.integer) else 0
    if worst > max(scale, 1e-4):
        raise HeronError(f"{path}: the exported policy differs from the run's policy by up to {worst:.3g}")
    return worst


def check_dreamer(path: Path, fmt: str, module: Any, policy: Any, n: int) -> float:
    """As ``check``, for the Dreamers: the file against the player with the same uniform draws
    (``predict`` draws its own), over two steps with the state fed back."""
    from heron.algos.dreamer.spaces import to_env_actions

    rng = np.random.default_rng(1)
    state = policy.actor.initial_state(n, "cpu")
    file_state = state.numpy()
    worst = 0.0
    for _ in range(2):
        named = _dreamer_inputs(policy, n, rng)
        obs = {name[4:]: t for name, t in named[:-2]}
        uniform = named[-1][1]
        with torch.no_grad():
            action, state = module.player.act(obs, state, True, uniform=uniform)
        want = to_env_actions(action, policy.spaces)
        got = run_exported(path, fmt, {k: v.numpy() for k, v in obs.items()}, file_state, uniform.numpy())
        if np.issubdtype(want.dtype, np.integer):
            if not np.array_equal(got[0], want):
                raise HeronError(f"{path}: the exported policy chose other actions than the run's player")
        else:
            worst = max(worst, float(np.abs(got[0] - want).max()))
        worst = max(worst, float(np.abs(got[1] - state.numpy()).max()))
        file_state = got[1]
    if worst > 1e-4:
        raise HeronError(f"{path}: the exported policy differs from the run's player by up to {worst:.3g}")
    return worst
