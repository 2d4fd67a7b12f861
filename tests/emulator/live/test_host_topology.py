"""The host topology (issue 30, slice 2c) on a rehearsed 3-host Ray cluster (ray_hosts.py): each
datacenter is its node's address, and the link is shaped by an actor on each sending host toward the
peer host only, changed in place, counted, and gone from both hosts after `down`. What the kernel
holds is judged by iproute2's `tc`, run in the host's namespace; the rates by a real TCP transfer."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from emulator.control.types import Cluster, Role
from emulator.errors import TopologyError
from emulator.live.host_topology import LOCAL, REMOTE, HostTopology, nodes_of_datacenters
from emulator.live.launcher import WorkerPlan
from emulator.live.ray_hosting import cluster_nodes
from emulator.live.ray_placement import RayNode
from emulator.net.backend import TO_LOCAL, TO_REMOTE
from emulator.net.names import new_run_id
from emulator.net.probe import measure_throughput
from emulator.net.spec import LinkSpec

from .ray_hosts import RayHosts, joined_driver, on_rehearsed_hosts

PLANS = [WorkerPlan(Cluster.REMOTE, 0, Role.PREFILL), WorkerPlan(Cluster.LOCAL, 0, Role.PREFILL),
         WorkerPlan(Cluster.LOCAL, 1, Role.DECODE)]


def node(name: str, ip: str) -> RayNode:
    return RayNode(name * 8, ip)


def test_each_datacenter_is_the_one_host_of_its_clusters_workers() -> None:
    a, b = node("a", "10.0.0.1"), node("b", "10.0.0.2")
    nodes = nodes_of_datacenters(PLANS, {"remote-prefill-0": a, "local-prefill-0": b, "local-decode-1": b})
    assert nodes == {REMOTE: a, LOCAL: b}
    with pytest.raises(TopologyError, match=r"^ray.local_resource: the local cluster's workers are on 2 hosts"):
        nodes_of_datacenters(PLANS, {"remote-prefill-0": a, "local-prefill-0": b,
                                     "local-decode-1": node("c", "10.0.0.3")})
    with pytest.raises(TopologyError, match=r"^ray: both clusters are on 10.0.0.1; a host link needs two hosts"):
        nodes_of_datacenters(PLANS, {"remote-prefill-0": a, "local-prefill-0": node("c", "10.0.0.1"),
                                     "local-decode-1": node("c", "10.0.0.1")})


@pytest.fixture(scope="module")
def driver() -> Iterator[RayHosts]:
    """The rehearsed cluster with this process joined as its driver (the token in its environment)."""
    with joined_driver() as hosts:
        yield hosts


@on_rehearsed_hosts
def test_the_link_is_shaped_on_each_sending_host_counted_reshaped_and_removed(driver: RayHosts) -> None:
    remote, local = driver.rehearsal.host("remote"), driver.rehearsal.host("local")
    by_ip = {n.ip: n for n in cluster_nodes() if n.alive}
    topology = HostTopology(LinkSpec(bandwidth_mbit=50), new_run_id(), {REMOTE: by_ip[remote.addr],
                                                                        LOCAL: by_ip[local.addr]})
    with topology:
        assert topology.address(REMOTE) == remote.addr and topology.address(LOCAL) == local.addr
        assert topology.netns(REMOTE) is None and topology.target(LOCAL, 7000) == (local.addr, 7000)
        assert "rate 50Mbit" in driver.tc("remote", "class", "show")
        assert "rate 50Mbit" in driver.tc("local", "class", "show")  # local -> remote: the same shape
        assert topology.status()["backend"] == "host" and topology.mtu == 9000

        before = topology.counters()
        shaped = measure_throughput(remote.netns, local.netns, local.addr, seconds=2.0)
        after = topology.counters()
        print(f"remote -> local: {shaped['bits_per_s'] / 1e6:.2f} Mbit/s, {shaped['bytes']} B")
        assert abs(shaped["bits_per_s"] / 50e6 - 1) <= 0.05
        grew = after.directions[TO_LOCAL].bytes - before.directions[TO_LOCAL].bytes
        assert grew >= shaped["bytes"]  # every byte the receiver counted left through the remote host's class
        assert after.directions[TO_REMOTE].bytes > before.directions[TO_REMOTE].bytes  # the acks, shaped too

        topology.update(LinkSpec(bandwidth_mbit=20, reverse={"bandwidth_mbit": 30}))
        assert "rate 20Mbit" in driver.tc("remote", "class", "show")
        assert "rate 30Mbit" in driver.tc("local", "class", "show")
        assert topology.spec.bandwidth_mbit == 20
    assert "htb" not in driver.tc("remote", "qdisc", "show") and "htb" not in driver.tc("local", "qdisc", "show")
    assert topology.down() == []  # idempotent


@on_rehearsed_hosts
def test_a_host_whose_interface_has_a_foreign_qdisc_is_refused_and_the_other_host_is_restored(
        driver: RayHosts) -> None:
    remote, local = driver.rehearsal.host("remote"), driver.rehearsal.host("local")
    by_ip = {n.ip: n for n in cluster_nodes() if n.alive}
    subprocess.run(["ip", "netns", "exec", local.netns, "tc", "qdisc", "add", "dev", local.ifname, "root",
                    "handle", "7:", "tbf", "rate", "1mbit", "burst", "32kbit", "latency", "400ms"],
                   check=True, timeout=30)
    try:
        topology = HostTopology(LinkSpec(bandwidth_mbit=50), new_run_id(), {REMOTE: by_ip[remote.addr],
                                                                            LOCAL: by_ip[local.addr]})
        with pytest.raises(TopologyError) as err:
            topology.up()
        line = str(err.value)
        assert line.startswith(f"host link: interface {local.ifname}") and "\n" not in line, line
        assert "htb" not in driver.tc("remote", "qdisc", "show")  # the remote host's link, opened first, is gone
        assert "tbf 7: root" in driver.tc("local", "qdisc", "show")  # the foreign qdisc is left as it was
        assert not topology.is_up and topology.actors == {}
    finally:
        subprocess.run(["ip", "netns", "exec", local.netns, "tc", "qdisc", "del", "dev", local.ifname, "root"],
                       check=False, timeout=30)
