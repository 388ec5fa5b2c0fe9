"""DreamerV2's networks, env stack, replay layout, CLI and resume (the losses are in
test_dreamer_v2.py, the episode buffer in test_episode_buffer.py)."""

import gymnasium as gym
import numpy as np
import pytest
import torch
import toy_envs

from heron import api
from heron.accel.precision import Precision
from heron.algos.dreamer.distributions import st_sample
from heron.algos.dreamer_v2.config import PRESETS, Config
from heron.algos.dreamer_v2.distributions import TruncatedNormal
from heron.algos.dreamer_v2.networks import Agent, Decoder
from heron.cli import main
from heron.envs import dreamer as denvs
from heron.errors import HeronError
from heron.runtime import checkpoint as ckpt

DEBUG = dict(PRESETS["debug"], progress="none")


def small_cfg(**kw):
    return Config(**{**DEBUG, **kw})


def test_straight_through_sample_is_one_hot_and_passes_gradients():
    torch.manual_seed(0)
    logits = torch.randn(5, 4, 3, requires_grad=True)
    sample = st_sample(logits)
    onehot = sample.detach().round()
    assert torch.allclose(sample.detach(), onehot, atol=1e-6)  # forward: a one-hot sample
    assert torch.equal(onehot.sum(-1), torch.ones(5, 4)) and set(onehot.unique().tolist()) <= {0.0, 1.0}
    weights = torch.randn(5, 4, 3)
    (sample * weights).sum().backward()
    probs = logits.detach().softmax(-1)
    # d/dlogits of sum(w * p): the softmax Jacobian applied to w
    expected = probs * (weights - (probs * weights).sum(-1, keepdim=True))
    assert torch.allclose(logits.grad, expected, atol=1e-6)
    # the samples follow the categorical distribution of the logits
    probs = torch.tensor([[0.7, 0.2, 0.1, 0.0], [0.05, 0.05, 0.3, 0.6]])
    many = st_sample(probs.log().expand(40_000, 2, 4)).detach()
    torch.testing.assert_close(many.mean(0), probs, atol=0.01, rtol=0)
    assert many[:, 0, 3].sum() == 0  # a class of probability 0 is never drawn


def test_gradients_reach_encoder_through_the_sampled_latents():
    torch.manual_seed(0)
    cfg = small_cfg()
    agent = Agent({"state": (3,)}, (), ("state",), 2, True, cfg)
    rssm = agent.world.rssm
    T, B = 6, 2
    embed = agent.world.encoder({"state": torch.randn(T, B, 3)})
    h, z, _, _ = rssm.observe(embed, torch.zeros(T, B, 2), torch.zeros(T, B, dtype=torch.bool))
    agent.world.reward(torch.cat([z, h], -1)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in agent.world.encoder.parameters())
    assert rssm.post_out.weight.grad.abs().sum() > 0  # only reachable through the straight-through z


def test_observe_and_imagine_shapes_and_episode_resets():
    torch.manual_seed(0)
    cfg = small_cfg(stochastic_size=3, discrete_size=5, recurrent_state_size=7)
    agent = Agent({"rgb": (3, 64, 64), "state": (4,)}, ("rgb",), ("state",), 2, False, cfg)
    world, rssm = agent.world, agent.world.rssm
    T, B = 5, 3
    obs = {"rgb": torch.randint(0, 256, (T, B, 3, 64, 64), dtype=torch.uint8), "state": torch.randn(T, B, 4)}
    is_first = torch.zeros(T, B, dtype=torch.bool)
    is_first[2, 1] = True
    h, z, post, prior = rssm.observe(world.encoder(obs), torch.rand(T, B, 2) * 2 - 1, is_first)
    assert h.shape == (T, B, 7) and z.shape == (T, B, 15) and post.shape == prior.shape == (T, B, 3, 5)
    recon = world.decoder(torch.cat([z, h], -1))
    assert recon["rgb"].shape == (T, B, 3, 64, 64) and recon["state"].shape == (T, B, 4)
    # an episode start forgets the past: the state at t=2 of sequence 1 equals a fresh filter's
    fresh_h = rssm.gru(torch.nn.functional.elu(rssm.in_z(torch.zeros(1, 15))), torch.zeros(1, 7))
    assert torch.allclose(h[2, 1], fresh_h[0], atol=1e-6)
    h_t, z_t = h.flatten(0, 1), z.flatten(0, 1)
    for _ in range(4):
        h_t, z_t = rssm.imagine_step(h_t, z_t, agent.actor(torch.cat([z_t, h_t], -1)).rsample())
    assert h_t.shape == (T * B, 7) and z_t.shape == (T * B, 15)


