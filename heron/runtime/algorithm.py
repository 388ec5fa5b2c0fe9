"""The interface of an algorithm's module, written down once (``Algorithm``): what the run, the
evaluation worker and the faces use of ``heron.algos.<name>``. mypy checks every module the
registry lists against it (``heron.registry``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from heron.accel.acting import Policy
    from heron.config import RunConfig
    from heron.runtime.run import Run


class Algorithm(Protocol):
    """What heron expects of an algorithm's module (``heron.algos.<name>``): the registry lists them,
    a run trains one, the evaluation worker rebuilds its policy.

    Optional beside these: ``eval_env(cfg)``, the algorithm's own env stack for evaluations (the
    Dreamers'), and ``EVAL_IN_WORKER = True`` where an evaluation may run in a worker process
    (its deterministic policy draws no random numbers: ``heron.runtime.evalworker``)."""

    @property
    def __name__(self) -> str:  # the module's name (``heron.algos.<name>``)
        ...

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
