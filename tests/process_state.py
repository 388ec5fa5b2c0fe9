"""The process-wide state a test must leave as it found it, so that the suite passes in any order.

``conftest.py`` takes a :func:`snapshot` before each test's setup and compares it with one taken
after its teardown (every fixture undone, ``monkeypatch`` included). A difference fails the test
at teardown, naming what changed. What is compared:

- ``sys.modules``: a module that was loaded before must still be the same object (a test that
  deletes or replaces one leaves later imports a second copy of its classes); a module loaded
  during the test must be the one a plain ``import`` finds now (a stand-in imported from a folder
  the test put on ``sys.path`` and took off again would shadow the real package in later tests);
- ``sys.path``, the working directory, the environment variables and the umask;
- torch's intra-op thread count, default dtype and device, deterministic-algorithms mode, float32
  matmul precision, the cuDNN/TF32 flags, grad mode, anomaly detection and autocast;
- numpy's floating-point error handling;
- the Python-level signal handlers;
- Gymnasium's registry (ids registered and what they make);
- the root logger's handlers and level, and ``logging.disable``;
- heron's own process-level memory (callables given as envs, fault-injection counts);
- threads and child processes the test started and left running.

Global random-number generators are not compared: drawing from them is what code does. A test that
needs a fixed stream seeds it itself.
"""

from __future__ import annotations

import importlib.machinery
import logging
import os
import signal
import sys
import sysconfig
import threading
from dataclasses import dataclass, field
from typing import Any

# What other packages do to the process the first time they are imported or used, in whichever test
# does that first: the same in every order, so not a test's leak.
_LONG_LIVED_CHILDREN = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")  # the stdlib's helpers
_LONG_LIVED_THREADS = ("tqdm_monitor",)  # tqdm's monitor, started with its first bar (a daemon); and
# Inductor's compile pool (_kept_pools)
_SET_ON_IMPORT = {  # environment variables
    "LD_LIBRARY_PATH": "opencv-python (cv2) adds its bundled libraries",
    "PYOPENGL_PLATFORM": "dm_control's renderer chooses a headless OpenGL platform",
    "TORCHINDUCTOR_CACHE_DIR": "torch's Inductor, at its first compilation",
    "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR": "torch's Inductor, at its first compilation",
}
_REPLACED_ON_IMPORT = {  # modules
    "distutils": "setuptools' import hook serves its own distutils in place of the standard library's",
}
_REPLACED_PREFIXES = ("torch._inductor.runtime.compile_tasks.",)  # Inductor reloads the code it generated
_MADE_ON_IMPORT = ("_cython_",)  # Cython's runtime module, shared by the extensions built with one version
# Gymnasium ids heron registers on first use, the same whichever test uses them first: a user's
# importable factory (``module:name``); DeepMind Control ids have string entry points (below).
_HERON_REGISTERED = ("heron-user/",)


def _torch_state() -> dict[str, Any]:
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_num_threads"):  # not imported, or still importing
        return {}
    state = {
        "torch.get_num_threads()": torch.get_num_threads(),
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled(),
        "torch.is_deterministic_algorithms_warn_only_enabled()": torch.is_deterministic_algorithms_warn_only_enabled(),
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        "torch.backends.cudnn.deterministic": torch.backends.cudnn.deterministic,
        "torch.backends.cudnn.benchmark": torch.backends.cudnn.benchmark,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.is_grad_enabled()": torch.is_grad_enabled(),
        "torch.is_anomaly_enabled()": torch.is_anomaly_enabled(),
        "torch.is_inference_mode_enabled()": torch.is_inference_mode_enabled(),
        "torch.is_autocast_enabled('cpu')": torch.is_autocast_enabled("cpu"),
    }
    if hasattr(torch, "get_default_device"):
        state["torch.get_default_device()"] = torch.get_default_device()
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None:
        state["torch._inductor.config.deterministic"] = inductor.deterministic
    return state


def _numpy_state() -> dict[str, Any]:
    np = sys.modules.get("numpy")
    return {} if np is None or not hasattr(np, "geterr") else {"numpy.geterr()": np.geterr()}


def _signal_handlers() -> dict[str, Any]:
    handlers = {}
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            handlers[signal.Signals(sig).name] = signal.getsignal(sig)
        except (ValueError, OSError):  # a real-time signal without a name
            continue
    return handlers


def _gym_registry() -> dict[str, Any]:
    gym_envs = sys.modules.get("gymnasium.envs.registration")
    if gym_envs is None:
        return {}
    return {
        env_id: (spec.entry_point, spec.kwargs, spec.max_episode_steps) for env_id, spec in gym_envs.registry.items()
    }


