"""Soft Actor-Critic for continuous actions (CleanRL's sac_continuous_action.py, with skrl's options)."""

from heron.algos.sac.agent import check, load_policy
from heron.algos.sac.config import PRESETS, SEARCH_SPACE, Config
from heron.algos.sac.train import train

DESCRIPTION = "Soft Actor-Critic: tanh-Gaussian actor, twin soft Q, automatic entropy tuning (Box actions)"
# its deterministic policy draws nothing: an evaluation may run in a worker process (heron.runtime.evalworker)
EVAL_IN_WORKER = True
__all__ = ["Config", "PRESETS", "SEARCH_SPACE", "DESCRIPTION", "EVAL_IN_WORKER", "check", "load_policy", "train"]
