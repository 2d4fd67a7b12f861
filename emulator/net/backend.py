"""The contract every link backend keeps, and the plain data that describes a link's two ends.

Describe first, realise second: `LinkEnds` names the namespaces, devices and addresses; a backend
turns a `LinkSpec` into devices/qdiscs/relays on those ends and changes them live.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from emulator.net.spec import LinkSpec

TO_LOCAL, TO_REMOTE = "remote->local", "local->remote"


@dataclass(frozen=True, slots=True)
class LinkEnds:
    """Where a link lives. Proxy links have no namespaces (None) and use 127.0.0.1 on both ends."""

    run_id: str
    remote_netns: str | None
    local_netns: str | None
    remote_ifname: str
    local_ifname: str
    remote_addr: str = "198.18.0.1"  # RFC 2544 benchmarking range: never routed anywhere
    local_addr: str = "198.18.0.2"
    prefixlen: int = 24
    mtu: int = 9000


@dataclass(frozen=True, slots=True)
class DirectionCounters:
    bytes: int = 0
    packets: int = 0
    drops: int = 0


@dataclass(frozen=True, slots=True)
class LinkCounters:
    """Per direction, keyed TO_LOCAL / TO_REMOTE; what crossed the link and what it dropped.
    `read_at_monotonic`: when a relay process read them (CLOCK_MONOTONIC, shared by the host's
    processes), so a rate is counted between reads, not between late answers (issue 26)."""

    directions: dict[str, DirectionCounters] = field(default_factory=dict)
    read_at_monotonic: float | None = None


class LinkBackend(Protocol):
    """A shaped link between two ends.

    `apply` creates the link and shapes it; `update` reshapes it while traffic flows (effective
    within one second, never by deleting and re-adding); `close` removes what `apply` created and
    is idempotent. `description` says in one line what the backend can and cannot emulate.
    """

    name: str
    description: str

    def apply(self, spec: LinkSpec) -> None: ...

    def update(self, spec: LinkSpec) -> None: ...

    def counters(self) -> LinkCounters: ...

    def close(self) -> None: ...
