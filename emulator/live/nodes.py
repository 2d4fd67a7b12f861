"""The gateway's view of its workers: connection, role, what each holds, and the last stats.

Load is what the gateway itself handed out and has not heard back about, so it is exact and needs
no polling; the worker's `stats` add the link view (goodput, retransmits) of prefill nodes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from emulator.control.router import NodeLoad
from emulator.control.types import Cluster, NodeId, Role
from emulator.live import protocol as p


@dataclass(slots=True)
class NodeState:
    """One worker. Its slot (cluster, index) is fixed; its role, and so its NodeId, may flip."""

    cluster: Cluster
    index: int
    role: Role
    spawn_name: str  # the --node it was started with: a restarted worker keeps it
    writer: asyncio.StreamWriter | None = None
    kv_port: int | None = None
    pid: int | None = None
    is_up: bool = False
    is_draining: bool = False  # a role flip is pending: no new work
    prefill_rids: set[int] = field(default_factory=set)  # prefills handed out, not yet done
    prefill_tokens: dict[int, int] = field(default_factory=dict)  # rid -> incremental tokens
    decode_rids: set[int] = field(default_factory=set)  # decodes handed out, not yet ended
    stats: p.Stats | None = None

    @property
    def node(self) -> NodeId:
        return NodeId(self.cluster, self.role, self.index)

    @property
    def name(self) -> str:
        return str(self.node)

    @property
    def slot(self) -> tuple[Cluster, int]:
        return (self.cluster, self.index)

    @property
    def pool(self) -> str:
        """The metrics pool: remote_prefill, local_prefill or decode."""
        if self.role is Role.DECODE:
            return "decode"
        return f"{self.cluster.value}_prefill"

    @property
    def can_take_work(self) -> bool:
        return self.is_up and not self.is_draining and self.writer is not None

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

    def __init__(self, nodes: list[NodeState]) -> None:
        self.by_slot = {n.slot: n for n in nodes}

    def __iter__(self):
        return iter(self.by_slot.values())

    def get(self, name: str | NodeId) -> NodeState | None:
        """By NodeId or its text, current role or not (`local-decode-3` finds slot 3 after a flip)."""
        try:
            node = name if isinstance(name, NodeId) else NodeId.parse(name)
        except ValueError:
            return None
        return self.by_slot.get((node.cluster, node.index))

    def prefill_loads(self) -> list[NodeLoad]:
        """What the router weighs: every prefill node, with queued tokens and requests."""
        return [
            NodeLoad(n.node, sum(n.prefill_tokens.values()), len(n.prefill_rids), n.can_take_work)
            for n in self if n.role is Role.PREFILL
        ]

    def pick_decode(self) -> NodeState | None:
        """The up decode node holding the fewest requests (ties: lowest id)."""
        candidates = [n for n in self if n.role is Role.DECODE and n.can_take_work and n.kv_port]
        return min(candidates, key=lambda n: (len(n.decode_rids), n.index), default=None)

    def queue_depths(self) -> dict[str, int]:
        """Requests WAITING per pool (not those in service or in a decode batch), as the worker's
        last stats say; before its first stats, what the gateway handed out beyond one in service."""
        depths = {"remote_prefill": 0, "local_prefill": 0, "decode": 0}
        for n in self:
            if not n.is_up:
                continue
            held = len(n.decode_rids) if n.role is Role.DECODE else len(n.prefill_rids)
            depths[n.pool] += n.stats.queue_depth if n.stats is not None else max(held - 1, 0)
        return depths

    def roles(self) -> dict[str, str]:
        return {n.name: n.role.value for n in self}

    def count(self, cluster: Cluster, role: Role) -> int:
        return sum(1 for n in self if n.cluster is cluster and n.role is role)
