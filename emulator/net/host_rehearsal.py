"""A one-machine rehearsal of several hosts: each "host" a network namespace with one veth onto a
bridge in this namespace, addressed 10.<k>.0.<i>/24, so hosts have different addresses and a
HostLink shapes a real interface exactly as it would on two machines.

It creates and removes namespaces, veths and the bridge, each recorded in the run's ledger before it
is made (`python -m emulator net down` removes them after a crash). It shapes nothing itself.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from dataclasses import dataclass

from pyroute2.netlink.exceptions import NetlinkError

from emulator.errors import TopologyError
from emulator.net import netns
from emulator.net.kernel_entries import rtnl
from emulator.net.ledger import Ledger, undo_entry
from emulator.net.names import ifname, netns_name

log = logging.getLogger(__name__)
DEFAULT_HOSTS = ("driver", "remote", "local")
MAX_NUM_HOSTS = 64  # addresses .1-.64 of the /24; interface roles h0-h63 fit the 15-character names
PREFIXLEN = 24
DEFAULT_MTU = 9000  # the project's link MTU (LinkEnds.mtu): header overhead is under 1% of a frame
_HOST_NAME = re.compile(r"[a-z][a-z0-9]{0,11}")
_SUBNET_OCTETS = range(1, 255)  # 10.<k>.0.0/24


@dataclass(frozen=True, slots=True)
class RehearsalHost:
    """One rehearsed host: its namespace, its interface in there, its address and its bridge port."""

    name: str
    netns: str
    ifname: str
    addr: str
    bridge_port: str


class HostRehearsal:
    """Hosts on one bridge. `up` builds them (claiming the run's ledger unless one is given); `down`
    removes what `up` recorded, newest first, tolerating what is gone, and is idempotent."""

    def __init__(self, run_id: str, ledger: Ledger, owns_ledger: bool, bridge: str, subnet: str) -> None:
        self.run_id, self.ledger, self.bridge, self.subnet = run_id, ledger, bridge, subnet
        self._owns_ledger = owns_ledger
        self.hosts: dict[str, RehearsalHost] = {}
        self._entries: list[dict] = []  # what this rehearsal recorded, in order

    @classmethod
    def up(cls, run_id: str, hosts: tuple[str, ...] = DEFAULT_HOSTS, *, ledger: Ledger | None = None,
           mtu: int = DEFAULT_MTU) -> HostRehearsal:
        _check_hosts(hosts)
        owns = ledger is None
        ledger = ledger if ledger is not None else Ledger.claim(run_id)
        rehearsal = cls(run_id, ledger, owns, ifname(run_id, "br"), "")
        try:
            rehearsal.subnet = free_subnet(run_id)
            rehearsal._make_bridge()
            for i, name in enumerate(hosts):
                rehearsal._make_host(i, name, mtu)
        except BaseException:
            rehearsal.down()
            raise
        log.info("rehearsal %s: hosts %s on bridge %s (%s)", run_id,
                 ", ".join(f"{h.name}={h.addr}" for h in rehearsal.hosts.values()), rehearsal.bridge, rehearsal.subnet)
        return rehearsal

    def host(self, name: str) -> RehearsalHost:
        if name not in self.hosts:
            raise TopologyError(f"rehearsal host: {name!r} is not one of {', '.join(self.hosts)}; use one of those")
        return self.hosts[name]

    def down(self) -> list[str]:
        """Remove the hosts and the bridge; with a claimed ledger, its run id goes back too."""
        removed = []
        for entry in reversed(self._entries):
            try:
                if undo_entry(entry):
                    removed.append(f"{entry['kind']} {entry['name']}")
            except (OSError, TopologyError) as err:
                log.warning("rehearsal %s: removing %s failed: %s", self.run_id, entry["name"], err)
        self._entries = []
        self.hosts = {}
        if self._owns_ledger:
            removed += self.ledger.teardown()
            self.ledger.release()
            self._owns_ledger = False
        return removed

    def __enter__(self) -> HostRehearsal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def _record(self, kind: str, **fields: str) -> None:
        entry = {"kind": kind, **fields}
        self.ledger.record(kind, **fields)
        self._entries.append(entry)

    def _make_bridge(self) -> None:
        self._record("link", netns="", name=self.bridge)
        with rtnl("") as ipr:
            try:
                ipr.link("add", ifname=self.bridge, kind="bridge")
            except NetlinkError as err:
                raise TopologyError(f"rehearsal bridge {self.bridge}: cannot create ({err.args[1]}); run as root "
                                    "(a leftover of an earlier run is removed by `python -m emulator net down`)") \
                    from None
            ipr.link("set", index=ipr.link_lookup(ifname=self.bridge)[0], state="up")

    def _make_host(self, i: int, name: str, mtu: int) -> None:
        space, port, inner = netns_name(self.run_id, name), ifname(self.run_id, f"h{i}"), ifname(self.run_id, f"e{i}")
        addr = str(ipaddress.IPv4Network(self.subnet)[i + 1])
        self._record("netns", name=space)
        netns.create_netns(space)
        self._record("link", netns="", name=port)
        with rtnl("") as ipr:
            try:
                ipr.link("add", ifname=port, kind="veth", peer={"ifname": inner, "net_ns_fd": space})
            except NetlinkError as err:
                raise TopologyError(f"rehearsal host {name}: veth {port} cannot be created ({err.args[1]}); "
                                    "run as root") from None
            index = ipr.link_lookup(ifname=port)[0]
            ipr.link("set", index=index, mtu=mtu, master=ipr.link_lookup(ifname=self.bridge)[0])
            ipr.link("set", index=index, state="up")
        with rtnl(space) as ipr:
            index = ipr.link_lookup(ifname=inner)[0]
            ipr.link("set", index=index, mtu=mtu)
            ipr.addr("add", index=index, address=addr, prefixlen=PREFIXLEN)
            ipr.link("set", index=index, state="up")
        self.hosts[name] = RehearsalHost(name, space, inner, addr, port)


def free_subnet(run_id: str) -> str:
    """10.<k>.0.0/24 that no IPv4 route of this namespace overlaps (the default route aside), trying
    k from one the run id picks, so concurrent rehearsals tend to differ too."""
    with rtnl("") as ipr:
        routes = [(r.get_attr("RTA_DST"), r["dst_len"]) for r in ipr.get_routes(family=2, table=254)]
        routes += [(r.get_attr("RTA_DST"), r["dst_len"]) for r in ipr.get_routes(family=2, table=255)]
    taken = [ipaddress.IPv4Network(f"{dst}/{length}", strict=False) for dst, length in routes if dst and length]
    start = int(run_id, 16) % len(_SUBNET_OCTETS)
    for step in range(len(_SUBNET_OCTETS)):
        k = _SUBNET_OCTETS[(start + step) % len(_SUBNET_OCTETS)]
        candidate = ipaddress.IPv4Network(f"10.{k}.0.0/{PREFIXLEN}")
        if not any(candidate.overlaps(net) for net in taken):
            return str(candidate)
    raise TopologyError("rehearsal: every 10.<k>.0.0/24 overlaps a route here; remove some routes")


def _check_hosts(hosts: tuple[str, ...]) -> None:
    if not 1 <= len(hosts) <= MAX_NUM_HOSTS:
        raise TopologyError(f"rehearsal hosts: {len(hosts)} given; use 1 to {MAX_NUM_HOSTS}")
    for name in hosts:
        if not isinstance(name, str) or not _HOST_NAME.fullmatch(name):
            raise TopologyError(f"rehearsal hosts: {name!r} is not a host name; use 1-12 lowercase letters "
                                "and digits, starting with a letter")
    if len(set(hosts)) != len(hosts):
        raise TopologyError(f"rehearsal hosts: {', '.join(hosts)} repeats a name; give each host its own")
