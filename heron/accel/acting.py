"""Acting in numpy on the CPU.

Every algorithm acts at every env step on a batch of a few observations. There, each torch call
costs microseconds of dispatch whatever its size, and numpy's calls on the same arrays far less:
PPO's Hopper-v5 acting step (one env, 64-64 tanh MLPs) and TD3's (256-256 ReLU actor) take several
times less time in numpy. The pieces here read the parameters as numpy views (no copy: an
optimizer's in-place steps show through) and run the layers with the torch path's operations in
the same order and in float32; only the products' and transcendental functions' rounding may
differ in the last bits, which the algorithms' tests bound against their torch acting.

Each algorithm decides where it applies (``eligible``): feed-forward MLPs, float32 CPU weights, and
products small enough that numpy's BLAS keeps them on the calling thread. Under mixed precision
PPO keeps acting in torch, in its compute type: its acting log-probs enter the update's ratio,
which must start at 1. SAC's and TD3's training loops act in float32 numpy then too, on the
actor's float32 weights, as a saved policy does: their actions enter no loss, and at an env's few
rows a bfloat16 product gains nothing (TD3's 256-256 actor on one Hopper row acts many times
faster in float32 numpy than in torch bfloat16). Evaluations keep the run's precision. PPO on a
GPU acts on a CPU copy of its model (``CpuTwin``), refreshed once per rollout. ``Acting`` is SAC's
and TD3's way to act, numpy or not, with acting ahead.

A tensor env (``heron.envs.native``: a vector env that returns torch tensors) is acted on in torch:
its observations go to the actor as tensors, and what the loop adds to the actor's output
(normals, noise, random actions drawn from the run's generators) is made a tensor beside it
(``as_like``). No observation, action, reward or flag of such an env becomes a numpy array.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar, overload

import numpy as np
import torch
from torch import nn

from heron.accel.graphs import GraphedStep
from heron.ops import mlp
from heron.rl.nets import RunningNorm

# OpenBLAS (numpy's BLAS) splits a product over threads from M * N * K = 2^18 on; below it runs on
# the calling thread, so numpy acting stays within the run's --torch-threads
PRODUCT_MAX = 2**18 - 1


def linears(module: nn.Module) -> list[nn.Linear]:
    """The ``nn.Linear`` layers of a sequential MLP, in order."""
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


def eligible(batch: int, layers: Sequence[nn.Linear], amp_dtype: torch.dtype | None = None) -> bool:
    """Whether numpy may run ``layers`` on ``batch`` rows: float32 weights on the CPU, every product
    below ``PRODUCT_MAX``, and no mixed precision where ``amp_dtype`` is given (PPO, and every
    evaluation; module doc)."""
    return amp_dtype is None and all(
        layer.weight.device.type == "cpu"
        and layer.weight.dtype == torch.float32
        and batch * layer.weight.numel() <= PRODUCT_MAX
        for layer in layers
    )


class NumpyMLP:
    """``nn.Linear`` layers with the activation ``act`` between them (not after the last), run in
    numpy by ``heron.ops.mlp.forward``, the forward the fused MLPs run in torch. The weight views are
    made again only when a parameter's storage moves (a key of data pointers per call)."""

    def __init__(self, layers: Sequence[nn.Linear], act: str):
        self.layers, self.act = list(layers), act
        self._key: tuple | None = None
        self._arrays: list[tuple[np.ndarray, np.ndarray]] = []

    def arrays(self) -> list[tuple[np.ndarray, np.ndarray]]:
        key = tuple(layer.weight.data_ptr() for layer in self.layers)
        if key != self._key:
            self._arrays = [(layer.weight.detach().numpy().T, layer.bias.detach().numpy()) for layer in self.layers]
            self._key = key
        return self._arrays

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return mlp.forward(x, self.arrays(), self.act)[0]


M = TypeVar("M", bound=nn.Module)


class CpuTwin(Generic[M]):
    """A CPU copy of a module that lives on an accelerator, for acting in numpy there too: where the
    weights move only between rollouts (PPO), copying them to the host once per rollout spares every
    env step its kernel launches and its two host syncs. ``refresh()`` brings the copy's parameters
    and buffers (normalizer statistics included) up to the module's."""

    def __init__(self, module: M):
        self.module: M = module
        self.twin: M = copy.deepcopy(module).cpu()

    def refresh(self) -> M:
        self.twin.load_state_dict(self.module.state_dict())
        return self.twin


