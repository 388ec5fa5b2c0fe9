"""``Policy``: a trained actor behind a numpy interface, for evaluation and the Python API."""

from __future__ import annotations

import copy
from typing import Callable

import numpy as np
import torch
from torch import nn

from heron.core.acting import CpuTwin


class Policy:
    """``predict(obs, deterministic=True)`` returns numpy actions for one observation (shape of the
    action space) or a batch ([B, *action shape]). Recurrent policies carry their state between
    calls; ``reset()`` starts new episodes.

    The wrapped actor implements ``act(obs [B, ...], state [B, S], deterministic) -> (actions, state)``."""

    batched = True  # evaluations may play several episodes at once through one predict (episodes.evaluate)

    def __init__(self, actor: nn.Module, obs_shape: tuple[int, ...], state_size: int = 0,
                 device: str | torch.device = "cpu", obs_dtype: torch.dtype = torch.float32):
        self.actor = actor.to(device).eval()
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
        return self.device.type == "cpu" or not any(isinstance(m, nn.modules.conv._ConvNd)
                                                    for m in self.actor.modules())

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
        (``numpy_mode``: feed-forward MLPs on vectors, float32, small products; ``heron.core.acting``)
        and lives on the CPU; else None (torch). A few microseconds a call against some dozens of
        torch dispatches: an evaluation makes one call per env step."""
        if batch not in self._numpy:
            make = getattr(self.actor, "numpy_mode", None)
            usable = (make is not None and self.device.type == "cpu" and self.state_size == 0
                      and self.obs_dtype == torch.float32)  # torch's path casts other types first
            self._numpy[batch] = make(batch) if usable else None
        return self._numpy[batch]

    def reset(self, batch: int = 1) -> None:
        """Start new episodes: a recurrent policy forgets its state (``batch`` episodes at once)."""
        self.state = torch.zeros(batch, self.state_size, device=self.device)

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
            raise ValueError(f"expected observations of shape {self.obs_shape} or [B, *{self.obs_shape}], "
                             f"got {obs.shape}")
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
