"""One KV cache on its way over the fluid link (link.py): the mutable state the fluid keeps for it,
and how one sender's caches split its connections."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

_INF = math.inf


class Transfer:
    """One KV cache (or cached prefix) on its way; mutable state of the fluid model. `num_bytes` is
    the cache's size; the fluid moves its wire bytes (LinkState.wire_per_byte): `remaining` those
    produced and not yet sent as of `since_s` (less rate * (now - since_s) now), `unproduced` those
    its prefill has yet to hand over (0 for a cache sent whole). A transfer that has sent all it
    was handed waits (`is_stalled`, no share) for its next layer. Caches of one `sender` (a prefill
    worker's connections to one decode worker; -1: its own) take those connections in the order they
    started (sender_lanes)."""

    __slots__ = ("num_bytes", "remaining", "unproduced", "since_s", "rate", "on_done", "arg", "start_s",
                 "is_active", "is_stalled", "is_pipelined", "is_after_idle", "version", "weight", "lanes", "tail_lanes",
                 "queued_cap", "sender", "rate_factor")

    def __init__(self, num_bytes: float, wire_bytes: float, unproduced: float, on_done: Callable[[Any], None],
                 arg: Any, start_s: float, lanes: float, sender: int = -1) -> None:
        self.num_bytes = num_bytes
        self.remaining = wire_bytes - unproduced
        self.unproduced = unproduced
        self.since_s = start_s
        self.rate = 0.0
        self.on_done = on_done
        self.arg = arg
        self.start_s = start_s
        self.is_active = True
        self.is_stalled = unproduced > 0 and self.remaining <= 0
        self.is_pipelined = False  # sent as produced: its last layer rides `tail_lanes` (end_production)
        self.is_after_idle = False  # pipelined, started on an idle link: the after-idle lane cap binds it
        self.version = 0  # grows at every rate change: an older finish timer is stale
        self.weight = 1.0  # < 1 while locked out behind incumbents (LinkState.newcomer_weight)
        self.lanes = self.tail_lanes = lanes  # connections carrying it; its last layer's
        self.queued_cap = _INF  # the most of its bytes that can stand in the queue: not a send's late bytes
        self.sender = sender
        self.rate_factor = 1.0  # its draw of the loss-limited rate over the mean (tcp.loss_time_factor)

    def left_at(self, now_s: float) -> float:
        return self.remaining - self.rate * (now_s - self.since_s) if now_s > self.since_s else self.remaining


def sender_lanes(active: list[Transfer], connections: int, chunk_bytes: float = 0.0, now_s: float = 0.0) -> list[float]:
    """The connections each of `active` (in the order they started) rides when some sender has
    several caches on the link: a sender's caches take its connections in that order (the live
    sender's one chunk queue), the older ones first, in whole connections when they leave fewer (a
    chunk rides one; and a crumb of a lane would arm a finish timer that outlives the run); one
    waiting for a layer holds none. Each asks for its own lanes, or with `chunk_bytes` (a lossless
    link, where the connections' weights share the bottleneck) as many as it has chunks left to
    send at `now_s` (at least one): a cache's last chunks leave the other connections to the next
    one. Worked out at each reshare, so a cache holds its count until the next. On a lossy link the
    loss-limited windows bind per connection, and the lanes are their caps (link._cap)."""
    held: dict[int, float] = {}
    lanes: list[float] = []
    for transfer in active:
        own = transfer.lanes
        if transfer.sender >= 0 and not transfer.is_stalled:
            if chunk_bytes > 0.0:
                chunks = math.ceil(transfer.left_at(now_s) / chunk_bytes)
                own = float(chunks) if 1 <= chunks < connections else (1.0 if chunks < 1 else float(connections))
            taken = held.get(transfer.sender, 0.0)
            free = connections - taken
            if own > free:
                own = float(math.floor(free)) if free > 0.0 else 0.0
            held[transfer.sender] = taken + own
        lanes.append(own)
    return lanes
