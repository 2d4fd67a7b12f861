"""The kernel names the user at the other end of a local TCP connection (sock_diag), or nothing."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from emulator.net.peer_uid import peer_uid

NOBODY = 65534


def test_the_peer_of_a_connection_from_this_process_is_this_user():
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        with client, accepted:
            assert peer_uid(accepted) == os.geteuid()
            assert peer_uid(client) == os.geteuid()  # either end


def test_a_socket_without_a_local_peer_has_none():
    with socket.socket() as unconnected, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        assert peer_uid(unconnected) is None and peer_uid(udp) is None
    left, right = socket.socketpair()
    with left, right:
        assert peer_uid(left) is None  # not TCP
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        client.close()  # no process holds the peer's socket now (closing, then TIME_WAIT, which reads uid 0)
        with accepted:
            assert peer_uid(accepted) is None


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the peer runs as another user")
def test_the_peer_of_another_users_connection_is_that_user():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        other = subprocess.Popen(["/usr/bin/python3", "-c", "import socket, sys; "
                                  f"s = socket.create_connection(('127.0.0.1', {port})); sys.stdin.read()"],
                                 user=NOBODY, stdin=subprocess.PIPE)
        try:
            accepted, _ = server.accept()
            with accepted:
                assert peer_uid(accepted) == NOBODY
        finally:
            other.kill()
            other.wait()
