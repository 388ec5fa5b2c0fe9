"""CUDA paths: every algorithm on a GPU, with and without ``--cuda-graphs``, in every precision.
Skipped where there is no GPU (CI), except a CPU check of a helper the GPU tests share. On a GPU
machine: ``python -m pytest -q tests/test_cuda.py``."""

import importlib
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_acting import acted_ahead, record_loop
from test_ppo_lean import _minibatch
from test_ppo_lean import _spaces as ppo_spaces
from test_sac_lean import A, B, D, make_batch, make_nets, make_td3_nets, td3_batches

from heron import api
from heron.accel import acting
from heron.accel.acting import GraphedActor
from heron.accel.graphs import GraphedStep, GraphedSteps, capturable
from heron.accel.handwritten import sac as sac_lean
from heron.accel.handwritten import td3 as td3_lean
from heron.accel.precision import Precision
from heron.accel.step import Learn, build_step, compile_step
from heron.algos.ppo import agent as ppo_agent
from heron.algos.sac.config import Config as SACConfig
from heron.algos.sac.train import make_update as sac_make_update
from heron.algos.td3.config import Config as TD3Config
from heron.algos.td3.train import make_update as td3_make_update
from heron.cli import main
from heron.ops import dist
from heron.ops.adam import adam
from heron.rl.buffers import ReplayBuffer
from heron.rl.nets import Polyak
from heron.rl.schedules import set_lr
from heron.runtime import checkpoint as ckpt
from heron.runtime.setup import cuda_graphs_note, seed_everything

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
ppo_train = importlib.import_module("heron.algos.ppo.train")


def _spaces(discrete: bool) -> dict:
    spaces = {
        "obs_spec": {"rgb": [[3, 64, 64], "uint8"], "state": [[4], "float32"]},
        "cnn_keys": ["rgb"],
        "mlp_keys": ["state"],
        "discrete": discrete,
        "action_dim": 3,
    }
    if not discrete:
        spaces.update(action_low=-torch.ones(3), action_high=torch.ones(3))
    return spaces


def _batches(n: int, T: int, B: int, discrete: bool, device: str = "cuda") -> list[dict[str, torch.Tensor]]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        first = rng.random((T, B)) < 0.1
        first[0] = True
        if discrete:
            action = np.eye(3, dtype=np.float32)[rng.integers(0, 3, (T, B))]
        else:
            action = rng.uniform(-1, 1, (T, B, 3)).astype(np.float32)
        data = {
            "rgb": rng.integers(0, 256, (T, B, 3, 64, 64), dtype=np.uint8),
            "state": rng.standard_normal((T, B, 4)).astype(np.float32),
            "action": action,
            "reward": rng.standard_normal((T, B)).astype(np.float32),
            "is_first": first,
            "is_terminal": rng.random((T, B)) < 0.05,
        }
        out.append({k: torch.from_numpy(v).to(device) for k, v in data.items()})
    return out


def _train_steps(
    cuda_graphs: bool, discrete: bool, batches, algo: str = "dreamer_v2", device: str = "cuda"
) -> tuple[list[dict[str, float]], dict]:
    """DreamerV2's or DreamerV3's debug-size gradient steps on ``batches``, with what the loop does
    between steps: DreamerV2 copies the critic to its target every second step, DreamerV3 moves its
    slow critic toward the critic (every step, its default)."""
    seed_everything(0, deterministic=True)
    config = importlib.import_module(f"heron.algos.{algo}.config")
    train = importlib.import_module(f"heron.algos.{algo}.train")
    v2 = algo == "dreamer_v2"
    extra = {"use_continues": True, "critic_target_update_freq": 2} if v2 else {}
    cfg = config.Config(
        **{**config.PRESETS["debug"], "progress": "none", **extra, "device": device, "cuda_graphs": cuda_graphs}
    )
    spaces = _spaces(discrete)
    agent = train.build(cfg, spaces).to(device)
    update = build_step(
        cfg,
        train.make_update(
            cfg,
            agent,
            spaces,
            *train.make_optimizers(cfg, agent).values(),
            Precision(cfg.precision, torch.device(device)),
        ),
    )
    history = []
    for i, batch in enumerate(batches):
        metrics = update(batch)
        history.append({k: float(v) for k, v in metrics.items()})  # graph outputs are overwritten next step
        if (i + 1) % cfg.critic_target_update_freq == 0:  # as the training loop does, between steps
            if v2:
                agent.target_critic.load_state_dict(agent.critic.state_dict())
            else:
                with torch.no_grad():
                    for slow, fast in zip(agent.target_critic.parameters(), agent.critic.parameters()):
                        slow.lerp_(fast, cfg.critic_tau)
    return history, {k: v.detach().clone() for k, v in agent.state_dict().items()}


