"""Twin Delayed DDPG for continuous actions (seed 001)."""

from heron.algos.td3.config import PRESETS, SEARCH_SPACE, Config
from heron.algos.td3.train import check, load_policy, train

DESCRIPTION = "TD3: deterministic actor, twin critics, target smoothing, delayed updates (Box actions)"
__all__ = ["Config", "PRESETS", "SEARCH_SPACE", "DESCRIPTION", "check", "load_policy", "train"]
