"""DreamerV2 (Hafner et al. 2021, as sheeprl implements it): a discrete world model learned from
replayed episodes, and behaviour learned in its imagination."""

from heron.algos.dreamer_v2.config import PRESETS, SEARCH_SPACE, Config
from heron.algos.dreamer_v2.train import check, eval_env, load_policy, train

DESCRIPTION = (
    "DreamerV2: RSSM world model with 32x32 discrete latents, actor-critic in imagination "
    "(Discrete and Box actions; pixels, vectors or both; Atari, DMC, any Gymnasium env)"
)
__all__ = ["DESCRIPTION", "PRESETS", "SEARCH_SPACE", "Config", "check", "eval_env", "load_policy", "train"]
