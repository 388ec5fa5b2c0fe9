"""The gradient steps never wait for the device: inside a step no tensor is read on the host
(``.item()``, ``float(t)``, ``if t:``, ``torch.equal``), none is made from host data
(``torch.tensor([...])``) and no operation has an output whose size depends on the data
(``nonzero``, a boolean mask as an index). On a GPU each of these stalls the step until the device
has caught up, and a CUDA graph cannot record the step (``--cuda-graphs``). This checks every
algorithm's steps on the CPU, by watching the operations each step dispatches. It cannot see copies
between the host and the device (``.cpu()``, ``.tolist()``, ``.to("cuda")``): on the CPU they
dispatch nothing. On a GPU the recording in test_cuda.py fails on those.

Let through as the CPU's own: an optimizer's step counter, read by its ``_get_value`` (a CPU tensor
unless the optimizer is ``capturable``, as --cuda-graphs makes it), and ``F.one_hot``'s range check,
which PyTorch makes on the CPU only, and only where the number of classes is given (every call must
give it). SAC's hand-written step picks the rows of each critic's minimum by index on the CPU and by
mask elsewhere (``LeanCritics.min_input_grad``): here it takes the masks, as on a GPU. Recurrent
PPO's eager step reads its episode starts once per call, to cut its sequences into chunks
(``RecurrentCore.sequence``); its recorded step does not, and that is the step checked here."""

import importlib
import traceback

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_ppo_lean import _minibatch
from test_ppo_lean import _spaces as ppo_spaces
from test_sac_lean import make_batch, make_nets, make_td3_nets, td3_batches
from torch.utils._python_dispatch import TorchDispatchMode

from heron.accel.handwritten import ppo as ppo_lean
from heron.accel.handwritten import sac as sac_lean
from heron.accel.handwritten import td3 as td3_lean
from heron.accel.handwritten.common import LeanCritics
from heron.accel.precision import Precision
from heron.algos.ppo import agent as ppo_agent
from heron.algos.sac.config import Config as SACConfig
from heron.algos.sac.train import make_update as sac_make_update
from heron.algos.td3.config import Config as TD3Config
from heron.algos.td3.train import make_update as td3_make_update
from heron.ops.adam import adam
from heron.rl import nets

CPU = torch.device("cpu")
READ, FROM_HOST, SIZED = "reads a tensor on the host", "makes a tensor from host data", "has a data-dependent size"
# the operations that wait for the device: what each does
WAITS = {
    "_local_scalar_dense": READ,
    "is_nonzero": READ,
    "equal": READ,
    "allclose": READ,
    "lift_fresh": FROM_HOST,
    "lift_fresh_copy": FROM_HOST,
    "nonzero": SIZED,
    "masked_select": SIZED,
    "_unique2": SIZED,
    "unique_consecutive": SIZED,
    "unique_dim": SIZED,
    "bincount": SIZED,
}
MASKED = ("index", "index_put", "index_put_", "_index_put_impl_")  # with a boolean index: SIZED


def _waits(name: str, args: tuple, kwargs: dict) -> str | None:
    """What the operation ``name`` called with ``args`` waits for (None: nothing)."""
    if name in WAITS:
        return WAITS[name]
    if name in MASKED and any(
        isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
        for i in (args[1] if len(args) > 1 else kwargs.get("indices", ()))
    ):
        return SIZED
    if (
        name == "repeat_interleave"
        and isinstance(args[-1] if args else None, torch.Tensor)
        and kwargs.get("output_size") is None
    ):
        return SIZED
    return None


