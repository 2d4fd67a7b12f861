"""The parent side of the host relay (host_relay.py): finds this host's address and the next hop's MAC
toward the peer, loosens reverse-path filtering where it is strict, starts the relay process, records
each piece in the run's ledger before it exists, and undoes them at close.

Each host shapes its own egress, so each receives the peer's packets on its real interface while it
routes the peer through its TUN: a strict rp_filter (1) would drop them, a loose one (2) does not.
Only an interface whose effective value is strict is changed, and put back at close.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from dataclasses import asdict
from typing import Any

from emulator.errors import LinkBackendUnavailable, TopologyError
from emulator.net import kernel_entries
from emulator.net.host_relay import RelayPath, relay_shape
from emulator.net.kernel_entries import read_conf, rtnl, write_conf
from emulator.net.ledger import Ledger
from emulator.net.names import ifname as make_ifname
from emulator.net.netns import run_in_netns
from emulator.net.relay_process import RelayProcess
from emulator.net.spec import LinkShape, LinkSpec
from emulator.net.tun_device import tun_unavailable_reason

log = logging.getLogger(__name__)
MODULE = "emulator.net.host_relay"
TUN_ROLE = "hr"
RP_STRICT, RP_LOOSE = 1, 2
NEIGH_TIMEOUT_S = 3.0
_NUD_VALID = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80  # REACHABLE STALE DELAY PROBE NOARP PERMANENT
DISCARD_PORT = 9


def relay_unavailable_reason() -> str | None:
    """Why this host cannot run the relay (no root, no /dev/net/tun), else None."""
    return tun_unavailable_reason()


def needs_relay(shape: LinkShape) -> bool:
    """Delay, jitter or loss: what htb cannot do (a rate alone stays htb's)."""
    return bool(shape.delay_ms or shape.jitter_ms or shape.loss_pct)


class HostRelayLink:
    """One running host relay: `update` reshapes it in place over its control socket, `close` stops it
    (its TUN and route go with it) and puts back what it changed; idempotent."""

    def __init__(self, path: RelayPath, ledger: Ledger, relay: RelayProcess, rp_filter: tuple[int, int] | None):
        self.path, self.ledger, self.relay, self.rp_filter = path, ledger, relay, rp_filter

    @classmethod
    def start(cls, netns: str, ifname: str, peer_addr: str, shape: LinkShape, ledger: Ledger, mtu: int,
              seed: int | None = None) -> HostRelayLink:
        if (reason := relay_unavailable_reason()) is not None:
            raise LinkBackendUnavailable(f"host relay: {reason}")
        path = resolve_path(netns, ifname, peer_addr, make_ifname(ledger.run_id, TUN_ROLE), mtu)
        rp_filter = loosen_rp_filter(netns, ifname, ledger)
        try:
            ledger.record("link", netns=netns, name=path.tun)  # before it exists: a crash still finds it
            args = ["--path", json.dumps(asdict(path)), "--spec", _spec_json(shape)]
            args += ["--seed", str(seed)] if seed is not None else []
            relay = RelayProcess(MODULE, f"host-relay-{netns or ifname}", args, ledger.folder)
            ledger.record("pid", pid=relay.pid, name=f"host relay {path.tun}")
        except BaseException:
            _restore(netns, ifname, rp_filter)
            raise
        log.info("host relay %s%s -> %s via %s: pid %d", path.tun, _where(netns), peer_addr, ifname, relay.pid)
        return cls(path, ledger, relay, rp_filter)

    def update(self, shape: LinkShape) -> None:
        self.relay.request("update", spec=LinkSpec(**relay_shape(shape).model_dump()).model_dump(mode="json"))

    def counters(self) -> dict[str, Any]:
        return self.relay.request("counters")["counters"]

    @property
    def pid(self) -> int:
        return self.relay.pid

    def close(self) -> None:
        self.relay.stop()
        with rtnl(self.path.netns) as ipr:  # gone with the relay's fd; this only makes sure
            for index in ipr.link_lookup(ifname=self.path.tun):
                ipr.link("del", index=index)
        _restore(self.path.netns, self.path.ifname, self.rp_filter)
        self.rp_filter = None


def resolve_path(netns: str, ifname: str, peer_addr: str, tun: str, mtu: int) -> RelayPath:
    """This host's address toward the peer and the next hop's MAC on `ifname`, as the kernel routes it
    now (before the relay's /32 takes the peer): the peer itself on a shared subnet, else the gateway."""
    with rtnl(netns) as ipr:
        try:
            route = ipr.route("get", dst=peer_addr)[0]
        except Exception as err:  # noqa: BLE001 (pyroute2 raises NetlinkError for "no route")
            raise TopologyError(f"host relay: no route to {peer_addr}{_where(netns)} ({err}); join the hosts "
                                "on one network") from None
        index = ipr.link_lookup(ifname=ifname)[0]
        if route.get_attr("RTA_OIF") != index:
            raise TopologyError(f"host relay: {peer_addr} is routed through another interface than {ifname}"
                                f"{_where(netns)}; shape the interface the kernel routes the peer through")
        src_addr, hop = route.get_attr("RTA_PREFSRC"), route.get_attr("RTA_GATEWAY") or peer_addr
        src_mac = ipr.get_links(index)[0].get_attr("IFLA_ADDRESS")
    return RelayPath(netns, tun, ifname, peer_addr, src_addr, next_hop_mac(netns, ifname, index, hop), src_mac, mtu)


def next_hop_mac(netns: str, ifname: str, index: int, hop: str) -> str:
    """The MAC of `hop` on `ifname`: from the neighbour table, after one datagram makes the kernel ask."""
    deadline = time.monotonic() + NEIGH_TIMEOUT_S
    poked = False
    while True:
        with rtnl(netns) as ipr:
            for msg in ipr.get_neighbours(ifindex=index, dst=hop):
                if msg["state"] & _NUD_VALID and msg.get_attr("NDA_LLADDR"):
                    return msg.get_attr("NDA_LLADDR")
        if time.monotonic() > deadline:
            raise TopologyError(f"host relay: no MAC for {hop} on {ifname}{_where(netns)} after "
                                f"{NEIGH_TIMEOUT_S:g} s; check that the peer host is up and reachable")
        if not poked:
            run_in_netns(netns or None, lambda: _poke(hop, ifname))
            poked = True
        time.sleep(0.05)


def _poke(addr: str, ifname: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
        sock.sendto(b"", (addr, DISCARD_PORT))


def loosen_rp_filter(netns: str, ifname: str, ledger: Ledger) -> tuple[int, int] | None:
    """Set `ifname`'s rp_filter to loose where the effective value (the larger of `all` and the
    interface's) is strict; (old, set) when it changed, recorded first, else None."""
    old, every = read_conf(netns, ifname, "rp_filter"), read_conf(netns, "all", "rp_filter")
    if old is None or max(old, every or 0) != RP_STRICT:
        return None
    ledger.record("sysctl", netns=netns, name=ifname, key="rp_filter", value=old, set=RP_LOOSE)
    write_conf(netns, ifname, "rp_filter", RP_LOOSE)
    log.info("host relay: %s%s rp_filter %d -> %d (the peer's packets arrive here, its route is the TUN)",
             ifname, _where(netns), old, RP_LOOSE)
    return old, RP_LOOSE


def _restore(netns: str, ifname: str, rp_filter: tuple[int, int] | None) -> None:
    if rp_filter is not None:
        kernel_entries.undo({"kind": "sysctl", "netns": netns, "name": ifname, "key": "rp_filter",
                             "value": rp_filter[0], "set": rp_filter[1]})


def _spec_json(shape: LinkShape) -> str:
    return LinkSpec(**relay_shape(shape).model_dump()).model_dump_json()


def _where(netns: str) -> str:
    return f" (netns {netns})" if netns else ""
