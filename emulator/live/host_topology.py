"""The live run's network when each cluster's workers live on a Ray node of its own host (issue 30,
slice 2c): a datacenter's address is its node's address and it has no namespace; the shaped link is
the real path between the hosts, a HostLink on each sending host toward the peer's address, opened,
changed, counted and closed by a small `LinkHost` actor pinned to that node.

It offers the part of `Topology` the session, launcher and loops use; run_live takes it (make_topology)
when each cluster's workers are on one node and the nodes' addresses differ. It does not place
workers (ray_placement.py does); the driver's ledger holds the run id, each host's link is in a
ledger of that host's, removed by its actor at `down`.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import socket
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emulator.control.types import Cluster
from emulator.errors import TopologyError
from emulator.live.launcher import WorkerPlan
from emulator.live.ray_placement import RayNode
from emulator.net.backend import TO_LOCAL, TO_REMOTE, DirectionCounters, LinkCounters
from emulator.net.ledger import Ledger
from emulator.net.spec import LinkShape, LinkSpec
from emulator.net.topology import Topology

if TYPE_CHECKING:
    from emulator.live.ray_hosting import RayHosting

log = logging.getLogger(__name__)
REMOTE, LOCAL = "remote", "local"  # as emulator.net.topology names the datacenters
BACKEND = "host"
CALL_TIMEOUT_S = 30.0  # opening a link probes sch_netem and reads every piece back: well under a second
HOST_MTU = 1500  # what loops.link_slack counts a packet as when the hosts' MTU is not read yet


class LinkHost:
    """A Ray actor (made remote by HostTopology) owning one host's HostLink toward its peer. Its
    ledger is this host's own, in a private temp dir: the run's id is held by the driver's."""

    def __init__(self, run_id: str, peer_addr: str) -> None:
        self.run_id, self.peer_addr = run_id, peer_addr
        self.base = Path(tempfile.mkdtemp(prefix=f"prf-{run_id}-link-"))  # 0700, so the ledger's parent is private
        (self.base / "ledger").mkdir(mode=0o700)
        self.ledger = Ledger(run_id, [], self.base / "ledger")
        self.link: Any = None

    def open(self, shape_json: str) -> tuple[str, str, int]:
        """Shape the interface this host routes `peer_addr` through; (its name, a description, its MTU)."""
        from emulator.net.host_link import HostLink

        ifname = route_ifname(self.peer_addr)
        self.link = HostLink.open("", ifname, self.peer_addr, LinkShape.model_validate_json(shape_json), self.ledger)
        return ifname, self.link.describe(), self.link.mtu

    def update(self, shape_json: str) -> None:
        self.link.update(LinkShape.model_validate_json(shape_json))

    def counters(self) -> tuple[int, int, int]:
        c = self.link.counters()
        return c.bytes, c.packets, c.drops

    def close(self) -> list[str]:
        """Remove the link and what the ledger holds; idempotent."""
        if self.link is not None:
            self.link.close()
            self.link = None
        removed = self.ledger.teardown()
        shutil.rmtree(self.base, ignore_errors=True)
        return removed


def route_ifname(peer_addr: str) -> str:
    """The interface this namespace sends to `peer_addr` through, as the kernel's route lookup says."""
    from emulator.net.kernel_entries import rtnl

    with rtnl("") as ipr:
        try:
            oif = ipr.route("get", dst=peer_addr)[0].get_attr("RTA_OIF")
        except Exception as err:  # noqa: BLE001 (pyroute2 raises NetlinkError for "no route")
            raise TopologyError(f"host link: no route to {peer_addr} on this host ({err}); join the hosts "
                                "on one network") from None
        return ipr.get_links(oif)[0].get_attr("IFLA_IFNAME")


def nodes_of_datacenters(plans: Sequence[WorkerPlan], node_of: Mapping[str, RayNode]) -> dict[str, RayNode]:
    """Each datacenter's one node; TopologyError (one line) when a cluster's workers span several
    hosts or the two clusters share one (the link would have no path to shape)."""
    dc_of = {Cluster.REMOTE: REMOTE, Cluster.LOCAL: LOCAL}
    found: dict[str, dict[str, RayNode]] = {REMOTE: {}, LOCAL: {}}  # dc -> node id -> node
    for plan in plans:
        node = node_of[plan.spawn_name]
        found[dc_of[plan.cluster]][node.node_id] = node
    for dc, by_id in found.items():
        if len(by_id) != 1:
            raise TopologyError(f"ray.{dc}_resource: the {dc} cluster's workers are on {len(by_id)} hosts; "
                                "a host link needs them on one host (offer the resource on one node)")
    nodes = {dc: next(iter(by_id.values())) for dc, by_id in found.items()}
    if nodes[REMOTE].ip == nodes[LOCAL].ip:
        raise TopologyError(f"ray: both clusters are on {nodes[REMOTE].ip}; a host link needs two hosts "
                            "(offer prfaas_remote and prfaas_local on different nodes)")
    return nodes


def make_topology(spec: LinkSpec, run_id: str, hosting: RayHosting | None, plans: Sequence[WorkerPlan],
                  backend: str = "auto") -> Topology | HostTopology:
    """A HostTopology when each cluster's workers are on one Ray node and the two nodes' addresses
    differ (separate hosts); else this host's namespaced Topology (`backend`), as before."""
    if hosting is not None:
        try:
            nodes = nodes_of_datacenters(plans, hosting.node_of)
        except TopologyError as err:
            log.info("link: this host's namespaces (%s)", err)
        else:
            return HostTopology(spec, run_id, nodes)
    return Topology(spec, backend=backend, run_id=run_id)


