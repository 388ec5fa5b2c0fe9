"""Twin Delayed DDPG for continuous actions (Fujimoto et al. 2018)."""

from heron.algos.td3.config import PRESETS, SEARCH_SPACE, Config
from heron.algos.td3.train import check, load_policy, train

DESCRIPTION = "TD3: deterministic actor, twin critics, target smoothing, delayed updates (Box actions)"
# its deterministic policy draws nothing: an evaluation may run in a worker process (heron.runtime.evalworker)
EVAL_IN_WORKER = True
__all__ = ["Config", "PRESETS", "SEARCH_SPACE", "DESCRIPTION", "EVAL_IN_WORKER", "check", "load_policy", "train"]
