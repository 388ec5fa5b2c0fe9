"""heron.ops.dist's collectives with two CPU processes over gloo (one spawn runs every check), and
world size 1 as a no-op."""

import os
import socket
from unittest import mock

import pytest
import torch
import torch.distributed as tdist
import torch.multiprocessing as mp

from heron.algos.ppo import agent as ppo_agent
from heron.errors import Fault, HeronError
from heron.ops import dist


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        # gradients: the mean of both ranks', a gradient missing on rank 1 counts as zeros there
        a = torch.nn.Parameter(torch.zeros(3))
        b = torch.nn.Parameter(torch.zeros(2, 2))
        a.grad = torch.tensor([1.0, 2.0, 3.0]) * (rank + 1)  # rank 0: 1,2,3; rank 1: 2,4,6
        if rank == 0:
            b.grad = torch.full((2, 2), 4.0)
        dist.all_reduce_grads([a, b])
        assert torch.equal(a.grad, torch.tensor([1.5, 3.0, 4.5]))
        assert torch.equal(b.grad, torch.full((2, 2), 2.0))  # (4 + 0) / 2, on both ranks

        # moments: those of the concatenated data, identical bits on both ranks
        g = torch.Generator().manual_seed(rank)
        x = torch.randn(5 + 3 * rank, 4, generator=g, dtype=torch.float64) * (rank + 1) + rank
        everything = torch.cat(
            [
                torch.randn(5 + 3 * r, 4, generator=torch.Generator().manual_seed(r), dtype=torch.float64) * (r + 1) + r
                for r in range(2)
            ]
        )
        mean, var, count = dist.global_moments(x)
        assert count == 13
        torch.testing.assert_close(mean, everything.mean(0), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(var, everything.var(0, unbiased=False), rtol=1e-12, atol=1e-12)
        both = [torch.empty(8, dtype=torch.float64) for _ in range(2)]
        tdist.all_gather(both, torch.cat([mean, var]))
        assert torch.equal(both[0], both[1])

        # decisions: one rank's stop is everyone's; one rank's problem ends both, told by that rank
        assert dist.any_rank(rank == 1) and not dist.any_rank(False)
        assert dist.any_rank(False, rank == 0) == (False, True) and dist.all_ranks(True)
        with pytest.raises(HeronError, match="^bad on rank 1$" if rank else "^rank 1: bad on rank 1$"):
            dist.agree(HeronError("bad on rank 1") if rank else None)
        with pytest.raises(Fault) as caught:
            dist.agree(None if rank else Fault("disk full"))
        assert caught.value.exit_code == 1 and str(caught.value) == "disk full"

        # the mean and unbiased std of the concatenation, without a host sync
        y = torch.arange(4.0) + 10 * rank  # rank 0: 0..3, rank 1: 10..13
        both_y = torch.cat([torch.arange(4.0), torch.arange(4.0) + 10])
        (m, sd), (m2, sd2) = dist.mean_std([y, y[:2]])
        torch.testing.assert_close((m, sd), (both_y.mean(), both_y.std()))
        torch.testing.assert_close((m2, sd2), (both_y[[0, 1, 4, 5]].mean(), both_y[[0, 1, 4, 5]].std()))
        assert float(dist.mean(torch.tensor(float(rank)))) == 0.5

        # parameters: rank 0's everywhere, and a difference found
        torch.manual_seed(rank)
        net = torch.nn.Linear(3, 2)
        net.register_buffer("stat", torch.full((2,), float(rank)))
        dist.broadcast_state(net)
        dist.check_in_sync({"net": net})
        assert float(net.stat.sum()) == 0.0
        if rank == 1:
            with torch.no_grad():
                net.bias[0] += 1e-6
        with pytest.raises(Fault, match="net differs between rank 0 and rank 1"):
            dist.check_in_sync({"net": net})
        _td3_half_batches_equal_the_whole_batch(rank)
        _ppo_half_minibatches_equal_the_whole_minibatch(rank)
        _crossq_half_batches_equal_the_whole_batch(rank)
        tdist.barrier()  # no rank tears the group down while the other still reads from it
    finally:
        tdist.destroy_process_group()
    # gloo's threads can abort (SIGABRT) in C++ teardown at interpreter exit under load: every check
    # has passed by now, so leave without that teardown
    os._exit(0)


def _td3_half_batches_equal_the_whole_batch(rank: int) -> None:
    """Three TD3 updates (critic every step, actor on the second): rank r trains on half r of each
    batch with averaged gradients; every rank also trains a copy alone on the whole batch. Same
    parameters within float tolerance, identical bits across ranks."""
    from heron.algos.td3 import losses
    from heron.algos.td3.networks import build
    from heron.ops.adam import adam

    def make():
        torch.manual_seed(0)
        actor, critic = build(3, -torch.ones(1), torch.ones(1), (16, 16), obs_norm=False)
        return actor, critic, adam(actor.parameters(), 1e-3), adam(critic.parameters(), 1e-3)

    def step(nets, batch, reduce, with_actor):
        actor, critic, actor_opt, q_opt = nets
        with torch.no_grad():
            target = losses.td_target(
                batch["rewards"], batch["terminated"], critic(batch["next_obs"], actor(batch["next_obs"])), 0.99
            )
        q_opt.zero_grad(set_to_none=True)
        losses.critic_losses(critic(batch["obs"], batch["actions"]), target).sum().backward()
        if reduce:
            dist.all_reduce_grads(critic.parameters())
        q_opt.step()
        if with_actor:
            actor_opt.zero_grad(set_to_none=True)
            critic.requires_grad_(False)  # as TD3's update: dQ1/da only
            losses.actor_loss(critic.q1(batch["obs"], actor(batch["obs"]))).backward()
            critic.requires_grad_(True)
            if reduce:
                dist.all_reduce_grads(actor.parameters())
            actor_opt.step()

    split, whole = make(), make()
    for i in range(3):
        g = torch.Generator().manual_seed(100 + i)  # the same global batch on both ranks
        batch = {
            "obs": torch.randn(8, 3, generator=g),
            "next_obs": torch.randn(8, 3, generator=g),
            "actions": torch.rand(8, 1, generator=g) * 2 - 1,
            "rewards": torch.randn(8, generator=g),
            "terminated": torch.rand(8, generator=g) < 0.2,
        }
        half = {k: v[4 * rank : 4 * rank + 4] for k, v in batch.items()}
        step(split, half, reduce=True, with_actor=i == 1)
        step(whole, batch, reduce=False, with_actor=i == 1)
    for a, b in zip(
        list(split[0].parameters()) + list(split[1].parameters()),
        list(whole[0].parameters()) + list(whole[1].parameters()),
    ):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    dist.check_in_sync({"actor": split[0], "critic": split[1]})


def _crossq_half_batches_equal_the_whole_batch(rank: int) -> None:
    """Three CrossQ updates (the actor on the third) past the batch renormalisation's warm-up: rank
    r trains on half r of each batch, its layers' statistics over both halves and its gradients
    averaged; every rank also trains a copy alone on the whole batch. Same parameters and running
    statistics within float tolerance, identical bits across ranks."""
    from heron.algos.sac import crossq
    from heron.algos.sac.agent import Nets
    from heron.algos.sac.config import Config
    from heron.rl.batch_renorm import BatchRenorm

    cfg = Config(hidden_sizes=(16,), critic_hidden_sizes=(16,), bn_warmup=1, policy_frequency=3)

    class Step:  # the run's optimizer step (heron.accel.precision), its gradient all-reduce optional
        def __init__(self, reduce):
            self.reduce = reduce

        def optimize(self, opt, loss, params, max_norm=0.0):
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if self.reduce:
                dist.all_reduce_grads(params)
            opt.step()

        def update(self):
            pass

    def make(reduce):
        torch.manual_seed(0)
        actor, critic = crossq.build(3, -torch.ones(1), torch.ones(1), cfg)
        for layer in [*actor.modules(), *critic.modules()]:
            if isinstance(layer, BatchRenorm):
                layer.across_ranks = reduce  # the whole-batch copy's statistics are its own
        log_alpha = torch.zeros((), requires_grad=True)
        opts = [torch.optim.Adam(p, lr=1e-3) for p in (actor.parameters(), critic.parameters(), [log_alpha])]
        nets = Nets(actor, critic, None, *opts, log_alpha, lambda: log_alpha.detach().exp(), -1.0)
        return nets, crossq.make_update(cfg, nets, Step(reduce))

    (split, split_update), (whole, whole_update) = make(True), make(False)
    for i in range(3):
        g = torch.Generator().manual_seed(200 + i)  # the same global batch on both ranks
        batch = {
            "obs": torch.randn(8, 3, generator=g),
            "next_obs": torch.randn(8, 3, generator=g) + 1.0,
            "actions": torch.rand(8, 1, generator=g) * 2 - 1,
            "rewards": torch.randn(8, generator=g),
            "terminated": torch.rand(8, generator=g) < 0.2,
        }
        half = {k: v[4 * rank : 4 * rank + 4] for k, v in batch.items()}
        with mock.patch("torch.randn_like", torch.zeros_like):  # the Gaussians' means: no draws to align
            split_update(half, i == 2)
            whole_update(batch, i == 2)
    for name in ("actor", "critic"):
        a, b = getattr(split, name).state_dict(), getattr(whole, name).state_dict()
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5, msg=f"{name}.{key}")
    dist.check_in_sync({"actor": split.actor, "critic": split.critic})


