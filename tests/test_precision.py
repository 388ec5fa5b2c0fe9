"""--precision: under bf16-mixed the layers compute in bfloat16 and everything after them (actions,
log-probs, entropies, losses) is float32; 16-mixed is refused without CUDA. (Exact resume in
bf16-mixed: test_determinism.py; 16-mixed with its GradScaler on a GPU: test_cuda.py. Learning in
bf16-mixed was checked by hand, docs/benchmarks/index.md, "Precision and learning": the suite's time is spent.)"""

import copy
import importlib

import pytest
import torch
import torch.nn.functional as F
from cli_helpers import cli_error

from heron.accel.precision import Precision
from heron.algos.dreamer_v2.config import Config as DreamerConfig
from heron.algos.dreamer_v3 import losses as v3_losses
from heron.algos.dreamer_v3.config import Config as DreamerV3Config
from heron.algos.ppo import agent as ppo_agent
from heron.algos.ppo.config import Config as PPOConfig
from heron.algos.sac import agent as sac_agent
from heron.algos.sac.config import Config as SACConfig
from heron.algos.td3 import losses as td3_losses


def _train_module(algo):
    return importlib.import_module(f"heron.algos.{algo}.train")


def test_layers_compute_in_bfloat16_and_hand_back_float32():
    torch.manual_seed(0)
    prec = Precision("bf16-mixed", torch.device("cpu"))
    layer = torch.nn.Linear(5, 3)
    prec.apply(layer)
    x = torch.randn(4, 5)
    y = layer(x)
    assert y.dtype == torch.float32
    assert torch.equal(y, F.linear(x.bfloat16(), layer.weight.bfloat16(), layer.bias.bfloat16()).float())
    assert layer.weight.dtype == torch.float32  # parameters stay float32
    y.sum().backward()
    assert layer.weight.grad.dtype == torch.float32
    target = copy.deepcopy(layer)  # a target network keeps the hooks (and copies no Precision)
    assert torch.equal(target(x), y)
    assert Precision("32", torch.device("cpu")).mixed is False


def test_chains_hand_over_in_bfloat16_with_the_per_layer_values():
    """Layers that follow one another in an nn.Sequential through activations alone pass their
    output on in bfloat16 (half the saved memory, no float32 copy) with exactly the values of the
    per-layer path, which rounds every layer's input; the chain's end hands back float32, and a
    layer norm (or a float32 head) between layers ends a chain."""

    def run_recording(net, x):
        seen = {}
        hooks = [m.register_forward_hook(lambda mod, a, out, k=k: seen.__setitem__(k, out)) for k, m in enumerate(net)]
        y = net(x)
        for h in hooks:
            h.remove()
        return y, seen

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(6, 8), torch.nn.ELU(), torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
    )
    ref = copy.deepcopy(net)
    Precision("bf16-mixed", torch.device("cpu")).apply(net)
    x = torch.randn(5, 6) * 3
    y, seen = run_recording(net, x)
    assert seen[0].dtype == seen[1].dtype == seen[2].dtype == torch.bfloat16 and y.dtype == torch.float32
    h = x
    for layer in ref:  # every layer's input rounded, its output float32
        h = (
            F.linear(h.bfloat16(), layer.weight.bfloat16(), layer.bias.bfloat16()).float()
            if isinstance(layer, torch.nn.Linear)
            else layer(h)
        )
    assert torch.equal(y, h)
    y.square().sum().backward()
    h.square().sum().backward()
    for p, q in zip(net.parameters(), ref.parameters()):  # and the same gradients
        assert p.grad.dtype == torch.float32 and torch.equal(p.grad, q.grad)

    broken = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.ELU(), torch.nn.Linear(8, 3))
    Precision("bf16-mixed", torch.device("cpu")).apply(broken)
    assert run_recording(broken, x)[1][0].dtype == torch.float32


