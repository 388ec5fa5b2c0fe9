"""The algorithms heron knows: name -> module. A literal dict; nothing registers itself.

Every module listed is an ``Algorithm``: the interface below, written down once. mypy checks each
module against it (the ``TYPE_CHECKING`` block at the end), so an algorithm that misses a name or
changes a signature fails the type check, not a run.
"""

from __future__ import annotations

import difflib
import importlib
from typing import TYPE_CHECKING, Any, Protocol, cast

from heron.errors import HeronError

if TYPE_CHECKING:
    import torch

    from heron.accel.acting import Policy
    from heron.config import RunConfig
    from heron.runtime.run import Run

ALGOS = {
    "sac": "heron.algos.sac",
    "td3": "heron.algos.td3",
    "ppo": "heron.algos.ppo",
    "dreamer_v2": "heron.algos.dreamer_v2",
    "dreamer_v3": "heron.algos.dreamer_v3",
}


class Algorithm(Protocol):
    """What heron expects of an algorithm's module (``heron.algos.<name>``).

    Optional beside these: ``eval_env(cfg)``, the algorithm's own env stack for evaluations (the
    Dreamers'), and ``EVAL_IN_WORKER = True`` where an evaluation may run in a worker process
    (its deterministic policy draws no random numbers: ``heron.runtime.evalworker``)."""

    @property
    def Config(self) -> type[RunConfig]:  # noqa: N802 (a class, as the module names it)
        """Its options: a dataclass extending ``heron.config.RunConfig``."""

    @property
    def PRESETS(self) -> dict[str, dict[str, Any]]:  # noqa: N802
        """Name -> overrides (``--preset``), applied in order."""

    @property
    def SEARCH_SPACE(self) -> dict[str, Any]:  # noqa: N802
        """``heron tune``'s default search space."""

    @property
    def DESCRIPTION(self) -> str:  # noqa: N802
        """One line for ``heron list``."""

    def check(self, cfg: Any) -> dict:
        """Reject an env whose spaces the algorithm cannot handle, before a run directory exists;
        returns the spaces a checkpoint saves (resume and eval compare them)."""

    def train(self, cfg: Any, run: Run) -> dict:
        """Train in ``run`` (``heron.runtime.run.Run``) and return its summary (``run.finish``'s)."""

    def load_policy(self, cfg: Any, state: dict, device: str | torch.device = ...) -> Policy:
        """The trained policy from a checkpoint's ``state``."""


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