@pytest.mark.parametrize(
    "device,graphs,compiled,precision,ranks,told",
    [
        ("cuda", False, False, "32", 1, True),
        ("cuda", False, False, "bf16-mixed", 1, True),
        ("cuda", True, False, "32", 1, False),
        ("cuda", False, True, "32", 1, False),
        ("cpu", False, False, "32", 1, False),
        ("cuda", False, False, "16-mixed", 1, False),
        ("cuda", False, False, "32", 2, False),
    ],
)
def test_a_gpu_run_that_could_record_its_steps_is_told_so(device, graphs, compiled, precision, ranks, told):
    """A one-process CUDA run without --cuda-graphs gets a note naming it (on the CPU too: no GPU
    needed); not where it cannot apply (the CPU, 16-mixed, torchrun), nor with graphs already on or
    --compile chosen."""
    cfg = SACConfig(cuda_graphs=graphs, compile=compiled, precision=precision)
    note = cuda_graphs_note(cfg, torch.device(device), dist.World(size=ranks, local_size=ranks))
    assert (note is not None) == told
    if told:
        assert "--cuda-graphs true" in note and "\n" not in note


def test_the_dreamer_steps_helper_runs_on_the_cpu():
    """The graphed-step tests' helper, eager on the CPU (GPU time is scarce: a broken helper fails
    here first), in a process of its own (it makes the kernels deterministic): two steps, each
    batch with a loss of its own."""
    check = """
import test_cuda as t
for algo, discrete in (("dreamer_v2", True), ("dreamer_v3", True), ("dreamer_v3", False)):
    history, _ = t._train_steps(False, discrete, t._batches(2, 8, 4, discrete, "cpu"), algo, "cpu")
    assert len({round(h["losses/world_model_loss"], 6) for h in history}) == 2, algo
"""
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]


@needs_cuda
@pytest.mark.parametrize("algo", ["dreamer_v2", "dreamer_v3"])
@pytest.mark.parametrize("discrete", [True, False])
def test_cuda_graph_steps_equal_eager_steps(discrete, algo):
    """The graphed step is the same computation: 3 eager warm-up steps, a capture, replays. Same
    losses step by step (the sampling noise included) and the same weights (DreamerV3's moving
    percentiles of the returns among them)."""
    batches = _batches(8, 8, 4, discrete)
    eager, eager_w = _train_steps(False, discrete, batches, algo)
    graphed, graphed_w = _train_steps(True, discrete, batches, algo)
    for i, (a, b) in enumerate(zip(eager, graphed)):
        for k in a:
            assert b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-5), (i, k)
    assert len({round(h["losses/world_model_loss"], 6) for h in graphed[3:]}) == 5  # replays see new batches
    for k in eager_w:
        torch.testing.assert_close(graphed_w[k], eager_w[k], rtol=1e-4, atol=1e-5, msg=k)


@needs_cuda
@pytest.mark.parametrize("algo", ["dreamer_v2", "dreamer_v3"])
def test_cuda_graph_run_checkpoints_and_resumes(tmp_path, algo):
    """A whole run on the GPU with --cuda-graphs, then a resume, then eval of the saved policy."""
    run_dir = tmp_path / "g"
    r = api.train(
        algo,
        presets=["debug"],
        device="cuda",
        cuda_graphs=True,
        total_steps=300,
        env_id="Pendulum-v1",
        run_dir=str(run_dir),
        progress="none",
    )
    assert r["step"] == 300 and np.isfinite(r["mean_return"])
    state = ckpt.load(ckpt.latest_checkpoint(run_dir / "checkpoints"))
    assert state["world_opt"]["param_groups"][0]["capturable"]
    api.resume(run_dir, total_steps=450)
    last = ckpt.load(ckpt.latest_checkpoint(run_dir / "checkpoints"))
    assert int(last["step"]) == 450 and int(last["n_updates"]) > int(state["n_updates"])
    assert all(torch.isfinite(v).all() for v in last["agent"].values() if v.is_floating_point())
    assert main(["eval", str(run_dir), "--episodes", "1", "--device", "cuda"]) == 0