def test_sac_and_td3_outputs_and_losses_are_float32():
    spaces = {"obs_shape": [3], "action_low": -torch.ones(2), "action_high": torch.ones(2)}
    actor, critic = sac_agent.networks(SACConfig(hidden_sizes=(16, 16)), spaces)
    Precision("bf16-mixed", torch.device("cpu")).apply(actor, critic)
    obs = torch.randn(8, 1, 3)
    starts = torch.zeros(8, 1, dtype=torch.bool)
    feats, _ = actor.encoder(obs, obs.new_zeros(8, 0), starts)
    actions, log_prob = actor.sample(feats.flatten(0, 1))
    q_feats, _ = critic.encode(obs, obs.new_zeros(8, 2, 0), starts)
    q = critic.values(q_feats.flatten(1, 2), actions)  # the EnsembleMLP path
    assert actions.dtype == log_prob.dtype == q.dtype == torch.float32
    loss = td3_losses.critic_losses(q, torch.randn(8))
    assert loss.dtype == torch.float32
    # the twin critics did run in bfloat16: their values differ from float32's
    critic32 = sac_agent.networks(SACConfig(hidden_sizes=(16, 16)), spaces)[1]
    critic32.load_state_dict(critic.state_dict())
    q32 = critic32.values(critic32.encode(obs, obs.new_zeros(8, 2, 0), starts)[0].flatten(1, 2), actions)
    assert not torch.equal(q, q32) and torch.allclose(q, q32, atol=0.05)


def test_ppo_and_dreamer_distributions_are_float32():

    spaces = {"obs_shape": [4], "obs_dtype": "float32", "action": {"kind": "discrete", "n": 3}, "obs_parts": None}
    model = ppo_agent.build(PPOConfig(hidden_sizes=(16,)), spaces)
    Precision("bf16-mixed", torch.device("cpu")).apply(model)
    params, values, _ = model(torch.randn(6, 1, 4), torch.zeros(6, 0), torch.zeros(6, 1, dtype=torch.bool))
    actions, logp = model.pi_head.sample_logp(params)
    assert params.dtype == values.dtype == logp.dtype == model.pi_head.entropy(params).dtype == torch.float32

    dreamer = _train_module("dreamer_v2")
    cfg = DreamerConfig(
        hidden_size=16, recurrent_state_size=16, stochastic_size=4, discrete_size=4, dense_units=16, mlp_layers=1
    )
    spaces = {
        "obs_spec": {"state": [[4], "float32"]},
        "cnn_keys": [],
        "mlp_keys": ["state"],
        "discrete": True,
        "action_dim": 2,
    }
    agent = dreamer.build(cfg, spaces)
    Precision("bf16-mixed", torch.device("cpu")).apply(agent)
    h = torch.zeros(5, 16)
    z = torch.zeros(5, 16)
    pi = agent.actor(torch.cat([z, h], -1))
    action = pi.rsample()
    assert pi.log_prob(action).dtype == pi.entropy().dtype == torch.float32
    h2, z2 = agent.world.rssm.imagine_step(h, z, action)
    assert h2.dtype == z2.dtype == torch.float32


def outputs(modules: dict, run) -> dict:
    """Each named layer's (input, output) during ``run()``."""
    seen = {}
    hooks = [
        m.register_forward_hook(lambda mod, args, out, name=name: seen.__setitem__(name, (args[0], out)))
        for name, m in modules.items()
    ]
    run()
    for h in hooks:
        h.remove()
    return seen


def exact(layer, x, y, dtype) -> bool:
    """Whether the linear ``layer`` gave ``y`` from ``x`` computing in ``dtype``."""
    bias = None if layer.bias is None else layer.bias.to(dtype)
    return torch.equal(y, F.linear(x.to(dtype), layer.weight.to(dtype), bias).float())


