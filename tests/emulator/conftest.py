"""Fixtures shared by the emulator's tests."""

from __future__ import annotations

import pytest

from emulator.net.ledger import sweep
from emulator.net.names import new_run_id


@pytest.fixture
def run_id():
    """A fresh run id; whatever the test leaves under it (namespaces, relays) is swept afterwards."""
    rid = new_run_id()
    yield rid
    sweep(rid)