@needs_cuda
@pytest.mark.parametrize("algo", ["dreamer_v2", "dreamer_v3"])
@pytest.mark.parametrize(
    "extra", [[], ["--env-id", "dmc_walker_walk"], ["--env-id", "PongNoFrameskip-v4", "--action-repeat", "4"]]
)
def test_debug_run_on_cuda(tmp_path, extra, algo):
    if "dmc_walker_walk" in extra:
        pytest.importorskip("dm_control")
    if "PongNoFrameskip-v4" in extra:
        pytest.importorskip("ale_py")
    run_dir = tmp_path / "r"
    assert (
        main(
            [
                "train",
                algo,
                "--preset",
                "debug",
                "--device",
                "cuda",
                "--run-dir",
                str(run_dir),
                "--progress",
                "none",
                "--total-steps",
                "200",
                *extra,
            ]
        )
        == 0
    )
    assert "losses/world_model_loss" in (run_dir / "metrics.csv").read_text()


@needs_cuda
@pytest.mark.parametrize("algo", ["sac", "td3", "ppo", "dreamer_v2", "dreamer_v3"])
@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed", "tf32"])
def test_precisions_on_cuda(tmp_path, algo, precision):
    """Every algorithm in every mixed precision on the GPU: finite losses, and in 16-mixed the
    GradScaler's state in the checkpoint, restored by a resume."""
    run_dir = tmp_path / "r"
    assert (
        main(
            [
                "train",
                algo,
                "--preset",
                "debug",
                "--device",
                "cuda",
                "--precision",
                precision,
                "--run-dir",
                str(run_dir),
                "--progress",
                "none",
                "--eval-episodes",
                "1",
            ]
        )
        == 0
    )
    state = ckpt.load(ckpt.latest_checkpoint(run_dir / "checkpoints"))
    assert state["precision"]["mode"] == precision
    if precision == "16-mixed":
        assert float(state["precision"]["scaler"]["scale"]) > 0
        step = int(state["step"])
        assert main(["train", "--resume", str(run_dir), "--total-steps", str(step * 2)]) == 0


# -- SAC, TD3 and PPO: --cuda-graphs against the eager step -----------------------------------------
def _offpolicy_setup(algo: str, device: str, lean: bool | str = False) -> tuple:
    """SAC's or TD3's small networks (32-32, normalized observations) on ``device``: (config, nets,
    (target, source) pairs, the update step, optimizers). The autograd step, or with ``lean`` the
    hand-written one (``--fused-update``, which ``--cuda-graphs`` records where it applies)."""
    sac = algo == "sac"
    cfg = (SACConfig if sac else TD3Config)(hidden_sizes=(32, 32), obs_norm=True)
    with torch.device(device):  # the nets' tensors made there (make_nets is the lean tests')
        nets = make_nets(cfg) if sac else make_td3_nets(cfg)
    targets = [(nets.critic_target, nets.critic)] + ([] if sac else [(nets.actor_target, nets.actor)])
    for module in (nets.actor, *(m for pair in targets for m in pair)):
        module.to(device)  # the buffers made from CPU tensors (action bounds)
    update = (sac_make_update if sac else td3_make_update)(cfg, nets, Precision("32", torch.device(device)))
    if lean:  # True, or "bf16": the products in bfloat16 (--precision bf16-mixed)
        update = (sac_lean if sac else td3_lean).LeanUpdate(cfg, nets, torch.bfloat16 if lean == "bf16" else None)
    opts = [nets.actor_opt, nets.q_opt] + ([nets.alpha_opt] if sac else [])
    return cfg, nets, targets, update, opts


def _offpolicy_steps(
    algo: str, graphed: bool, n: int = 14, compiled: bool | str = False, device: str = "cuda", lean: bool | str = False
) -> tuple[list[dict[str, float]], list[torch.Tensor]]:
    """n steps on fixed batches, alternating critic-only and critic-and-actor steps, with what the
    training loop does between steps: Polyak updates, a learning-rate schedule, new normalizer
    statistics (each must reach the recorded step). ``compiled``: True for ``--compile``'s
    torch.compile, or the name of a torch.compile backend."""
    sac = algo == "sac"
    cfg, nets, targets, update, opts = _offpolicy_setup(algo, device, lean)
    norm = nets.actor.encoder.norm if sac else nets.actor.norm
    if compiled:
        update = _compiled(update, compiled)
    if graphed:
        capturable(*opts)
        update = GraphedSteps(update)
    polyak = Polyak(*targets)
    batches = [make_batch(i) for i in range(n)] if sac else td3_batches(n)
    torch.manual_seed(1)
    history = []
    for i, batch in enumerate(batches):
        for opt, lr in zip(opts, (cfg.policy_lr, cfg.q_lr)):
            set_lr(opt, lr * (1 - i / n))
        metrics = update({k: v.to(device) for k, v in batch.items()}, i % 2 == 1)
        history.append({k: float(v) for k, v in metrics.items()})  # graph outputs are overwritten next step
        polyak(0.05)
        if i not in (5, 6):  # the two captures (steps 6 and 7) meet statistics an eager step has cached
            norm.update(torch.randn(8, norm.mean.shape[0], device=device) * 2 + 1)
    if graphed:
        assert sorted(update.steps) == [False, True] and all(s.graph is not None for s in update.steps.values())
    params = [p.detach().clone() for m in (nets.actor, nets.critic) for p in m.parameters()]
    return history, params


