"""A small, real hybrid-attention LM whose cache has the structure that makes PrfaaS work.

A few full-attention layers keep KV that grows with the prompt; the rest (KDA, Gated DeltaNet,
sliding-window) keep a bounded state. Imports only torch and the standard library.
"""

from model_stub.cache import HybridCache, LayerCache
from model_stub.config import PRESET_NAMES, SIZES, LayerKind, ModelConfig, get_preset
from model_stub.model import HybridModel, resolve_device

__all__ = [
    "PRESET_NAMES", "SIZES", "HybridCache", "HybridModel", "LayerCache", "LayerKind", "ModelConfig",
    "get_preset", "resolve_device",
]
