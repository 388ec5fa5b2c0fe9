"""The fast paths of the off-policy update against the plain ones: heron.ops.fused's one-node ReLU
MLPs (ReLU for SAC/TD3, tanh for PPO's bodies) give the outputs and gradients of the same layers
run one by one through autograd (float32 and bf16-mixed), and Adam's lean step gives torch's Adam step bit for bit."""

import copy

import pytest
import torch
import torch.nn.functional as F

from heron.accel.graphs import capturable
from heron.accel.precision import Precision, clip_grad_norm
from heron.ops.adam import adam
from heron.ops.fused import ReluMLP, TanhMLP
from heron.rl import nets
from heron.rl.nets import EnsembleMLP, RecurrentCore, RunningNorm
from heron.rl.schedules import set_lr


def _reference(ens: EnsembleMLP, x: torch.Tensor, i: int, dtype=None) -> torch.Tensor:
    """Member i, layer by layer, with autocast around each hidden layer's product when ``dtype`` is
    given (the last layer in float32)."""
    h = x
    for k, layer in enumerate(ens.layers):
        hidden = k < len(ens.layers) - 1
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None and hidden):
            h = torch.addmm(layer.bias[i], h, layer.weight[i])
        h = h.float()
        if k < len(ens.layers) - 1:
            h = torch.relu(h)
    return h


def _grads(params):
    out = [p.grad.clone() if p.grad is not None else None for p in params]
    for p in params:
        p.grad = None
    return out


@pytest.mark.parametrize("per_member", [False, True])
def test_ensemble_equals_layer_by_layer(per_member):
    torch.manual_seed(0)
    ens = EnsembleMLP(2, 7, (16, 16), 3)
    params = list(ens.parameters())
    x = torch.randn(2, 5, 7) if per_member else torch.randn(5, 7)
    x.requires_grad_(True)
    y = ens(x)
    (y.sin().sum()).backward()
    got, gx = _grads(params), x.grad.clone()
    x.grad = None
    ref = torch.stack([_reference(ens, x[i] if per_member else x, i) for i in range(2)])
    ref.sin().sum().backward()
    want, wx = _grads(params), x.grad.clone()
    assert y.shape == (2, 5, 3) and torch.allclose(y, ref, atol=1e-6)
    for a, b in zip(got, want):
        assert torch.allclose(a, b, atol=1e-5)
    assert torch.allclose(gx, wx, atol=1e-5)


def test_one_member_with_and_without_weight_gradients():
    torch.manual_seed(1)
    ens = EnsembleMLP(2, 4, (8,), 1)
    params = list(ens.parameters())
    x = torch.randn(6, 4)
    ens.member(1, x).pow(2).sum().backward()
    got = _grads(params)
    _reference(ens, x, 1).pow(2).sum().backward()
    want = _grads(params)
    for a, b in zip(got, want):
        assert torch.equal(a[0], torch.zeros_like(a[0]))  # member 0 was not run: zero, not garbage
        assert torch.allclose(a, b, atol=1e-6)
    # the actor loss's path: gradient for the input only, none for the frozen weights
    ens.requires_grad_(False)
    a = torch.randn(6, 4, requires_grad=True)
    ens.member(0, a).sum().backward()
    assert all(p.grad is None for p in params)
    g = a.grad.clone()
    a.grad = None
    _reference(ens, a, 0).sum().backward()
    assert torch.allclose(g, a.grad, atol=1e-6)


