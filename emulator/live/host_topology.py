"""The live run's network when each cluster's workers live on a Ray node of its own host (issue 30,
slice 2c): a datacenter's address is its node's address and it has no namespace; the shaped link is
the real path between the hosts, a HostLink on each sending host toward the peer's address, opened,
changed, counted and closed by a small `LinkHost` actor pinned to that node.

It offers the part of `Topology` the session, launcher and loops use; run_live takes it (make_topology)
when each cluster's workers are on one node and the nodes' addresses differ. It does not place
workers (ray_placement.py does); the driver's ledger holds the run id, each host's link is in a
ledger of that host's, removed by its actor at `down`. A host on the driver's machine (the rehearsal)
has its link in the driver's ledger too, so a host whose node died (its actor with it) loses its
shaping at `down` or `net down` all the same; a lost host's counters stay at their last reading.
"""

from __future__ import annotations

import contextlib
import logging
import os
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
from emulator.live.ray_workers import answers_within
from emulator.net.backend import TO_LOCAL, TO_REMOTE, DirectionCounters, LinkCounters
from emulator.net.host_link_plan import root_major
from emulator.net.ledger import Ledger
from emulator.net.netns import list_netns, netns_path
from emulator.net.run_lock import RunIdInUse
from emulator.net.spec import LinkShape, LinkSpec
from emulator.net.topology import Topology

if TYPE_CHECKING:
    from emulator.live.ray_hosting import RayHosting

log = logging.getLogger(__name__)
REMOTE, LOCAL = "remote", "local"  # as emulator.net.topology names the datacenters
BACKEND = "host"
CALL_TIMEOUT_S = 30.0  # opening a link probes sch_netem and reads every piece back: well under a second
READ_TIMEOUT_S = 0.5  # counters answer in ms; a host silent this long reads as it last did (teardown gives 1 s)
CLOSE_TIMEOUT_S = 2.0  # within the teardown's 3 s for the link, the driver's ledger and ray.kill after it
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")  # one machine's processes share it
HOST_MTU = 1500  # what loops.link_slack counts a packet as when the hosts' MTU is not read yet


class LinkHost:
    """A Ray actor (made remote by HostTopology) owning one host's HostLink toward its peer. On a host
    of its own it claims the run id there, so its ledger is where `net down` on that host looks after
    a crash; on the driver's machine (the driver holds the id) its ledger is in a private temp dir and
    the driver's ledger holds its qdisc as well."""

    def __init__(self, run_id: str, peer_addr: str) -> None:
        self.run_id, self.peer_addr = run_id, peer_addr
        self.base: Path | None = None
        try:
            self.ledger = Ledger.claim(run_id)
        except RunIdInUse:
            self.base = Path(tempfile.mkdtemp(prefix=f"prf-{run_id}-link-"))  # 0700, so the ledger's parent is private
            (self.base / "ledger").mkdir(mode=0o700)
            self.ledger = Ledger(run_id, [], self.base / "ledger")
        self.link: Any = None

    def locate(self) -> tuple[str, int, int, str, str]:
        """Where this host's link will be: its machine's boot id, its network namespace (nsfs
        device and inode), the interface it routes `peer_addr` through, and its ledger's dir."""
        return (*namespace_id(), route_ifname(self.peer_addr), str(self.base or ""))

    def open(self, shape_json: str) -> tuple[str, str, int, list[str]]:
        """Shape the interface this host routes `peer_addr` through; (its name, a description, its MTU,
        what the link cannot apply as set)."""
        from emulator.net.host_link import HostLink

        ifname = route_ifname(self.peer_addr)
        self.link = HostLink.open("", ifname, self.peer_addr, LinkShape.model_validate_json(shape_json), self.ledger)
        return ifname, self.link.describe(), self.link.mtu, list(self.link.notes)

    def update(self, shape_json: str) -> list[str]:
        """Reshape in place; what the link cannot apply as set, so far."""
        self.link.update(LinkShape.model_validate_json(shape_json))
        return list(self.link.notes)

    def counters(self) -> tuple[int, int, int]:
        c = self.link.counters()
        return c.bytes, c.packets, c.drops

    def close(self) -> list[str]:
        """Remove the link and what the ledger holds; idempotent."""
        if self.link is not None:
            self.link.close()
            self.link = None
        removed = self.ledger.teardown()
        self.ledger.release()
        if self.base is not None:
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


