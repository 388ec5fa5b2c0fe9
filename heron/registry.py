"""The algorithms heron knows: name -> module. A literal dict; nothing registers itself.

Every module listed is an ``Algorithm`` (``heron.runtime.algorithm``: the interface, written down
once). mypy checks each module against it (the ``TYPE_CHECKING`` block at the end), so an algorithm
that misses a name or changes a signature fails the type check, not a run.
"""

from __future__ import annotations

import difflib
import importlib
from typing import TYPE_CHECKING, cast

from heron.errors import HeronError
from heron.runtime.algorithm import Algorithm

ALGOS = {
    "sac": "heron.algos.sac",
    "td3": "heron.algos.td3",
    "ppo": "heron.algos.ppo",
    "dreamer_v2": "heron.algos.dreamer_v2",
    "dreamer_v3": "heron.algos.dreamer_v3",
}


def get(name: str) -> Algorithm:
    if name not in ALGOS:
        close = difflib.get_close_matches(name, ALGOS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise HeronError(f"unknown algorithm {name!r}{hint}; choose from {', '.join(ALGOS)}")
    return cast(Algorithm, importlib.import_module(ALGOS[name]))


if TYPE_CHECKING:  # every listed module satisfies the interface (checked by mypy, never run)
    from heron.algos import dreamer_v2, dreamer_v3, ppo, sac, td3

    _SAC: Algorithm = sac
    _TD3: Algorithm = td3
    _PPO: Algorithm = ppo
    _DREAMER_V2: Algorithm = dreamer_v2
    _DREAMER_V3: Algorithm = dreamer_v3
