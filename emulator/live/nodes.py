"""The gateway's hands on its workers: each one's control connection, KV port, process and last
stats. Role, up/draining and what each node holds are the run core's (emulator.run.board): this
table reads them from there, so the live and virtual engines weigh and name nodes alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

from emulator.control.types import Cluster, NodeId, Role
from emulator.run.board import NodeBoard
from emulator.wire import protocol as p


@dataclass(slots=True)
class NodeState:
    """One worker at a fixed slot of the board; its role, and so its NodeId, may flip."""

    board: NodeBoard
    slot: int
    spawn_name: str  # the --node it was started with: a restarted worker keeps it
    writer: asyncio.StreamWriter | None = None
    kv_port: int | None = None
    pid: int | None = None
    is_up: bool = False  # connected and proven: the board hears of every change
    stats: p.Stats | None = None
    device: str | None = None  # cuda:1 or cpu as placed (emulator/live/placement.py), else as its hello says
    host: str | None = None  # the machine it runs on: its Ray node's address, or this host's name

    @property
    def node(self) -> NodeId:
        return self.board.ids[self.slot]

    @property
    def name(self) -> str:
        return self.board.names[self.slot]

    @property
    def cluster(self) -> Cluster:
        return self.node.cluster

    @property
    def index(self) -> int:
        return self.node.index

    @property
    def role(self) -> Role:
        return Role.PREFILL if self.board.is_prefill[self.slot] else Role.DECODE

    @property
    def pool(self) -> str:
        """The metrics pool: remote_prefill, local_prefill or decode."""
        if self.role is Role.DECODE:
            return "decode"
        return f"{self.cluster.value}_prefill"

    @property
    def num_held(self) -> int:
        board, slot = self.board, self.slot
        return board.prefill_held[slot] if board.is_prefill[slot] else board.decode_held[slot]

    def join(self, writer: asyncio.StreamWriter, hello: p.Hello) -> None:
        """A proven hello: its connection and ports, and its device where the placement left it
        open (the hello's is the worker's own view: a worker pinned to GPU 1 sees it as cuda:0)."""
        self.writer, self.kv_port, self.pid = writer, hello.kv_port, hello.pid
        self.device = self.device or hello.device

    async def send(self, msg: p.Message) -> bool:
        """Write one message; False when the connection is gone (the caller treats the node as lost)."""
        if self.writer is None or self.writer.is_closing():
            return False
        try:
            self.writer.write(p.encode(msg))
            await self.writer.drain()
        except (ConnectionError, OSError):
            return False
        return True


class NodeTable:
    """Every node the scenario defines, up or not, by slot; looked up by any of its names."""

    def __init__(self, board: NodeBoard, spawn_names: list[str], devices: list[str | None] | None = None,
                 hosts: list[str | None] | None = None) -> None:
        self.board = board
        devices = devices or [None] * len(spawn_names)
        hosts = hosts or [None] * len(spawn_names)
        self.by_slot = [NodeState(board, slot, name, device=device, host=host)
                        for slot, (name, device, host) in enumerate(zip(spawn_names, devices, hosts, strict=True))]

    def __iter__(self) -> Iterator[NodeState]:
        return iter(self.by_slot)

    def at(self, slot: int) -> NodeState:
        return self.by_slot[slot]

    def get(self, name: str | NodeId) -> NodeState | None:
        """By NodeId or its text, current role or not (`local-decode-3` finds slot 3 after a flip)."""
        try:
            node = name if isinstance(name, NodeId) else NodeId.parse(name)
        except ValueError:
            return None
        slot = self.board.slot_of(node)
        return self.by_slot[slot] if slot >= 0 else None

    def queue_depths(self) -> dict[str, int]:
        """Requests WAITING per pool (not those in service or in a decode batch), as the worker's
        last stats say; before its first stats, what the gateway handed out beyond one in service."""
        depths = {"remote_prefill": 0, "local_prefill": 0, "decode": 0}
        for n in self:
            if n.is_up:
                depths[n.pool] += n.stats.queue_depth if n.stats is not None else max(n.num_held - 1, 0)
        return depths

    def roles(self) -> dict[str, str]:
        return {n.name: n.role.value for n in self}

    def devices(self) -> dict[str, str]:
        """Each node's device where known (cuda:1, cpu), by its current name as `roles` has it."""
        return {n.name: n.device for n in self if n.device is not None}

    def hosts(self) -> dict[str, str]:
        """Each node's machine where known, by its current name."""
        return {n.name: n.host for n in self if n.host is not None}

    def count(self, cluster: Cluster, role: Role) -> int:
        return sum(1 for n in self if n.cluster is cluster and n.role is role)