class HostTopology:
    """Datacenters as Ray nodes on separate hosts, joined by the real path between them, shaped on
    each sending host (remote -> local: spec.to_local; local -> remote: spec.to_remote)."""

    def __init__(self, spec: LinkSpec, run_id: str, node_of_dc: Mapping[str, RayNode]) -> None:
        self.spec, self.run_id = spec, run_id
        self.node_of_dc = dict(node_of_dc)
        self.dcs = (REMOTE, LOCAL)
        self.backend = None  # no relay process of the driver's (session.py reads backend.pid)
        self.mtu = HOST_MTU
        self.ledger: Ledger | None = None
        self.warnings: list[str] = []
        self.actors: dict[str, Any] = {}
        self.described: dict[str, str] = {}

    @property
    def uses_netns(self) -> bool:
        return True  # kernel packets of `mtu` cross the link, as on the namespaced backends (loops.link_slack)

    @property
    def is_up(self) -> bool:
        return self.ledger is not None

    def __enter__(self) -> HostTopology:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> HostTopology:
        """Claim the run id, then open each direction's link on its sending host; a refusal on
        either host closes what was opened and is raised as its one line."""
        if self.is_up:
            return self
        self.ledger = Ledger.claim(self.run_id)
        try:
            self._open(REMOTE, LOCAL, self.spec.to_local)
            self._open(LOCAL, REMOTE, self.spec.to_remote)
        except BaseException:
            self.down()
            raise
        return self

    def _open(self, dc: str, peer_dc: str, shape: LinkShape) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node, peer = self.node_of_dc[dc], self.node_of_dc[peer_dc]
        actor = ray.remote(LinkHost).options(
            num_cpus=0, max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False)).remote(self.run_id, peer.ip)
        self.actors[dc] = actor
        try:
            ifname, description, mtu = ray.get(actor.open.remote(shape.model_dump_json()), timeout=CALL_TIMEOUT_S)
        except ray.exceptions.RayTaskError as err:
            cause = err.cause if isinstance(err.cause, TopologyError) else None
            raise (cause or TopologyError(f"host link on {node.label}: {str(err).splitlines()[0]}")) from None
        self.mtu = mtu if dc == REMOTE else self.mtu
        self.described[dc] = f"{node.ip} {ifname}: {description}"
        log.info("host link on %s: %s", node.label, self.described[dc])

    def _require_up(self) -> None:
        if not self.is_up:
            raise TopologyError("topology: call up() first")

    def netns(self, dc: str) -> str | None:
        """None: each datacenter is its host's own namespace."""
        self._require_up()
        if dc not in self.dcs:
            raise TopologyError(f"datacenter: {dc!r} is not one of {', '.join(self.dcs)}")
        return None

    def address(self, dc: str) -> str:
        """The datacenter's node address: its listeners bind there, the peer host reaches them there."""
        self._require_up()
        return self.node_of_dc[dc].ip

    def target(self, dst_dc: str, port: int) -> tuple[str, int]:
        return self.address(dst_dc), port

    def socket(self, dc: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        self.netns(dc)
        return socket.socket(family, kind)

    def update(self, spec: LinkSpec) -> None:
        """Reshape both hosts' links in place (HostLink.update); the spec is kept once both took it."""
        import ray

        self._require_up()
        ray.get([self.actors[REMOTE].update.remote(spec.to_local.model_dump_json()),
                 self.actors[LOCAL].update.remote(spec.to_remote.model_dump_json())], timeout=CALL_TIMEOUT_S)
        self.spec = spec

    def counters(self) -> LinkCounters:
        """What each host's shaped class sent toward its peer."""
        import ray

        self._require_up()
        to_local, to_remote = ray.get([self.actors[REMOTE].counters.remote(), self.actors[LOCAL].counters.remote()],
                                      timeout=CALL_TIMEOUT_S)
        return LinkCounters({TO_LOCAL: DirectionCounters(*to_local), TO_REMOTE: DirectionCounters(*to_remote)})

    def status(self) -> dict:
        hosts = ", ".join(f"{dc} {node.label}" for dc, node in self.node_of_dc.items())
        return {
            "run_id": self.run_id,
            "backend": BACKEND,
            "reason": f"workers on Ray nodes of separate hosts ({hosts})",
            "description": "; ".join(self.described.values()) or None,
            "namespaces": [],
            "spec": self.spec.model_dump(),
            "warnings": list(self.warnings),
        }

    def down(self) -> list[str]:
        """Each host's link closed by its actor (a lost node's link goes with its host), then the
        driver's ledger torn down and the run id given back; idempotent."""
        import ray

        removed: list[str] = []
        for dc, actor in list(self.actors.items()):
            try:
                removed += [f"{self.node_of_dc[dc].ip}: {r}" for r in ray.get(actor.close.remote(),
                                                                            timeout=CALL_TIMEOUT_S)]
            except ray.exceptions.RayError as err:
                log.warning("host link on %s: not closed (%s)", self.node_of_dc[dc].label, str(err).splitlines()[0])
            with contextlib.suppress(ray.exceptions.RayError):
                ray.kill(actor)
        self.actors = {}
        if self.ledger is not None:
            ledger, self.ledger = self.ledger, None
            try:
                removed += ledger.teardown()
            finally:
                ledger.release()
        return removed
