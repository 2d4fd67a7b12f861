"""Fixtures for model_stub tests: seeded tiny models (built once per session) and generators."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from model_stub import HybridModel, get_preset


@pytest.fixture(scope="session")
def tiny_model() -> Callable[..., HybridModel]:
    """`make(name, dtype="float32")`: the tiny preset `name` on CPU, built once per session.

    Models are shared between tests, so tests must only run them (prefill/decode), never train or
    edit their weights.
    """
    models: dict[tuple[str, str], HybridModel] = {}

    def make(name: str, dtype: str = "float32") -> HybridModel:
        if (name, dtype) not in models:
            models[name, dtype] = HybridModel(get_preset(name, "tiny", dtype=dtype), device="cpu")
        return models[name, dtype]

    return make


@pytest.fixture(scope="session")
def make_generator() -> Callable[[int], torch.Generator]:
    """`make(seed)`: a fresh CPU torch.Generator; session-scoped so hypothesis tests can use it."""
    return lambda seed: torch.Generator().manual_seed(seed)


@pytest.fixture
def generator(make_generator: Callable[[int], torch.Generator]) -> torch.Generator:
    """A CPU torch.Generator seeded with 0, fresh for each test."""
    return make_generator(0)


@pytest.fixture(scope="session")
def random_tokens(make_generator: Callable[[int], torch.Generator]) -> Callable[..., list[int]]:
    """`tokens(n, seed=0)`: n byte tokens (0-255), the same for the same (n, seed)."""

    def tokens(n: int, seed: int = 0) -> list[int]:
        return torch.randint(0, 256, (n,), generator=make_generator(seed)).tolist()

    return tokens