def _assert_same(eager, graphed, eager_w, graphed_w, key, rel=1e-4, abs=1e-5):
    for i, (a, b) in enumerate(zip(eager, graphed)):
        assert a.keys() == b.keys(), i
        for k in a:
            assert b[k] == pytest.approx(a[k], rel=rel, abs=abs), (i, k)
    assert len({round(h[key], 6) for h in graphed[6:]}) == len(graphed) - 6  # replays see new batches
    for a, b in zip(eager_w, graphed_w):
        torch.testing.assert_close(b, a, rtol=rel, atol=abs)


@needs_cuda
@pytest.mark.parametrize("lean", [False, True, "bf16"], ids=["autograd", "lean", "lean-bf16"])
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_offpolicy_graphed_steps_equal_eager_steps(algo, lean):
    """SAC's and TD3's two recorded steps (critic only; critic and actor) are the eager steps: the
    same losses step by step (the policy's and the target policy's noise included) and weights,
    with the learning rates, target networks and normalizer moving between steps. The autograd
    step and the hand-written one alike."""
    eager, eager_w = _offpolicy_steps(algo, graphed=False, lean=lean)
    graphed, graphed_w = _offpolicy_steps(algo, graphed=True, lean=lean)
    _assert_same(eager, graphed, eager_w, graphed_w, "losses/qf_loss")


def _learn_steps(
    algo: str,
    graphed: bool,
    buffer_device: str,
    n: int = 14,
    device: str = "cuda",
    manual: bool = False,
    lean: bool = False,
) -> tuple[list[dict[str, float]], list]:
    """n gradient steps as the loop takes them (``heron.accel.step.Learn``: sample, update, average the
    targets) from a replay buffer that gets a new env step after each, wrapping around. ``manual``:
    the same steps written out (sample, update, Polyak) instead of through ``Learn``."""
    sac = algo == "sac"
    _, nets, targets, update, opts = _offpolicy_setup(algo, device, lean)
    rb = ReplayBuffer(2 * 40, 2, (D,), np.float32, (A,), device=buffer_device, seed=3, out_device=device)
    rng = np.random.default_rng(0)

    def add():
        rb.add(
            obs=rng.normal(size=(2, D)).astype(np.float32) * 2,
            next_obs=rng.normal(size=(2, D)).astype(np.float32),
            actions=rng.uniform(-1, 1, (2, A)).astype(np.float32),
            rewards=rng.normal(size=2).astype(np.float32),
            terminated=rng.random(2) < 0.2,
            truncated=rng.random(2) < 0.1,
        )

    for _ in range(30):
        add()
    fields, polyak = getattr(update, "fields", None), Polyak(*targets)
    cfg = SimpleNamespace(tau=0.05, cuda_graphs=graphed, n_step=1, gamma=0.99)
    learn = Learn(cfg, update, rb, (B,), polyak, opts if graphed else ())
    torch.manual_seed(1)
    history = []
    for i in range(n):
        delayed = i % 2 == 1
        if manual:
            batch = rb.sample(B, fields)
            metrics = update(batch, delayed)
            if delayed or sac:
                polyak(0.05)
        else:
            metrics = learn(delayed, delayed or sac)  # SAC averages after every step, TD3 after its actor's
        history.append({k: float(v) for k, v in metrics.items()})  # graph outputs are overwritten next step
        add()  # recorded gathers must read the rows written since
    if graphed:
        assert learn.rows_in == (buffer_device == "cuda")
        assert sorted(learn.step.steps) == [(False, sac), (True, True)]
        assert all(s.graph is not None for s in learn.step.steps.values())
    params = [p.detach().clone() for m in (nets.actor, *(m for pair in targets for m in pair)) for p in m.parameters()]
    return history, params