def test_init_is_xavier_uniform_with_zero_biases():
    """The references' init (Keras's default; sheeprl's init_weights): every Linear, Conv and
    ConvTranspose (the GRU's projection too) has zero biases and U(-b, b) weights with
    b = sqrt(6 / (fan_in + fan_out)); the RSSM's split layers get the bound of the whole layer."""
    import math

    torch.manual_seed(0)
    cfg = small_cfg(
        cnn_channels_multiplier=4, dense_units=32, hidden_size=24, recurrent_state_size=20, use_continues=True
    )
    agent = Agent({"rgb": (3, 64, 64), "state": (5,)}, ("rgb",), ("state",), 3, True, cfg)
    rssm = agent.world.rssm
    split = {id(rssm.in_z.weight), id(rssm.in_a.weight), id(rssm.post_h.weight), id(rssm.post_e.weight)}
    layers = [m for m in agent.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d, torch.nn.ConvTranspose2d))]
    assert len(layers) > 20
    for m in layers:
        if m.bias is not None:
            assert torch.count_nonzero(m.bias) == 0, m
        if id(m.weight) in split:
            continue
        fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(m.weight)
        bound = math.sqrt(6.0 / (fan_in + fan_out))
        w = m.weight.abs().max().item()
        assert w <= bound and (m.weight.numel() < 200 or w > 0.95 * bound), (m, w, bound)
    whole_in = rssm.z_dim + 3
    assert rssm.in_z.weight.abs().max() <= math.sqrt(6.0 / (whole_in + 24)) < math.sqrt(6.0 / (rssm.z_dim + 24))
    assert rssm.in_a.weight.abs().max() <= math.sqrt(6.0 / (whole_in + 24))
    assert rssm.post_e.weight.abs().max() <= math.sqrt(6.0 / (20 + agent.world.encoder.out_dim + 24))
    assert torch.count_nonzero(rssm.gru.linear.bias) == 0
    assert torch.equal(agent.target_critic[0].weight, agent.critic[0].weight)  # the target starts as the critic


def test_sampled_windows_start_like_episodes():
    """The references mark the first step of every sampled window as an episode start: zero state and
    zero previous action, whatever the replay holds there."""
    from heron.algos.dreamer.spaces import spaces_of
    from heron.algos.dreamer_v2.train import build, make_optimizers, make_update

    cfg = small_cfg(sequence_length=6, per_rank_batch_size=3)
    env = denvs.make("CartPole-v1")
    spaces = spaces_of(cfg, env.observation_space, env.action_space)
    env.close()

    def world_loss(batch):
        torch.manual_seed(0)
        agent = build(cfg, spaces)
        update = make_update(
            cfg, agent, spaces, *make_optimizers(cfg, agent).values(), Precision("32", torch.device("cpu"))
        )
        torch.manual_seed(1)
        return update({k: v.clone() for k, v in batch.items()})["losses/world_model_loss"].item()

    g = torch.Generator().manual_seed(3)
    T, B = 6, 3
    batch = {
        "state": torch.randn(T, B, 4, generator=g),
        "reward": torch.ones(T, B),
        "action": torch.nn.functional.one_hot(torch.randint(0, 2, (T, B), generator=g), 2).float(),
        "is_first": torch.zeros(T, B, dtype=torch.bool),
        "is_terminal": torch.zeros(T, B, dtype=torch.bool),
    }
    as_start = {**batch, "action": batch["action"].clone(), "is_first": batch["is_first"].clone()}
    as_start["action"][0] = 0.0
    as_start["is_first"][0] = True
    other_first = {**batch, "action": batch["action"].clone()}  # another action before the window
    other_first["action"][0] = 1.0 - other_first["action"][0]
    base = world_loss(batch)
    assert base == world_loss(as_start) == world_loss(other_first)  # a_0 before the window is never seen
    later = {**batch, "action": batch["action"].clone()}
    later["action"][2] = 1.0 - later["action"][2]
    assert world_loss(later) != base  # the actions inside the window do matter