def test_value_heads_stay_float32():
    """PPO's value head and DreamerV2's reward and critic heads (heron.rl.nets.float32_out) run in
    float32 under bf16-mixed: a bfloat16 value near 300 moves in steps of 2. The layers before them
    still run in bfloat16."""
    torch.manual_seed(1)

    spaces = {"obs_shape": [4], "obs_dtype": "float32", "action": {"kind": "discrete", "n": 3}, "obs_parts": None}
    model = ppo_agent.build(PPOConfig(hidden_sizes=(16,)), spaces)
    Precision("bf16-mixed", torch.device("cpu")).apply(model)
    seen = outputs(
        {"v": model.v_head, "pi": model.pi_head.linear},
        lambda: model(torch.randn(6, 1, 4) * 30, torch.zeros(6, 0), torch.zeros(6, 1, dtype=torch.bool)),
    )
    assert exact(model.v_head, *seen["v"], torch.float32) and not exact(model.v_head, *seen["v"], torch.bfloat16)
    assert exact(model.pi_head.linear, *seen["pi"], torch.bfloat16)

    dreamer = _train_module("dreamer_v2")
    cfg = DreamerConfig(
        hidden_size=16, recurrent_state_size=16, stochastic_size=4, discrete_size=4, dense_units=16, mlp_layers=1
    )
    agent = dreamer.build(
        cfg,
        {
            "obs_spec": {"state": [[4], "float32"]},
            "cnn_keys": [],
            "mlp_keys": ["state"],
            "discrete": True,
            "action_dim": 2,
        },
    )
    Precision("bf16-mixed", torch.device("cpu")).apply(agent)
    rssm = agent.world.rssm
    heads = {
        "critic": agent.critic[-1],
        "target": agent.target_critic[-1],
        "reward": agent.world.reward[-1],
        "actor": agent.actor.net[-1],
        "prior": rssm.prior[-1],
        "post": rssm.post_out,
        "decoder": agent.world.decoder.mlp[-1],
        "hidden": agent.critic[0],
    }
    feat, h = torch.randn(7, 32) * 30, torch.randn(7, 16) * 3
    seen = outputs(
        heads,
        lambda: (
            agent.critic(feat),
            agent.target_critic(feat),
            agent.world.reward(feat),
            agent.actor(feat),
            rssm.prior_logits(h),
            agent.world.decoder(feat),
            rssm.posterior_step(h, torch.randn(7, 16)),
        ),
    )
    for name in ("critic", "target", "reward", "actor", "prior", "post", "decoder"):
        assert exact(heads[name], *seen[name], torch.float32), name
    assert exact(heads["hidden"], *seen["hidden"], torch.bfloat16)


def test_dreamer_v3_heads_and_distributions_stay_float32():
    """DreamerV3 under bf16-mixed: its two-hot heads (reward, critic, slow critic; 255 logits whose
    softmax a bfloat16 would blur), the continue model, the latents' logits, the vector decoder and
    the actor's output layer run in float32, and what is computed from them (the two-hot means, the
    action distributions' log-probabilities and entropies, the imagined state) is float32. The layers
    before them run in bfloat16."""
    dreamer = _train_module("dreamer_v3")
    cfg = DreamerV3Config(
        dense_units=16, mlp_layers=1, hidden_size=16, recurrent_state_size=16, stochastic_size=4, discrete_size=4
    )
    bins = v3_losses.twohot_bins(cfg.bins)
    for discrete in (True, False):
        torch.manual_seed(2)
        spaces = {
            "obs_spec": {"state": [[4], "float32"]},
            "cnn_keys": [],
            "mlp_keys": ["state"],
            "discrete": discrete,
            "action_dim": 2,
        }
        if not discrete:
            spaces.update(action_low=-torch.ones(2), action_high=torch.ones(2))
        agent = dreamer.build(cfg, spaces)
        world, rssm = agent.world, agent.world.rssm
        with torch.no_grad():  # the reward and critic heads start at exactly 0, in any dtype: move them
            for head in (world.reward[-1], agent.critic[-1], agent.target_critic[-1]):
                head.weight.normal_(0, 0.3)
        Precision("bf16-mixed", torch.device("cpu")).apply(agent)
        heads = {
            "reward": world.reward[-1],
            "continue": world.continue_model[-1],
            "critic": agent.critic[-1],
            "slow": agent.target_critic[-1],
            "actor": agent.actor.net[-1],
            "prior": rssm.prior[-1],
            "post": rssm.post_out,
            "decoder": world.decoder.heads[0],
            "hidden": agent.critic[0],
        }
        feat, h = torch.randn(7, rssm.feat_dim) * 3, torch.randn(7, 16)
        made = {}  # the two-hot means and the policy

        def run():
            for name, net in (("reward", world.reward), ("critic", agent.critic), ("slow", agent.target_critic)):
                made[name] = v3_losses.twohot_mean(net(feat), bins)
            world.continue_model(feat), rssm.prior_logits(h), rssm.posterior_step(h, torch.randn(7, 16))
            world.decoder(feat)
            made["pi"] = agent.actor(feat)

        seen = outputs(heads, run)
        for name, (x, y) in seen.items():
            dtype = torch.bfloat16 if name == "hidden" else torch.float32
            assert exact(heads[name], x, y, dtype), (discrete, name)
            if name in ("reward", "critic", "hidden"):  # where the two dtypes give different numbers: can fail
                assert not exact(heads[name], x, y, torch.float32 if dtype == torch.bfloat16 else torch.bfloat16)
        pi = made["pi"]
        action = pi.rsample()
        assert made["reward"].dtype == made["critic"].dtype == made["slow"].dtype == torch.float32
        assert action.dtype == pi.log_prob(action).dtype == pi.entropy().dtype == torch.float32
        h2, z2 = rssm.imagine_step(h, torch.zeros(7, rssm.z_dim), action)
        assert h2.dtype == z2.dtype == torch.float32