@pytest.mark.parametrize("lean", [False, True], ids=["autograd", "lean"])
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_learn_takes_the_loops_steps(algo, lean):
    """(On the CPU, for CI.) ``heron.accel.step.Learn`` without graphs is the loop's sample, update and
    Polyak step, in that order, on the same rows: equal to them written out, to the last bit."""
    manual, manual_w = _learn_steps(algo, False, "cpu", n=6, device="cpu", manual=True, lean=lean)
    learn, learn_w = _learn_steps(algo, False, "cpu", n=6, device="cpu", lean=lean)
    assert learn == manual and all(torch.equal(a, b) for a, b in zip(learn_w, manual_w))


@needs_cuda
@pytest.mark.parametrize("lean", [False, True], ids=["autograd", "lean"])
@pytest.mark.parametrize("buffer_device", ["cuda", "cpu"])
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_recorded_sampling_update_and_averaging_equal_eager(algo, buffer_device, lean):
    """--cuda-graphs records the batch's gather from a device buffer, the update and the targets'
    Polyak step as one graph per variant, fed only the rows drawn on the host: the eager losses
    step by step and weights (the targets' included), the same rows drawn, rows written after the
    capture read by the replays. With the buffer in host memory the gathered batch is the input."""
    eager, eager_w = _learn_steps(algo, False, buffer_device, lean=lean)
    graphed, graphed_w = _learn_steps(algo, True, buffer_device, lean=lean)
    _assert_same(eager, graphed, eager_w, graphed_w, "losses/qf_loss")


def _acting(algo: str, graphed: bool, n: int = 8) -> np.ndarray:
    """n acting calls (SAC: its Gaussian, whose draw training makes on the host; TD3: the greedy
    actions) on fresh observations, with the actor's weights and the normalizer moved in place
    between calls, as the update steps do."""
    sac = algo == "sac"
    cfg = (SACConfig if sac else TD3Config)(hidden_sizes=(32, 32), obs_norm=True)
    with torch.device("cuda"):
        nets = make_nets(cfg) if sac else make_td3_nets(cfg)
    actor = nets.actor.cuda()
    norm = actor.encoder.norm if sac else actor.norm

    def fn(obs):  # what training records
        return actor.gaussian(obs.float()) if sac else actor(obs)

    def eager(obs):
        with torch.no_grad():
            return fn(torch.as_tensor(obs, device="cuda")).cpu().numpy()

    act = GraphedActor(fn, "cuda") if graphed else eager
    torch.cuda.manual_seed(0)  # the normalizer's updates below
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        out.append(act(rng.standard_normal((3, norm.mean.shape[0])).astype(np.float32) * 2))
        with torch.no_grad():
            for p in actor.parameters():
                p.mul_(0.98).add_(0.01)
        norm.update(torch.randn(8, norm.mean.shape[0], device="cuda") + 0.5)
    if graphed:
        assert act.step.graph is not None
    return np.stack(out)


@needs_cuda
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_graphed_acting_equals_eager_acting(algo):
    """--cuda-graphs records SAC's and TD3's acting call too: its replays give the eager results
    (SAC's Gaussian, TD3's greedy actions), with the weights and normalizer statistics moved in place
    between calls reaching the replays."""
    eager, graphed = _acting(algo, graphed=False), _acting(algo, graphed=True)
    np.testing.assert_allclose(graphed, eager, rtol=1e-5, atol=1e-6)
    assert len({a.tobytes() for a in graphed[4:]}) == len(graphed) - 4  # the replays moved with the weights


def _compiled(update, compiled: bool | str):
    return compile_step(update) if compiled is True else torch.compile(update, backend=compiled)


def _ppo_steps(
    graphed: bool, n: int = 10, compiled: bool | str = False, device: str = "cuda"
) -> tuple[list[dict[str, float]], list[torch.Tensor]]:
    cfg = ppo_train.Config(hidden_sizes=(32, 32), obs_norm=True, ent_coef=0.01, clip_vloss=True, clip_coef=0.2)
    torch.manual_seed(0)
    model = ppo_agent.build(cfg, ppo_spaces("box"))
    g = torch.Generator().manual_seed(1)
    batches = [_minibatch(model, "box", 64, g) for _ in range(n)]  # made on the CPU by the initial model
    model.to(device)
    opt = adam(model.parameters(), 3e-4, eps=1e-5)
    update = ppo_train.make_update(cfg, model, opt, Precision("32", torch.device(device)))
    if compiled:
        update = _compiled(update, compiled)
    if graphed:
        capturable(opt)
        update = GraphedStep(update)
    history = []
    for i, mb in enumerate(batches):
        set_lr(opt, 3e-4 * (1 - i / n))  # annealing
        metrics = update({k: v.to(device) for k, v in mb.items()})
        history.append({k: float(v) for k, v in metrics.items()})
        if i != 2:  # as in training (one normalizer update per rollout), the capture (step 3) meets cached statistics
            model.norm.update(torch.randn(16, 5, device=device) * 3 + 1)
    if graphed:
        assert update.graph is not None
    return history, [p.detach().clone() for p in model.parameters()]


