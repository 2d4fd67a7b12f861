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
