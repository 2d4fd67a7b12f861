"""Describe the shaping of one host's egress toward one peer as tc operations: pure data, no kernel.

The tree on the sending host's interface (`host_link.py` realises it and reads it back):

    root htb <M>: (default class <M>:2)
      <M>:1  rate = ceil = the link's bandwidth   <- u32 filter: IPv4 destination == the peer
        <M+1>: netem delay/jitter/loss            (only where the kernel has sch_netem)
      <M>:2  rate = ceil = HIGH_CEIL_BYTES_PER_S  everything else: intra-cluster traffic unshaped

The major M comes from the run id, so a root qdisc is recognisably the run's (the ledger deletes it by
that handle after a crash) and two runs on one host never pick the same one by accident.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass

from emulator.errors import LinkSpecError
from emulator.net.names import check_run_id
from emulator.net.netem_plan import MAX_TC_RATE_BYTES_PER_S, TBF_BURST_S, Param, QdiscOp, netem_params
from emulator.net.spec import LinkShape

SHAPED_MINOR, DEFAULT_MINOR = 1, 2
# The unshaped class's rate and ceiling: 100 Gbit/s, above what a NIC or veth here moves, so traffic
# that is not the peer's is never held back (htb takes 64-bit rates; pyroute2 sends TCA_HTB_RATE64).
HIGH_CEIL_BYTES_PER_S = 100e9 / 8
# htb's quantum only divides spare rate between siblings, and these two never borrow; a fixed value
# keeps the kernel from warning that rate / r2q is out of range at high rates.
QUANTUM_BYTES = 60_000
FILTER_PRIO = 1
ETH_P_IP = 0x0800
IPV4_DST_OFFSET = 16  # bytes into the IPv4 header
_MAJORS = (0x100, 0x7F00)  # below the kernel's auto-allocated 0x8000..; each run's M and M+1 inside


@dataclass(frozen=True, slots=True)
class ClassOp:
    """One RTM_NEWTCLASS request for an htb class; `params` are sched_htb's class keywords."""

    netns: str
    ifname: str
    command: str  # "add" | "change"
    classid: str
    parent: str
    params: tuple[Param, ...]

    def kwargs(self) -> dict[str, int | float]:
        return dict(self.params)


@dataclass(frozen=True, slots=True)
class FilterOp:
    """One RTM_NEWTFILTER request: a u32 match on the IPv4 destination that sends to `target`."""

    netns: str
    ifname: str
    parent: str
    target: str
    peer_addr: str

    @property
    def keys(self) -> list[str]:
        return [f"0x{int(ipaddress.IPv4Address(self.peer_addr)):08x}/0xffffffff+{IPV4_DST_OFFSET}"]


@dataclass(frozen=True, slots=True)
class HostPlan:
    """Everything `open` adds, in order: root, classes, the netem leaf (if any), then the filter."""

    root: QdiscOp
    classes: tuple[ClassOp, ...]
    netem: QdiscOp | None
    filter: FilterOp


