"""The Python API: ``heron.train(...)`` and ``heron.load(run_dir)``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from heron import registry
from heron.config import HeronError, apply_overrides
from heron.core import checkpoint as ckpt
from heron.core.envs import check_env_id
from heron.core.policy import Policy
from heron.core.run import Run, read_config, read_yaml, resolve_device


def make_config(algo: str, presets: tuple[str, ...] | list[str] = (), config_file: str | None = None,
                **overrides: Any) -> Any:
    """Resolve a config: defaults -> config file -> presets (in order) -> overrides; validated."""
    module = registry.get(algo)
    cfg = module.Config()
    if config_file:
        data = read_yaml(config_file)
        data.pop("algo", None)
        data.pop("run_dir", None)  # a fresh run: reading a run's config back must not reuse its dir
        cfg = apply_overrides(cfg, data, f"config file {config_file}")
    for name in presets:
        if name not in module.PRESETS:
            raise HeronError(f"unknown preset {name!r} for {algo}; choose from {', '.join(module.PRESETS)}")
        cfg = apply_overrides(cfg, module.PRESETS[name], f"preset {name}")
    cfg = apply_overrides(cfg, overrides, "argument")
    cfg.validate()
    return cfg


def train(algo: str, presets: tuple[str, ...] | list[str] = (), config_file: str | None = None,
          **hyperparameters: Any) -> dict:
    """Train ``algo`` ("sac", "td3") and return a summary dict: run_dir, step, env_id,
    mean_return, std_return, episodes (of the final deterministic evaluation), best_eval.

    Example: ``heron.train("sac", env_id="Hopper-v5", total_steps=100_000, run_dir="runs/h")``."""
    cfg = make_config(algo, presets, config_file, **hyperparameters)
    module = registry.get(algo)
    check_env_id(cfg.env_id)
    module.check(cfg)
    return _run(module, Run.start(algo, cfg))


def resume(run_dir: str | Path, total_steps: int | None = None) -> dict:
    """Continue an interrupted run from its latest checkpoint (optionally to a new step target)."""
    algo, data = read_config(run_dir)
    module = registry.get(algo)
    cfg = apply_overrides(module.Config(), data, f"{run_dir}/config.yaml")
    cfg = dataclasses.replace(cfg, run_dir=str(run_dir))
    if total_steps is not None:
        cfg = dataclasses.replace(cfg, total_steps=total_steps)
    cfg.validate()
    return _run(module, Run.resume(algo, cfg))


def _run(module: Any, run: Run) -> dict:
    run.eval_env_fn = eval_env_fn(module, run.cfg)
    try:
        return module.train(run.cfg, run)
    finally:
        run.close()


def load_checkpoint(run_dir: str | Path, which: str = "latest") -> tuple[str, Any, dict]:
    """(algo, config, state) of a run's ``latest`` or ``best`` checkpoint, or of a checkpoint file."""
    algo, data = read_config(run_dir)
    module = registry.get(algo)
    cfg = apply_overrides(module.Config(), data, f"{run_dir}/config.yaml")
    ckpt_dir = Path(run_dir) / "checkpoints"
    if which == "latest":
        path = ckpt.latest_checkpoint(ckpt_dir)
        if path is None:
            raise HeronError(f"{run_dir} has no checkpoint yet")
    elif which == "best":
        path = ckpt_dir / "best.pt"
    else:
        path = Path(which)
    state = ckpt.load(path)
    if not isinstance(state, dict) or "actor" not in state or "step" not in state:
        raise HeronError(f"corrupt or unreadable checkpoint {path}: not a heron checkpoint")
    return algo, cfg, state


def load(run_dir: str | Path, which: str = "latest", device: str = "auto") -> Policy:
    """The trained policy of a run: ``policy.predict(obs, deterministic=True)`` -> numpy actions,
    for one observation or a batch. Normalization statistics come with it."""
    algo, cfg, state = load_checkpoint(run_dir, which)
    policy = registry.get(algo).load_policy(cfg, state, resolve_device(device))
    policy.step, policy.env_id, policy.algo = int(state["step"]), cfg.env_id, algo
    return policy


def eval_env_fn(module: Any, cfg: Any) -> Any:
    """The algorithm's own evaluation env factory ``f(render_mode) -> env`` (its wrapper stack), or
    None for heron's standard ``make_env``."""
    maker = getattr(module, "eval_env", None)
    return maker(cfg) if maker is not None else None
