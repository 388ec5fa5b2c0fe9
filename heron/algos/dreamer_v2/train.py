"""DreamerV2, read top to bottom (Hafner et al. 2021; sheeprl's DreamerV2).

Data (danijar's layout): replay entry t of an episode holds observation t, the action that led to
it (zeros at the first), the reward received on arriving there, ``is_first`` and ``is_terminal``.
An episode of K env steps is K + 1 entries. A time-limit cut leaves ``is_terminal`` 0 on the last
entry, so the continue model never learns that truncation ends the world.

One gradient step (``update``) is a pure tensor function ``batch -> metrics`` (no ``.item()``):

1. World model on a batch of sequences [T, B]: encode, filter through the RSSM (posterior states;
   each window starts as an episode does, from a zero state and a zero previous action), decode;
   reconstruction loss = KL (balanced, free nats) + observation, reward and continue NLLs (the
   continue model learns the discount gamma * (1 - is_terminal), as the references' does).
2. Behaviour: from every posterior state (detached), imagine ``--horizon`` steps with the actor
   through the prior; rewards, discounts and target-critic values on the imagined states give
   lambda-returns; the actor maximizes them (REINFORCE share rho, dynamics backpropagation 1 - rho,
   entropy bonus eta; each action against the first return that holds its reward,
   ``losses.actor_steps``), the critic regresses them. The target critic is a copy every
   ``--critic-target-update-freq`` gradient steps.

Imagined time line: s_0 (a posterior state) -a_0-> s_1 -a_1-> ... s_H. The lambda-return of step t
takes the reward and continue predicted at s_t, as the paper's eq. 4 and its code do
(``--lambda-rewards current``), or at s_{t+1} (``next``, DreamerV3's correction): see
``losses.imagination_targets``.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import torch

from heron.algos.dreamer_v2 import envs as denvs
from heron.algos.dreamer_v2 import losses
from heron.algos.dreamer_v2.config import Config
from heron.algos.dreamer_v2.networks import Agent, Player, image_to_float
from heron.core import checkpoint as ckpt
from heron.core import dist
from heron.core.buffers import EpisodeBuffer
from heron.core.envs import VecEnv
from heron.core.native import require_vector_entry_point
from heron.core.policy import Policy
from heron.core.precision import Precision
from heron.core.run import Run
from heron.core.update import build_step
from heron.errors import HeronError


# -- spaces -------------------------------------------------------------------------------------------
def _env_fn(cfg: Config, render_mode: str | None = None) -> gym.Env:
    return denvs.make(cfg.env_id, cfg.action_repeat, cfg.observation, cfg.grayscale, cfg.max_episode_steps,
                      render_mode=render_mode)


def eval_env(cfg: Config):
    """Evaluation envs: the training stack (``heron.api`` hands this to Run and ``heron eval``)."""
    return functools.partial(_env_fn, cfg)


def spaces_of(cfg: Config, obs_space: gym.spaces.Dict, act_space: gym.Space) -> dict:
    """What a saved agent needs to rebuild itself: observation spec, encoder keys, actions."""
    spec = {k: [list(s.shape), str(s.dtype)] for k, s in obs_space.spaces.items()}
    images = [k for k, (shape, _) in spec.items() if len(shape) == 3]
    vectors = [k for k, (shape, _) in spec.items() if len(shape) == 1]
    if cfg.cnn_keys or cfg.mlp_keys:
        cnn, mlp = list(cfg.cnn_keys), list(cfg.mlp_keys)
    else:
        cnn, mlp = images, ([] if images else vectors)
    for k in cnn + mlp:
        if k not in spec:
            raise HeronError(f"observation key {k!r} not in {cfg.env_id}'s observations ({', '.join(spec)})")
    for k in cnn:
        if k not in images or spec[k][0][1:] != [denvs.SIZE, denvs.SIZE]:
            raise HeronError(f"--cnn-keys {k}: needs a [C, 64, 64] image, {cfg.env_id} gives {spec[k][0]}")
    for k in mlp:
        if k not in vectors:
            raise HeronError(f"--mlp-keys {k}: needs a vector, {cfg.env_id} gives {spec[k][0]}")
    if not cnn + mlp:
        raise HeronError(f"dreamer_v2 has nothing to encode for {cfg.env_id}: choose --cnn-keys or --mlp-keys")
    if isinstance(act_space, gym.spaces.Discrete):
        out = {"discrete": True, "action_dim": int(act_space.n)}
    elif isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1 and \
            np.all(np.isfinite(act_space.low)) and np.all(np.isfinite(act_space.high)):
        out = {"discrete": False, "action_dim": int(act_space.shape[0]),
               "action_low": torch.as_tensor(act_space.low, dtype=torch.float32),
               "action_high": torch.as_tensor(act_space.high, dtype=torch.float32)}
    else:
        raise HeronError(f"dreamer_v2 supports Discrete and bounded 1-D Box actions; {cfg.env_id} has {act_space}")
    return {"obs_spec": spec, "cnn_keys": cnn, "mlp_keys": mlp, **out}


def check(cfg: Config) -> dict:
    """Reject an env or option DreamerV2 cannot handle, before a run directory exists; returns the
    spaces a checkpoint saves (resume and eval compare them)."""
    if cfg.vector_mode == "native":
        require_vector_entry_point(cfg.env_id)
    env = _env_fn(cfg)
    try:
        return spaces_of(cfg, env.observation_space, env.action_space)
    finally:
        env.close()


def _obs_spec(spaces: dict) -> dict[str, tuple]:
    return {k: tuple(shape) for k, (shape, _) in spaces["obs_spec"].items()}


def build(cfg: Config, spaces: dict) -> Agent:
    return Agent(_obs_spec(spaces), tuple(spaces["cnn_keys"]), tuple(spaces["mlp_keys"]), spaces["action_dim"],
                 spaces["discrete"], cfg)


def to_env_actions(actions: torch.Tensor, spaces: dict) -> np.ndarray:
    """One-hot -> indices; [-1, 1] -> the action bounds."""
    if spaces["discrete"]:
        return actions.argmax(-1).cpu().numpy()
    low, high = spaces["action_low"].to(actions.device), spaces["action_high"].to(actions.device)
    return (low + (actions + 1.0) * 0.5 * (high - low)).cpu().numpy()


class DreamerPolicy(Policy):
    """``predict(obs)`` for dict observations (one, or a batch of [B, ...] per key); carries the
    RSSM state and previous action between calls, ``reset()`` at episode starts."""

    def __init__(self, player: Player, spaces: dict, device: str | torch.device = "cpu"):
        super().__init__(player, (), player.state_size, device)
        self.spaces = spaces
        self.keys = list(spaces["cnn_keys"]) + list(spaces["mlp_keys"])
        self.spec = _obs_spec(spaces)

    def on_host(self) -> Policy:
        """Itself: the player (RSSM, encoder and actor, 400-600 units wide) is not the few small
        products that a CPU copy runs faster than the accelerator."""
        return self

    def predict(self, obs: dict[str, np.ndarray], deterministic: bool = True) -> np.ndarray:
        if not isinstance(obs, dict):
            raise ValueError(f"expected a dict of observations with keys {self.keys}")
        first = np.asarray(obs[self.keys[0]])
        single = first.shape == self.spec[self.keys[0]]
        x = {k: torch.as_tensor(np.asarray(obs[k]), device=self.device) for k in self.keys}
        if single:
            x = {k: v.unsqueeze(0) for k, v in x.items()}
        batch = x[self.keys[0]].shape[0]
        if self.state is None or self.state.shape[0] != batch:
            self.reset(batch)
        action, self.state = self.actor.act(x, self.state, deterministic)
        out = to_env_actions(action, self.spaces)
        return out[0] if single else out


def load_policy(cfg: Config, state: dict, device: str | torch.device = "cpu") -> Policy:
    player = Player(build(cfg, state["spaces"]))
    player.load_state_dict(state["actor"])
    return DreamerPolicy(player, state["spaces"], device)


def replay(cfg: Config, run: Run, spaces: dict) -> EpisodeBuffer:
    fields = {k: (tuple(shape), np.dtype(dt)) for k, (shape, dt) in spaces["obs_spec"].items()
              if k in spaces["cnn_keys"] or k in spaces["mlp_keys"]}
    fields.update(action=((spaces["action_dim"],), np.float32), reward=((), np.float32),
                  is_first=((), np.bool_), is_terminal=((), np.bool_))
    folder = "buffer" if run.world.is_main else f"buffer/rank{run.world.rank}"  # each rank its own files
    memmap_dir = str(run.run_dir / folder) if cfg.memmap_buffer else None
    # this process's share of --buffer-size, for its envs, sampled with its own stream
    return EpisodeBuffer(run.local(cfg.buffer_size), run.local(cfg.num_envs), fields, cfg.sequence_length,
                         cfg.prioritize_ends, memmap_dir=memmap_dir, seed=run.rank_seed(),
                         cross_episodes=cfg.buffer_type == "sequential")


def make_optimizers(cfg: Config, agent: Agent) -> dict[str, torch.optim.Optimizer]:
    """Adam for the world model, the actor and the critic (checkpoint keys ``world_opt``, ``actor_opt``,
    ``critic_opt``). DreamerV2's weight decay scales every weight by ``1 - wd`` before each step; decoupled
    decay scales by ``1 - lr * weight_decay``, so it gets ``wd / lr``. On CUDA the fused kernel (one launch
    per optimizer); with ``--cuda-graphs`` device-side step counters."""
    cuda = next(agent.parameters()).is_cuda

    def adam(module: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
        return torch.optim.Adam(module.parameters(), lr=lr, eps=cfg.adam_eps, weight_decay=cfg.weight_decay / lr,
                                decoupled_weight_decay=True, fused=True if cuda else None,
                                capturable=cfg.cuda_graphs)
    return {"world_opt": adam(agent.world, cfg.world_lr), "actor_opt": adam(agent.actor, cfg.actor_lr),
            "critic_opt": adam(agent.critic, cfg.critic_lr)}


def make_update(cfg: Config, agent: Agent, spaces: dict, world_opt: torch.optim.Optimizer,
                actor_opt: torch.optim.Optimizer, critic_opt: torch.optim.Optimizer, prec: Precision | None = None):
    """The gradient step ``update(batch [T, B, ...]) -> metrics`` (module doc), a closure over the
    agent and its optimizers (the benchmark times it alone)."""
    world, actor, critic, target_critic = agent.world, agent.actor, agent.critic, agent.target_critic
    rssm = world.rssm
    keys = list(spaces["cnn_keys"]) + list(spaces["mlp_keys"])
    rho = cfg.objective_mix if cfg.objective_mix >= 0 else (1.0 if spaces["discrete"] else 0.0)
    current = cfg.lambda_rewards == "current"

    prec = prec or Precision("32", torch.device("cpu"))

    def update(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One gradient step on sequences [T, B, ...] (module doc)."""
        # 1. world model
        obs = {k: batch[k] for k in keys}
        embed = world.encoder(obs)
        # a sampled window starts as an episode does (the references): zero state, zero previous action
        is_first = torch.cat([torch.ones_like(batch["is_first"][:1]), batch["is_first"][1:]])
        h, z, post, prior = rssm.observe(embed, batch["action"], is_first)
        feat = torch.cat([z, h], -1)
        recon = world.decoder(feat)
        obs_nll = sum(losses.gaussian_nll(recon[k], image_to_float(obs[k]), 3) for k in spaces["cnn_keys"]) + \
            sum(losses.gaussian_nll(recon[k], obs[k], 1) for k in spaces["mlp_keys"])
        rewards = torch.tanh(batch["reward"]) if cfg.clip_rewards else batch["reward"]
        reward_nll = losses.gaussian_nll(world.reward(feat).squeeze(-1), rewards, 0)
        continue_nll = None
        if world.continue_model is not None:  # the discount: gamma * (1 - terminal), as the references learn it
            continue_nll = losses.bernoulli_nll(world.continue_model(feat).squeeze(-1),
                                                cfg.gamma * (1.0 - batch["is_terminal"].float()))
        wm = losses.reconstruction_loss(obs_nll, reward_nll, post, prior, cfg.kl_balancing_alpha, cfg.kl_free_nats,
                                        cfg.kl_free_avg, cfg.kl_regularizer, continue_nll, cfg.continue_scale_factor)
        # each step: backward, the torchrun all-reduce, clipping (the norm is a metric), the update
        world_grad = prec.optimize(world_opt, wm["loss"], world.parameters(), cfg.clip_gradients, norm=True)

        # 2. behaviour in imagination, from every posterior state
        world.requires_grad_(False)
        h_t, z_t = h.detach().flatten(0, 1), z.detach().flatten(0, 1)
        feats, log_probs, entropies = [torch.cat([z_t, h_t], -1)], [], []
        for _ in range(cfg.horizon):
            pi = actor(feats[-1].detach())
            action = pi.rsample()
            log_probs.append(pi.log_prob(action.detach()))
            entropies.append(pi.entropy())
            # with pure REINFORCE (rho = 1) nothing backpropagates through the imagined dynamics
            h_t, z_t = rssm.imagine_step(h_t, z_t, action if rho < 1 else action.detach())
            feats.append(torch.cat([z_t, h_t], -1))
        feat_im = torch.stack(feats)  # [H + 1, M, F]: s_0 (a posterior state) .. s_H
        rewards_im = world.reward(feat_im).squeeze(-1)  # [H + 1, M]
        discounts_im = None
        if world.continue_model is not None:
            discounts_im = torch.sigmoid(world.continue_model(feat_im).squeeze(-1))
        values = target_critic(feat_im).squeeze(-1)  # [H + 1, M]
        alive = 1.0 - batch["is_terminal"].float().flatten()  # [M]
        lam, weights = losses.imagination_targets(rewards_im, discounts_im, values, alive, cfg.gamma, cfg.lmbda,
                                                  current=current)  # [H, M] each
        steps = losses.actor_steps(torch.stack(log_probs), torch.stack(entropies), lam, values.detach(), weights,
                                   current)  # [H - 1, M] each (current) or [H, M]
        actor_loss = losses.actor_loss(*steps, rho, cfg.actor_ent_coef)
        actor_grad = prec.optimize(actor_opt, actor_loss, actor.parameters(), cfg.clip_gradients, norm=True)
        world.requires_grad_(True)

        critic_loss = losses.critic_loss(critic(feat_im[:-1].detach()).squeeze(-1), lam.detach(), weights)
        critic_grad = prec.optimize(critic_opt, critic_loss, critic.parameters(), cfg.clip_gradients, norm=True)
        prec.update()
        return {"losses/world_model_loss": wm["loss"].detach(), "losses/kl": wm["kl"].detach(),
                "losses/observation_loss": wm["observation"].detach(), "losses/reward_loss": wm["reward"].detach(),
                "losses/continue_loss": wm["continue"].detach(), "losses/actor_loss": actor_loss.detach(),
                "losses/critic_loss": critic_loss.detach(), "losses/policy_entropy": torch.stack(entropies).mean().detach(),
                "losses/lambda_return": lam.mean().detach(), "grads/world_model": world_grad,
                "grads/actor": actor_grad, "grads/critic": critic_grad}

    return update


