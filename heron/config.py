"""The configuration every algorithm shares, and the machinery that turns dataclasses into CLIs.

Config flows one way: dataclass defaults -> ``--config FILE.yaml`` -> ``--preset NAME ...`` (in
order) -> command-line flags -> ``validate()`` -> ``train(cfg, run)``. Each field carries a one-line
help text in its metadata; the CLI, ``heron list`` and the docs read it from there.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import typing
from dataclasses import dataclass
from typing import Any

from heron.errors import HeronError, install_hint


def opt(default: Any, help: str, choices: tuple | None = None) -> Any:
    """A config field with a one-line help text (and optionally its allowed values)."""
    if isinstance(default, (list, dict)):
        raise TypeError("use tuples for sequence defaults")
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


@dataclass
class RunConfig:
    """Fields shared by every algorithm: environment, seed, budget, devices, cadences, logging."""

    env_id: str = opt(
        "Pendulum-v1",
        "Gymnasium environment id (e.g. Hopper-v5, HopperBulletEnv-v0), or your own: "
        "module:EnvId imports module first; module:name may name an env class or factory",
    )
    seed: int = opt(1, "seed of python, numpy, torch and the environments")
    total_steps: int = opt(1_000_000, "total environment steps to train for (summed over envs)")
    num_envs: int = opt(1, "number of parallel environments")
    vector_mode: str = opt(
        "sync",
        "vector env: sync (same process), async (subprocesses), or native: the env's own "
        "vector implementation, for an id registered with a vector_entry_point",
        ("sync", "async", "native"),
    )
    device: str = opt("auto", "torch device: auto (cuda when available), cpu or cuda[:N]")
    run_dir: str = opt("", "run directory; empty means runs/<env>__<algo>__<seed>__<time>")
    eval_every: int = opt(10_000, "deterministic evaluation every N env steps (0 = off)")
    eval_episodes: int = opt(10, "episodes per evaluation")
    eval_envs: int = opt(
        10,
        "envs an evaluation plays its episodes in at once, one episode each, acting for all "
        "of them in one batch (1: one episode after another in one env, for an env of which "
        "only one instance can exist)",
    )
    eval_async: str = opt(
        "auto",
        "play evaluations in a worker process while training goes on, from a snapshot "
        "of the policy, with the same results: auto (a GPU run with a core spare beyond its "
        "torch threads, env workers and other processes' load), on or off",
        ("auto", "on", "off"),
    )
    checkpoint_every: int = opt(
        100_000, "checkpoint every N env steps (0 = off; a checkpoint is always written at the end)"
    )
    checkpoint_minutes: float = opt(
        10.0,
        "also checkpoint by wall time: first after 1 minute, then every 2, 4, 8, ... minutes up to this many (0 = off)",
    )
    keep_checkpoints: int = opt(3, "step-numbered checkpoints kept on disk (latest and best are always kept)")
    log_every: int = opt(1000, "write losses every N env steps (the only host syncs of training)")
    progress: str = opt(
        "auto", "progress display: auto, bar, log (plain lines) or none", ("auto", "bar", "log", "none")
    )
    torch_threads: int = opt(
        0,
        "torch intra-op threads (0 = one per free core, at most 4: "
        "cores other processes keep busy are left out, also during the run)",
    )
    torch_deterministic: bool = opt(True, "use deterministic torch kernels")
    compile: bool = opt(False, "torch.compile the update step")
    cuda_graphs: bool = opt(
        False,
        "record the gradient step (and the acting step) as a CUDA graph after 3 eager "
        "steps and replay it (CUDA only; the same computation with far fewer kernel launches)",
    )
    track: bool = opt(False, "log to Weights & Biases (needs wandb installed)")
    wandb_project: str = opt("heron", "Weights & Biases project name")
    capture_video: bool = opt(False, "record a video of the final evaluation into the run directory")
    precision: str = opt(
        "32",
        "numerics: 32 (float32), tf32 (TF32 matrix products on CUDA), bf16-mixed (bfloat16 "
        "matrix products, CPU or CUDA), 16-mixed (float16 with loss scaling, CUDA)",
        ("32", "tf32", "bf16-mixed", "16-mixed"),
    )
    dist_backend: str = opt(
        "auto",
        "torch.distributed backend under torchrun: auto (NCCL when each local rank "
        "has its own GPU, else gloo), nccl or gloo",
        ("auto", "nccl", "gloo"),
    )

    def validate(self) -> None:
        """Reject impossible values with a one-line reason."""
        positive = ["total_steps", "num_envs", "eval_episodes", "eval_envs", "keep_checkpoints", "log_every"]
        for name in positive:
            if getattr(self, name) <= 0:
                raise HeronError(f"--{flag(name)} must be positive, got {getattr(self, name)}")
        for name in ["eval_every", "checkpoint_every", "checkpoint_minutes", "torch_threads"]:
            if getattr(self, name) < 0:
                raise HeronError(f"--{flag(name)} must be >= 0, got {getattr(self, name)}")
        check_device(self.device, "device")
        if self.env_id.startswith("envpool/") and self.vector_mode != "native":
            raise HeronError(f"{self.env_id} is EnvPool's vector env: train on it with --vector-mode native")
        if self.precision == "16-mixed":
            from heron.accel.precision import check

            check(self.precision, self.device)
        if self.cuda_graphs:
            import torch

            if self.device == "cpu" or not torch.cuda.is_available():
                raise HeronError("--cuda-graphs needs a CUDA device (--device cuda)")
            if self.precision == "16-mixed":  # the GradScaler reads its inf check on the host every step
                raise HeronError("--cuda-graphs cannot capture 16-mixed's loss scaling: use --precision bf16-mixed")
        if self.track and importlib.util.find_spec("wandb") is None:
            raise HeronError(f"--track needs wandb: {install_hint('wandb')}")
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            if choices and getattr(self, f.name) not in choices:
                raise HeronError(
                    f"--{flag(f.name)} must be one of {', '.join(map(str, choices))}, got {getattr(self, f.name)!r}"
                )


def check_device(name: str, option: str) -> None:
    """auto, cpu or cuda[:N], and CUDA only where it is available."""
    if not (name in ("auto", "cpu", "cuda") or (name.startswith("cuda:") and name[5:].isdigit())):
        raise HeronError(f"--{option} must be auto, cpu or cuda[:N], got {name!r}")
    if name.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise HeronError(f"--{option} {name} requested but CUDA is not available here")
        if ":" in name and int(name[5:]) >= torch.cuda.device_count():
            raise HeronError(f"--{option} {name}: only {torch.cuda.device_count()} CUDA device(s) here")


def flag(name: str) -> str:
    return name.replace("_", "-")


def field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def coerce(cls: type, name: str, value: Any) -> Any:
    """Convert a YAML/preset/CLI value to the field's declared type, or raise HeronError."""
    kind = field_types(cls)[name]
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if kind is int:
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, str):  # accept 1000, 1_000 and 1e6
                text = value.replace("_", "")
                value = int(text) if text.lstrip("-").isdigit() else float(text)
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind is str:
            return str(value)
        if typing.get_origin(kind) is tuple:
            if isinstance(value, str):
                value = [v for v in value.replace(",", " ").split() if v]
            item = typing.get_args(kind)[0]
            return tuple(str(v) if item is str else int(v) for v in value)
    except (TypeError, ValueError):
        raise HeronError(f"--{flag(name)} expects {type_name(kind)}, got {value!r}") from None
    raise TypeError(f"unsupported config type {kind} for {name}")


