"""The gradient steps never wait for the device: inside a step no tensor is read on the host
(``.item()``, ``float(t)``, ``if t:``), none is made from host data (``torch.tensor([...])``) and no
operation has an output whose size depends on the data (``nonzero``, boolean indexing). On a GPU each
of these stalls the step until the device has caught up, and a CUDA graph cannot record the step at
all (``--cuda-graphs``). The GPU tests (test_cuda.py) record the steps where there is a GPU; this
checks every algorithm's steps on the CPU, by watching the operations each step dispatches.

Two host reads belong to the CPU alone and are let through: an optimizer's step counter (a CPU
tensor unless the optimizer is ``capturable``, as --cuda-graphs makes it) and ``F.one_hot``'s range
check (PyTorch makes it on the CPU only). SAC's hand-written step picks the rows of each critic's
minimum by index on the CPU and by mask elsewhere (``LeanCritics.min_input_grad``): here it takes
the masks, as on a GPU."""

import importlib
import traceback

import numpy as np
import pytest
import torch
from test_ppo_lean import _minibatch
from test_ppo_lean import _spaces as ppo_spaces
from test_sac_lean import make_batch, make_nets, make_td3_nets, td3_batches
from torch.utils._python_dispatch import TorchDispatchMode

from heron.algos.ppo import lean as ppo_lean
from heron.algos.sac import lean as sac_lean
from heron.algos.sac.config import Config as SACConfig
from heron.algos.sac.train import make_update as sac_make_update
from heron.algos.td3 import lean as td3_lean
from heron.algos.td3.config import Config as TD3Config
from heron.algos.td3.train import make_update as td3_make_update
from heron.core.lean import LeanCritics
from heron.core.nets import adam
from heron.core.precision import Precision

CPU = torch.device("cpu")
# the operations that wait for the device: what each does
WAITS = {"_local_scalar_dense": "reads a tensor on the host", "lift_fresh": "makes a tensor from host data",
         "lift_fresh_copy": "makes a tensor from host data", "nonzero": "has a data-dependent size",
         "masked_select": "has a data-dependent size", "_unique2": "has a data-dependent size",
         "unique_consecutive": "has a data-dependent size", "unique_dim": "has a data-dependent size"}


