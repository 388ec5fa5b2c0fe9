"""DreamerV3 (Hafner et al. 2023, the official code and sheeprl's DreamerV3): DreamerV2's world model
with symlog predictions, two-hot reward and value heads, free bits and KL balancing per step, return
normalisation by percentiles, and one fixed set of hyperparameters across domains."""

from heron.algos.dreamer_v3.config import PRESETS, SEARCH_SPACE, Config
from heron.algos.dreamer_v3.train import check, eval_env, load_policy, train

DESCRIPTION = (
    "DreamerV3: RSSM world model with 32x32 discrete latents, symlog and two-hot predictions, "
    "percentile return normalisation (Discrete and Box actions; pixels, vectors or both; "
    "Atari, DMC, any Gymnasium env)"
)
__all__ = ["DESCRIPTION", "PRESETS", "SEARCH_SPACE", "Config", "check", "eval_env", "load_policy", "train"]
