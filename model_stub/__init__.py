"""A small, real hybrid-attention LM whose cache has the structure that makes PrfaaS work.

A few full-attention layers keep KV that grows with the prompt; the rest (KDA, Gated DeltaNet,
sliding-window) keep a bounded state. Imports only torch and the standard library; torch loads on
first use of a model or cache name, so tools that only read configs (scenario validation) start fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from model_stub.config import PRESET_NAMES, SIZES, LayerKind, ModelConfig, get_preset

_LAZY = {"HybridCache": "model_stub.cache", "LayerCache": "model_stub.cache",
         "HybridModel": "model_stub.model", "resolve_device": "model_stub.model"}

__all__ = [
    "PRESET_NAMES", "SIZES", "HybridCache", "HybridModel", "LayerCache", "LayerKind", "ModelConfig",
    "get_preset", "resolve_device",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'model_stub' has no attribute {name!r}")
