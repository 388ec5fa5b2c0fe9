"""What a training process sets up, and what it leaves alone.

A run that does not compile never imports torch's compiler stack: importing torch._dynamo and
Inductor's config cost every run 1-3 s of startup on a 2-core AMD EPYC VM (heron.ops.adam.Adam,
heron.runtime.setup._deterministic_algorithms). The ``heron`` command keeps freed memory in the heap
(heron.runtime.memory: PPO from pixels page-faulted about 2,500 times per vector step without it);
``heron.train()`` leaves the caller's allocator as it was."""

import subprocess
import sys

SCRIPT = """
import sys, tempfile
import heron
from heron.runtime import memory
before = memory._done
for algo, flags in (("sac", dict(env_id="Pendulum-v1", learning_starts=100, batch_size=16)),
                    ("ppo", dict(env_id="CartPole-v1", num_envs=2, num_steps=32, num_minibatches=2))):
    heron.train(algo, total_steps=200, hidden_sizes=(16,), eval_every=0, eval_episodes=1, checkpoint_every=100,
                progress="none", run_dir=tempfile.mkdtemp() + "/r", **flags)
    heron.resume(heron.train(algo, total_steps=100, hidden_sizes=(16,), eval_every=0, eval_episodes=1,
                             progress="none", run_dir=tempfile.mkdtemp() + "/q", **flags)["run_dir"], total_steps=200)
loaded = sorted(m for m in sys.modules if m.startswith(("torch._dynamo", "torch._inductor")))
print("LOADED", loaded[:5])
print("KEPT", before, memory._done)
"""

COMMAND = """
import sys
from heron.runtime import memory
sys.argv = ["heron", "train", "sac", "--preset", "debug", "--total-steps", "1", "--progress", "none",
            "--run-dir", sys.argv[1]]
from heron.cli import entry
code = entry()
print("KEPT", memory._done, code)
"""


def test_training_checkpointing_and_resume_import_no_compiler_and_leave_the_allocator():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "LOADED []" in out.stdout, out.stdout[-500:]
    assert "KEPT False False" in out.stdout, out.stdout[-500:]  # a library call leaves the allocator alone


def test_the_heron_command_keeps_freed_memory(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", COMMAND, str(tmp_path / "run")], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "KEPT True 0" in out.stdout, out.stdout[-500:]