def test_16_mixed_needs_cuda(capsys, tmp_path):
    if torch.cuda.is_available():
        return
    err = cli_error(capsys, ["train", "sac", "--precision", "16-mixed", "--run-dir", str(tmp_path / "r")])
    assert "--precision 16-mixed needs CUDA" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("avx512_bf16,amx,slow", [(False, False, True), (True, False, False), (False, True, False)])
def test_bf16_on_a_cpu_without_bfloat16_instructions_is_called_slow(monkeypatch, avx512_bf16, amx, slow):
    # AVX2-only CPUs (AMD Zen 3) emulate bfloat16 products: SAC ran 9x slower than float32 there
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    cpu = torch.device("cpu")
    warning = Precision("bf16-mixed", cpu).slow_warning()
    assert (warning is not None) == slow
    if slow:
        assert "--precision 32" in warning and "\n" not in warning
    assert Precision("32", cpu).slow_warning() is None


@pytest.mark.parametrize("mode,deterministic", [("32", True), ("tf32", True), ("tf32", False), ("bf16-mixed", True)])
def test_cuda_numerics_of_each_precision(mode, deterministic):
    """What each precision sets on CUDA (the flags only; no GPU needed): TF32 matrix products and
    autotuning in tf32 alone, while cuDNN's convolutions keep PyTorch's default TF32 in every mode
    (full-float32 convolutions took DreamerV2's graphed step 3.6x the time and 3.4x the memory of
    tf32's on an H200)."""
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    before = cudnn.allow_tf32, cudnn.benchmark, matmul.allow_tf32
    try:  # each flag set against what the precision should leave
        cudnn.allow_tf32, cudnn.benchmark, matmul.allow_tf32 = False, deterministic, mode != "tf32"
        Precision(mode, torch.device("cuda"), deterministic)
        assert matmul.allow_tf32 == (mode == "tf32")
        assert cudnn.allow_tf32
        assert cudnn.benchmark == (mode == "tf32" and not deterministic)
    finally:
        cudnn.allow_tf32, cudnn.benchmark, matmul.allow_tf32 = before


def test_loss_scale_survives_an_optimizer_stepped_twice_in_one_gradient_step():
    """SAC's policy_frequency actor steps use one optimizer twice per gradient step: GradScaler
    unscales an optimizer once per scale, so the scale moves in between (a CPU GradScaler stands in
    for 16-mixed's CUDA one); an overflowing step is skipped and halves the scale."""
    prec = Precision("32", torch.device("cpu"))
    prec.scaler = torch.amp.GradScaler("cpu", init_scale=4.0, growth_interval=1)
    w = torch.nn.Parameter(torch.tensor([1.0]))
    opt = torch.optim.SGD([w], lr=0.5)
    for _ in range(2):
        prec.optimize(opt, (w**2).sum(), [w])  # grad 2w: 1.0 -> 0.0 -> 0.0
    prec.update()
    assert w.item() == 0.0 and prec.scaler.get_scale() == 16.0  # two updates: 4 -> 8 -> 16
    w.data.fill_(1.0)
    norm = prec.optimize(opt, w.sum() * float("inf"), [w], norm=True)  # overflow: skipped
    prec.update()
    assert w.item() == 1.0 and not torch.isfinite(norm) and prec.scaler.get_scale() == 8.0
    prec.update()  # nothing stepped since: no update (GradScaler would raise)
