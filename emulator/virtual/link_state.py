"""One direction of the cross-datacenter link as the fluid model sees it (link.py): its rate, delay
and loss, and what TCP on it makes of them (tcp.py): the loss-limited ceiling per connection and
transfer, and how far a deep buffer locks newcomers out."""

from __future__ import annotations

import math
from dataclasses import dataclass

from emulator.virtual.tcp import (
    CONNECTIONS,
    LOSS_C,
    LOSS_C_AFTER_IDLE,
    MSS_BYTES,
    PACKET_BYTES,
    QUEUE_PACKETS,
    is_lockout,
    mathis_bytes_per_s,
)

_INF = math.inf
MIN_NEWCOMER_WEIGHT = 0.01  # a newcomer is starved, not stopped (and a weight sum never reaches 0)


@dataclass(frozen=True, slots=True)
class LinkState:
    """One direction of the link as the fluid model sees it; rate inf means unshaped."""

    rate_bytes_per_s: float
    delay_s: float
    loss: float = 0.0  # packet loss probability, 0..1
    rtt_s: float = 0.0  # both directions' delays: what the sender's ACK clock sees
    connections: int = CONNECTIONS
    queue_bytes: float = QUEUE_PACKETS * PACKET_BYTES  # the bottleneck's drop-tail buffer
    loss_c: float = LOSS_C  # one connection's loss response (tcp.py), bench/link_tcp.py's fits vary it
    loss_c_after_idle: float = LOSS_C_AFTER_IDLE  # the same after an idle spell shrank the window
    wire_per_byte: float = 1.0  # what the shaper counts per KV byte: tcp.WIRE_PER_BYTE on the live link

    @property
    def per_transfer_cap(self) -> float:
        """The loss-limited ceiling of one transfer in wire bytes/s (inf on a lossless link, 0 on a cut one)."""
        return self.connections * self.pipelined_lane_cap

    @property
    def pipelined_lane_cap(self) -> float:
        """The loss-limited ceiling of one connection in wire bytes/s; a cache sent layer by layer as
        its prefill produces it rides all of them while it is produced, its last layer's lanes after."""
        return mathis_bytes_per_s(MSS_BYTES, self.rtt_s, self.loss, self.loss_c) * self.wire_per_byte

    @property
    def pipelined_lane_cap_after_idle(self) -> float:
        """One connection's loss-limited ceiling for a pipelined cache that starts after an idle
        spell (tcp.is_idle_spell): its window has shrunk and regrows slowly under loss."""
        return mathis_bytes_per_s(MSS_BYTES, self.rtt_s, self.loss, self.loss_c_after_idle) * self.wire_per_byte

    @property
    def newcomer_weight(self) -> float:
        """A newcomer's share per incumbent's on a saturated link: BDP / buffer when the buffer is
        the deeper (bench/link_tcp.py: 0.03-0.34 fit 20-200 Mbit/s), else 1 (fair)."""
        if not is_lockout(self.rate_bytes_per_s, self.rtt_s, self.queue_bytes):
            return 1.0
        return max(MIN_NEWCOMER_WEIGHT, self.rate_bytes_per_s * self.rtt_s / self.queue_bytes)

    @property
    def has_ramp(self) -> bool:
        """Whether new connections ramp up at all: a finite rate and a round trip to ramp over."""
        return self.rate_bytes_per_s < _INF and self.rtt_s > 0