@needs_cuda
def test_ppo_graphed_steps_equal_eager_steps():
    eager, eager_w = _ppo_steps(graphed=False)
    graphed, graphed_w = _ppo_steps(graphed=True)
    _assert_same(eager, graphed, eager_w, graphed_w, "losses/value_loss")


@needs_cuda
@pytest.mark.parametrize("algo", ["sac", "td3", "ppo"])
def test_compiled_graphed_steps_equal_eager_steps(monkeypatch, algo):
    """--compile --cuda-graphs (LeanRL's pairing): the compiled step, recorded, is the eager step:
    the same losses step by step and weights, within what Inductor's fused and reordered sums move;
    its random draws are eager's here (fallback_random) so that the noise is the same."""
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(inductor_config, "fallback_random", True)
    torch._dynamo.reset()
    if algo == "ppo":
        (eager, eager_w), (got, got_w), key = _ppo_steps(False), _ppo_steps(True, compiled=True), "losses/value_loss"
    else:
        eager, eager_w = _offpolicy_steps(algo, graphed=False)
        got, got_w = _offpolicy_steps(algo, graphed=True, compiled=True)
        key = "losses/qf_loss"
    _assert_same(eager, got, eager_w, got_w, key, rel=1e-3, abs=1e-4)


@needs_cuda
@pytest.mark.parametrize("algo,env_id", [("sac", "Pendulum-v1"), ("td3", "Pendulum-v1"), ("ppo", "CartPole-v1")])
def test_graphed_runs_checkpoint_resume_and_evaluate(tmp_path, monkeypatch, algo, env_id):
    """--cuda-graphs through whole runs: the steps are replayed graphs, checkpoints hold plain
    learning rates (they resume with or without graphs), a resume records its graphs again, the
    saved policy evaluates."""
    replays, replay = [], torch.cuda.CUDAGraph.replay
    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", lambda self: (replays.append(1), replay(self))[1])
    run_dir = tmp_path / "g"
    r = api.train(
        algo,
        presets=["debug"],
        device="cuda",
        cuda_graphs=True,
        env_id=env_id,
        run_dir=str(run_dir),
        progress="none",
        eval_episodes=1,
    )
    assert np.isfinite(r["mean_return"])
    state = ckpt.load(ckpt.latest_checkpoint(run_dir / "checkpoints"))
    assert len(replays) > int(state["n_updates"]) // 2  # most steps were replays
    opt = state["opt" if algo == "ppo" else "q_opt"]["param_groups"][0]
    assert type(opt["lr"]) is float and not opt["capturable"]
    step = int(state["step"])
    before = len(replays)
    api.resume(run_dir, total_steps=2 * step)
    last = ckpt.load(ckpt.latest_checkpoint(run_dir / "checkpoints"))
    assert int(last["step"]) == 2 * step and int(last["n_updates"]) > int(state["n_updates"])
    assert len(replays) > before
    config = run_dir / "config.yaml"
    text = config.read_text()
    assert "cuda_graphs: true" in text
    config.write_text(text.replace("cuda_graphs: true", "cuda_graphs: false"))  # the same run, eager from here
    assert main(["train", "--resume", str(run_dir), "--total-steps", str(3 * step)]) == 0
    assert main(["eval", str(run_dir), "--episodes", "1", "--device", "cuda"]) == 0


