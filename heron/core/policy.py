"""``Policy``: a trained actor behind a numpy interface, for evaluation and the Python API."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


class Policy:
    """``predict(obs, deterministic=True)`` returns numpy actions for one observation (shape of the
    action space) or a batch ([B, *action shape]). Recurrent policies carry their state between
    calls; ``reset()`` starts new episodes.

    The wrapped actor implements ``act(obs [B, ...], state [B, S], deterministic) -> (actions, state)``."""

    def __init__(self, actor: nn.Module, obs_shape: tuple[int, ...], state_size: int = 0,
                 device: str | torch.device = "cpu", obs_dtype: torch.dtype = torch.float32):
        self.actor = actor.to(device).eval()
        self.obs_shape, self.state_size = tuple(obs_shape), state_size
        self.device, self.obs_dtype = torch.device(device), obs_dtype
        self.state: torch.Tensor | None = None

    def reset(self, batch: int = 1) -> None:
        self.state = torch.zeros(batch, self.state_size, device=self.device)

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        obs = np.asarray(obs)
        single = obs.shape == self.obs_shape
        if not single and obs.shape[1:] != self.obs_shape:
            raise ValueError(f"expected observations of shape {self.obs_shape} or [B, *{self.obs_shape}], "
                             f"got {obs.shape}")
        x = torch.as_tensor(obs, device=self.device).to(self.obs_dtype)
        if single:
            x = x.unsqueeze(0)
        if self.state is None or self.state.shape[0] != x.shape[0]:
            self.reset(x.shape[0])
        with torch.no_grad():
            action, self.state = self.actor.act(x, self.state, deterministic)
        out = action.cpu().numpy()
        return out[0] if single else out
