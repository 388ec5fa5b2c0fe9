"""The Python API: ``heron.train(...)``, ``heron.resume(run_dir)``, ``heron.load(run_dir)`` and
``heron.evaluate(run_dir)``."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from heron import registry
from heron.accel.acting import Policy
from heron.config import apply_overrides
from heron.envs.ids import callable_env_id, check_env_id, instance_env_id, is_callable_id, takes_num_envs, use_callable
from heron.errors import EnvCrashed, Fault, HeronError, WriteFailed, first_line
from heron.ops import dist
from heron.runtime import checkpoint as ckpt
from heron.runtime import evalworker
from heron.runtime.episodes import EVAL_SEED_OFFSET
from heron.runtime.episodes import evaluate as run_episodes
from heron.runtime.run import Run
from heron.runtime.rundir import check_state, read_config, read_yaml
from heron.runtime.setup import resolve_device


def make_config(
    algo: str, presets: tuple[str, ...] | list[str] = (), config_file: str | None = None, **overrides: Any
) -> Any:
    """Resolve a config: defaults -> config file -> presets (in order) -> overrides; validated."""
    module = registry.get(algo)
    cfg = module.Config()
    if config_file:
        data = read_yaml(config_file)
        data.pop("algo", None)
        data.pop("run_dir", None)  # a fresh run: reading a run's config back must not reuse its dir
        cfg = apply_overrides(cfg, data, f"config file {config_file}", saved=True)
    for name in presets:
        if name not in module.PRESETS:
            raise HeronError(f"unknown preset {name!r} for {algo}; choose from {', '.join(module.PRESETS)}")
        cfg = apply_overrides(cfg, module.PRESETS[name], f"preset {name}")
    cfg = apply_overrides(cfg, overrides, "argument")
    cfg.validate()
    return cfg


def train(
    algo: str,
    presets: tuple[str, ...] | list[str] = (),
    config_file: str | None = None,
    env: Any = None,
    callback: Callable[[dict], None] | None = None,
    eval_env: Callable[..., Any] | None = None,
    **hyperparameters: Any,
) -> dict:
    """Train an algorithm and return the summary of its final evaluation.

    Example: ``heron.train("sac", env_id="Hopper-v5", total_steps=100_000, run_dir="runs/h")``.

    Args:
        algo: "sac", "td3", "ppo", "dreamer_v2" or "dreamer_v3".
        presets: named overlays applied in order, as ``--preset`` (``heron list`` names them).
        config_file: a YAML file of options read before the presets, as ``--config`` (a run's
            ``config.yaml`` reproduces that run).
        env: instead of ``env_id``, one of

            * a callable (an env class or a function) that returns a Gymnasium env;
            * a vector env factory: a callable with a ``num_envs`` parameter that returns a
              ``gymnasium.vector.VectorEnv``; the run steps it natively (``vector_mode="native"``)
              and evaluates on one-env vector envs of it;
            * a ``gymnasium.vector.VectorEnv`` instance: the run steps it (``num_envs`` is its
              own) and leaves closing it to the caller; evaluation plays single envs of the id
              it was made from (``gymnasium.make_vec``), or of ``eval_env``.

            The run records a callable's import path (``module:name``); one that a new process
            cannot import (a lambda, a closure, a function of ``__main__``, an instance) must be
            given again to ``resume`` and ``evaluate``.
        callback: called with each deterministic evaluation as it is logged (``{"step",
            "mean_return", "std_return", "episodes"}``, the final one included). An exception it
            raises ends the run there and reaches the caller (``heron tune`` prunes trials so).
        eval_env: with a vector env instance as ``env``, a callable that returns one env of it,
            for evaluation.
        **hyperparameters: any training flag in snake case (``total_steps=100_000``,
            ``policy_lr=1e-3``); the algorithm's page lists them.

    Returns:
        ``{"run_dir", "step", "env_id", "mean_return", "std_return", "episodes", "best_eval"}``:
            mean, std and episode count of the final deterministic evaluation, and the best
            evaluation of the run.

    Raises:
        HeronError: bad input (unknown algorithm, option or env, an impossible value).
        Fault: the run ended by a fault after keeping its last good checkpoint (``Diverged``,
            ``EnvCrashed``, ``WriteFailed``).
        Interrupted: SIGINT/SIGTERM stopped the run after a checkpoint of the current step.

    What the run changes in this process it puts back when it returns or raises: torch's thread
    count, the deterministic-algorithms mode, cuDNN's and the TF32 flags, ``CUBLAS_WORKSPACE_CONFIG``,
    the SIGINT/SIGTERM handlers and the state of Python's, NumPy's and torch's global random
    generators (``heron.runtime.process``). It does not change glibc's allocator, as the ``heron``
    command does for its own process (``heron.runtime.memory``: freed memory kept in the heap, faster
    for PPO from pixels on a CPU); a script that trains in a process of its own can call
    ``heron.runtime.memory.keep_freed_memory()`` first.

    Under torchrun (several processes) every rank calls this with the same arguments: data-parallel
    training (docs/guide/distributed.md)."""
    if env is not None:
        if "env_id" in hyperparameters:
            raise HeronError("give env or env_id, not both")
        if isinstance(env, gym.vector.VectorEnv):
            hyperparameters["env_id"] = instance_env_id(env)
            use_callable(hyperparameters["env_id"], env, eval_env)
            if hyperparameters.setdefault("num_envs", env.num_envs) != env.num_envs:
                raise HeronError(
                    f"num_envs={hyperparameters['num_envs']}, but the vector env given has {env.num_envs} envs"
                )
        else:
            hyperparameters["env_id"] = callable_env_id(env)
        if isinstance(env, gym.vector.VectorEnv) or takes_num_envs(env):
            mode = hyperparameters.setdefault("vector_mode", "native")
            if mode != "native":
                raise HeronError(f"a vector env trains with vector_mode='native', not {mode!r}")
        if is_callable_id(hyperparameters["env_id"]):
            print(
                f"heron: note: env {hyperparameters['env_id']} cannot be imported by another process: "
                "`heron eval` and `heron train --resume` of this run will ask for it; in Python pass it again "
                "(heron.evaluate(run_dir, env=...), heron.resume(run_dir, env=...))",
                file=sys.stderr,
            )
    elif eval_env is not None:
        raise HeronError("eval_env goes with env= a vector env instance")
    cfg = make_config(algo, presets, config_file, **hyperparameters)
    module = registry.get(algo)
    check_env_id(cfg.env_id)
    module.check(cfg)
    check_world(module, cfg)
    run = Run.start(module, cfg)
    run.evaluations.on_eval = callback
    return _run(module, run)


def resume(
    run_dir: str | Path,
    total_steps: int | None = None,
    env: Any = None,
    torch_threads: int | None = None,
    eval_async: str | None = None,
    eval_env: Callable[..., Any] | None = None,
) -> dict:
    """Continue an interrupted run from its latest checkpoint, exactly where it stopped.

    Args:
        run_dir: the run directory.
        total_steps: a new step target (default: the run's own).
        env: the callable or vector env the run was trained on, when it was given as one
            (``train``).
        torch_threads: a new intra-op thread count (0 = choose by the free cores), for another
            machine or a neighbour; a count other than the run's own may change the order of
            floating-point sums, so the continuation is then not bitwise that of an uninterrupted
            run.
        eval_async: where evaluations are played ("auto", "on", "off"), for another machine; the
            results are the same.
        eval_env: with a vector env instance as ``env``, a callable that returns one env of it.

    Returns:
        The summary ``train`` returns."""
    algo, data = read_config(run_dir)
    module = registry.get(algo)
    cfg = apply_overrides(module.Config(), data, f"{run_dir}/config.yaml", saved=True)
    if env is not None:
        use_callable(cfg.env_id, env, eval_env)
    check_env_id(cfg.env_id)  # before the run reopens: a missing module or callable changes nothing there
    cfg = dataclasses.replace(cfg, run_dir=str(run_dir))
    if total_steps is not None:
        cfg = dataclasses.replace(cfg, total_steps=total_steps)
    if torch_threads is not None:
        cfg = dataclasses.replace(cfg, torch_threads=torch_threads)
    if eval_async is not None:
        cfg = dataclasses.replace(cfg, eval_async=eval_async)
    cfg.validate()
    spaces = module.check(cfg)
    check_world(module, cfg)
    return _run(module, Run.resume(module, cfg, spaces=spaces))


def check_world(module: Any, cfg: Any) -> None:
    """Under torchrun: the global sizes split over the ranks (``dist.check_split``), and nothing
    asked of a rank that data-parallel training does not do; ``--eval-async on`` only where a
    worker process can evaluate. Checked on every rank alike, before any rank opens the run, so bad
    input ends them all with exit 2."""
    world = dist.from_env()
    dist.check_split(cfg, world)
    if world.distributed and cfg.cuda_graphs:
        raise HeronError("--cuda-graphs is for one process; under torchrun use --compile or neither")
    evalworker.check(module, cfg, world.distributed)


def _run(module: Any, run: Run) -> dict:
    try:
        return module.train(run.cfg, run)
    except EnvCrashed as exc:
        raise EnvCrashed(f"{exc}; {run.save_after_crash()}") from exc
    except WriteFailed as exc:
        raise WriteFailed(
            f"{exc}; {run.kept()}; make room, then continue with: heron train --resume {run.run_dir}"
        ) from exc
    except RuntimeError as exc:
        if not run.world.distributed:
            raise
        # a collective failed: another rank died (its own message, if any, is its last words)
        raise Fault(
            f"rank {run.world.rank}: another process of this torchrun job failed or left it "
            f"({first_line(exc)[:160]}); {run.kept()}; continue with: heron train --resume {run.run_dir}"
        ) from exc
    finally:
        run.close()


def load_checkpoint(
    run_dir: str | Path, which: str = "latest", env: Callable[..., Any] | None = None, check_env: bool = False
) -> tuple[str, Any, dict]:
    """(algo, config, state) of a run's ``latest`` or ``best`` checkpoint, or of a checkpoint file.
    ``check_env``: also that the env (``env``: the callable the run was trained on, when it was
    given as one) has the spaces the checkpoint was saved for."""
    algo, data = read_config(run_dir)
    module = registry.get(algo)
    cfg = apply_overrides(module.Config(), data, f"{run_dir}/config.yaml", saved=True)
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
    if env is not None:
        use_callable(cfg.env_id, env)
    check_state(state, path, algo, module.check(cfg) if check_env else None)
    return algo, cfg, state


def load(run_dir: str | Path, which: str = "latest", device: str = "auto") -> Policy:
    """The trained policy of a run, with its normalization statistics.

    Args:
        run_dir: the run directory.
        which: "latest", "best", or a checkpoint file.
        device: "auto", "cpu" or "cuda[:N]".

    Returns:
        A ``Policy``: ``policy.predict(obs, deterministic=True)`` gives numpy actions for one
            observation or a batch."""
    algo, cfg, state = load_checkpoint(run_dir, which)
    policy = registry.get(algo).load_policy(cfg, state, resolve_device(device))
    policy.step, policy.env_id, policy.algo = int(state["step"]), cfg.env_id, algo
    return policy


def evaluate(
    run_dir: str | Path,
    episodes: int | None = None,
    checkpoint: str = "latest",
    seed: int | None = None,
    video: bool = False,
    device: str = "auto",
    env: Callable[..., Any] | None = None,
    envs: int | None = None,
) -> dict:
    """Play a saved policy deterministically, as ``heron eval --json`` does.

    Args:
        run_dir: the run directory.
        episodes: episodes to play (default: the run's ``eval_episodes``, so that the defaults
            repeat the run's own evaluation of that checkpoint).
        checkpoint: "latest", "best", or a checkpoint file.
        seed: episode k starts from ``reset(seed=seed + k)``; by default the run's own evaluation
            seeds.
        video: also write an mp4 of the first episode into ``run_dir/videos/``.
        device: "auto", "cpu" or "cuda[:N]".
        env: the callable or vector env the run was trained on, when it was given as one
            (``train``).
        envs: episodes played at once, one env instance each (default: the run's ``eval_envs``).

    Returns:
        ``{"mean_return", "std_return", "episodes", "returns", "env_id", "algo", "steps"}``, and
            ``"video"`` (its path) when one was written."""
    if episodes is not None and episodes <= 0:
        raise HeronError(f"--episodes must be positive, got {episodes}")
    if envs is not None and envs <= 0:
        raise HeronError(f"--envs must be positive, got {envs}")
    algo, cfg, state = load_checkpoint(run_dir, checkpoint, env, check_env=True)
    episodes = episodes if episodes is not None else cfg.eval_episodes
    module = registry.get(algo)
    policy = module.load_policy(cfg, state, resolve_device(device))
    video_path = None
    if video:
        video_path = str(Path(run_dir) / "videos" / f"eval_{algo}_step_{int(state['step'])}.mp4")
    seed = seed if seed is not None else cfg.seed + EVAL_SEED_OFFSET
    returns = run_episodes(
        policy.on_host(),
        cfg.env_id,
        episodes,
        seed,
        video_path=video_path,
        env_fn=evalworker.eval_env_fn(module, cfg),
        at_once=envs or cfg.eval_envs,
    )
    assert returns is not None, "nothing asks it to stop"
    out = {
        "mean_return": float(returns.mean()),
        "std_return": float(returns.std()),
        "episodes": len(returns),
        "env_id": cfg.env_id,
        "algo": algo,
        "steps": int(state["step"]),
        "returns": returns.tolist(),
    }
    if video_path:
        out["video"] = video_path
    return out