@needs_cuda
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_acting_ahead_on_cuda_changes_no_number(tmp_path, monkeypatch, algo):
    """--act-ahead on a graphed GPU run: before critic-only steps the next actions (TD3) or Gaussian
    (SAC) are taken first, and the env steps while the critics train on the GPU. Two runs acting
    behind agree bit for bit (the premise), and a run acting ahead agrees with them: weights and
    losses; and it did act ahead, only before critic-only steps."""
    events = record_loop(monkeypatch, (GraphedActor, "__call__"))
    states, rows, order = {}, {}, {}
    for run in ("behind", "behind-again", "ahead"):
        events.clear()
        run_dir = tmp_path / run
        api.train(
            algo,
            presets=["debug"],
            device="cuda",
            env_id="Pendulum-v1",
            run_dir=str(run_dir),
            progress="none",
            eval_every=0,
            torch_threads=1,
            cuda_graphs=True,
            obs_norm=True,
            act_ahead=run == "ahead",
            eval_async="off",
        )
        states[run] = ckpt.load(ckpt.latest_checkpoint(run_dir / "checkpoints"))
        with open(run_dir / "metrics.csv") as f:
            cells = [line.split(",") for line in f]
            rows[run] = [(c[0], c[2], c[3]) for c in cells if "SPS" not in c[2]]  # not the wall time
        order[run] = acted_ahead(events)
    assert order["behind"] == [] and len(order["ahead"]) > 50 and set(order["ahead"]) == {False}
    for run in ("behind-again", "ahead"):
        assert rows[run] == rows["behind"] and len(rows[run]) > 5, run
        for key in ("actor", "critic", "critic_target"):
            for name, tensor in states[run][key].items():
                assert torch.equal(tensor.cpu(), states["behind"][key][name].cpu()), f"{run}: {key}.{name}"


@needs_cuda
@pytest.mark.parametrize("body,action", [("cnn", "discrete"), ("shared", "box")])
def test_ppo_recorded_acting_equals_eager_acting(body, action):
    """--cuda-graphs records PPO's acting step where no CPU twin acts (a CNN, a shared body): its
    replays give the eager step's actions, log-probs and values on the same observations and noise,
    with the weights moved in place between calls reaching the replays, whether the observations and
    noise come as arrays or, as the rollout passes them, already on the GPU."""
    from heron.algos.ppo.acting import RecordedActing

    image = body == "cnn"
    spaces = {
        "obs_shape": [4, 84, 84] if image else [5],
        "obs_dtype": "uint8" if image else "float32",
        "action": {"kind": "discrete", "n": 6}
        if action == "discrete"
        else {"kind": "box", "low": -torch.ones(2), "high": torch.ones(2)},
        "obs_parts": None,
    }
    cfg = ppo_train.Config(hidden_sizes=() if image else (16,), shared_network=True)
    torch.manual_seed(0)
    model = ppo_agent.build(cfg, spaces).cuda()
    recorded = RecordedActing(model, "cuda")
    rng = np.random.default_rng(0)
    for i in range(8):
        obs = (
            rng.integers(0, 256, (8, 4, 84, 84), dtype=np.uint8)
            if image
            else rng.standard_normal((8, 5)).astype(np.float32)
        )
        noise = model.pi_head.noise((8,), "cuda")
        got = recorded(obs, noise.cpu().numpy()) if i % 2 else recorded(torch.as_tensor(obs, device="cuda"), noise)
        with torch.no_grad():
            params, values, _ = model.step(torch.as_tensor(obs, device="cuda"), torch.zeros(8, 0, device="cuda"))
            actions, logp = model.pi_head.sample_logp(params, noise)
            want = (model.pi_head.to_env(actions), actions, logp, values)
            for p in model.parameters():  # as an update moves them, between calls
                p.mul_(0.97).add_(0.01)
        for name, a, b in zip(("to_env", "actions", "logp", "values"), got, want):
            np.testing.assert_allclose(a, b.cpu().numpy(), rtol=1e-5, atol=1e-5, err_msg=f"{name}, call {i}")
    assert recorded.graph.step.graph is not None


@needs_cuda
def test_ppo_on_cuda_records_its_acting_where_no_twin_acts(tmp_path, monkeypatch):
    """A shared body acts on the GPU (no CPU twin): with --cuda-graphs every rollout step replays the
    recorded acting step, and the run checkpoints, resumes and evaluates."""
    from heron.algos.ppo.acting import RecordedActing

    calls, call = [], RecordedActing.__call__
    monkeypatch.setattr(RecordedActing, "__call__", lambda self, *a: (calls.append(1), call(self, *a))[1])
    run_dir = tmp_path / "p"
    r = api.train(
        "ppo",
        presets=["debug"],
        device="cuda",
        env_id="Pendulum-v1",
        run_dir=str(run_dir),
        progress="none",
        eval_episodes=1,
        shared_network=True,
        cuda_graphs=True,
    )
    assert np.isfinite(r["mean_return"]) and len(calls) == 2048 // 2  # debug: 2 envs, 2,048 steps
    assert main(["train", "--resume", str(run_dir), "--total-steps", "3072"]) == 0
    assert len(calls) == 3072 // 2