def _registry_changes(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Ids removed or registered anew, and ids added by the test itself; an id added by importing a
    package (a string entry point, as ALE's and dm_control's) or registered by heron on first use is
    the same in every order."""
    removed = sorted(old.keys() - new.keys())
    changed = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
    added = sorted(
        k for k in new.keys() - old.keys() if not isinstance(new[k][0], str) and not k.startswith(_HERON_REGISTERED)
    )
    if not (removed or changed or added):
        return None
    return (
        f"gymnasium registry: ids added {added}, removed {removed}, registered anew {changed} "
        "(gymnasium.registry.pop(id) what the test registered)"
    )


def _heron_state() -> dict[str, Any]:
    """heron's own process-level memory: the callables ``heron.train(env=fn)`` was given, and the
    fault-injection points' counts and stop signal (``heron.runtime.faults``)."""
    state = {}
    envids, faults = sys.modules.get("heron.envs.ids"), sys.modules.get("heron.runtime.faults")
    if envids is not None:
        state["heron.envs.ids._CALLABLES (forget_callable)"] = dict(envids._CALLABLES)
    if faults is not None:
        state["heron.runtime.faults._counts"] = dict(faults._counts)
        state["heron.runtime.faults._released.is_set()"] = faults._released.is_set()
    return state


def _children() -> dict[int, str]:
    """This process's live child processes (zombies, already exited, left out): pid -> command."""
    children = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # not Linux
        return children
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        continue
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:  # exited meanwhile
                continue
            children[pid] = cmd
    return children


def _kept_pools() -> set[threading.Thread]:
    """The worker threads of the pool torch's Inductor keeps for compiling, from its first compilation
    on (``AsyncCompile.pool``, cached for the process)."""
    module = sys.modules.get("torch._inductor.async_compile")
    pool = getattr(getattr(module, "AsyncCompile", None), "pool", None)
    if pool is None or not hasattr(pool, "cache_info") or pool.cache_info().currsize == 0:
        return set()
    return set(getattr(pool(), "_threads", ()))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@dataclass
class Snapshot:
    modules: dict[str, Any]
    values: dict[str, Any]
    environ: dict[str, str]
    threads: set[threading.Thread]
    children: dict[int, str]
    notes: list[str] = field(default_factory=list)


def snapshot() -> Snapshot:
    root = logging.getLogger()
    values = {
        "sys.path": list(sys.path),
        "os.getcwd()": os.getcwd(),
        "os.umask()": _umask(),
        "logging root handlers": list(root.handlers),
        "logging root level": root.level,
        "logging.disable level": root.manager.disable,
        **_torch_state(),
        **_numpy_state(),
        **{f"signal handler for {name}": h for name, h in _signal_handlers().items()},
    }
    registry = _gym_registry()
    if registry:
        values["gymnasium registry"] = registry
    values.update(_heron_state())
    return Snapshot(dict(sys.modules), values, dict(os.environ), set(threading.enumerate()), _children())


def _module_file(module: Any) -> str | None:
    path = getattr(module, "__file__", None)
    return os.path.realpath(path) if path else None


def _installed(path: str) -> bool:
    """Whether ``path`` lies in the standard library or an installed package's folder."""
    return any(path.startswith(os.path.realpath(folder) + os.sep) for folder in _INSTALLED)


_INSTALLED = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}


def _shadowing(name: str, module: Any) -> str | None:
    """Why a top-level module loaded during a test would change what later tests import, or None.
    A module a plain import would find now is fine, and so is one an installed package loaded by
    another name (pybullet_envs' ``robot_bases``, SciPy's ``_cyutility``); one made by hand
    (``types.ModuleType``) or loaded from a folder no longer on ``sys.path`` is not."""
    if "." in name or name in sys.builtin_module_names or name.startswith(_MADE_ON_IMPORT):
        return None
    spec = getattr(module, "__spec__", None)
    if spec is None:
        return (
            f"sys.modules[{name!r}] was made by hand (no import spec) and left there: later imports of {name!r} get it"
        )
    loaded = _module_file(module)
    if loaded is None:  # a namespace package, or one a library made through importlib
        return None
    found = importlib.machinery.PathFinder.find_spec(name, sys.path)
    found_file = os.path.realpath(found.origin) if found is not None and found.origin else None
    if found_file == loaded or (found_file is None and _installed(loaded)):
        return None
    return (
        f"sys.modules[{name!r}] is {loaded}, which a plain import would not find now "
        f"({found_file or 'no module'}): remove it (and its submodules) from sys.modules"
    )


def differences(before: Snapshot, after: Snapshot) -> list[str]:
    """What a test changed in the process and did not undo, one line each."""
    found = []
    for name, module in before.modules.items():
        now = after.modules.get(name)
        if now is None:
            found.append(f"sys.modules[{name!r}] was removed (a later import makes a second copy of its classes)")
        elif now is not module and name not in _REPLACED_ON_IMPORT and not name.startswith(_REPLACED_PREFIXES):
            found.append(f"sys.modules[{name!r}] was replaced by another module object")
    for name, module in after.modules.items():
        if name not in before.modules and name not in _REPLACED_ON_IMPORT:
            why = _shadowing(name, module)
            if why:
                found.append(why)
    for key in before.values.keys() | after.values.keys():
        old, new = before.values.get(key, "<absent>"), after.values.get(key, "<absent>")
        if old == "<absent>" or new == "<absent>":
            continue  # torch or gymnasium first imported by this test: nothing to compare with
        if old == new:
            continue
        if key == "gymnasium registry":
            if (why := _registry_changes(old, new)) is not None:
                found.append(why)
        elif key == "sys.path":
            appended = new[len(old) :]
            if new[: len(old)] != old or not all(_installed(os.path.realpath(p)) for p in appended):
                found.append(f"sys.path: {old!r} -> {new!r}")
            # else: a package appended one of its own folders on import (setuptools' _vendor)
        else:
            found.append(f"{key}: {old!r} -> {new!r}")
    for var in sorted(before.environ.keys() | after.environ.keys()):
        if before.environ.get(var) != after.environ.get(var) and var not in _SET_ON_IMPORT:
            found.append(f"os.environ[{var!r}]: {before.environ.get(var)!r} -> {after.environ.get(var)!r}")
    kept = _kept_pools()
    for thread in after.threads - before.threads:
        if thread.is_alive() and thread not in kept and not (thread.daemon and thread.name in _LONG_LIVED_THREADS):
            found.append(f"thread {thread.name!r} (daemon={thread.daemon}) still running")
    for pid, cmd in after.children.items():
        if pid not in before.children and not any(kind in cmd for kind in _LONG_LIVED_CHILDREN):
            found.append(f"child process {pid} still running: {cmd[:200]}")
    return found
