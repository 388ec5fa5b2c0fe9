"""``--compile`` on the CPU: a compiled update step is the eager step (the GPU's compiled-and-graphed
pairing is in tests/test_cuda.py). torch.compile's "aot_eager" backend runs what Dynamo and AOT
autograd make of the step without generating code, which is where the two faults this file was
written for lay; Inductor's code generation is left to the GPU tests and ``test_ppo_runs``."""

import pytest
import torch
from test_cuda import _assert_same, _offpolicy_steps, _ppo_steps

from heron.ops.fused import ReluMLP, TanhMLP
from heron.rl.nets import EnsembleMLP


@pytest.mark.parametrize(
    "make",
    [lambda: TanhMLP(5, (16, 16)), lambda: ReluMLP(5, (16, 16), 3), lambda: EnsembleMLP(2, 5, (16, 16), 1)],
    ids=["tanh", "relu", "ensemble"],
)
def test_compiled_mlps_give_the_eager_gradients(make):
    """Inside torch.compile the MLPs leave their hand-written autograd node for autograd's own graph
    of the same operations: Dynamo before torch 2.13 traced the node's backward wrongly for tanh
    bodies (gradients off by 10 and more; PPO's compiled steps left its bodies' weights unchanged)."""
    torch.manual_seed(0)
    net = make()
    x = torch.randn(32, 5, requires_grad=True)

    def loss(x):
        return net(x).tanh().pow(2).sum()

    grads = []
    for fn in (loss, torch.compile(loss, backend="aot_eager", fullgraph=True)):
        net.zero_grad(set_to_none=True)
        x.grad = None
        fn(x).backward()
        grads.append([x.grad.clone()] + [p.grad.clone() for p in net.parameters()])
    for eager, compiled in zip(*grads):
        torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("algo", ["sac", "td3", "ppo"])
def test_compiled_update_steps_equal_eager_steps(algo):
    """SAC's, TD3's and PPO's compiled update steps, with heron's Adam (whose eager lean step keeps
    lists on the optimizer, which Dynamo before torch 2.13 could not trace: the compiled step takes
    torch's), over steps with the learning rate, targets and normalizer moving in between."""
    if algo == "ppo":
        (eager, eager_w), (got, got_w), key = (
            _ppo_steps(False, n=8, device="cpu"),
            _ppo_steps(False, n=8, compiled="aot_eager", device="cpu"),
            "losses/value_loss",
        )
    else:
        eager, eager_w = _offpolicy_steps(algo, graphed=False, n=10, device="cpu")
        got, got_w = _offpolicy_steps(algo, graphed=False, n=10, compiled="aot_eager", device="cpu")
        key = "losses/qf_loss"
    _assert_same(eager, got, eager_w, got_w, key)