@needs_cuda
def test_ppo_on_cuda_acts_on_a_cpu_twin(tmp_path, monkeypatch):
    """PPO's feed-forward model on the GPU acts in numpy on a CPU twin, refreshed once per rollout."""
    refreshes, refresh = [], acting.CpuTwin.refresh
    monkeypatch.setattr(acting.CpuTwin, "refresh", lambda self: (refreshes.append(1), refresh(self))[1])
    r = api.train(
        "ppo",
        presets=["debug"],
        device="cuda",
        env_id="Pendulum-v1",
        run_dir=str(tmp_path / "p"),
        progress="none",
        eval_episodes=1,
        eval_async="off",
    )  # the worker's evaluations refresh no twin
    state = ckpt.load(ckpt.latest_checkpoint(tmp_path / "p" / "checkpoints"))
    evaluations = len((tmp_path / "p" / "eval.csv").read_text().splitlines()) - 1  # each acts on the host too
    assert np.isfinite(r["mean_return"]) and len(refreshes) == int(state["n_updates"]) + evaluations
    assert int(state["n_updates"]) > 1 and evaluations >= 1


@needs_cuda
@pytest.mark.parametrize("algo", ["sac", "ppo"])
def test_evaluations_in_the_worker_equal_those_on_the_host_copy(tmp_path, algo):
    """--eval-async on a GPU run (auto's choice on a machine with a spare core): the worker's
    evaluations, from snapshots of the GPU policy, give eval.csv and best.pt as the host copy's in
    the training process do (one thread on both sides: the same arithmetic)."""
    rows = {}
    for mode in ("off", "on"):
        api.train(
            algo,
            presets=["debug"],
            device="cuda",
            env_id="Pendulum-v1",
            run_dir=str(tmp_path / mode),
            progress="none",
            total_steps=3000,
            eval_every=1000,
            eval_episodes=2,
            torch_threads=1,
            cuda_graphs=True,
            eval_async=mode,
        )
        with open(tmp_path / mode / "eval.csv") as f:
            rows[mode] = [line.rsplit(",", 1)[0] for line in f]  # without the wall time
    assert rows["on"] == rows["off"] and len(rows["on"]) == 4
    best = {m: ckpt.load(tmp_path / m / "checkpoints" / "best.pt") for m in ("off", "on")}
    assert best["on"]["step"] == best["off"]["step"]
    for name, tensor in best["off"]["actor"].items():
        assert torch.equal(tensor.cpu(), best["on"]["actor"][name].cpu()), name


@needs_cuda
@pytest.mark.parametrize("algo", ["sac", "td3", "ppo"])
def test_evaluation_on_cuda_acts_on_a_host_copy(tmp_path, algo):
    """A feed-forward actor trained on the GPU is evaluated on a CPU copy of it (no launches or
    syncs per eval step), acting as the GPU actor does."""
    env_id = "CartPole-v1" if algo == "ppo" else "Pendulum-v1"
    api.train(
        algo,
        presets=["debug"],
        device="cuda",
        env_id=env_id,
        run_dir=str(tmp_path / "r"),
        progress="none",
        eval_episodes=3,
        obs_norm=True,
    )
    policy = api.load(tmp_path / "r", device="cuda")
    host = policy.on_host()
    assert host is not policy and {p.device.type for p in host.actor.parameters()} == {"cpu"}
    obs = np.random.default_rng(0).normal(size=(5, 4 if algo == "ppo" else 3)).astype(np.float32)
    close = np.testing.assert_array_equal if algo == "ppo" else np.testing.assert_allclose
    close(host.predict(obs), policy.predict(obs), **({} if algo == "ppo" else {"rtol": 1e-4, "atol": 1e-5}))
    assert api.evaluate(tmp_path / "r", episodes=3, device="cuda")["episodes"] == 3


@needs_cuda
@pytest.mark.parametrize("algo,extra", [("sac", []), ("td3", []), ("sac", ["--recurrent", "gru"])])
def test_replay_in_host_memory_feeds_the_gpu(tmp_path, algo, extra):
    """--buffer-device cpu with --device cuda: the replay stays in host memory and every sampled
    batch (transitions or sequences) reaches the GPU."""
    assert (
        main(
            [
                "train",
                algo,
                "--preset",
                "debug",
                "--device",
                "cuda",
                "--buffer-device",
                "cpu",
                "--run-dir",
                str(tmp_path / "r"),
                "--progress",
                "none",
                "--eval-episodes",
                "1",
                *extra,
            ]
        )
        == 0
    )