def type_name(kind: Any) -> str:
    if typing.get_origin(kind) is tuple:
        return "a list of strings" if typing.get_args(kind)[0] is str else "a list of integers"
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string"}.get(kind, str(kind))


def apply_overrides(cfg: Any, overrides: dict[str, Any], source: str, saved: bool = False) -> Any:
    """Return a copy of ``cfg`` with ``overrides`` (keys in snake or kebab case) applied. ``saved``:
    the overrides come from a saved config (a run's config.yaml, a --config file), where a removed
    option is left out rather than refused."""
    names = {f.name for f in dataclasses.fields(cfg)}
    changes = {}
    for key, value in overrides.items():
        name = str(key).replace("-", "_")
        removed = getattr(type(cfg), "REMOVED", {})
        if name in removed and name not in names:
            if saved:
                continue
            raise HeronError(f"{source}: --{flag(name)} was removed: {removed[name]}")
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f" (did you mean {flag(close[0])}?)" if close else ""
            raise HeronError(f"{source}: unknown option {key!r}{hint}")
        changes[name] = coerce(type(cfg), name, value)
    return dataclasses.replace(cfg, **changes)


def to_dict(cfg: Any) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


@dataclass
class OffPolicyConfig(RunConfig):
    """Fields SAC and TD3 share: replay, discounting, target networks, batches, learning rates."""

    # Options these algorithms had and no longer have, with what to do instead (``apply_overrides``):
    # a saved config that names one (a run or a config file made by an earlier heron) is read
    # without it; asked for anew, it is refused.
    REMOVED: typing.ClassVar[dict[str, str]] = {
        "act_on_host": "acting stays on the training device (acting on a host copy of the actor measured 14% "
        "slower for SAC and no faster for TD3 on a GPU); leave it out",
    }

    buffer_size: int = opt(1_000_000, "replay buffer capacity in transitions")
    buffer_device: str = opt("auto", "where replay data lives: auto (the training device), cpu, or cuda")
    gamma: float = opt(0.99, "discount factor")
    tau: float = opt(0.005, "target network Polyak coefficient")
    batch_size: int = opt(256, "transitions per gradient step")
    learning_starts: int = opt(5000, "env steps of uniform random actions before learning starts")
    policy_lr: float = opt(3e-4, "actor learning rate")
    q_lr: float = opt(1e-3, "critic learning rate")
    policy_frequency: int = opt(2, "actor update every N gradient steps")
    gradient_steps: int = opt(1, "gradient steps per vector env step")
    n_step: int = opt(
        1,
        "n-step returns: each critic target sums the discounted rewards of up to N steps and "
        "bootstraps with gamma^k after the k steps it summed; a termination, a truncation or the "
        "newest stored step ends the sum early (1 = one-step targets)",
    )
    hidden_sizes: tuple[int, ...] = opt((256, 256), "hidden layer sizes of actor and critics")
    max_grad_norm: float = opt(0.0, "clip actor and critic gradient norms to this (0 = off)")
    obs_norm: bool = opt(False, "normalize observations with running statistics (saved with the model)")
    act_ahead: bool = opt(
        True,
        "take the next env step's actions before gradient steps that leave the actor as it "
        "is (the critic-only steps between actor updates; feed-forward actors), so that on a GPU "
        "the env steps while the critics train; the same numbers either way",
    )

    def validate(self) -> None:
        super().validate()
        for name in ("policy_lr", "q_lr", "batch_size", "buffer_size", "gradient_steps", "policy_frequency", "n_step"):
            if getattr(self, name) <= 0:
                raise HeronError(f"--{flag(name)} must be positive, got {getattr(self, name)}")
        for name in ("learning_starts", "max_grad_norm"):
            if getattr(self, name) < 0:
                raise HeronError(f"--{flag(name)} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.gamma <= 1.0:
            raise HeronError(f"--gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise HeronError(f"--tau must be in (0, 1], got {self.tau}")
        if self.batch_size > self.buffer_size:
            raise HeronError(f"--batch-size {self.batch_size} is larger than --buffer-size {self.buffer_size}")
        if self.buffer_size < self.num_envs:
            raise HeronError(f"--buffer-size {self.buffer_size} is smaller than --num-envs {self.num_envs}")
        if not self.hidden_sizes or min(self.hidden_sizes) <= 0:
            raise HeronError("--hidden-sizes needs at least one layer, all sizes positive")
        check_device(self.buffer_device, "buffer-device")