class Waits(TorchDispatchMode):
    """Records each operation that waits for the device (``_waits``) that a step dispatches, with the
    line that called it; ``cpu_only`` counts the calls under way whose host reads are the CPU's own."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []
        self.cpu_only = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.__name__.split(".")[0]
        what = _waits(name, args, kwargs)
        if what is not None:
            frames = traceback.extract_stack()[:-1]
            counter = any(f.name == "_get_value" and "/torch/optim/" in f.filename for f in frames)
            if not (what == READ and (self.cpu_only or counter)):
                caller = [f for f in frames if "site-packages" not in f.filename][-1]  # heron's line (or a test's)
                where = caller.filename.split("/heron/")[-1].split("/tests/")[-1]
                self.found.append(f"{where}:{caller.lineno} {what} ({name}): {caller.line}")
        return func(*args, **kwargs)


def waits_in(step, monkeypatch) -> list[str]:
    """What ``step()`` does that waits for the device, from its second call (the first may make
    optimizer state and caches)."""
    step()
    waits = Waits()
    one_hot = F.one_hot

    def checked_one_hot(x: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
        assert num_classes > 0, "F.one_hot without num_classes reads the largest index on the host, on a GPU too"
        waits.cpu_only += 1
        try:
            return one_hot(x, num_classes)
        finally:
            waits.cpu_only -= 1

    monkeypatch.setattr(F, "one_hot", checked_one_hot)
    with waits:
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
    cfg = ppo_train.Config(
        hidden_sizes=(32, 32),
        obs_norm=True,
        ent_coef=0.01,
        clip_vloss=True,
        clip_coef=0.2,
        dual_clip=3.0 if kind == "discrete" else None,
    )
    torch.manual_seed(0)
    model = ppo_agent.build(cfg, ppo_spaces(kind))
    opt = adam(model.parameters(), 3e-4, eps=1e-5)
    update = (
        ppo_lean.LeanUpdate(cfg, model, opt) if lean else ppo_train.make_update(cfg, model, opt, Precision("32", CPU))
    )
    batch = _minibatch(model, kind, 64, torch.Generator().manual_seed(1))
    return lambda: update(batch)


def _ppo_recurrent():
    """Recurrent PPO's step on whole sequences (an LSTM core), as --cuda-graphs records it."""
    ppo_train = importlib.import_module("heron.algos.ppo.train")
    cfg = ppo_train.Config(hidden_sizes=(16,), recurrent="lstm", rnn_hidden_size=8, obs_norm=True, clip_coef=0.2)
    torch.manual_seed(0)
    model = ppo_agent.build(cfg, ppo_spaces("discrete"))
    g = torch.Generator().manual_seed(1)
    B, L = 4, 6
    obs, starts = torch.randn(B, L, 5, generator=g), torch.rand(B, L, generator=g) < 0.25
    state0 = torch.zeros(B, model.state_size)
    with torch.no_grad():
        params, _, _ = model(obs, state0, starts)
        actions = model.pi_head.sample_logp(params)[0]
        logp = model.pi_head.log_prob(params, actions)
    batch = {
        "obs": obs,
        "state0": state0,
        "starts": starts,
        "actions": actions,
        "logp": logp + 0.3 * torch.randn(B, L, generator=g),
        "adv": torch.randn(B, L, generator=g),
        "returns_n": torch.randn(B, L, generator=g),
        "values_n": torch.randn(B, L, generator=g),
    }
    update = ppo_train.make_update(cfg, model, adam(model.parameters(), 3e-4, eps=1e-5), Precision("32", CPU))
    return lambda: update(batch)


