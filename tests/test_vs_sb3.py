"""heron's TD3 gradient step against Stable-Baselines3's, the reference users compare it with: from
the same weights, on the same batches and the same target-smoothing noise, both libraries must move
every network (actor, twin critics, both targets) to the same values, step after step, with the
policy delay and the Polyak updates at the same steps. A learning curve that differs from SB3's at
equal env steps (docs/benchmarks/index.md, "Off-policy curves beside Stable-Baselines3") is then not
a difference in the update."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

sb3 = pytest.importorskip("stable_baselines3")

from heron.accel.handwritten import td3 as lean  # noqa: E402
from heron.accel.precision import Precision  # noqa: E402
from heron.algos.td3.config import Config  # noqa: E402
from heron.algos.td3.networks import build  # noqa: E402
from heron.algos.td3.train import Nets, make_update  # noqa: E402
from heron.ops.adam import adam  # noqa: E402
from heron.rl.nets import Polyak  # noqa: E402

D, A, B, H = 6, 2, 64, (32, 32)


class Box(gym.Env):
    """Only its spaces are used (SB3 builds its networks from them); actions in [-1, 1], where SB3's
    scaled actions and heron's env-unit actions coincide."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (D,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (A,), np.float32)

    def reset(self, seed=None, options=None):
        return np.zeros(D, np.float32), {}

    def step(self, action):
        return np.zeros(D, np.float32), 0.0, False, False, {}


def _copy_into_sb3(actor, critic, sb3_actor, sb3_critic):
    """heron's weights into SB3's modules: Linear layers in order; heron's ensemble keeps member e's
    weight as [in, out] (SB3's nn.Linear: [out, in])."""
    with torch.no_grad():
        mine = [m for m in actor.net if isinstance(m, torch.nn.Linear)]
        theirs = [m for m in sb3_actor.mu if isinstance(m, torch.nn.Linear)]
        for a, b in zip(mine, theirs, strict=True):
            b.weight.copy_(a.weight)
            b.bias.copy_(a.bias)
        for e, q in enumerate(sb3_critic.q_networks):
            linears = [m for m in q if isinstance(m, torch.nn.Linear)]
            for layer, b in zip(critic.q.layers, linears, strict=True):
                b.weight.copy_(layer.weight[e].T)
                b.bias.copy_(layer.bias[e])


def _batches(n):
    g = torch.Generator().manual_seed(7)
    for _ in range(n):
        yield {
            "obs": torch.randn(B, D, generator=g),
            "next_obs": torch.randn(B, D, generator=g),
            "actions": torch.rand(B, A, generator=g) * 2 - 1,
            "rewards": torch.randn(B, generator=g),
            "terminated": torch.rand(B, generator=g) < 0.2,
        }


@pytest.mark.parametrize("fused", [True, False], ids=["hand-written", "autograd"])
def test_td3_update_matches_sb3(fused):
    from stable_baselines3 import TD3
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    cfg = Config(
        hidden_sizes=H,
        batch_size=B,
        policy_lr=1e-3,
        q_lr=1e-3,
        gamma=0.99,
        tau=0.05,
        policy_frequency=2,
        policy_noise=0.2,
        noise_clip=0.5,
    )
    torch.manual_seed(0)
    actor, critic = build(D, -torch.ones(A), torch.ones(A), H, False)
    actor_target = copy.deepcopy(actor).requires_grad_(False)
    critic_target = copy.deepcopy(critic).requires_grad_(False)
    nets = Nets(
        actor,
        critic,
        actor_target,
        critic_target,
        adam(list(actor.parameters()), cfg.policy_lr),
        adam(list(critic.parameters()), cfg.q_lr),
    )
    update = lean.LeanUpdate(cfg, nets) if fused else make_update(cfg, nets, Precision("32", torch.device("cpu")))
    polyak = Polyak((actor_target, actor), (critic_target, critic))

    model = TD3(
        "MlpPolicy",
        Box(),
        learning_rate=1e-3,
        batch_size=B,
        gamma=0.99,
        tau=0.05,
        policy_delay=2,
        target_policy_noise=0.2,
        target_noise_clip=0.5,
        learning_starts=0,
        device="cpu",
        policy_kwargs=dict(net_arch=list(H)),
        seed=0,
    )
    model.set_logger(configure(None, []))
    _copy_into_sb3(actor, critic, model.actor, model.critic)
    model.actor_target.load_state_dict(model.actor.state_dict())
    model.critic_target.load_state_dict(model.critic.state_dict())

    pairs = [
        (actor, model.actor),
        (critic, model.critic),
        (actor_target, model.actor_target),
        (critic_target, model.critic_target),
    ]
    for n, batch in enumerate(_batches(6), start=1):
        sample = ReplayBufferSamples(
            batch["obs"],
            batch["actions"],
            batch["next_obs"],
            batch["terminated"].float()[:, None],
            batch["rewards"][:, None],
            None,
        )
        model.replay_buffer.sample = lambda *args, **kwargs: sample  # noqa: B023 (this step's batch)
        torch.manual_seed(100 + n)  # the smoothing noise: both draw [B, A] normals first from this stream
        model.train(gradient_steps=1, batch_size=B)
        torch.manual_seed(100 + n)
        delayed = n % cfg.policy_frequency == 0
        update(batch, delayed)
        if delayed:
            polyak(cfg.tau)
        for mine, theirs in pairs:
            ours = torch.cat([p.detach().flatten() for p in _sb3_order(mine)])
            ref = torch.cat([p.detach().flatten() for p in theirs.parameters()])
            assert torch.allclose(ours, ref, rtol=1e-4, atol=1e-6), (n, type(mine).__name__)
    assert model._n_updates == 6


def _sb3_order(module):
    """heron's parameters in SB3's order and layout: the actor's Linear layers as they are; the
    critic's members one after the other, each layer's weight transposed to [out, in]."""
    if hasattr(module, "net"):
        return [t for m in module.net if isinstance(m, torch.nn.Linear) for t in (m.weight, m.bias)]
    return [t for e in range(module.q.members) for layer in module.q.layers for t in (layer.weight[e].T, layer.bias[e])]