def _ppo_half_minibatches_equal_the_whole_minibatch(rank: int) -> None:
    """Three of PPO's own update steps (``make_update``: advantages normalized over the global
    minibatch, clipped value loss, gradient clipping) on half r of each minibatch in rank r equal
    the same steps on the whole minibatch in one process (the collectives switched off)."""
    import importlib
    from unittest import mock

    from heron.accel.precision import Precision
    from heron.algos.ppo.config import Config
    from heron.ops.adam import adam

    ppo = importlib.import_module("heron.algos.ppo.train")  # the module (the package exports its train())
    cfg = Config(norm_adv=True, clip_vloss=True, max_grad_norm=0.5, hidden_sizes=(16,))
    spaces = {"obs_shape": [4], "obs_dtype": "float32", "action": {"kind": "discrete", "n": 3}, "obs_parts": None}

    def make():
        torch.manual_seed(0)
        model = ppo_agent.build(cfg, spaces)
        opt = adam(model.parameters(), 1e-2, eps=1e-5)
        return model, ppo.make_update(cfg, model, opt, Precision("32", torch.device("cpu")))

    (split, split_update), (whole, whole_update) = make(), make()
    for i in range(3):
        g = torch.Generator().manual_seed(200 + i)  # the same global minibatch on both ranks: [B, L=1]
        mb = {
            "obs": torch.randn(8, 1, 4, generator=g),
            "state0": torch.zeros(8, 0),
            "starts": torch.zeros(8, 1, dtype=torch.bool),
            "actions": torch.randint(0, 3, (8, 1), generator=g),
            "logp": -torch.rand(8, 1, generator=g) - 0.5,
            "adv": torch.randn(8, 1, generator=g) * 3 + 1,
            "returns_n": torch.randn(8, 1, generator=g),
            "values_n": torch.randn(8, 1, generator=g),
        }
        mine = {k: v[4 * rank : 4 * rank + 4] for k, v in mb.items()}
        ((mine["adv_mean"], mine["adv_std"]),) = dist.mean_std([mine["adv"]])
        split_update(mine)
        with mock.patch.object(dist, "_active", lambda: False):
            whole_update(mb)
    for a, b in zip(split.parameters(), whole.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    dist.check_in_sync({"model": split})


def test_collectives_with_two_processes():
    mp.spawn(_worker, args=(_free_port(),), nprocs=2, join=True)


def test_world_size_one_is_a_no_op():
    assert dist.from_env({}) == dist.World() and not dist.World().distributed
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.tensor([1.0, 2.0])
    dist.all_reduce_grads([p])
    assert torch.equal(p.grad, torch.tensor([1.0, 2.0])) and not tdist.is_initialized()
    x = torch.tensor([[1.0], [3.0]])
    mean, var, count = dist.global_moments(x)
    assert mean.tolist() == [2.0] and var.tolist() == [1.0] and count == 2
    assert dist.any_rank(True) and not dist.any_rank(False)


def test_torchrun_environment_is_read_and_checked():
    w = dist.from_env({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"})
    assert (w.rank, w.local_rank, w.size, w.local_size, w.is_main) == (3, 1, 4, 2, False)
    with pytest.raises(HeronError, match="inconsistent torchrun environment"):
        dist.from_env({"RANK": "4", "WORLD_SIZE": "4"})
    assert dist.choose_backend("auto", torch.device("cpu"), w) == "gloo"
    with pytest.raises(HeronError, match="nccl needs --device cuda"):
        dist.choose_backend("nccl", torch.device("cpu"), w)


def test_a_normalizer_fed_global_moments_equals_one_fed_the_whole_batch():
    from heron.rl.nets import RunningNorm

    history, batch = torch.randn(6, 3, dtype=torch.float64), torch.randn(10, 3, dtype=torch.float64) * 3 + 1
    whole, merged = RunningNorm((3,)), RunningNorm((3,))
    for norm in (whole, merged):
        norm.update(history)
    whole.update(batch)
    merged.update_moments(*dist.global_moments(batch))
    for name in ("mean", "var", "count"):
        torch.testing.assert_close(getattr(merged, name), getattr(whole, name), rtol=1e-12, atol=1e-12)


def test_sizes_that_do_not_split_over_the_ranks_are_refused_on_every_rank(tmp_path, capsys, monkeypatch):
    """Global sizes split over the ranks: one that does not divide is bad input on every rank alike
    (exit 2 before any process group forms: no rank waits), reported once, by rank 0."""
    from heron.cli import main

    cases = [
        (["td3", "--num-envs", "3"], "--num-envs (3) is split over the 2 processes: it must be a multiple of 2"),
        (["sac", "--num-envs", "2", "--batch-size", "255"], "--batch-size (255) is split over the 2 processes"),
        (
            ["ppo", "--num-envs", "2", "--num-steps", "6", "--num-minibatches", "4"],
            "--num-envs x --num-steps (12) must split into --num-minibatches (4) minibatches of a share for each",
        ),
        (["dreamer_v2", "--preset", "debug", "--cuda-graphs", "true"], None),
    ]
    for args, message in cases:
        for rank in ("0", "1"):
            monkeypatch.setenv("RANK", rank)
            monkeypatch.setenv("WORLD_SIZE", "2")
            assert main(["train", *args, "--run-dir", str(tmp_path / "run")]) == 2
            err = capsys.readouterr().err
            if rank == "1":
                assert err == ""
            elif message:
                assert message in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()
