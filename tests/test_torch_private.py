"""Every private torch API heron uses (heron.ops.torch_private) against the public behaviour it
stands in for: a torch release that renames or changes one fails here, by name."""

import copy

import pytest
import torch

from heron.ops import torch_private as private


def test_the_fused_adam_kernel_and_initializer_step_as_torch_adam_does():
    torch.manual_seed(0)
    params = [torch.randn(5, 3, requires_grad=True), torch.randn(3, requires_grad=True)]
    theirs = [p.detach().clone().requires_grad_(True) for p in params]
    mine_opt = torch.optim.Adam(params, lr=1e-2, fused=True)
    their_opt = torch.optim.Adam(theirs, lr=1e-2, fused=True)
    for p in params + theirs:
        p.grad = torch.ones_like(p) * 0.5
    private.init_adam_group(mine_opt, mine_opt.param_groups[0])  # the state a first step creates
    states = [mine_opt.state[p] for p in params]
    assert all(set(s) >= {"step", "exp_avg", "exp_avg_sq"} for s in states)
    for _ in range(3):
        steps = [s["step"] for s in states]
        private.foreach_add_(steps, 1)
        private.fused_adam_(
            params,
            [p.grad for p in params],
            [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states],
            [],
            steps,
            amsgrad=False,
            lr=1e-2,
            beta1=0.9,
            beta2=0.999,
            weight_decay=0.0,
            eps=1e-8,
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )
        their_opt.step()
    for a, b in zip(params, theirs):
        assert torch.equal(a, b)


def test_undecorated_optimizer_methods_are_the_methods():
    opt = torch.optim.Adam([torch.zeros(2, requires_grad=True)], lr=0.1)
    state = private.undecorated(torch.optim.Optimizer.state_dict)(opt)
    assert state == opt.state_dict()
    private.undecorated(torch.optim.Optimizer.zero_grad)(opt, True)


def test_foreach_kernels_are_their_loops():
    a, b = [torch.randn(4), torch.randn(2, 3)], [torch.randn(4), torch.randn(2, 3)]
    want = [x + 0.3 * (y - x) for x, y in zip(a, b)]
    got = copy.deepcopy(a)
    private.foreach_lerp_(got, b, 0.3)
    assert all(torch.allclose(x, y) for x, y in zip(got, want))
    assert all(torch.allclose(n, x.norm()) for n, x in zip(private.foreach_norm(a, 2.0), a))
    scaled = copy.deepcopy(a)
    private.foreach_mul_(scaled, torch.tensor(2.0))
    assert all(torch.equal(x, 2 * y) for x, y in zip(scaled, a))


@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_backward_kernels_are_autograds(act):
    x = torch.randn(6, 4, requires_grad=True)
    out = torch.relu(x) if act == "relu" else torch.tanh(x)
    g = torch.randn(6, 4)
    (want,) = torch.autograd.grad(out, x, g)
    got = private.threshold_backward(g, out.detach(), 0) if act == "relu" else private.tanh_backward(g, out.detach())
    assert torch.allclose(got, want)


def test_version_counters_move_with_in_place_writes():
    t = torch.zeros(3)
    before = private.version(t)
    t.add_(1)
    assert private.version(t) > before


def test_the_deterministic_mode_is_set_as_torch_sets_it():
    was, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        private.set_deterministic_algorithms(True, warn_only=True)
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        private.set_deterministic_algorithms(was, warn_only=warn)
    loaded = private.loaded_inductor_config()
    assert loaded is None or hasattr(loaded, "deterministic")
