"""CUDA paths: DreamerV2 on a GPU, with and without ``--cuda-graphs``. Skipped where there is no
GPU (CI). On a GPU machine: ``python -m pytest -q tests/test_cuda.py``."""

import numpy as np
import pytest
import torch

from heron import api
from heron.algos.dreamer_v2.config import PRESETS, Config
from heron.algos.dreamer_v2.train import build, make_optimizers, make_update, wrap_update
from heron.cli import main
from heron.core import checkpoint as ckpt
from heron.core.run import seed_everything

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEBUG = dict(PRESETS["debug"], progress="none")


def _spaces(discrete: bool) -> dict:
    spaces = {"obs_spec": {"rgb": [[3, 64, 64], "uint8"], "state": [[4], "float32"]}, "cnn_keys": ["rgb"],
              "mlp_keys": ["state"], "discrete": discrete, "action_dim": 3}
    if not discrete:
        spaces.update(action_low=-torch.ones(3), action_high=torch.ones(3))
    return spaces


def _batches(n: int, T: int, B: int, discrete: bool) -> list[dict[str, torch.Tensor]]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        first = rng.random((T, B)) < 0.1
        first[0] = True
        if discrete:
            action = np.eye(3, dtype=np.float32)[rng.integers(0, 3, (T, B))]
        else:
            action = rng.uniform(-1, 1, (T, B, 3)).astype(np.float32)
        data = {"rgb": rng.integers(0, 256, (T, B, 3, 64, 64), dtype=np.uint8),
                "state": rng.standard_normal((T, B, 4)).astype(np.float32), "action": action,
                "reward": rng.standard_normal((T, B)).astype(np.float32), "is_first": first,
                "is_terminal": rng.random((T, B)) < 0.05}
        out.append({k: torch.from_numpy(v).cuda() for k, v in data.items()})
    return out


def _train_steps(cuda_graphs: bool, discrete: bool, batches) -> tuple[list[dict[str, float]], dict]:
    seed_everything(0, deterministic=True)
    cfg = Config(**{**DEBUG, "use_continues": True, "device": "cuda", "cuda_graphs": cuda_graphs,
                    "critic_target_update_freq": 2})
    spaces = _spaces(discrete)
    agent = build(cfg, spaces).cuda()
    update = wrap_update(cfg, make_update(cfg, agent, spaces, *make_optimizers(cfg, agent).values()))
    history = []
    for i, batch in enumerate(batches):
        metrics = update(batch)
        history.append({k: float(v) for k, v in metrics.items()})  # graph outputs are overwritten next step
        if (i + 1) % cfg.critic_target_update_freq == 0:  # as the training loop does, between steps
            agent.target_critic.load_state_dict(agent.critic.state_dict())
    return history, {k: v.detach().clone() for k, v in agent.state_dict().items()}


@needs_cuda
@pytest.mark.parametrize("discrete", [True, False])
def test_cuda_graph_steps_equal_eager_steps(discrete):
    """The graphed step is the same computation: 3 eager warm-up steps, a capture, replays. Same
    losses step by step (the Gumbel and truncated-normal noise included) and the same weights."""
    batches = _batches(8, 8, 4, discrete)
    eager, eager_w = _train_steps(False, discrete, batches)
    graphed, graphed_w = _train_steps(True, discrete, batches)
    for i, (a, b) in enumerate(zip(eager, graphed)):
        for k in a:
            assert b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-5), (i, k)
    assert len({round(h["losses/world_model_loss"], 6) for h in graphed[3:]}) == 5  # replays see new batches
    for k in eager_w:
        torch.testing.assert_close(graphed_w[k], eager_w[k], rtol=1e-4, atol=1e-5, msg=k)


@needs_cuda
def test_cuda_graph_run_checkpoints_and_resumes(tmp_path):
    """A whole run on the GPU with --cuda-graphs, then a resume, then eval of the saved policy."""
    run_dir = tmp_path / "g"
    r = api.train("dreamer_v2", presets=["debug"], device="cuda", cuda_graphs=True, total_steps=300,
                  env_id="Pendulum-v1", run_dir=str(run_dir), progress="none")
    assert r["step"] == 300 and np.isfinite(r["mean_return"])
    state = ckpt.load(ckpt.latest_checkpoint(run_dir / "checkpoints"))
    assert state["world_opt"]["param_groups"][0]["capturable"]
    api.resume(run_dir, total_steps=450)
    last = ckpt.load(ckpt.latest_checkpoint(run_dir / "checkpoints"))
    assert int(last["step"]) == 450 and int(last["n_updates"]) > int(state["n_updates"])
    assert all(torch.isfinite(v).all() for v in last["agent"].values() if v.is_floating_point())
    assert main(["eval", str(run_dir), "--episodes", "1", "--device", "cuda"]) == 0


@needs_cuda
@pytest.mark.parametrize("extra", [[], ["--env-id", "dmc_walker_walk"], ["--env-id", "PongNoFrameskip-v4",
                                                                          "--action-repeat", "4"]])
def test_debug_run_on_cuda(tmp_path, extra):
    if "dmc_walker_walk" in extra:
        pytest.importorskip("dm_control")
    if "PongNoFrameskip-v4" in extra:
        pytest.importorskip("ale_py")
    run_dir = tmp_path / "r"
    assert main(["train", "dreamer_v2", "--preset", "debug", "--device", "cuda", "--run-dir", str(run_dir),
                 "--progress", "none", "--total-steps", "200", *extra]) == 0
    assert "losses/world_model_loss" in (run_dir / "metrics.csv").read_text()


@needs_cuda
@pytest.mark.parametrize("algo", ["sac", "td3", "ppo", "dreamer_v2"])
@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed", "tf32"])
def test_precisions_on_cuda(tmp_path, algo, precision):
    """Every algorithm in every mixed precision on the GPU: finite losses, and in 16-mixed the
    GradScaler's state in the checkpoint, restored by a resume."""
    run_dir = tmp_path / "r"
    assert main(["train", algo, "--preset", "debug", "--device", "cuda", "--precision", precision, "--run-dir",
                 str(run_dir), "--progress", "none", "--eval-episodes", "1"]) == 0
    state = ckpt.load(ckpt.latest_checkpoint(run_dir / "checkpoints"))
    assert state["precision"]["mode"] == precision
    if precision == "16-mixed":
        assert float(state["precision"]["scaler"]["scale"]) > 0
        step = int(state["step"])
        assert main(["train", "--resume", str(run_dir), "--total-steps", str(step * 2)]) == 0