def root_major(run_id: str) -> int:
    """The run's htb major: even, in [0x100, 0x7f00), so the netem leaf's M+1 is free too."""
    low, high = _MAJORS
    return low + (int(check_run_id(run_id), 16) % ((high - low) // 2)) * 2


def handle(major: int, minor: int | None = None) -> str:
    return f"{major:x}:" if minor is None else f"{major:x}:{minor:x}"


def check_peer(peer_addr: str) -> str:
    try:
        return str(ipaddress.IPv4Address(peer_addr))
    except ValueError:
        raise LinkSpecError(f"host link peer_addr: {peer_addr!r} is not an IPv4 address; give the peer host's "
                            "IPv4 address (the u32 filter matches IPv4 destinations)") from None


def plan_open(netns: str, ifname: str, peer_addr: str, shape: LinkShape, mtu: int, major: int,
              has_netem: bool, netem_rate: bool) -> HostPlan:
    """The ops that shape `ifname`'s egress toward `peer_addr` only. `has_netem`: add the netem leaf
    (always, so `update` can `change` it); `netem_rate`: netem keeps order under jitter with its rate."""
    peer = check_peer(peer_addr)
    root = QdiscOp(netns, ifname, "add", "htb", handle(major), None, (("default", DEFAULT_MINOR),))
    classes = (
        ClassOp(netns, ifname, "add", handle(major, SHAPED_MINOR), handle(major), htb_class_params(shape, mtu)),
        ClassOp(netns, ifname, "add", handle(major, DEFAULT_MINOR), handle(major),
                _htb_params(HIGH_CEIL_BYTES_PER_S, mtu)),
    )
    netem = _netem_op(netns, ifname, shape, mtu, major, "add", netem_rate) if has_netem else None
    return HostPlan(root, classes, netem, FilterOp(netns, ifname, handle(major), handle(major, SHAPED_MINOR), peer))


def plan_change(plan: HostPlan, shape: LinkShape, mtu: int, major: int, netem_rate: bool
                ) -> tuple[ClassOp, QdiscOp | None]:
    """Reshape in place: the shaped class and the netem leaf are `change`d, never deleted and re-added."""
    shaped = plan.classes[0]
    cls = ClassOp(shaped.netns, shaped.ifname, "change", shaped.classid, shaped.parent, htb_class_params(shape, mtu))
    if plan.netem is None:
        return cls, None
    netem = _netem_op(shaped.netns, shaped.ifname, shape, mtu, major, "change", netem_rate)
    if "rate" not in netem.kwargs():  # netem keeps an absent TCA_NETEM_RATE: say 0 to switch it off
        netem = QdiscOp(netem.netns, netem.ifname, "change", "netem", netem.handle, netem.parent,
                        (*netem.params, ("rate", 0)))
    return cls, netem


def htb_class_params(shape: LinkShape, mtu: int) -> tuple[Param, ...]:
    """The shaped class: rate = ceil = the bandwidth (unshaped: the high ceiling)."""
    rate = HIGH_CEIL_BYTES_PER_S if shape.bandwidth_mbit is None else shape.rate_bytes_per_s
    if round(rate) < 1:
        raise LinkSpecError(f"link.bandwidth_mbit: {shape.bandwidth_mbit:g} is below 1 byte/s, the smallest rate "
                            "tc carries; raise it to at least 0.000008")
    return _htb_params(rate, mtu)


def _htb_params(rate_bytes_per_s: float, mtu: int) -> tuple[Param, ...]:
    """burst = max(2 * mtu, one millisecond at the rate), as the tbf fallback sizes its bucket
    (netem_plan.tbf_params): a full frame always fits, and high rates do not starve on the timer."""
    rate = int(round(rate_bytes_per_s))
    burst = max(2 * mtu, math.ceil(rate * TBF_BURST_S))
    return (("rate", rate), ("ceil", rate), ("burst", burst), ("cburst", burst), ("mtu", mtu),
            ("quantum", QUANTUM_BYTES))


def _netem_op(netns: str, ifname: str, shape: LinkShape, mtu: int, major: int, command: str,
              netem_rate: bool) -> QdiscOp:
    # netem's rate field is 32-bit as pyroute2 sends it; above that htb alone shapes (and jitter may reorder)
    fits = shape.bandwidth_mbit is None or shape.rate_bytes_per_s <= MAX_TC_RATE_BYTES_PER_S
    params = netem_params(shape, mtu, netem_rate=netem_rate and fits)
    return QdiscOp(netns, ifname, command, "netem", handle(major + 1), handle(major, SHAPED_MINOR), params)


def unapplied_note(ifname: str, shape: LinkShape, has_netem: bool) -> str | None:
    """One line when the shape asks for what this host cannot apply (delay/jitter/loss with neither netem nor
    the host relay); `has_netem`: netem or the relay applies them."""
    if has_netem or not (shape.delay_ms or shape.jitter_ms or shape.loss_pct):
        return None
    return (f"host link {ifname}: delay/jitter/loss not applied on this host (kernel lacks sch_netem, and the "
            "userspace relay needs root and /dev/net/tun), rate only; use a kernel with sch_netem, or run as root")
