"""The categoricals both Dreamers sample: the latents' one-hot samples with straight-through
gradients (``st_sample``), and the discrete actions' one-hot categorical (``OneHotST``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def st_sample(logits: torch.Tensor, uniform: torch.Tensor | None = None) -> torch.Tensor:
    """One-hot sample of the categoricals in the last dim with straight-through gradients:
    the forward value is the sample, the backward pass sees d(probs). ``uniform`` (logits' shape
    without the last dim, in [0, 1)): the draws to use instead of fresh ones (an exported policy
    takes them as an input)."""
    probs = logits.softmax(-1)
    # inverse-CDF sampling: one uniform per categorical variable, not one Gumbel per class (the
    # Gumbel noise's exponential draws were a large part of a small model's gradient step on CPU). Class j
    # is drawn when cdf[j-1] <= v < cdf[j]: a class of probability 0 never is; v is scaled to the
    # computed total, so rounding in the cumulative sum cannot push it past the last class
    cdf = probs.detach().cumsum(-1)
    v = (torch.rand_like(cdf[..., :1]) if uniform is None else uniform.unsqueeze(-1)) * cdf[..., -1:]
    index = (cdf <= v).sum(-1).clamp_max(logits.shape[-1] - 1)
    onehot = F.one_hot(index, logits.shape[-1]).to(probs.dtype)
    return onehot + probs - probs.detach()


class OneHotST:
    """One-hot categorical whose samples pass straight-through gradients."""

    def __init__(self, logits: torch.Tensor):
        self.logits = logits.log_softmax(-1)

    def rsample(self) -> torch.Tensor:
        return st_sample(self.logits)

    def log_prob(self, onehot: torch.Tensor) -> torch.Tensor:
        return (onehot * self.logits).sum(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum(-1)

    def mode(self) -> torch.Tensor:
        return F.one_hot(self.logits.argmax(-1), self.logits.shape[-1]).to(self.logits.dtype)
