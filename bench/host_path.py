"""The inter-host path of issue 30 as link_fidelity.py measures it: the one-machine rehearsal (driver,
remote and local hosts, each a namespace on a bridge) with a HostLink on each sending host toward the
other's address, exposed with the part of Topology the bench and iperf3() use. Without sch_netem each
HostLink adds the host relay once a point asks for delay (host_relay.py); its CPU is the relay's.

No Ray here: the link is the same HostLink the LinkHost actors open on real hosts, so its fidelity
does not depend on who opens it. Bench scripts import it by its plain name.
"""

from __future__ import annotations

import os

from emulator.errors import LinkBackendUnavailable
from emulator.net.backend import TO_LOCAL, TO_REMOTE, LinkCounters
from emulator.net.host_link import HostLink
from emulator.net.host_rehearsal import DEFAULT_HOSTS, HostRehearsal, RehearsalHost
from emulator.net.host_relay_link import relay_unavailable_reason
from emulator.net.kernel_entries import links_named, rtnl
from emulator.net.names import new_run_id
from emulator.net.netem_backend import NetemSupport, probe_netem_support
from emulator.net.spec import LinkSpec
from emulator.net.topology import LOCAL, REMOTE


class HostPath:
    """Rehearsed hosts with the link up; `update` reshapes both HostLinks in place, `close` removes
    them and then the hosts, and says which interfaces still had a root qdisc after the links closed."""

    uses_netns = True

    def __init__(self, spec: LinkSpec) -> None:
        if os.geteuid() != 0:
            raise LinkBackendUnavailable("link backend host: needs root (namespaces, a bridge and tc)")
        self.run_id = new_run_id()
        self.spec = spec
        self.netem: NetemSupport = probe_netem_support()
        self.rehearsal: HostRehearsal | None = None
        self.links: dict[str, HostLink] = {}
        self.leftover_qdiscs: list[str] = []
        self.leftover_devices: list[str] = []  # a host relay's TUN or /32 route still there after close

    @property
    def description(self) -> str:
        return f"host: {self.links[REMOTE].describe()}" if self.links else "host: down"

    @property
    def applies_delay(self) -> bool:
        """netem under htb, or else the host relay (root and /dev/net/tun)."""
        return self.netem.is_available or relay_unavailable_reason() is None

    @property
    def pid(self) -> int | None:
        """The remote host's relay (it carries the measured stream), for the bench's CPU per GB."""
        link = self.links.get(REMOTE)
        return link.relay_pid if link is not None else None

    @property
    def backend(self) -> HostPath:  # the bench reads `topo.backend.description` (and a relay pid: none)
        return self

    def __enter__(self) -> HostPath:
        self.rehearsal = HostRehearsal.up(self.run_id, DEFAULT_HOSTS)
        try:
            for dc, peer, shape in ((REMOTE, LOCAL, self.spec.to_local), (LOCAL, REMOTE, self.spec.to_remote)):
                host = self.rehearsal.host(dc)
                self.links[dc] = HostLink.open(host.netns, host.ifname, self.address(peer), shape,
                                               self.rehearsal.ledger, netem=self.netem)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def netns(self, dc: str) -> str:
        return self._host(dc).netns

    def address(self, dc: str) -> str:
        return self._host(dc).addr

    def target(self, dc: str, port: int) -> tuple[str, int]:
        return self.address(dc), port

    def update(self, spec: LinkSpec) -> None:
        self.links[REMOTE].update(spec.to_local)
        self.links[LOCAL].update(spec.to_remote)
        self.spec = spec

    def counters(self) -> LinkCounters:
        return LinkCounters({TO_LOCAL: self.links[REMOTE].counters(), TO_REMOTE: self.links[LOCAL].counters()})

    def close(self) -> None:
        """Links first (then each host is read: any root qdisc, relay device or /32 route left is named),
        hosts last."""
        for link in self.links.values():
            link.close()
        if self.rehearsal is not None:
            for dc in self.links:
                host = self.rehearsal.host(dc)
                with rtnl(host.netns) as ipr:
                    index = ipr.link_lookup(ifname=host.ifname)[0]
                    if any(m["parent"] == 0xFFFFFFFF and m["handle"] != 0 for m in ipr.get_qdiscs(index)):
                        self.leftover_qdiscs.append(f"{dc}:{host.ifname}")
                    routes = [r.get_attr("RTA_DST") for r in ipr.get_routes(family=2, table=254) if r["dst_len"] == 32]
                self.leftover_devices += [f"{dc}:{n}" for n in links_named(f"prf-{self.run_id}-", host.netns)
                                          if n != host.ifname]
                self.leftover_devices += [f"{dc}:route {dst}/32" for dst in routes]
            self.rehearsal.down()
            self.rehearsal = None
        self.links = {}

    def _host(self, dc: str) -> RehearsalHost:
        assert self.rehearsal is not None, "host path is down"
        return self.rehearsal.host(dc)
