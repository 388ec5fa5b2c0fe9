"""Soft Actor-Critic for continuous actions (seeds 000 and 002)."""

from heron.algos.sac.config import PRESETS, SEARCH_SPACE, Config
from heron.algos.sac.train import check, load_policy, train

DESCRIPTION = "Soft Actor-Critic: tanh-Gaussian actor, twin soft Q, automatic entropy tuning (Box actions)"
__all__ = ["Config", "PRESETS", "SEARCH_SPACE", "DESCRIPTION", "check", "load_policy", "train"]
