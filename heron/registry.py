"""The algorithms heron knows: name -> module. A literal dict; nothing registers itself.

Each module exposes ``Config`` (a dataclass extending ``heron.config.RunConfig``), ``PRESETS``
(name -> overrides), ``DESCRIPTION``, ``check(cfg)`` (rejects unsupported spaces before a run
directory exists), ``train(cfg, run) -> dict`` and ``load_policy(cfg, state, device) -> Policy``
(``heron.accel.acting``).
"""

from __future__ import annotations

import difflib
import importlib
from types import ModuleType

from heron.errors import HeronError

ALGOS = {
    "sac": "heron.algos.sac",
    "td3": "heron.algos.td3",
    "ppo": "heron.algos.ppo",
    "dreamer_v2": "heron.algos.dreamer_v2",
    "dreamer_v3": "heron.algos.dreamer_v3",
}


def get(name: str) -> ModuleType:
    if name not in ALGOS:
        close = difflib.get_close_matches(name, ALGOS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise HeronError(f"unknown algorithm {name!r}{hint}; choose from {', '.join(ALGOS)}")
    return importlib.import_module(ALGOS[name])
