#!/usr/bin/env python
"""heron PPO vs Stable-Baselines3 PPO with identical settings, one after the other, on this machine.

Two settings (``--setting``):

* ``cartpole``: CartPole-v1, 100k steps, the SB3 zoo block (8 envs x 32 steps, one 256-sample
  minibatch, 20 epochs, lr 1e-3 annealed linearly, gamma 0.98, GAE lambda 0.8, no entropy bonus).
  heron runs ``--preset classic``. The zoo anneals the clip range too; heron has no clip schedule,
  so both run with a constant 0.2 here.
* ``cartpole-lstm``: the same block with an LSTM policy beside sb3-contrib's ``RecurrentPPO``
  (``pip install sb3-contrib``): an LSTM of 64 units in front of a 64-unit layer, one for the actor
  and one for the critic on both sides (sb3-contrib's ``enable_critic_lstm``, its default; heron's
  separate networks), orthogonal initialization, no observation or value normalization (heron's
  ``recurrent`` preset has both: off here, as in sb3-contrib's defaults). Each minibatch is whole
  32-step sequences on both sides.
* ``hopper``: Hopper-v5, 100k steps, SB3's PPO defaults (1 env x 2048 steps, minibatch 64,
  10 epochs, lr 3e-4 constant, gamma 0.99, lambda 0.95, clip 0.2, no value clipping, vf 0.5,
  max grad norm 0.5) with VecNormalize (observations and rewards). heron runs the same numbers
  with ``--obs-norm --reward-scale`` (the same running statistics, saved with the model).

Both: 64-64 tanh MLPs, separate actor and critic, orthogonal init, Adam eps 1e-5, advantage
normalization per minibatch, the same seed and torch thread count. heron's recomputation of
advantages before each epoch is turned off (SB3 computes them once per rollout), so the work per
iteration is the same.

Reported: wall time of training (setup included, imports excluded on both sides; heron's final
one-episode evaluation and checkpoint included: a handicap of well under a second on these
tasks) and env steps/s; then the
mean return of 10 deterministic episodes of each final policy, run by ONE evaluation loop here with
the same start seeds for both.

Run (use a quiet machine: nothing else running)::

    python benchmarks/ppo_vs_sb3.py --setting cartpole --threads 1 --rounds 3
    python benchmarks/ppo_vs_sb3.py --setting hopper --threads 1 --rounds 3
    python benchmarks/ppo_vs_sb3.py --setting cartpole-lstm --threads 1 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time

import numpy as np
import torch

SETTINGS = {
    "cartpole": dict(
        env_id="CartPole-v1",
        total_steps=100_000,
        num_envs=8,
        num_steps=32,
        num_minibatches=1,
        update_epochs=20,
        learning_rate=1e-3,
        anneal_lr=True,
        gamma=0.98,
        gae_lambda=0.8,
        ent_coef=0.0,
        vf_coef=0.5,
        clip_coef=0.2,
        clip_vloss=False,
        max_grad_norm=0.5,
        obs_norm=False,
        reward_scale=False,
    ),
    "cartpole-lstm": dict(
        env_id="CartPole-v1",
        total_steps=100_000,
        num_envs=8,
        num_steps=32,
        num_minibatches=1,
        update_epochs=20,
        learning_rate=1e-3,
        anneal_lr=True,
        gamma=0.98,
        gae_lambda=0.8,
        ent_coef=0.0,
        vf_coef=0.5,
        clip_coef=0.2,
        clip_vloss=False,
        max_grad_norm=0.5,
        obs_norm=False,
        reward_scale=False,
        recurrent="lstm",
    ),
    "hopper": dict(
        env_id="Hopper-v5",
        total_steps=100_000,
        num_envs=1,
        num_steps=2048,
        num_minibatches=32,
        update_epochs=10,
        learning_rate=3e-4,
        anneal_lr=False,
        gamma=0.99,
        gae_lambda=0.95,
        ent_coef=0.0,
        vf_coef=0.5,
        clip_coef=0.2,
        clip_vloss=False,
        max_grad_norm=0.5,
        obs_norm=True,
        reward_scale=True,
    ),
}


def run_heron(s: dict, seed: int, threads: int, run_dir: str) -> tuple[float, object]:
    from torch.utils.tensorboard import SummaryWriter  # noqa: F401  precede its timer too)

    import heron
    import heron.algos.ppo  # noqa: F401  imports outside the timer, as for SB3 (its imports

    recurrent = s.get("recurrent")
    net = (
        dict(recurrent=recurrent, rnn_hidden_size=64, hidden_sizes=(64,)) if recurrent else dict(hidden_sizes=(64, 64))
    )
    start = time.perf_counter()
    heron.train(
        "ppo",
        **{**s, **net},
        seed=seed,
        torch_threads=threads,
        recompute_adv=False,
        eval_every=0,
        eval_episodes=1,
        log_every=10_000,
        progress="none",
        run_dir=run_dir,
    )
    elapsed = time.perf_counter() - start
    policy = heron.load(run_dir, device="cpu")

    def act(obs, first):
        if first:
            policy.reset()  # a recurrent policy starts each episode from a zero state
        return policy.predict(obs, deterministic=True)

    return elapsed, act


def run_sb3(s: dict, seed: int, threads: int) -> tuple[float, object]:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    recurrent = s.get("recurrent")
    if recurrent:
        from sb3_contrib import RecurrentPPO  # pip install sb3-contrib

        algo, policy, extra = (
            RecurrentPPO,
            "MlpLstmPolicy",
            dict(
                policy_kwargs=dict(
                    lstm_hidden_size=64, enable_critic_lstm=True, ortho_init=True, net_arch=dict(pi=[64], vf=[64])
                )
            ),
        )
    else:
        algo, policy, extra = PPO, "MlpPolicy", {}
    torch.set_num_threads(threads)
    start = time.perf_counter()
    env = make_vec_env(s["env_id"], n_envs=s["num_envs"], seed=seed)
    if s["obs_norm"]:
        env = VecNormalize(env, norm_obs=True, norm_reward=s["reward_scale"], gamma=s["gamma"])
    lr = s["learning_rate"]
    model = algo(
        policy,
        env,
        n_steps=s["num_steps"],
        batch_size=s["num_envs"] * s["num_steps"] // s["num_minibatches"],
        n_epochs=s["update_epochs"],
        learning_rate=(lambda f: f * lr) if s["anneal_lr"] else lr,
        gamma=s["gamma"],
        gae_lambda=s["gae_lambda"],
        clip_range=s["clip_coef"],
        ent_coef=s["ent_coef"],
        vf_coef=s["vf_coef"],
        max_grad_norm=s["max_grad_norm"],
        seed=seed,
        device="cpu",
        verbose=0,
        **extra,
    )
    model.learn(total_timesteps=s["total_steps"])
    elapsed = time.perf_counter() - start
    lstm = {"state": None}  # a recurrent policy's state between the steps of an episode

    def act(obs, first):
        if s["obs_norm"]:
            obs = env.normalize_obs(obs)
        if not recurrent:
            return model.predict(obs, deterministic=True)[0]
        action, lstm["state"] = model.predict(
            obs, state=None if first else lstm["state"], episode_start=np.array([first]), deterministic=True
        )
        return action

    return elapsed, act


def evaluate(act, env_id: str, episodes: int, seed: int) -> tuple[float, float]:
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + 1_000_000 + k)
        done, total, first = False, 0.0, True
        while not done:
            obs, r, term, trunc, _ = env.step(act(np.asarray(obs, np.float32), first))
            first = False
            total += float(r)
            done = term or trunc
        returns.append(total)
    env.close()
    return float(np.mean(returns)), float(np.std(returns))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--setting", choices=sorted(SETTINGS), default="cartpole")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--total-steps", type=int, default=0, help="override the setting's step budget")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="pairs of runs, the order alternating (heron first in odd rounds); a shared VM's speed "
        "can drift by tens of percent within minutes, so the median of the per-round ratios is "
        "reported",
    )
    args = p.parse_args()
    s = dict(SETTINGS[args.setting])
    if args.total_steps:
        s["total_steps"] = args.total_steps
    run_dir = tempfile.mkdtemp(prefix="heron_ppo_bench_")
    runners = {
        "heron": lambda r: run_heron(s, args.seed, args.threads, f"{run_dir}/run{r}"),
        "sb3": lambda r: run_sb3(s, args.seed, args.threads),
    }
    results = {name: {"seconds": []} for name in runners}
    try:
        for r in range(args.rounds):
            for name in ("heron", "sb3") if r % 2 == 0 else ("sb3", "heron"):
                elapsed, act = runners[name](r)
                results[name]["seconds"].append(round(elapsed, 1))
                line = f"round {r + 1} {name:6s} {elapsed:7.1f} s  {s['total_steps'] / elapsed:7.0f} steps/s"
                if r == 0:  # the same seed gives the same policy every round
                    mean, std = evaluate(act, s["env_id"], args.eval_episodes, args.seed)
                    results[name].update(eval_mean=round(mean, 1), eval_std=round(std, 1))
                    line += f"  eval {mean:8.1f} +- {std:.1f}"
                print(line, flush=True)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    ratios = [b / a for a, b in zip(results["heron"]["seconds"], results["sb3"]["seconds"])]
    ratio = float(np.median(ratios))
    peer = "sb3-contrib's RecurrentPPO" if s.get("recurrent") else "SB3"
    print(f"heron speedup over {peer}: {ratio:.2f}x (median of {len(ratios)}: {', '.join(f'{x:.2f}' for x in ratios)})")
    print(
        json.dumps(
            {
                "setting": args.setting,
                "threads": args.threads,
                "seed": args.seed,
                **results,
                "ratios": [round(x, 2) for x in ratios],
                "speedup": round(ratio, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
