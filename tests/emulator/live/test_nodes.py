"""The node table's devices, as the Live page gets them in each snapshot: the placement's where it
pinned a worker, the worker's own word otherwise, keyed by each node's current name."""

from __future__ import annotations

import asyncio
import socket

from emulator.live.nodes import NodeTable
from emulator.run.board import NodeBoard
from emulator.wire import protocol as p

PROOF = "0" * 64


def hello(node: str, device: str) -> p.Hello:
    return p.Hello(node=node, roles=["prefill", "decode"], kv_port=None, pid=1, device=device, threads=1,
                   proof=PROOF)


async def join_all(table: NodeTable, devices: list[str]) -> None:
    """Each node says hello over a real (idle) connection, reporting `devices` as its own view."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        _, writer = await asyncio.open_connection(sock=ours)
        for node, device in zip(table, devices, strict=True):
            node.join(writer, hello(node.spawn_name, device))
        writer.close()


def test_devices_come_from_the_placement_or_the_hello_and_follow_a_role_flip() -> None:
    board = NodeBoard(num_remote=1, num_local=2, num_local_prefill=1)
    names = ["remote-prefill-0", "local-prefill-0", "local-decode-1"]
    table = NodeTable(board, names, ["cuda:1", "cpu", None])
    assert table.devices() == {"remote-prefill-0": "cuda:1", "local-prefill-0": "cpu"}  # before any hello
    asyncio.run(join_all(table, ["cuda:0", "cpu", "cuda:0"]))
    # a pinned worker calls its one GPU cuda:0; the table keeps the GPU it was given
    assert table.devices() == {"remote-prefill-0": "cuda:1", "local-prefill-0": "cpu", "local-decode-1": "cuda:0"}
    board.flipped(1)  # local-prefill-0 turns decode: the same worker, a new name
    assert table.devices() == {"remote-prefill-0": "cuda:1", "local-decode-0": "cpu", "local-decode-1": "cuda:0"}
    assert set(table.devices()) == set(table.roles())


def test_hosts_are_the_placement_s_and_follow_a_role_flip() -> None:
    board = NodeBoard(num_remote=1, num_local=2, num_local_prefill=1)
    names = ["remote-prefill-0", "local-prefill-0", "local-decode-1"]
    table = NodeTable(board, names, hosts=["10.9.0.2", "10.9.0.3", "10.9.0.3"])
    assert table.hosts() == {"remote-prefill-0": "10.9.0.2", "local-prefill-0": "10.9.0.3", "local-decode-1": "10.9.0.3"}
    board.flipped(1)
    assert table.hosts() == {"remote-prefill-0": "10.9.0.2", "local-decode-0": "10.9.0.3", "local-decode-1": "10.9.0.3"}
    assert NodeTable(board, names).hosts() == {}
