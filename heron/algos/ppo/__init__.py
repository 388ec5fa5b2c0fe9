"""Proximal Policy Optimization with DI-engine's options."""

from heron.algos.ppo.agent import load_policy
from heron.algos.ppo.config import PRESETS, SEARCH_SPACE, Config
from heron.algos.ppo.spaces import check
from heron.algos.ppo.train import train

DESCRIPTION = (
    "Proximal Policy Optimization: clipped surrogate (dual clip), GAE, value/obs normalization, "
    "recurrent and off-policy modes (Discrete, MultiDiscrete, Box; vectors and images)"
)
# its deterministic policy draws nothing: an evaluation may run in a worker process (heron.runtime.evalworker)
EVAL_IN_WORKER = True
__all__ = ["Config", "PRESETS", "SEARCH_SPACE", "DESCRIPTION", "EVAL_IN_WORKER", "check", "load_policy", "train"]