def test_relu_mlp_is_the_sequential_it_saves_as():
    torch.manual_seed(2)
    net = ReluMLP(5, (16, 16), 4)
    seq = torch.nn.Sequential(*[copy.deepcopy(m) for m in net])
    assert list(net.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    x = torch.randn(3, 7, 5)  # leading dims are kept
    y = net(x)
    y.tanh().sum().backward()
    ref = torch.nn.Sequential.forward(seq, x)
    ref.tanh().sum().backward()
    assert y.shape == (3, 7, 4) and torch.allclose(y, ref, atol=1e-6)
    for p, q in zip(net.parameters(), seq.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5)
    with torch.no_grad():  # the path without autograd
        assert torch.allclose(net(x), ref, atol=1e-6)


def test_tanh_body_is_the_sequential_it_saves_as():
    torch.manual_seed(6)
    body = TanhMLP(4, (8, 8))
    seq = torch.nn.Sequential(*[copy.deepcopy(m) for m in body])
    x = torch.randn(5, 1, 4, requires_grad=True)
    y = body(x)
    (y * torch.arange(8.0)).sum().backward()
    gx, x.grad = x.grad.clone(), None
    ref = torch.nn.Sequential.forward(seq, x)
    (ref * torch.arange(8.0)).sum().backward()
    assert torch.allclose(y, ref, atol=1e-6) and torch.allclose(gx, x.grad, atol=1e-6)
    for p, q in zip(body.parameters(), seq.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5)
    assert torch.equal(TanhMLP(3, ())(x), x)  # no hidden layers: the identity
    Precision("bf16-mixed", torch.device("cpu")).apply(body)
    lin = [m for m in body if isinstance(m, torch.nn.Linear)]
    h = F.linear(x.detach().bfloat16(), lin[0].weight.bfloat16(), lin[0].bias.bfloat16()).tanh()
    want = F.linear(h, lin[1].weight.bfloat16(), lin[1].bias.bfloat16()).tanh().float()
    assert torch.equal(body(x.detach()), want)


def test_bf16_mixed_equals_autocast_around_each_layer():
    torch.manual_seed(3)
    ens = EnsembleMLP(2, 6, (32, 32), 2)
    net = ReluMLP(6, (32,), 2)
    Precision("bf16-mixed", torch.device("cpu")).apply(ens, net)
    x = torch.randn(9, 6)
    y = ens(x)
    assert y.dtype == torch.float32
    ref = torch.stack([_reference(ens, x, i, torch.bfloat16) for i in range(2)])
    # ReLU commutes with rounding: bfloat16 activations between the hidden layers are the same; the
    # last layer is float32 (heron.ops.fused: a bfloat16 Q value would move in steps of 2 near 300)
    assert torch.equal(y, ref)
    all_bf16 = F.linear(
        F.linear(
            F.linear(x.bfloat16(), ens.layers[0].weight[0].t().bfloat16(), ens.layers[0].bias[0].bfloat16()).relu(),
            ens.layers[1].weight[0].t().bfloat16(),
            ens.layers[1].bias[0].bfloat16(),
        ).relu(),
        ens.layers[2].weight[0].t().bfloat16(),
        ens.layers[2].bias[0].bfloat16(),
    )
    assert not torch.equal(y[0], all_bf16.float()), "the last layer ran in bfloat16"
    y.sum().backward()
    got = _grads(list(ens.parameters()))
    ref.sum().backward()
    want = _grads(list(ens.parameters()))
    for a, b in zip(got, want):
        assert a.dtype == torch.float32 and torch.allclose(a, b, rtol=1e-2, atol=1e-2)
    lin = [m for m in net if isinstance(m, torch.nn.Linear)]
    h = F.linear(x.bfloat16(), lin[0].weight.bfloat16(), lin[0].bias.bfloat16()).relu()
    want_net = F.linear(h.float(), lin[1].weight, lin[1].bias)
    assert torch.equal(net(x), want_net)
    assert torch.equal(copy.deepcopy(net)(x), want_net)  # a target network keeps the type


def test_lean_adam_step_is_torchs_step():
    torch.manual_seed(4)
    nets = [ReluMLP(3, (8,), 2) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    lean, plain = adam(nets[0].parameters(), 1e-2), torch.optim.Adam(nets[1].parameters(), lr=1e-2, fused=True)
    for step in range(7):
        x = torch.randn(4, 3)
        for net, opt in ((nets[0], lean), (nets[1], plain)):
            opt.zero_grad()
            net(x).pow(2).sum().backward()
            if step == 4:  # a parameter without a gradient: torch's step, which leaves its counter behind
                next(net.parameters()).grad = None
        lean.lean_step()
        plain.step()
        if step == 2:  # a learning-rate change and a state_dict round trip on the way
            for opt in (lean, plain):
                opt.param_groups[0]["lr"] = 3e-3
            lean.load_state_dict(copy.deepcopy(lean.state_dict()))
    assert lean._lean is not None  # the lean path was taken
    for p, q in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(p, q)
    assert str(lean.state_dict()) == str(plain.state_dict())


def test_capturable_adam_follows_set_lr_and_saves_plain_groups():
    """--cuda-graphs' optimizers (heron.accel.graphs.capturable): the learning rate a tensor that
    set_lr fills in place (the recorded step reads it there), the same updates as float learning
    rates, and checkpoints that hold plain floats and capturable off, so they resume either way."""
    torch.manual_seed(6)
    nets = [ReluMLP(3, (8,), 2) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    graphed, plain = adam(nets[0].parameters(), 1e-2), adam(nets[1].parameters(), 1e-2)
    capturable(graphed)
    lr = graphed.param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor) and graphed.param_groups[0]["capturable"]
    for step in range(6):
        x = torch.randn(4, 3)
        for net, opt in ((nets[0], graphed), (nets[1], plain)):
            set_lr(opt, 1e-2 * (1 - step / 6))  # an annealing schedule
            opt.lean_zero_grad()
            net(x).pow(2).sum().backward()
            opt.lean_step()
        assert graphed.param_groups[0]["lr"] is lr  # filled in place
        if step == 2:
            saved = graphed.state_dict()
            assert saved["param_groups"][0]["lr"] == pytest.approx(1e-2 * (1 - 2 / 6))
            assert type(saved["param_groups"][0]["lr"]) is float and not saved["param_groups"][0]["capturable"]
            graphed.load_state_dict(copy.deepcopy(saved))
            capturable(graphed)
            lr = graphed.param_groups[0]["lr"]
    assert float(lr) == pytest.approx(1e-2 / 6)
    for p, q in zip(nets[0].parameters(), nets[1].parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_paths_taken_while_a_cuda_graph_records_compute_the_same(kind, monkeypatch):
    """What --cuda-graphs records may neither read the host nor reuse tensors computed outside the
    graph: the recurrent core then runs every step as its own chunk (not chunks found from the
    batch's episode starts) and the normalizer computes its float32 statistics afresh. The same
    numbers as the eager paths; the recurrent states exact at every step, as a step-by-step
    unroll gives them."""
    torch.manual_seed(7)
    core = RecurrentCore(kind, 3, 5)
    x, state0 = torch.randn(4, 9, 3), torch.randn(4, core.state_size)
    starts = torch.rand(4, 9) < 0.2
    starts[1, 4] = True  # at least one chunk boundary
    with torch.no_grad():
        out, states = core.sequence(x, state0, starts)
        state, steps = state0, []
        for t in range(9):
            h, state = core.step(x[:, t], state * (~starts[:, t]).unsqueeze(-1).float())
            steps.append((h, state))
        norm = RunningNorm((3,))
        norm.update(torch.randn(20, 3) * 2 + 1)
        cached = norm._float32()
        assert norm._float32()[0] is cached[0]  # eagerly: the cached statistics
        monkeypatch.setattr(nets, "recording", lambda t: True)
        rec_out, rec_states = core.sequence(x, state0, starts)
        fresh = norm._float32()
    torch.testing.assert_close(rec_out, out, rtol=1e-5, atol=1e-6)
    for t, (h, state) in enumerate(steps):
        torch.testing.assert_close(rec_out[:, t], h, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(rec_states[:, t], state, rtol=1e-5, atol=1e-6)
    assert fresh[0] is not cached[0] and all(torch.equal(a, b) for a, b in zip(fresh, cached))


@pytest.mark.parametrize("max_norm", [0.05, 1e9])
def test_lean_clip_is_torchs_clip(max_norm):
    torch.manual_seed(5)
    grads = [torch.randn(7, 3), torch.randn(3), torch.randn(4, 4)]
    ours = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    theirs = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, q, g in zip(ours, theirs, grads):
        p.grad, q.grad = g.clone(), g.clone()
    ours[1].grad = theirs[1].grad = None  # a parameter without a gradient is skipped
    n1 = clip_grad_norm(ours, max_norm)
    n2 = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    assert torch.equal(n1, n2)
    for p, q in zip(ours, theirs):
        assert (p.grad is None and q.grad is None) or torch.equal(p.grad, q.grad)