class Waits(TorchDispatchMode):
    """Records each operation in WAITS that a step dispatches, with the line that called it."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in WAITS:
            frames = traceback.extract_stack()[:-1]
            caller = [f for f in frames if "site-packages" not in f.filename][-1]  # heron's line (or a test's)
            cpu_only = any("/torch/optim/" in f.filename for f in frames) or (
                name == "_local_scalar_dense" and "one_hot(" in (caller.line or ""))
            if not cpu_only:
                where = caller.filename.split("/heron/")[-1].split("/tests/")[-1]
                self.found.append(f"{where}:{caller.lineno} {WAITS[name]} ({name}): {caller.line}")
        return func(*args, **(kwargs or {}))


def waits_in(step) -> list[str]:
    """What ``step()`` does that waits for the device, from its second call (the first may make
    optimizer state and caches)."""
    step()
    with Waits() as waits:
        step()
    return waits.found


def _offpolicy(algo: str, lean: bool):
    if algo == "sac":
        cfg = SACConfig(hidden_sizes=(32, 32), obs_norm=True)
        nets = make_nets(cfg)
        update = sac_lean.LeanUpdate(cfg, nets) if lean else sac_make_update(cfg, nets, Precision("32", CPU))
        batch = make_batch(0)
    else:
        cfg = TD3Config(hidden_sizes=(32, 32), obs_norm=True, max_grad_norm=0.5)
        nets = make_td3_nets(cfg)
        update = td3_lean.LeanUpdate(cfg, nets) if lean else td3_make_update(cfg, nets, Precision("32", CPU))
        batch = td3_batches(1)[0]
    return lambda: update(batch, True)  # the critic and the actor


def _ppo(kind: str, lean: bool):
    ppo_train = importlib.import_module("heron.algos.ppo.train")
    cfg = ppo_train.Config(hidden_sizes=(32, 32), obs_norm=True, ent_coef=0.01, clip_vloss=True, clip_coef=0.2,
                           dual_clip=3.0 if kind == "discrete" else None)
    torch.manual_seed(0)
    model = ppo_train._build(cfg, ppo_spaces(kind))
    opt = adam(model.parameters(), 3e-4, eps=1e-5)
    update = ppo_lean.LeanUpdate(cfg, model, opt) if lean else ppo_train.make_update(cfg, model, opt,
                                                                                      Precision("32", CPU))
    batch = _minibatch(model, kind, 64, torch.Generator().manual_seed(1))
    return lambda: update(batch)


def _dreamer(algo: str, discrete: bool):
    config = importlib.import_module(f"heron.algos.{algo}.config")
    train = importlib.import_module(f"heron.algos.{algo}.train")
    cfg = config.Config(**config.PRESETS["debug"])
    spaces = {"obs_spec": {"state": [[4], "float32"]}, "cnn_keys": [], "mlp_keys": ["state"], "discrete": discrete,
              "action_dim": 2}
    if not discrete:
        spaces.update(action_low=-torch.ones(2), action_high=torch.ones(2))
    torch.manual_seed(0)
    agent = train.build(cfg, spaces)
    update = train.make_update(cfg, agent, spaces, *train.make_optimizers(cfg, agent).values())
    rng = np.random.default_rng(0)
    T, B = cfg.sequence_length, cfg.per_rank_batch_size
    first = rng.random((T, B)) < 0.1
    action = np.eye(2)[rng.integers(0, 2, (T, B))] if discrete else rng.uniform(-1, 1, (T, B, 2))
    batch = {"state": torch.randn(T, B, 4), "action": torch.as_tensor(action, dtype=torch.float32),
             "reward": torch.randn(T, B), "is_first": torch.as_tensor(first),
             "is_terminal": torch.as_tensor(rng.random((T, B)) < 0.05)}
    return lambda: update(batch)


STEPS = {
    "sac": lambda: _offpolicy("sac", False), "sac hand-written": lambda: _offpolicy("sac", True),
    "td3": lambda: _offpolicy("td3", False), "td3 hand-written": lambda: _offpolicy("td3", True),
    "ppo discrete": lambda: _ppo("discrete", False), "ppo box": lambda: _ppo("box", False),
    "ppo box hand-written": lambda: _ppo("box", True),
    "dreamer_v2 discrete": lambda: _dreamer("dreamer_v2", True), "dreamer_v2 box": lambda: _dreamer("dreamer_v2", False),
    "dreamer_v3 discrete": lambda: _dreamer("dreamer_v3", True), "dreamer_v3 box": lambda: _dreamer("dreamer_v3", False),
}


@pytest.mark.parametrize("name", list(STEPS))
def test_gradient_steps_do_not_wait_for_the_device(name, monkeypatch):
    by_mask = LeanCritics.min_input_grad
    monkeypatch.setattr(LeanCritics, "min_input_grad", lambda self, *args: by_mask(self, *args, split=False))
    assert waits_in(STEPS[name]()) == []


def test_the_watch_sees_what_waits():
    """The check can fail: a step that reads a loss on the host, makes a tensor from a list, or
    selects by a mask is caught, each at its line."""
    w = torch.randn(3, requires_grad=True)

    def step():
        loss = (w * w).sum()
        scale = torch.tensor([0.5, 2.0])
        picked = w.masked_select(w > 0)
        return loss.item() * scale.sum() + picked.sum()

    found = waits_in(step)
    for op, line in (("_local_scalar_dense", "loss.item()"), ("lift_fresh", "torch.tensor("),
                     ("masked_select", "masked_select(")):
        assert any(f"({op})" in f and line in f and "test_host_syncs.py:" in f for f in found), (op, found)