def namespace_id() -> tuple[str, int, int]:
    """This process's machine (boot id) and network namespace (the nsfs device and inode)."""
    ns = os.stat("/proc/self/ns/net")
    return BOOT_ID.read_text().strip(), ns.st_dev, ns.st_ino


def netns_here(boot_id: str, dev: int, ino: int) -> str | None:
    """How this process names the namespace a host reported: '' for its own, a named namespace of
    this machine by its name; None for another machine's, or an unnamed one (out of reach)."""
    own_boot, own_dev, own_ino = namespace_id()
    if boot_id != own_boot:
        return None
    if (dev, ino) == (own_dev, own_ino):
        return ""
    for name in list_netns():
        with contextlib.suppress(OSError):
            st = os.stat(netns_path(name))
            if (st.st_dev, st.st_ino) == (dev, ino):
                return name
    return None


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
        self.netns_of_dc: dict[str, str] = {}  # hosts on this machine: their namespace, as named here
        self.dir_of_dc: dict[str, str] = {}  # ... and their LinkHost's private dir
        self.lost: set[str] = set()  # hosts whose actor died (their node with it)
        self._last: dict[str, DirectionCounters] = {}  # each host's last counters reading

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
            self._record_reachable(dc, *ray.get(actor.locate.remote(), timeout=CALL_TIMEOUT_S))
            ifname, description, mtu, notes = ray.get(actor.open.remote(shape.model_dump_json()),
                                                      timeout=CALL_TIMEOUT_S)
        except ray.exceptions.RayTaskError as err:
            cause = err.cause if isinstance(err.cause, TopologyError) else None
            raise (cause or TopologyError(f"host link on {node.label}: {str(err).splitlines()[0]}")) from None
        self.mtu = mtu if dc == REMOTE else self.mtu
        self._warn(node, notes)
        self.described[dc] = f"{node.ip} {ifname}: {description}"
        log.info("host link on %s: %s", node.label, self.described[dc])

    def _record_reachable(self, dc: str, boot_id: str, dev: int, ino: int, ifname: str, base: str) -> None:
        """A host on this machine gets its link's root qdisc in the driver's ledger before it is
        added: if its node dies with the actor, `down` (or `net down` after a crash) removes it."""
        space = netns_here(boot_id, dev, ino)
        if space is not None and self.ledger is not None:
            self.ledger.record("qdisc", netns=space, name=ifname, handle=root_major(self.run_id) << 16)
            self.netns_of_dc[dc], self.dir_of_dc[dc] = space, base

    def _gather(self, calls: Mapping[str, Any], timeout_s: float, strict: bool = True) -> dict[str, Any]:
        """Each host's answer, the calls made at once and waited for together (a lost host costs one
        timeout, not one per host); None for a host that did not answer in time. A host whose actor
        died is marked lost and not asked again; an actor's own error is raised (`strict`) or logged."""
        import ray

        answers: dict[str, Any] = dict.fromkeys(calls)
        for dc, got in zip(calls, answers_within(list(calls.values()), timeout_s), strict=True):
            if isinstance(got, ray.exceptions.ActorUnavailableError):  # for a moment; a lost node ends as ActorDiedError
                continue
            if isinstance(got, ray.exceptions.RayActorError):
                self._mark_lost(dc, got)
            elif isinstance(got, ray.exceptions.RayTaskError) and not strict:
                log.warning("host link on %s: %s", self.node_of_dc[dc].label, str(got).splitlines()[0])
            elif isinstance(got, ray.exceptions.RayError):
                raise got
            else:
                answers[dc] = got
        return answers

    def _warn(self, node: RayNode, notes: Sequence[str]) -> None:
        """A host link's notes (what it does not apply as set) among the run's warnings, each once."""
        for note in notes:
            line = f"host link on {node.label}: {note}"
            if line not in self.warnings:
                self.warnings.append(line)

    def _mark_lost(self, dc: str, err: Exception) -> None:
        if dc in self.lost:
            return
        self.lost.add(dc)
        node = self.node_of_dc[dc]
        where = "the driver removes its shaping at teardown" if dc in self.netns_of_dc else \
            "its shaping stays on that host until `python -m emulator net down` runs there"
        line = f"host link on {node.label}: its node is lost ({type(err).__name__}); counters stay at the " \
               f"last reading, {where}"
        self.warnings.append(line)
        log.warning("%s", line)

    def _asking(self, method: str, *args: Any) -> dict[str, Any]:
        """`method` called on every host not lost: dc -> its ObjectRef."""
        return {dc: getattr(actor, method).remote(*args) for dc, actor in self.actors.items() if dc not in self.lost}

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
        """Reshape both hosts' links in place (HostLink.update); the spec is kept once every host
        not lost took it (a lost host has no link to reshape). TopologyError for a silent host."""
        self._require_up()
        shapes = {REMOTE: spec.to_local.model_dump_json(), LOCAL: spec.to_remote.model_dump_json()}
        calls = {dc: self.actors[dc].update.remote(shape) for dc, shape in shapes.items() if dc not in self.lost}
        answers = self._gather(calls, CALL_TIMEOUT_S)
        silent = [dc for dc, notes in answers.items() if notes is None and dc not in self.lost]
        if silent:
            raise TopologyError(f"host link on {self.node_of_dc[silent[0]].label}: no answer within "
                                f"{CALL_TIMEOUT_S:g} s; the link is not reshaped there")
        for dc, notes in answers.items():
            self._warn(self.node_of_dc[dc], notes or [])
        self.spec = spec

    def counters(self) -> LinkCounters:
        """What each host's shaped class sent toward its peer (a lost or silent host: its last reading)."""
        self._require_up()
        for dc, read in self._gather(self._asking("counters"), READ_TIMEOUT_S).items():
            if read is not None:
                self._last[dc] = DirectionCounters(*read)
        zero = DirectionCounters(0, 0, 0)
        return LinkCounters({TO_LOCAL: self._last.get(REMOTE, zero), TO_REMOTE: self._last.get(LOCAL, zero)})

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
        """Each host's link closed by its actor, all asked at once and waited for CLOSE_TIMEOUT_S at
        most; a host whose actor is gone or silent keeps its link until the driver's ledger, torn
        down next, removes it (a host on this machine), else until `net down` runs on that host.
        Then the run id is given back; idempotent."""
        import ray

        removed: list[str] = []
        answers = self._gather(self._asking("close"), CLOSE_TIMEOUT_S, strict=False)
        for dc, actor in self.actors.items():
            node = self.node_of_dc[dc]
            if answers.get(dc) is not None:
                removed += [f"{node.ip}: {r}" for r in answers[dc]]
            elif dc in self.netns_of_dc:  # on this machine: its private dir goes here, its qdisc with the ledger
                log.warning("host link on %s: not closed by its actor; removed by the driver", node.label)
                _remove_private_dir(self.dir_of_dc.get(dc), self.run_id)
            else:
                log.warning("host link on %s: not closed (its node is lost or silent); run `python -m emulator "
                            "net down` on that host", node.label)
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


def _remove_private_dir(path: str | None, run_id: str) -> None:
    """A lost LinkHost's ledger dir on this machine: only one named as LinkHost names it for this run."""
    if path and Path(path).name.startswith(f"prf-{run_id}-link-"):
        shutil.rmtree(path, ignore_errors=True)
