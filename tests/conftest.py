"""Session-wide test hygiene."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True)
def _restore_main_module():
    """Streamlit's AppTest installs the page script as `sys.modules["__main__"]` and leaves it there;
    a later test that spawns a process would then re-run that page in the child (multiprocessing's
    spawn imports the parent's main file). Put the real one back after every test."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `gpu` skip, with the reason, where torch sees no CUDA device (torch is imported
    only when such a test was collected, so other suites start without it)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: torch.cuda.is_available() is False")
    for item in gpu_items:
        item.add_marker(skip)
