#!/bin/bash
# heron beside LeanRL (github.com/pytorch-labs/LeanRL, its torch.compile + CUDA-graph scripts) on one
# GPU machine, in one run of about 7 minutes (an H100 or H200 with 16 cores): env steps per
# second of SAC, TD3 and PPO on HalfCheetah-v5, each run of heron followed by LeanRL's, and the ratio
# heron / LeanRL.
#
# Both sides, evaluation, checkpoints and video off (LeanRL has none):
#   SAC, TD3: 20,000 steps, learning from 5,000 (TD3's defaults are 25,000 in both), timed from
#             step START (7,000); heron --cuda-graphs true, LeanRL --compile --cudagraphs.
#   PPO:      8 envs x 256 steps, 32 minibatches, 10 epochs, 64-64 tanh networks (heron's mujoco
#             preset; LeanRL run with --num-envs 8 --num-steps 256, its defaults for the rest), at
#             most 102,400 steps, timed from step 20,480 (the 10th rollout).
# Each run stops at its step count or after HERON_SECONDS (50) / LEANRL_SECONDS (80; PPO 110) with
# SIGINT.
# LeanRL gets longer: its first learning steps torch.compile three functions on a cold cache; the
# summary says how long that took (its slowest interval of env steps). On an H200 that was 23-29 s
# for SAC and TD3 and 41 s for PPO, whose 70 s then held 11 of its 50 iterations: PPO gets 110 s.
# heron's rate is read from metrics.csv; LeanRL's from a count of env steps that a stand-in 'wandb'
# module keeps (below, written to /tmp at run time), beside LeanRL's own 'speed' figure (its mean
# from step learning_starts + 3, or PPO's 3rd iteration, to the last logged step).
#
# First, on a machine with network access, in the repo root (.whl, .whl_leanrl and .leanrl are in
# .git/info/exclude; nothing of LeanRL is committed to heron):
#   1. Gymnasium and MuJoCo wheels in .whl: the loop in benchmarks/gpu_check.sh's header.
#   2. LeanRL's dependencies the GPU machine's Python lacks, in .whl_leanrl (it has numpy, tqdm,
#      typing-extensions, packaging, cloudpickle): tensordict 0.12 and torchrl 0.12 are the releases
#      of torch 2.11's time
#      (torchrl's C++ extension, unused by these scripts, links libtorch; tensordict's does not);
#      tyro 1.0 needs docstring-parser and typeguard, tensordict and torchrl need pyvers:
#        for p in tensordict==0.12.3 torchrl==0.12.0 pyvers==0.2.3 tyro==1.0.17 docstring-parser==0.18.0 \
#            typeguard==4.6.1; do
#          python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#            --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#            --platform manylinux2014_x86_64 --platform any -d .whl_leanrl $p; done
#   3. LeanRL's three scripts in .leanrl/leanrl, at LeanRL's commit 8dbb6336b7f6cc65cdbbeb2e86637c38867e2677,
#      from a git clone checked out at that commit (M: its .git directory):
#        mkdir -p .leanrl/leanrl
#        for a in sac td3 ppo; do f=leanrl/${a}_continuous_action_torchcompile.py
#          git --git-dir=$M show HEAD:$f > .leanrl/$f; done
#      and for ALGOS=atari its Atari script: f=leanrl/ppo_atari_envpool_torchcompile.py, the same way.
# then copy the repository with .whl, .whl_leanrl and .leanrl (about 35 MB) to the GPU machine and run
#   bash benchmarks/gpu_vs_leanrl.sh there. It prints its results and writes $OUT/summary.txt,
#   $OUT/{heron,leanrl}-{sac,td3,ppo}.log and $OUT/leanrl-steps.csv.
# ALGOS="sac td3" leaves PPO out; HERON_SECONDS, LEANRL_SECONDS and START change the timings;
# ALGOS=atari: PPO from Pong frames, heron's --preset atari on ALE's vector env (8 threads, 8 envs x
#   128 steps) for ATARI_SECONDS (100), then LeanRL's Atari script (--env-id Pong-v5, its defaults: the
#   same block) for LEANRL_SECONDS (170), both timed from step 20,480. EnvPool's wheel is not
#   installed beside ALE's, so LeanRL's envs are ALE's vector env too, under EnvPool's API
#   (benchmarks/leanrl_stubs: no sticky actions, a lost life ends the episode, clipped rewards).
#   Copy .whl_atari (gymnasium, ale-py, opencv; see gpu_check.sh), .whl_leanrl and .leanrl along
#   (about 56 MB), not .whl; "features" keeps the preset's evaluations (5 games every 250,000
#   steps) and checkpoints every 100,000;
# HERON_MODES (default "graphs"): heron's runs per algorithm, "graphs" (--cuda-graphs) and/or
# "compiled" (--compile with --cuda-graphs, LeanRL's pairing; its compile time counts, so give it
# HERON_SECONDS of 80 or more);
# and/or "features" (--cuda-graphs with evaluation, 10 episodes, and a checkpoint every 10,000 steps:
# as a training run has them; the evaluations go to a worker process, --eval-async's default on a GPU);
# and/or "features-compiled" (the same with --compile: give it HERON_SECONDS of 80 or more);
# and/or "features-autograd" (SAC, TD3: the autograd step recorded, --fused-update false);
# a mode naming "behind" (e.g. "features-behind") turns --act-ahead off: every env step after the
# update in flight, for the A/B of acting ahead of the critic-only steps;
# PPO: a mode naming "once" (e.g. "features-once") computes the advantages once per rollout
# (--recompute-adv false), as LeanRL's and CleanRL's PPO do, where heron's default (DI-engine's)
# re-values the rollout before every epoch: the same algorithm on both sides; "tf32" adds
# --precision tf32, the TF32 matrix products LeanRL's scripts ask for (float32_matmul_precision high);
# LEANRL_MODE (default "--compile --cudagraphs") LeanRL's speed-ups, e.g. "--cudagraphs" alone.
#
# LeanRL's scripts were written for Gymnasium 0.29; here they run on 1.4 (heron's, for v5 envs and
# numpy 2) through the stand-in: the vector env resets on the same step and hands back the old
# infos['final_observation'] and infos['final_info'], and TransformObservation's space is optional.
set -o pipefail
# GPU_CHECK_SITE and GPU_CHECK_RUNS move the wheels' site and the runs (for tests/test_benchmark_scripts.py)
SITE=${GPU_CHECK_SITE:-/tmp/site} RUNS=${GPU_CHECK_RUNS:-/tmp/runs}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE \
    $(ls .whl/*.whl .whl_atari/*.whl .whl_leanrl/*.whl 2>/dev/null) || exit 1
export PYTHONPATH=$SITE:$PWD MUJOCO_GL=disable PYTHONUNBUFFERED=1  # no rendering: the GPU machine may lack libEGL
OUT=${OUT:-/tmp/gpu_vs_leanrl}
W=$RUNS/vs  # work folder: the stand-in, the step counts, the rates
rm -rf $W $RUNS/vs-*  # a rerun on the same machine starts afresh
mkdir -p "$OUT" $W/stub/wandb
HERON_MODES=${HERON_MODES:-graphs}
HERON_SECONDS=${HERON_SECONDS:-50} START=${START:-7000}
LEANRL_MODE=${LEANRL_MODE:---compile --cudagraphs}
[ -d .leanrl/leanrl ] || echo "no .leanrl/leanrl: LeanRL's scripts were not carried (see the header)"

cat > $W/stub/wandb/__init__.py <<'EOF'
"""Stand-in for wandb, for LeanRL's scripts (written by heron's benchmarks/gpu_vs_leanrl.sh).
init and log do nothing but note LeanRL's own 'speed'. On import it also
- counts env steps through gymnasium's SyncVectorEnv and notes (env steps, time) each time the
  count passes a multiple of $LEANRL_EVERY, in $LEANRL_STEPS;
- gives Gymnasium 1.x the 0.29 vector API those scripts read: same-step autoreset with
  infos['final_observation'] and infos['final_info'] (a list of the finished envs' infos), and
  TransformObservation's observation_space optional;
- lets a TensorDictModule return more tensors than its out_keys, as tensordict did then."""
import os
import time

import gymnasium as gym
import numpy as np

_log = open(os.environ.get("LEANRL_STEPS", os.devnull), "a", buffering=1)
_every = int(os.environ.get("LEANRL_EVERY", "1000"))


def init(*args, **kwargs):
    return None


def log(data, step=None, **kwargs):
    if "speed" in data:
        _log.write(f"speed,{step},{time.time():.3f},{float(data['speed']):.1f}\n")


def finish(*args, **kwargs):
    return None


def _pick(infos, i):
    """Env i's info out of a vector info dict (its keys with a '_key' mask set for i)."""
    return {k: _pick(v, i) if isinstance(v, dict) else v[i] for k, v in infos.items()
            if not k.startswith("_") and infos.get("_" + k, np.ones(i + 1, bool))[i]}


class SyncVectorEnv(gym.vector.SyncVectorEnv):
    def __init__(self, env_fns, *args, **kwargs):
        kwargs.setdefault("autoreset_mode", gym.vector.AutoresetMode.SAME_STEP)
        super().__init__(env_fns, *args, **kwargs)
        self._env_steps = 0

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = super().step(actions)
        before, self._env_steps = self._env_steps, self._env_steps + self.num_envs
        if self._env_steps // _every > before // _every:
            _log.write(f"steps,{self._env_steps},{time.time():.3f},\n")
        if "final_obs" in infos:
            infos["final_observation"] = infos.pop("final_obs")
            done = infos.pop("_final_obs")
            final = infos.pop("final_info", {})
            infos.pop("_final_info", None)
            infos["final_info"] = [f for f in (_pick(final, i) for i in np.flatnonzero(done)) if "episode" in f]
        return obs, rewards, terminations, truncations, infos


class TransformObservation(gym.wrappers.TransformObservation):
    def __init__(self, env, func, observation_space=None):
        super().__init__(env, func, observation_space)


gym.vector.SyncVectorEnv = SyncVectorEnv
gym.wrappers.TransformObservation = TransformObservation

# tensordict 0.12 refuses a module that returns more tensors than out_keys; the tensordict of
# LeanRL's time wrote the first ones and dropped the rest (its SAC policy returns action, log-prob
# and mean under the one key "action")
try:
    from tensordict.nn import TensorDictModule as _Module
except ImportError:
    _Module = None
if _Module is not None:
    _write = _Module._write_to_tensordict

    def _write_first(self, tensordict, tensors, tensordict_out=None, out_keys=None):
        keys = self.out_keys_source if out_keys is None else out_keys
        return _write(self, tensordict, list(tensors)[: len(keys)], tensordict_out, out_keys)

    _Module._write_to_tensordict = _write_first
EOF

# rate KIND PATH START ALGO: env steps/s from step START to the last one recorded; one line, and
# "ALGO KIND RATE" appended to $W/results
cat > $W/rate.py <<'EOF'
import csv, statistics, sys
kind, path, start, algo = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
own = launch = None
if kind == "heron":
    with open(path + "/metrics.csv", newline="") as f:
        lines = [line for line in f if line.endswith("\n")]  # a kill can tear the last one
    # heron's final evaluation (after its final checkpoint, even with --eval-every 0) is left out:
    # LeanRL has none (on the H200 a SAC run's came 11 s after its last training row)
    pts = [(int(r[0]), float(r[1])) for r in csv.reader(lines[1:])
           if len(r) == 4 and r[0].isdigit() and not r[2].startswith("eval/")]
else:
    pts = []
    for r in csv.reader(open(path)):
        if r[0] == "launch":
            launch = float(r[2])
        elif r[0] == "steps":
            pts.append((int(r[1]), float(r[2])))
        elif r[0] == "speed":
            own = float(r[3])
window = [p for p in pts if p[0] >= start]
label = sys.argv[6] if len(sys.argv) > 6 else kind  # heron's mode: heron, heron-compiled
name = label if kind == "heron" else "LeanRL"
if len(window) < 2 or window[-1][0] == window[0][0]:
    last = f"step {pts[-1][0]}" if pts else "no step"
    print(f"{algo} {name}: too slow, did not get past step {start} in time (last: {last})")
    sys.exit()
(s0, t0), (s1, t1) = window[0], window[-1]
rate = (s1 - s0) / (t1 - t0)
line = f"{algo} {name}: {rate:.0f} env steps/s over steps {s0}-{s1} ({t1 - t0:.1f} s)"
if kind == "leanrl":
    gaps = [(b[1] - a[1], a[0], b[0]) for a, b in zip(pts, pts[1:])]
    inside = [g for g, a, b in gaps if a >= start]
    g, a, b = max(gaps)
    line += (f"; its own figure {own:.0f}" if own else "") + f"; step {s0} reached {t0 - launch:.0f} s after launch"
    line += f"; slowest interval: steps {a}-{b} in {g:.1f} s (compile, graph capture), median {statistics.median(inside):.2f} s"
print(line)
open(sys.argv[5], "a").write(f"{algo} {label} {rate:.1f}\n")
EOF

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/summary.txt
python3 -c "
import importlib
for name in ('torch', 'gymnasium', 'mujoco', 'ale_py', 'tensordict', 'torchrl', 'tyro'):
    try:
        print(name, importlib.import_module(name).__version__, end='  ')
    except Exception:
        print(name, 'absent', end='  ')
print()" 2>&1 | tail -3 | tee -a $OUT/summary.txt

for algo in ${ALGOS:-sac td3 ppo}; do
    env=HalfCheetah-v5 seconds=$HERON_SECONDS threads=4 stub=$W/stub
    script=.leanrl/leanrl/${algo}_continuous_action_torchcompile.py
    if [ $algo = atari ]; then  # PPO from Pong frames, 8 envs x 128 steps on both sides
        # LeanRL's Atari script reads EnvPool and the old gym package: their stand-ins are a folder of
        # their own (the continuous scripts' torchrl would take this gym for the real one)
        env=PongNoFrameskip-v4 seconds=${ATARI_SECONDS:-100} threads=8
        stub=$(cd "$(dirname "$0")" && pwd)/leanrl_stubs:$W/stub
        script=.leanrl/leanrl/ppo_atari_envpool_torchcompile.py
        heron_flags="--preset atari --env-backend ale --total-steps 10000000"; start=20480; every=1024
        leanrl_flags="--env-id Pong-v5 --total-timesteps 10000000"
    elif [ $algo = ppo ]; then
        heron_flags="--preset mujoco --total-steps 102400"; start=20480; every=2048
        leanrl_flags="--env-id $env --num-envs 8 --num-steps 256 --total-timesteps 102400"
    else
        heron_flags="--preset mujoco --total-steps 20000 --learning-starts 5000"; start=$START; every=1000
        leanrl_flags="--env-id $env --total-timesteps 20000 --learning-starts 5000"
    fi
    leanrl_seconds=${LEANRL_SECONDS:-$(case $algo in ppo) echo 110;; atari) echo 170;; *) echo 80;; esac)}
    echo "== $algo, $env: heron (at most $seconds s), then LeanRL $LEANRL_MODE (at most $leanrl_seconds s)"
    for mode in $HERON_MODES; do
        # features-*: evaluation and a checkpoint every 10,000 steps (as a training run has them); Atari:
        # the preset's evaluations (5 games every 250,000 steps) and a checkpoint every 100,000
        extras="--eval-every 0 --checkpoint-every 0 --checkpoint-minutes 0"
        [[ $mode = features* ]] && extras="--eval-every 10000 --checkpoint-every 10000 --checkpoint-minutes 0"
        [[ $mode = features* ]] && [ $algo = atari ] && extras="--checkpoint-every 100000 --checkpoint-minutes 0"
        mode_flags="--cuda-graphs true"
        [[ $mode = *compiled* ]] && mode_flags="$mode_flags --compile true"
        [[ $mode = *behind* ]] && mode_flags="$mode_flags --act-ahead false"  # the A/B of --act-ahead
        [[ $mode = *autograd* ]] && mode_flags="$mode_flags --fused-update false"
        [[ $mode = *once* ]] && mode_flags="$mode_flags --recompute-adv false"  # LeanRL's (CleanRL's) PPO
        [[ $mode = *tf32* ]] && mode_flags="$mode_flags --precision tf32"  # LeanRL's TF32 matrix products
        label=heron$([ $mode = graphs ] || echo "-$mode")
        dir=$RUNS/vs-$algo-$mode log="$OUT/$label-$algo.log"
        timeout -s INT -k 30 $seconds python3 -m heron train $([ $algo = atari ] && echo ppo || echo $algo) \
            --env-id $env --device cuda $mode_flags $extras $heron_flags \
            --torch-threads $threads --progress none --run-dir $dir > "$log" 2>&1
        code=$?
        if [ -f $dir/metrics.csv ]; then python3 $W/rate.py heron $dir $start $algo $W/results $label
        else echo "$algo $label: exit $code, no metrics.csv"; tail -5 "$log"; fi | tee -a $OUT/summary.txt
    done

    steps=$W/leanrl-$algo.csv
    echo "launch,0,$(date +%s.%N)," > $steps
    LEANRL_STEPS=$steps LEANRL_EVERY=$every PYTHONPATH=$stub:$SITE TQDM_MININTERVAL=10 \
        timeout -s INT -k 30 $leanrl_seconds python3 $script $LEANRL_MODE $leanrl_flags > "$OUT/leanrl-$algo.log" 2>&1
    code=$?
    sed "s/^/$algo,/" $steps >> $OUT/leanrl-steps.csv
    if grep -q ^steps $steps; then python3 $W/rate.py leanrl $steps $start $algo $W/results
    else echo "$algo LeanRL: exit $code, no env steps"; fi | tee -a $OUT/summary.txt
    [ $code = 0 ] || [ $code = 124 ] || { echo "LeanRL exit $code:"; tail -15 "$OUT/leanrl-$algo.log"; }
done

echo "== heron / LeanRL, env steps/s ($(nvidia-smi --query-gpu=name --format=csv,noheader))" | tee -a $OUT/summary.txt
python3 - $W/results <<'EOF' | tee -a $OUT/summary.txt
import os, sys
rates = {}
for line in open(sys.argv[1]) if os.path.exists(sys.argv[1]) else []:
    algo, kind, rate = line.split()
    rates.setdefault(algo, {})[kind] = float(rate)
for algo, r in rates.items():
    herons = [k for k in r if k.startswith("heron")]
    if herons and "leanrl" in r:
        for k in herons:
            print(f"{algo}: {k} {r[k]:.0f}, LeanRL {r['leanrl']:.0f}: {r[k] / r['leanrl']:.2f}x")
    else:
        print(f"{algo}: only {', '.join(r)} measured")
EOF