def test_decoder_first_deconvolution_as_a_matrix_product_matches_the_layer():
    """The decoder computes its 1x1-input transposed convolution as one GEMM; it must equal the layer.
    Under bf16-mixed that product runs in bfloat16 like every other layer of the decoder, and the
    decoder's output is float32."""
    torch.manual_seed(0)
    dec = Decoder({"rgb": (3, 64, 64), "depth": (1, 64, 64)}, ("rgb", "depth"), (), 40, 4, 8, 1)
    feat = torch.randn(2, 3, 40, requires_grad=True)
    out = dec(feat)
    assert out["rgb"].shape == (2, 3, 3, 64, 64) and out["depth"].shape == (2, 3, 1, 64, 64)
    first = dec.cnn[0]
    x = torch.nn.functional.conv_transpose2d(
        dec.cnn_in(feat).reshape(-1, 32 * 4, 1, 1), first.weight, first.bias, stride=first.stride
    )
    ref = dec.cnn[1:](x).reshape(2, 3, 4, 64, 64)
    torch.testing.assert_close(torch.cat([out["rgb"], out["depth"]], 2), ref, atol=1e-6, rtol=1e-5)
    (g,) = torch.autograd.grad(out["rgb"].square().sum(), dec.cnn[0].weight)
    (g_ref,) = torch.autograd.grad(ref[:, :, :3].square().sum(), dec.cnn[0].weight)
    torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-4)

    Precision("bf16-mixed", torch.device("cpu")).apply(dec)
    seen = []
    dec.cnn[0].register_forward_hook(lambda mod, args, y: seen.append(y.dtype))
    out16 = dec(feat)
    assert seen == [torch.bfloat16] and out16["rgb"].dtype == torch.float32
    torch.testing.assert_close(out16["rgb"], out["rgb"], atol=0.05, rtol=0.05)


def test_truncated_normal_density_entropy_and_bounds():
    torch.manual_seed(0)
    mean, std = torch.tensor([[0.3, -0.8]]), torch.tensor([[0.5, 0.2]])
    dist = TruncatedNormal(mean, std)
    grid = torch.linspace(-1 + 1e-6, 1 - 1e-6, 20001)
    for i in range(2):  # the density integrates to 1 on [-1, 1]
        d = TruncatedNormal(mean[:, i : i + 1].expand(len(grid), 1), std[:, i : i + 1].expand(len(grid), 1))
        dens = d.log_prob(grid[:, None]).exp()
        assert torch.trapezoid(dens, grid).item() == pytest.approx(1.0, abs=1e-3)
    samples = TruncatedNormal(mean.expand(200_000, 2), std.expand(200_000, 2)).rsample()
    assert samples.min() > -1 and samples.max() < 1
    mc_entropy = -dist.log_prob(samples).mean()  # the entropy sums over the two dimensions
    assert dist.entropy().item() == pytest.approx(mc_entropy.item(), abs=0.02)
    m = mean.clone().requires_grad_(True)
    TruncatedNormal(m, std).rsample().sum().backward()
    assert m.grad.abs().sum() > 0


def test_action_repeat_rule_and_episode_caps_in_agent_steps():
    with pytest.raises(HeronError, match="use --action-repeat 1, or PongNoFrameskip-v4"):
        denvs.check("ALE/Pong-v5", 4)
    env = denvs.make("heron-test/Counter-v0", action_repeat=3)  # terminates after 3 frames
    env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step(np.zeros(1, np.float32))
    assert obs["state"].tolist() == [3.0] and reward == 1 + 2 + 3 and terminated
    cp = denvs.make("CartPole-v1", action_repeat=2, max_episode_steps=10)
    cp.reset(seed=0)
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = cp.step(steps % 2)
        steps += 1
        done = terminated or truncated
    assert truncated and steps == 10  # agent steps (20 frames), as sheeprl's env.max_episode_steps


def test_dmc_preset_keeps_dm_controls_own_limit():
    """--preset dmc says max_episode_steps 27000 (sheeprl's DMC setting): dm_control's own 1000 frames still end a
    walker episode, 500 agent steps at action repeat 2 (a cap in frames used to replace it: 13,500 steps)."""
    pytest.importorskip("dm_control")
    from heron.algos.dreamer_v2.train import eval_env

    cfg = Config(**{**PRESETS["dmc"], "observation": "state"})  # vectors: the cap is the same, no rendering
    assert cfg.max_episode_steps == 27000 and cfg.action_repeat == 2
    env = eval_env(cfg)()
    try:
        env.reset(seed=0)
        steps, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(np.zeros(6, np.float32))
            steps += 1
            done = terminated or truncated
        assert truncated and not terminated and steps == 500
    finally:
        env.close()
    short = denvs.make("dmc_walker_walk", 2, "state", max_episode_steps=7)  # a cap below the task's own
    short.reset(seed=0)
    assert [short.step(np.zeros(6, np.float32))[3] for _ in range(7)] == [False] * 6 + [True]


