"""Shared fixtures for transport tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def loopback_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected (client, server-side) TCP pair on 127.0.0.1."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname(), timeout=5)
        server, _ = listener.accept()
    try:
        yield client, server
    finally:
        client.close()
        server.close()