def _dreamer(algo: str, discrete: bool, pixels: bool = False, precision: str = "32"):
    """DreamerV2's or DreamerV3's debug-size step, on vectors (``pixels``: and 64x64 images)."""
    config = importlib.import_module(f"heron.algos.{algo}.config")
    train = importlib.import_module(f"heron.algos.{algo}.train")
    cfg = config.Config(**config.PRESETS["debug"])
    spaces = {
        "obs_spec": {"state": [[4], "float32"]},
        "cnn_keys": [],
        "mlp_keys": ["state"],
        "discrete": discrete,
        "action_dim": 2,
    }
    if pixels:
        spaces["obs_spec"]["rgb"] = [[3, 64, 64], "uint8"]
        spaces["cnn_keys"] = ["rgb"]
    if not discrete:
        spaces.update(action_low=-torch.ones(2), action_high=torch.ones(2))
    torch.manual_seed(0)
    agent = train.build(cfg, spaces)
    optimizers = train.make_optimizers(cfg, agent)
    prec = Precision(precision, CPU)
    prec.apply(agent)
    update = train.make_update(cfg, agent, spaces, *optimizers.values(), prec)
    rng = np.random.default_rng(0)
    T, B = cfg.sequence_length, cfg.per_rank_batch_size
    first = rng.random((T, B)) < 0.1
    action = np.eye(2)[rng.integers(0, 2, (T, B))] if discrete else rng.uniform(-1, 1, (T, B, 2))
    batch = {
        "state": torch.randn(T, B, 4),
        "action": torch.as_tensor(action, dtype=torch.float32),
        "reward": torch.randn(T, B),
        "is_first": torch.as_tensor(first),
        "is_terminal": torch.as_tensor(rng.random((T, B)) < 0.05),
    }
    if pixels:
        batch["rgb"] = torch.as_tensor(rng.integers(0, 256, (T, B, 3, 64, 64), dtype=np.uint8))
    return lambda: update(batch)


STEPS = {
    "sac": lambda: _offpolicy("sac", False),
    "sac hand-written": lambda: _offpolicy("sac", True),
    "td3": lambda: _offpolicy("td3", False),
    "td3 hand-written": lambda: _offpolicy("td3", True),
    "ppo discrete": lambda: _ppo("discrete", False),
    "ppo box": lambda: _ppo("box", False),
    "ppo discrete hand-written": lambda: _ppo("discrete", True),
    "ppo box hand-written": lambda: _ppo("box", True),
    "ppo recurrent, recorded": _ppo_recurrent,
    **{
        f"{algo} {'discrete' if discrete else 'box'}": lambda algo=algo, discrete=discrete: _dreamer(algo, discrete)
        for algo in ("dreamer_v2", "dreamer_v3")
        for discrete in (True, False)
    },
    **{
        f"{algo} pixels and vectors, bf16-mixed": lambda algo=algo: _dreamer(algo, True, True, "bf16-mixed")
        for algo in ("dreamer_v2", "dreamer_v3")
    },
}


@pytest.mark.parametrize("name", list(STEPS))
def test_gradient_steps_do_not_wait_for_the_device(name, monkeypatch):
    by_mask = LeanCritics.min_input_grad
    monkeypatch.setattr(LeanCritics, "min_input_grad", lambda self, *args: by_mask(self, *args, split=False))
    if name.endswith("recorded"):  # the step as a CUDA graph records it (module doc)
        monkeypatch.setattr(nets, "recording", lambda t: True)
    assert waits_in(STEPS[name](), monkeypatch) == []


def test_the_watch_sees_what_waits(monkeypatch):
    """The check can fail: a step that reads a loss on the host, makes a tensor from a list, selects
    or indexes by a mask or compares tensors on the host is caught, each at its line; F.one_hot
    without its number of classes is refused."""
    w = torch.randn(3, requires_grad=True)

    def step():
        loss = (w * w).sum()
        scale = torch.tensor([0.5, 2.0])
        picked = w.masked_select(w > 0)
        indexed = w[w < 0]
        same = torch.equal(w, w)
        return loss.item() * scale.sum() + picked.sum() + indexed.sum() + same

    found = waits_in(step, monkeypatch)
    for op, line in (
        ("_local_scalar_dense", "loss.item()"),
        ("lift_fresh", "torch.tensor("),
        ("masked_select", "masked_select("),
        ("index", "w[w < 0]"),
        ("equal", "torch.equal("),
    ):
        assert any(f"({op})" in f and line in f and "test_host_syncs.py:" in f for f in found), (op, found)
    with pytest.raises(AssertionError, match="num_classes"):
        waits_in(lambda: F.one_hot(torch.tensor([0, 2])), monkeypatch)