def test_weight_decay_scales_weights_by_one_minus_wd_whatever_the_learning_rate():
    from heron.algos.dreamer_v2.train import make_optimizers

    torch.manual_seed(0)
    cfg = small_cfg(weight_decay=0.1, world_lr=1e-3, actor_lr=0.5, critic_lr=0.25)
    agent = Agent({"state": (3,)}, (), ("state",), 2, True, cfg)
    opts = make_optimizers(cfg, agent)
    before = {n: p.detach().clone() for n, p in agent.named_parameters()}
    for p in agent.parameters():
        p.grad = torch.zeros_like(p)  # Adam's step is 0 / (0 + eps) = 0: only the decay moves the weights
    for name in ("world_opt", "actor_opt", "critic_opt"):
        opts[name].step()
    for module in ("world", "actor", "critic"):
        for n, p in getattr(agent, module).named_parameters():
            assert torch.allclose(p, 0.9 * before[f"{module}.{n}"], rtol=0, atol=1e-7), n
    # with a gradient: decay first, then Adam's first step, lr * sign(g) (m / sqrt(v) = g / |g|)
    actor_opt = make_optimizers(cfg, agent)["actor_opt"]
    w = next(agent.actor.parameters())
    w0 = w.detach().clone()
    w.grad = torch.full_like(w, 2.0)
    actor_opt.step()
    assert torch.allclose(w, 0.9 * w0 - 0.5, atol=1e-5)
    assert Config(**DEBUG).weight_decay == 1e-6  # the official DreamerV2 value


def test_pixel_and_dict_observations():
    px = denvs.make("CartPole-v1", observation="pixels")
    obs, _ = px.reset(seed=0)
    assert obs["rgb"].shape == (3, 64, 64) and obs["rgb"].dtype == np.uint8 and obs["rgb"].std() > 0
    assert obs["state"].dtype == np.float32
    dict_env = denvs.make("heron-test/DictImage-v0")
    obs, _ = dict_env.reset(seed=0)
    assert obs["pixels"].shape == (3, 64, 64) and obs["vec"].shape == (2,)


