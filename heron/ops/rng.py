"""Random generators' states as plain containers (tensors, lists, dicts of str and int), so that
checkpoints load with ``weights_only``: Python's, numpy's (the legacy global one and a
``Generator``), torch's CPU and CUDA generators."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def rng_state(np_rng: np.random.Generator | None = None) -> dict:
    """Python, numpy (legacy global and an optional Generator) and torch RNG states, as tensors and
    plain containers so that ``weights_only`` loading accepts them."""
    py = random.getstate()
    legacy: tuple[Any, ...] = np.random.get_state(legacy=True)  # type: ignore[assignment]  # the tuple form
    state: dict[str, Any] = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy_legacy": [legacy[0], torch.from_numpy(legacy[1].astype(np.int64)), legacy[2], legacy[3], legacy[4]],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if np_rng is not None:
        state["numpy_generator"] = generator_state(np_rng)
    return state


def generator_state(rng: np.random.Generator) -> dict:
    """A numpy Generator's bit-generator state as a plain dict of str/int (weights_only-loadable);
    assign it back with ``rng.bit_generator.state = ...``."""
    s = rng.bit_generator.state
    return {
        "bit_generator": s["bit_generator"],
        "state": dict(s["state"]),
        "has_uint32": int(s.get("has_uint32", 0)),
        "uinteger": int(s.get("uinteger", 0)),
    }


def set_rng_state(state: dict, np_rng: np.random.Generator | None = None) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    legacy = state["numpy_legacy"]
    np.random.set_state((legacy[0], legacy[1].numpy().astype(np.uint32), legacy[2], legacy[3], legacy[4]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if np_rng is not None and "numpy_generator" in state:
        np_rng.bit_generator.state = state["numpy_generator"]
