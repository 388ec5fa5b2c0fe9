"""heron: deep reinforcement learning in PyTorch."""

__version__ = "0.1.0"

from heron.api import evaluate, load, resume, train  # noqa: E402
from heron.errors import HeronError  # noqa: E402

__all__ = ["train", "resume", "load", "evaluate", "HeronError", "__version__"]