def test_replay_layout_step_counter(tmp_path):
    """Entry t holds observation t, the action that led to it (zeros first), the reward of arriving
    there, is_first at 0 only and is_terminal only on a real termination; an episode of K steps
    is K + 1 entries; truncation is not termination."""
    for length, cap, terminal in ((4, 0, True), (9, 5, False)):
        env_id = f"heron-test/DreamerCounter{length}-v0"
        gym.register(env_id, entry_point=toy_envs.Counter, kwargs={"length": length})
        run_dir = tmp_path / str(length)
        try:
            api.train(
                "dreamer_v2",
                presets=["debug"],
                env_id=env_id,
                total_steps=40,
                learning_starts=1000,
                max_episode_steps=cap,
                eval_every=0,
                checkpoint_every=0,
                run_dir=str(run_dir),
                progress="none",
            )
        finally:
            gym.registry.pop(env_id)
        buf = ckpt.load(ckpt.buffer_path(ckpt.latest_checkpoint(run_dir / "checkpoints")))
        K = cap or length
        assert buf["episodes"][:, 1].unique().tolist() == [K + 1]
        for start, n in buf["episodes"].tolist():
            state = buf["data"]["state"][start : start + n, 0]
            assert state.tolist() == list(range(K + 1))
            assert buf["data"]["is_first"][start : start + n].tolist() == [True] + [False] * K
            assert buf["data"]["is_terminal"][start : start + n].tolist() == [False] * K + [terminal]
            assert buf["data"]["reward"][start : start + n].tolist() == [0.0] + [float(t) for t in range(1, K + 1)]
            actions = buf["data"]["action"][start : start + n]
            assert actions[0].abs().sum() == 0 and (actions[1:].abs() > 0).all()


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--observation", "pixels", "--memmap-buffer"],
        ["--env-id", "heron-test/DictImage-v0", "--cnn-keys", "pixels", "--mlp-keys", "vec"],
        ["--env-id", "Pendulum-v1"],
        ["--use-continues", "--lambda-rewards", "next"],
    ],
)
def test_cli_smoke_debug_train_then_eval(tmp_path, capsys, extra):
    run_dir = tmp_path / "run"
    code = main(
        [
            "train",
            "dreamer_v2",
            "--preset",
            "debug",
            "--run-dir",
            str(run_dir),
            "--progress",
            "none",
            "--total-steps",
            "200",
            *extra,
        ]
    )
    assert code == 0
    metrics = (run_dir / "metrics.csv").read_text()
    assert "losses/world_model_loss" in metrics and "losses/actor_loss" in metrics
    # CartPole terminates, Pendulum and the dict env only time out
    warned = "ends episodes by termination but --use-continues is off" in capsys.readouterr().err
    assert warned == (extra == [] or "--observation" in extra)
    assert main(["eval", str(run_dir), "--episodes", "1", "--json"]) == 0
    assert '"mean_return"' in capsys.readouterr().out
    if "--memmap-buffer" in extra:
        assert (run_dir / "buffer" / "rgb.npy").is_file()


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--env-id", "ALE/Pong-v5", "--action-repeat", "4"], "already skips 4 frames"),
        (["--cnn-keys", "rgb"], "observation key 'rgb' not in"),
        (["--env-id", "heron-test/MultiDiscrete-v0"], "supports Discrete and bounded 1-D Box actions"),
        (["--kl-balancing-alpha", "1.5"], "--kl-balancing-alpha must be in [0, 1]"),
        (["--buffer-size", "10", "--sequence-length", "50"], "smaller than --sequence-length"),
        (["--env-id", "dmc_walker_wlak"], "walker"),
        (["--weight-decay", "1"], "--weight-decay must be in [0, 1)"),
        (["--cuda-graphs", "--compile"], "--cuda-graphs and --compile are alternatives"),
        (["--cuda-graphs", "--device", "cpu"], "--cuda-graphs needs a CUDA device"),
    ],
)
def test_bad_input_one_line_errors(tmp_path, capsys, argv, needle):
    code = main(["train", "dreamer_v2", "--preset", "debug", "--run-dir", str(tmp_path / "r"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and needle in err, err


def test_resume_restores_agent_buffer_and_counters(tmp_path):
    run_dir = tmp_path / "run"
    api.train("dreamer_v2", presets=["debug"], total_steps=150, run_dir=str(run_dir), eval_every=0)
    first = ckpt.load(ckpt.latest_checkpoint(run_dir / "checkpoints"))
    buf = ckpt.load(ckpt.buffer_path(ckpt.latest_checkpoint(run_dir / "checkpoints")))
    stored = int(buf["episodes"][:, 1].sum())
    api.resume(run_dir, total_steps=300)
    last = ckpt.load(ckpt.latest_checkpoint(run_dir / "checkpoints"))
    assert int(last["step"]) == 300 and int(last["n_updates"]) > int(first["n_updates"]) > 0
    buf2 = ckpt.load(ckpt.buffer_path(ckpt.latest_checkpoint(run_dir / "checkpoints")))
    kept = buf2["episodes"][: len(buf["episodes"])]
    assert torch.equal(kept, buf["episodes"])  # the old episodes were restored in place
    assert int(buf2["episodes"][:, 1].sum()) > stored
    start, n = buf["episodes"][0].tolist()
    assert torch.equal(buf2["data"]["state"][start : start + n], buf["data"]["state"][start : start + n])


def test_atari_episodes_are_reported_through_dreamers_own_env_stack():
    """DreamerV2's Atari stack plays whole games (no life-loss episodes, no GameStats wrapper): the
    vector env must report its episode ends as they come."""
    import functools

    from heron.envs.make import VecEnv

    pytest.importorskip("ale_py")
    fn = functools.partial(denvs.make, "PongNoFrameskip-v4", 4, max_episode_steps=50)  # agent steps
    envs = VecEnv("PongNoFrameskip-v4", 1, 0, "sync", env_fn=fn)
    try:
        envs.reset()
        ended = []
        for _ in range(60):
            ended += envs.step(np.zeros(1, np.int64)).episodes
        # one game, cut at 50 agent steps (200 frames; the reset's no-ops are not steps): the cap counts agent
        # steps, so the atari preset's 27,000 is the paper's 108,000 frames
        assert len(ended) == 1 and ended[0][0] == 0 and ended[0][2] == 50, ended
    finally:
        envs.close()
