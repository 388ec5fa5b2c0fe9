#!/bin/bash
# The GPU checks, in two runs of about 4-6 minutes each on an H100 or H200 with 16 cores:
#   bash benchmarks/gpu_check.sh tests   and   bash benchmarks/gpu_check.sh sps
# or both in one run of about 8 minutes: SPS_SECONDS=50 bash benchmarks/gpu_check.sh all
#   1. tests/test_cuda.py: every algorithm on CUDA; --cuda-graphs against the eager steps (SAC, TD3,
#      PPO, DreamerV2, DreamerV3) and through whole runs with a resume; every precision.
#   2. Env steps per second of SAC, TD3 and PPO on HalfCheetah-v5, eager and --cuda-graphs, with
#      logging, evaluation (10 episodes every 10k steps) and checkpoints on, beside LeanRL's
#      published H100 figures (SAC 725, TD3 936, PPO continuous 1774 env steps/s, with those off).
#
# For a GPU machine whose Python has PyTorch but not Gymnasium or MuJoCo: first, on a machine with
# network access, in the repo root (the wheels for the GPU machine's Python 3.12; .whl is in
# .git/info/exclude):
#   for p in gymnasium==1.4.0 mujoco==3.17.0 farama-notifications glfw pyopengl etils; do
#     python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 \
#       --platform any -d .whl $p; done
# then copy the repository with .whl to the GPU machine and run bash benchmarks/gpu_check.sh there (it
# installs the wheels itself). It prints its results and writes $OUT/{pytest.log,sps.txt}.
#
# sps takes SPS_ALGOS (sac td3 ppo), SPS_GRAPHS (false true) and SPS_EVAL_ASYNC (auto: on such a
# machine the evaluations go to a worker process; "off auto" times both): SPS_GRAPHS=true
# SPS_SECONDS=50 times the three graphed runs alone (about 3 minutes), and
# SPS_GRAPHS=true SPS_EVAL_ASYNC="off auto" SPS_SECONDS=45 each with evaluations in and out of process (5 minutes);
# SPS_ACT_AHEAD="true false" times SAC and TD3 with and without --act-ahead; SPS_COMPILE="false true"
# also with --compile (its compile time falls before the timed window: give it SPS_SECONDS of 70 or more).
# TESTS_K=EXPR bash benchmarks/gpu_check.sh tests: only the tests that pytest's -k EXPR selects
# What an evaluation costs on the GPU (benchmarks/eval_speed.py): bash benchmarks/gpu_check.sh eval
# What each --precision does to speed and GPU memory: bash benchmarks/gpu_check.sh precision
# Where a graphed SAC env step's time goes (torch.profiler): bash benchmarks/gpu_check.sh profile
#
# Atari (PPO from pixels on ALE's own vector env, beside LeanRL's published 6809 env steps/s, then
# where an iteration's time goes, benchmarks/ppo_phases.py):
#   bash benchmarks/gpu_check.sh atari   with .whl_atari copied along instead of .whl (54 MB)
# where .whl_atari holds gymnasium==1.4.0 farama-notifications ale-py==0.12.1 and
# opencv-python-headless==4.11.0.86 (evaluation's resize), downloaded as above.
#
# DreamerV3's gradient step beside sheeprl 0.8.4's dreamer_v3 (benchmarks/dreamer_v3_vs_sheeprl.py):
#   bash benchmarks/gpu_check.sh dreamer-v3   with .whl (for Gymnasium) and .whl_sheeprl copied along
# where .whl_sheeprl holds what sheeprl needs beyond the GPU machine's own packages (lightning,
# torchmetrics, rich and OpenCV are there): sheeprl==0.8.4 hydra-core==1.3.8 omegaconf==2.3.1
# python-dotenv==1.2.4, downloaded as above, and antlr4-python3-runtime==4.9.3, which PyPI has as
# source only: python3 -m pip wheel --no-deps antlr4-python3-runtime==4.9.3 -w .whl_sheeprl (1 MB in all).
set -o pipefail
# the wheels once per machine (a second run, or a second part of one, finds them in $SITE);
# GPU_CHECK_SITE and GPU_CHECK_RUNS (where the timed runs go) move them, for tests/test_benchmark_scripts.py
SITE=${GPU_CHECK_SITE:-/tmp/site} RUNS=${GPU_CHECK_RUNS:-/tmp/runs}
mkdir -p "$SITE"
wheels=$(ls .whl/*.whl .whl_atari/*.whl .whl_sheeprl/*.whl 2>/dev/null)
if [ "$(cat $SITE/.wheels 2>/dev/null)" != "$(echo $wheels | md5sum)" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE \
        $wheels || exit 1
    echo $wheels | md5sum > $SITE/.wheels
fi
export PYTHONPATH=$SITE:$PWD MUJOCO_GL=egl PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch, gymnasium; print('torch', torch.__version__, 'gymnasium', gymnasium.__version__)"

mode=${1:-tests}
if [ "$mode" = tests ] || [ "$mode" = all ]; then
# (95 s on an H200 before the compiled tests; those compile two or three steps each)
echo "== tests/test_cuda.py, 8 processes on the one GPU (2 threads each), at most 240 s a test"
only=(); [ -n "$TESTS_K" ] && only=(-k "$TESTS_K")  # TESTS_K=host_copy: those tests alone
OMP_NUM_THREADS=2 timeout 300 python3 -m pytest -q -p no:cacheprovider -n 8 --timeout 240 --durations 8 \
    "${only[@]}" tests/test_cuda.py 2>&1 | tee "$OUT/pytest.log" | tail -40
[ "$mode" = tests ] && exit
fi

# steps/s between two steps of a run, from its metrics.csv (wall time of the first and last rows)
sps() {
    python3 - "$1" "$2" <<'EOF'
import csv, sys
# the final evaluation's rows (after the final checkpoint) are no training: left out of the window
rows = [(int(r["step"]), float(r["wall_time"])) for r in csv.DictReader(open(sys.argv[1] + "/metrics.csv"))
        if not r["metric"].startswith("eval/")]
start = int(sys.argv[2])
window = [r for r in rows if r[0] >= start]
if len(window) < 2 or window[-1][0] == window[0][0]:
    print(f"too slow: did not get past step {start} in time")
else:
    (s0, t0), (s1, t1) = window[0], window[-1]
    print(f"{(s1 - s0) / (t1 - t0):.0f} env steps/s over steps {s0}-{s1}")
EOF
}

# timed NAME LABEL SECONDS START ARGS...: heron train ARGS in $RUNS/NAME (afresh), Ctrl-C after
# SECONDS (a checkpoint), then its rate from step START on, into sps.txt; its log in $OUT/NAME.log
timed() {
    local name=$1 label=$2 seconds=$3 start=$4 dir=$RUNS/$1
    shift 4
    rm -rf "$dir"  # a rerun on the same machine starts afresh
    timeout -s INT "$seconds" python3 -m heron train "$@" --progress none --run-dir "$dir" > "$OUT/$name.log" 2>&1
    local code=$?
    if [ -f "$dir/metrics.csv" ]; then
        echo "$label (exit $code): $(sps "$dir" "$start")" | tee -a "$OUT/sps.txt"
    else
        echo "$label: exit $code"; tail -5 "$OUT/$name.log"
    fi
}

if [ "$mode" = eval ]; then
    # what one evaluation (10 HalfCheetah-v5 episodes) costs: one at a time on the GPU, together, and
    # together on the actor's CPU copy (about 2 minutes for the three algorithms)
    export MUJOCO_GL=disable
    for algo in sac td3 ppo; do
        python3 benchmarks/eval_speed.py --algo $algo --device cuda --threads 4 --rounds 2 2>&1 \
            | grep -v "^WARNING\|^$" | tee -a "$OUT/eval.txt"
    done
    exit
fi

if [ "$mode" = profile ]; then
    # where a graphed env step's time goes (benchmarks/gpu_profile.py, its header's command): SAC, or
    # PROFILE_ALGOS="sac td3"; about a minute each
    export MUJOCO_GL=disable
    for algo in ${PROFILE_ALGOS:-sac}; do
        python3 benchmarks/gpu_profile.py $algo --wait 6000 --active 300 -- --preset mujoco --env-id HalfCheetah-v5 \
            --device cuda --cuda-graphs true --learning-starts 5000 --total-steps 6400 --eval-every 0 \
            --checkpoint-every 0 --torch-threads 4 --progress none 2>&1 | grep -v "^WARNING\|^$" | tee -a "$OUT/profile.txt"
    done
    exit
fi

if [ "$mode" = precision ]; then
    # what each --precision does to speed and GPU memory (about 5 minutes):
    # 1. DreamerV2's gradient step at sheeprl's DMC sizes (batch 50 x 50, continuous actions), with
    #    heron's training numerics (deterministic kernels; 32 has full-fp32 matrix products, tf32
    #    TF32 ones): eager in every precision, graphed in all but 16-mixed (its loss scaling is not
    #    recorded); peak_gpu_mb is the most memory its tensors held
    echo "== DreamerV2 gradient step, DMC sizes, per precision" | tee "$OUT/precision.txt"
    for p in 32 tf32 bf16-mixed 16-mixed; do
        for graphs in "" "--cuda-graphs"; do
            [ "$p" = 16-mixed ] && [ -n "$graphs" ] && continue
            python3 benchmarks/dreamer_vs_sheeprl.py --device cuda --sizes dmc --continuous --batch-size 50 \
                --warmup 6 --steps 20 --heron-defaults --skip-sheeprl --precision $p $graphs 2>&1 | tail -1 \
                | python3 -c "import json, sys; r = json.loads(sys.stdin.read()); print(r['precision'], \
'graphed' if r['cuda_graphs'] else 'eager', f\"{r['sec_per_grad_step']:.4f} s/step\", r['peak_gpu_mb'], 'MB')" \
                | tee -a "$OUT/precision.txt"
        done
    done
    # 2. SAC on HalfCheetah-v5, graphed, whole runs: env steps/s in float32 and bf16-mixed
    export MUJOCO_GL=disable
    for p in 32 bf16-mixed; do
        timed sac-$p "sac --cuda-graphs --precision $p" ${SPS_SECONDS:-60} 8000 sac --preset mujoco \
            --env-id HalfCheetah-v5 --device cuda --cuda-graphs true --precision $p --total-steps 20000 \
            --learning-starts 5000 --eval-every 0 --checkpoint-every 0 --torch-threads 4
    done
    exit
fi

if [ "$mode" = dreamer-v3 ]; then
    # both eager, then heron's recorded step (--cuda-graphs) against sheeprl's compiled losses
    # (algo.compile, its reduce-overhead mode) (DV3_MODES: which), at the paper's size S and heron's
    # vector preset (DV3_SIZES); batch 16 x 64, vector observations, Discrete(2) actions, sheeprl's
    # TF32 products on both sides. Each pair at most DV3_TIMEOUT seconds (240); the warm-ups, sheeprl's
    # compilation among them, fall outside the timed steps. The eager pairs should take about a minute
    # each; sheeprl compiles again for each size (its world-model loss unrolls 64 steps: minutes on a
    # fresh machine), so give the recorded pairs a call of their own if the eager ones were slow:
    # DV3_MODES=recorded bash benchmarks/gpu_check.sh dreamer-v3
    echo "== DreamerV3 gradient step beside sheeprl 0.8.4's dreamer_v3 (s per step)" | tee "$OUT/dreamer_v3.txt"
    for m in ${DV3_MODES:-eager recorded}; do
        for size in ${DV3_SIZES:-S vector}; do
            flags=""
            [ "$m" = recorded ] && flags="--cuda-graphs --sheeprl-compile"
            timeout ${DV3_TIMEOUT:-240} python3 benchmarks/dreamer_v3_vs_sheeprl.py --device cuda --sizes $size \
                --warmup 8 --steps 40 --sheeprl-python python3 $flags > "$OUT/dreamer_v3-$size-$m.log" 2>&1
            echo "$size $m (exit $?): $(tail -1 "$OUT/dreamer_v3-$size-$m.log")" | tee -a "$OUT/dreamer_v3.txt"
        done
    done
    exit
fi

if [ "$mode" = atari ]; then
    # PPO, --preset atari (8 envs x 128 steps), PongNoFrameskip-v4 on ALE's vector env stepping on 8
    # threads; logging, evaluation (5 games every 250k steps) and checkpoints on; eager, then graphed
    # (ATARI_GRAPHS: which; SPS_SECONDS each, 120). Then where an iteration's time goes
    # (benchmarks/ppo_phases.py; evaluation and checkpoints off, 30 iterations after 5), graphed
    # (ATARI_PHASES="false true": eager too; "": none); about 40 s each.
    echo "== env steps/s, PPO PongNoFrameskip-v4 (--env-backend ale)" | tee "$OUT/sps.txt"
    for graphs in ${ATARI_GRAPHS-false true}; do
        timed atari-$graphs "ppo atari --cuda-graphs $graphs" ${SPS_SECONDS:-120} 20480 ppo --preset atari \
            --env-id PongNoFrameskip-v4 --env-backend ale --device cuda --cuda-graphs $graphs \
            --total-steps 10000000 --checkpoint-every 100000 --torch-threads 8
    done
    for graphs in ${ATARI_PHASES-true}; do
        echo "== phases, --cuda-graphs $graphs" | tee -a "$OUT/phases.txt"
        rm -rf "$RUNS/phases-$graphs"
        timeout 150 python3 benchmarks/ppo_phases.py --skip 5 -- --preset atari --env-id PongNoFrameskip-v4 \
            --env-backend ale --device cuda --cuda-graphs $graphs --total-steps 35840 --eval-every 0 \
            --checkpoint-every 0 --torch-threads 8 --progress none --run-dir "$RUNS/phases-$graphs" 2>&1 \
            | grep -v "^A.L.E\|^\[Powered" | tail -9 | tee -a "$OUT/phases.txt"
    done
    exit
fi
MUJOCO_GL=disable python3 -c "import mujoco; print('mujoco', mujoco.__version__)"  # (egl: no libEGL there)

echo "== env steps/s, HalfCheetah-v5" | tee "$OUT/sps.txt"
export MUJOCO_GL=disable  # no rendering in these runs (a GPU machine without libEGL: egl fails at import)
for algo in ${SPS_ALGOS:-sac td3 ppo}; do
    for graphs in ${SPS_GRAPHS:-false true}; do
      for ea in ${SPS_EVAL_ASYNC:-auto}; do
       for comp in ${SPS_COMPILE:-false}; do
       for ahead in $([ $algo = ppo ] && echo - || echo ${SPS_ACT_AHEAD:-true}); do
        # SAC and TD3 learn from step 5,000 here (TD3's preset: 25,000) and are timed from 10,000;
        # PPO collects 8 x 256 steps an iteration (the mujoco preset) and is timed from its 10th
        label="$algo --cuda-graphs $graphs --eval-async $ea" name=$algo-$graphs-$ea
        [ $comp = true ] && label="$label --compile true" name=$name-compiled
        if [ $algo = ppo ]; then flags="--total-steps 102400"; start=20480
        else
            flags="--total-steps 20000 --learning-starts 5000 --act-ahead $ahead"; start=10000
            label="$label --act-ahead $ahead"; [ $ahead = true ] || name=$name-behind
        fi
        # at most SPS_SECONDS (85) each (6 runs in all)
        timed $name "$label" ${SPS_SECONDS:-85} $start $algo \
            --preset mujoco --env-id HalfCheetah-v5 --device cuda --cuda-graphs $graphs $flags --checkpoint-every 10000 \
            --torch-threads 4 --eval-async $ea --compile $comp
       done
       done
      done
    done
done