@overload
def as_like(x: np.ndarray | torch.Tensor, like: torch.Tensor) -> torch.Tensor: ...
@overload
def as_like(x: np.ndarray | torch.Tensor, like: np.ndarray) -> np.ndarray: ...
@overload
def as_like(x: np.ndarray | torch.Tensor, like: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor: ...
def as_like(x: np.ndarray | torch.Tensor, like: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """``x`` in ``like``'s kind: a tensor on ``like``'s device, or a numpy array."""
    if isinstance(like, torch.Tensor):
        return torch.as_tensor(x).to(like.device)
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


class Acting:
    """What SAC's and TD3's loops act with: ``act(obs)`` is the actor's output on a batch of
    observations [N, ...] as a numpy array (a tensor for a tensor env's), computed the fastest way
    that gives the same numbers, and passed through ``sample`` where given (SAC draws its actions
    from its Gaussian there; TD3 takes the greedy actions and adds its exploration noise itself):

    * in numpy (``numpy_fn``, the algorithm's ``NumpyActor``) where it applies (``eligible``: float32
      weights on the CPU, products small enough for one thread);
    * else, under --cuda-graphs, as a recorded CUDA graph of ``torch_fn`` (``GraphedActor``);
    * else ``torch_fn`` itself, without gradients, on the training device.

    Acting ahead (``--act-ahead``): the loop tells ``before_updates`` whether the gradient steps it is
    about to take train the actor. When none does (the critic-only steps between delayed actor
    steps), the next env step's output is the same before them as after, so it is taken now and the
    next ``act`` returns it: on a GPU that env step then runs while the critics train. The numbers
    are the same either way (``tests/test_acting.py``).

    ``cfg`` gives ``cuda_graphs`` and ``act_ahead``. A draw in ``sample`` happens at ``act``, also
    when the output was taken ahead: the random streams go as they would without acting ahead."""

    def __init__(
        self,
        torch_fn: Callable[[torch.Tensor], torch.Tensor],
        numpy_fn: Callable[[np.ndarray], np.ndarray] | None,
        device: torch.device,
        cfg: Any,
        sample: Callable[[Any], Any] | None = None,
    ):
        self.torch_fn, self.numpy_fn, self.device, self.ahead = torch_fn, numpy_fn, device, cfg.act_ahead
        self.sample = sample
        self.graphed = GraphedActor(torch_fn, device) if cfg.cuda_graphs and numpy_fn is None else None
        self._next: np.ndarray | torch.Tensor | None = None  # the next act's output, taken ahead

    def _output(self, obs: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        if isinstance(obs, torch.Tensor):  # a tensor env's: a tensor on the training device
            with torch.no_grad():
                return self.torch_fn(obs.to(self.device))
        if self.numpy_fn is not None:
            return self.numpy_fn(obs)
        if self.graphed is not None:
            return self.graphed(obs)
        with torch.no_grad():
            return self.torch_fn(torch.as_tensor(obs, device=self.device)).cpu().numpy()

    def act(self, obs: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        out, self._next = self._next, None
        if out is None:
            out = self._output(obs)
        return out if self.sample is None else self.sample(out)

    def before_updates(self, obs: np.ndarray | torch.Tensor, actor_moves: bool, last: bool = False) -> None:
        """Before an env step's gradient steps: take the next act's output now where acting ahead
        applies (``actor_moves``: some of those steps train the actor; ``last``: no env step follows)."""
        if self.ahead and not actor_moves and not last:
            self._next = self._output(obs)


def normalize(obs: np.ndarray, norm: RunningNorm) -> np.ndarray:
    """``RunningNorm.forward`` in numpy: float32 observations, standardized with the module's
    float32 statistics and clipped (the module's current statistics, read at every call)."""
    x = np.asarray(obs).astype(np.float32)
    if not norm.enabled:
        return x
    mean, std = norm._float32()
    return np.clip((x - mean.numpy()) / std.numpy(), -norm.clip, norm.clip)


class GraphedActor:
    """A feed-forward policy's acting call recorded (``--cuda-graphs``: SAC's and TD3's actor, PPO's
    feed-forward bodies that do not act in numpy): ``fn(*inputs [N, ...] on the device) -> [N, K]``,
    called with numpy arrays (the observations, PPO's sampling noise) and returning one. Once
    recorded, an env step's acting is one copy of each input into the graph's static inputs, one
    replay and one copy of the output back, instead of the forward's Python and its dozen kernel
    launches (a host sync each way before). Several results travel as one: ``fn`` packs them into
    its [N, K] output. The warm-up calls (``GraphedStep``) run eagerly on device copies. The weights
    and normalizer statistics it reads are updated in place between calls, and the replays see
    them; random draws come from the CUDA generator, as in the eager call."""

    def __init__(self, fn: Callable[..., torch.Tensor], device: str | torch.device, warmup: int = 3):
        self.step = GraphedStep(lambda batch: {"out": fn(*batch.values())}, warmup, device)

    def __call__(self, *inputs: Any) -> Any:
        with torch.no_grad():
            return self.step({str(i): torch.as_tensor(x) for i, x in enumerate(inputs)})["out"].cpu().numpy()


class Policy:
    """``predict(obs, deterministic=True)`` returns numpy actions for one observation (shape of the
    action space) or a batch ([B, *action shape]). Recurrent policies carry their state between
    calls; ``reset()`` starts new episodes.

    The wrapped actor implements ``act(obs [B, ...], state [B, S], deterministic) -> (actions, state)``."""

    batched = True  # evaluations may play several episodes at once through one predict (episodes.evaluate)
    # what ``heron.load`` tells of the checkpoint it read
    step: int = 0
    env_id: str = ""
    algo: str = ""

    def __init__(
        self,
        actor: nn.Module,
        obs_shape: tuple[int, ...],
        state_size: int = 0,
        device: str | torch.device = "cpu",
        obs_dtype: torch.dtype = torch.float32,
    ):
        self.actor: Any = actor.to(device).eval()  # act(obs, state, deterministic) -> (actions, state)
        self.obs_shape, self.state_size = tuple(obs_shape), state_size
        self.device, self.obs_dtype = torch.device(device), obs_dtype
        self.state: torch.Tensor | None = None
        self._numpy: dict[int, Callable[[np.ndarray], np.ndarray] | None] = {}  # per batch size

    def on_host(self) -> Policy:
        """This policy for an evaluation: on an accelerator, ``host_copy()``; the actor's forward for
        a few observations is then a few microseconds of CPU per step instead of a dozen kernel
        launches and two host syncs. Itself where there is no gain: on the CPU, or for an actor with
        convolutions (pixels), whose forward belongs on the accelerator."""
        return self.host_copy() if self.evaluates_on_host() and self.device.type != "cpu" else self

    def evaluates_on_host(self) -> bool:
        """Whether an evaluation acts on the CPU (``on_host``): all but an actor with convolutions on an
        accelerator."""
        return self.device.type == "cpu" or not any(
            isinstance(m, nn.modules.conv._ConvNd) for m in self.actor.modules()
        )

    def host_copy(self) -> Policy:
        """A policy over a CPU copy of the actor, made at the first call and brought up to the
        actor's current parameters and buffers (normalizer statistics) at each."""
        if getattr(self, "_host", None) is None:
            self._twin = CpuTwin(self.actor)
            self._host = copy.copy(self)
            self._host.actor, self._host.device, self._host.state = self._twin.twin.eval(), torch.device("cpu"), None
            self._host._numpy = {}
        self._twin.refresh()
        return self._host

    def _numpy_mode(self, batch: int) -> Callable[[np.ndarray], np.ndarray] | None:
        """The actor's deterministic step in numpy for ``batch`` observations, where it has one
        (``numpy_mode``: feed-forward MLPs on vectors, float32, small products; ``heron.accel.acting``)
        and lives on the CPU; else None (torch). A few microseconds a call against some dozens of
        torch dispatches: an evaluation makes one call per env step."""
        if batch not in self._numpy:
            make = getattr(self.actor, "numpy_mode", None)
            usable = (
                make is not None
                and self.device.type == "cpu"
                and self.state_size == 0
                and self.obs_dtype == torch.float32
            )  # torch's path casts other types first
            self._numpy[batch] = make(batch) if make is not None and usable else None
        return self._numpy[batch]

    def reset(self, batch: int = 1) -> None:
        """Start new episodes: a recurrent policy forgets its state (``batch`` episodes at once)."""
        self.state = torch.zeros(batch, self.state_size, device=self.device)

    def seed(self, seeds: list[int]) -> None:
        """The seeds of the episodes just started (one per row, after ``reset``). A policy that draws
        random numbers even when it acts deterministically (a Dreamer's latent states) draws them
        from these, so that an evaluation depends on the policy and its seeds alone. The others have
        nothing to draw and ignore them."""

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Actions for observations.

        Args:
            obs: one observation (the observation space's shape) or a batch ``[B, *shape]``, raw as
                the env returns it: the policy normalizes it with the statistics saved in training.
            deterministic: the most likely action (a Gaussian's mean, squashed where the actor
                squashes; a categorical's mode); ``False`` samples from the policy's distribution.
                TD3's actor is deterministic either way (its exploration noise is training's).

        Returns:
            Numpy actions in the env's action space: one action, or ``[B, *action shape]``.

        Raises:
            ValueError: the observation has neither shape."""
        obs = np.asarray(obs)
        single = obs.shape == self.obs_shape
        if not single and obs.shape[1:] != self.obs_shape:
            raise ValueError(
                f"expected observations of shape {self.obs_shape} or [B, *{self.obs_shape}], got {obs.shape}"
            )
        if deterministic and (fast := self._numpy_mode(1 if single else obs.shape[0])) is not None:
            out = fast(obs[None] if single else obs)
            return out[0] if single else out
        x = torch.as_tensor(obs, device=self.device).to(self.obs_dtype)
        if single:
            x = x.unsqueeze(0)
        if self.state is None or self.state.shape[0] != x.shape[0]:
            self.reset(x.shape[0])
        with torch.no_grad():
            action, self.state = self.actor.act(x, self.state, deterministic)
        out = action.cpu().numpy()
        return out[0] if single else out