# -- training -----------------------------------------------------------------------------------------
def train(cfg: Config, run: Run) -> dict:
    device = run.device
    N = run.local(cfg.num_envs)  # this process's envs (all of them without torchrun)
    envs = run.own(denvs.NativeStates(cfg.env_id, N, run.env_seed(N)) if cfg.vector_mode == "native" else
                   VecEnv(cfg.env_id, N, run.env_seed(N), cfg.vector_mode, env_fn=functools.partial(_env_fn, cfg)))
    spaces = spaces_of(cfg, envs.single_observation_space, envs.single_action_space)
    keys = list(spaces["cnn_keys"]) + list(spaces["mlp_keys"])
    A, discrete = spaces["action_dim"], spaces["discrete"]
    np_rng = np.random.default_rng(run.rank_seed())  # random actions before learning starts
    rb = replay(cfg, run, spaces)

    agent = build(cfg, spaces).to(device)
    run.sync_start(agent=agent)
    critic, target_critic = agent.critic, agent.target_critic
    player = Player(agent)
    optimizers = make_optimizers(cfg, agent)
    run.precision.apply(agent)  # --precision: autocast around its layers (the player shares them)
    update = build_step(cfg, make_update(cfg, agent, spaces, *optimizers.values(), run.precision), log=run.logger.print)

    def sample_batch() -> dict[str, torch.Tensor]:
        """[T, B, ...] tensors on the device; images stay uint8 until there."""
        data = rb.sample(cfg.per_rank_batch_size)
        return {k: torch.from_numpy(np.ascontiguousarray(np.swapaxes(v, 0, 1))).to(device, non_blocking=True)
                for k, v in data.items()}

    def policy_state() -> dict:
        return {"actor": player.state_dict(), "spaces": spaces}

    def full_state() -> dict:
        return {**policy_state(), "agent": agent.state_dict(), **{k: o.state_dict() for k, o in optimizers.items()},
                "n_updates": n_updates, "rng": ckpt.rng_state(np_rng), "envs": envs.state_dict()}

    def buffer_state() -> dict:
        state = rb.state_dict()
        # an env whose episode has just started holds only its first entry: resume replays that reset
        fresh = envs.episode_lengths == 0
        state["staging"] = [None if fresh[i] else s for i, s in enumerate(state["staging"])]
        return state

    def checkpoint_state() -> tuple[dict, dict]:
        return full_state(), buffer_state()

    # -- start or resume ------------------------------------------------------------------------------
    global_step, n_updates = 0, 0
    obs = envs.reset()
    if run.resume_state is not None:
        s = run.resume_state
        agent.load_state_dict(s["agent"])
        for k, o in optimizers.items():
            o.load_state_dict(s[k])
        if run.resume_buffer is None:
            raise HeronError(f"{run.run_dir}: the latest checkpoint has no replay buffer file")
        rb.load_state_dict(run.resume_buffer)
        ckpt.set_rng_state(s["rng"], np_rng)
        obs = envs.load_state_dict(s["envs"])
        global_step, n_updates = int(s["step"]), int(s["n_updates"])
        run.resume_buffer = None  # the mapped file is in place now

    def first_entries(o: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {**{k: o[k] for k in keys}, "action": np.zeros((N, A), np.float32), "reward": np.zeros(N, np.float32),
                "is_first": np.ones(N, bool), "is_terminal": np.zeros(N, bool)}

    rb.add(first_entries(obs), np.zeros(N, bool))
    is_first = torch.ones(N, dtype=torch.bool, device=device)
    p_state = torch.zeros(N, player.state_size, device=device)
    policy = DreamerPolicy(player, spaces, device)
    metrics: dict[str, torch.Tensor] = {}
    warned_terminal, warned_short = cfg.use_continues, cfg.buffer_type == "sequential"

    # -- the loop -------------------------------------------------------------------------------------
    while global_step < cfg.total_steps:
        if global_step < cfg.learning_starts:
            # uniform random actions from the run's seeded generator (saved in checkpoints)
            if discrete:
                env_actions = np_rng.integers(0, A, size=N)
                actions = np.eye(A, dtype=np.float32)[env_actions]
            else:
                actions = np_rng.uniform(-1.0, 1.0, size=(N, A)).astype(np.float32)
                env_actions = to_env_actions(torch.from_numpy(actions), spaces)
        else:
            obs_t = {k: torch.as_tensor(obs[k], device=device) for k in keys}
            actions_t, p_state = player.act(obs_t, p_state, False, is_first)
            actions = actions_t.cpu().numpy().astype(np.float32)
            env_actions = to_env_actions(actions_t, spaces)
        step = envs.step(env_actions)
        done = step.terminated | step.truncated
        # a native env's reset rows are no transition (step.valid), and its episodes begin there (step.started)
        rb.add({**{k: step.next_obs[k] for k in keys}, "action": actions, "reward": step.rewards,
                "is_first": np.zeros(N, bool), "is_terminal": step.terminated}, done, mask=step.valid)
        started = done if step.started is None else step.started
        if started.any():
            rb.add(first_entries(step.obs), np.zeros(N, bool), mask=started)
        is_first = torch.as_tensor(started, device=device)
        if not warned_terminal and step.terminated.any():
            warned_terminal = True
            run.logger.warn(f"{cfg.env_id} ends episodes by termination but --use-continues is off: imagined "
                            "returns will not see those ends (pass --use-continues)")
        if not warned_short and rb.short_episodes:
            warned_short = True
            run.logger.warn(f"{cfg.env_id} ended an episode shorter than --sequence-length {cfg.sequence_length}: "
                            "the episode buffer never samples such episodes (--buffer-type sequential does)")
        obs = step.obs
        prev_step, global_step = global_step, global_step + cfg.num_envs  # every rank's envs
        for _, ret, length in step.episodes:
            run.logger.episode(global_step, ret, length)

        # -- training: --pretrain-steps at once when it starts, then --gradient-steps every --train-every
        # (under torchrun every rank must be able to sample, or none trains: one collective per step)
        if global_step >= cfg.learning_starts and dist.all_ranks(rb.sampleable()):
            if n_updates == 0:
                rounds = cfg.pretrain_steps or cfg.gradient_steps
            else:
                rounds = cfg.gradient_steps if run.due(global_step, prev_step, cfg.train_every) else 0
            for _ in range(rounds):
                metrics = run.watch(update(sample_batch()), global_step)
                n_updates += 1
                if n_updates % cfg.critic_target_update_freq == 0:
                    target_critic.load_state_dict(critic.state_dict())

        run.after_step(global_step, prev_step, metrics, {"charts/gradient_steps": n_updates,
                                                         "charts/buffer_steps": len(rb)},
                       policy, policy_state, checkpoint_state)

    return run.finish(global_step, policy, policy_state, checkpoint_state)
