"""The fastest rate each userspace link backend was measured to shape, and the warning a link that
asks for more gets (at `validate`, at a live run's start, and on a live reshape).

The figures are bench/link_fidelity.py's (bench/results/link_fidelity.json: the highest rate shaped
to >= 0.95 of what was set, on the 2-core machine the project is measured on). The netem backend is
the kernel's own qdisc on a veth pair and has no figure here; the host relay (host_relay.py, an
inter-host link's delay and loss where the kernel lacks sch_netem) has one. Pure: no I/O, no probing.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.net.spec import LinkShape, LinkSpec
from emulator.net.vnet_header import carries_bursts


@dataclass(frozen=True, slots=True)
class Ceiling:
    """Measured Mbit/s: `rate_mbit` for links the backend moves in bursts, `per_packet_mbit` where
    loss or jitter makes it handle every MTU-sized packet on its own."""

    backend: str
    rate_mbit: float
    per_packet_mbit: float

    def for_shape(self, shape: LinkShape) -> tuple[float, str]:
        """The ceiling that applies to `shape`, and the words that say which one it is (none when
        the backend has one figure for every shape)."""
        if self.rate_mbit == self.per_packet_mbit:
            return self.rate_mbit, ""
        if carries_bursts(shape):
            return self.rate_mbit, "without loss or jitter; "
        return self.per_packet_mbit, "with loss or jitter, packet by packet; "


# tun: lossless TCP moves as unsegmented bursts (vnet_header.py); loss or jitter needs single packets.
# proxy: a TCP relay, which paces bytes in chunks whatever the shape.
# host relay: 2.5 and 5 Gbit/s rows reached ~1.13 Gbit/s with sender, receiver and both relays on 2 cores.
HOST_RELAY = "host relay"
CEILINGS = {
    "tun": Ceiling("tun", rate_mbit=2500.0, per_packet_mbit=1000.0),
    "proxy": Ceiling("proxy", rate_mbit=1000.0, per_packet_mbit=1000.0),
    HOST_RELAY: Ceiling(HOST_RELAY, rate_mbit=1000.0, per_packet_mbit=1000.0),
}


def ceiling_warnings(backend: str, spec: LinkSpec, where: str = "link") -> list[str]:
    """One `field: what; fix` line per direction of `spec` shaped above `backend`'s ceiling."""
    ceiling = CEILINGS.get(backend)
    if ceiling is None:
        return []
    lines = []
    for path, shape in ((where, spec.to_local), (f"{where}.reverse", spec.to_remote)):
        if path.endswith(".reverse") and spec.reverse is None:
            continue  # the same shape as the forward direction: one line says it
        if (line := shape_warning(ceiling, shape, f"{path}.bandwidth_mbit")) is not None:
            lines.append(line)
    return lines


def shape_warning(ceiling: Ceiling, shape: LinkShape, field: str) -> str | None:
    """The line for one direction whose rate is above `ceiling`, else None (unshaped: none)."""
    if shape.bandwidth_mbit is None:
        return None
    top, which = ceiling.for_shape(shape)
    if shape.bandwidth_mbit <= top:
        return None
    return (f"{field}: {shape.bandwidth_mbit:g} is above the {ceiling.backend} backend's measured "
            f"ceiling of {top:g} Mbit/s ({which}bench/link_fidelity.py), so on it the link carries "
            f"less than asked; lower it to {top:g}, or run where the kernel has sch_netem")
