"""A live run across a rehearsed 3-host Ray cluster (issue 30): the head on the driver host (this
namespace, on the rehearsal's bridge), one node in the remote host's namespace and one in the local
host's, each started by `ray start` with a token (tests/emulator/live/ray_hosts.py). The workers run
on the hosts' nodes and reach the gateway at the driver's bridge address; their KV crosses the
real path between the two hosts, shaped on each sending host (emulator/live/host_topology.py)."""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml

from emulator.live.session import run_live
from emulator.ray_cluster import ClusterUnreachable, Problem, check_cluster, signal_handlers_kept
from emulator.scenario import Scenario, parse_scenario

from .ray_hosts import RayHosts, ray_hosts, token_env

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.live,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces, a bridge and TUN"),
              pytest.mark.skipif(not shutil.which("ip"), reason="needs iproute2's ip to run `ray start` in a host")]
REPO = Path(__file__).resolve().parents[3]
QUICKSTART = yaml.safe_load((REPO / "scenarios" / "live-quickstart.yaml").read_text())


def scenario(address: str) -> Scenario:
    """live-quickstart for 10 s at a fixed 0.6 requests/s, its workers on the cluster at `address`."""
    doc = copy.deepcopy(QUICKSTART)
    doc.update(duration_s=10, drain_s=30, ray={"address": address}, expect={})
    doc["workload"].update(arrival={"kind": "poisson", "rate_per_s": 0.6}, max_requests=6)
    return parse_scenario(doc, REPO / "scenarios")


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayHosts]:
    """The rehearsed cluster, shared by this module's tests (starting it takes ~10 s)."""
    with signal_handlers_kept(), ray_hosts() as hosts:
        yield hosts


@pytest.fixture
def driver(cluster: RayHosts) -> Iterator[RayHosts]:
    """This process joined to the cluster as its driver, with the token, and leaving it at the end."""
    import ray

    with signal_handlers_kept(), token_env(cluster.env()):
        ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
        try:
            yield cluster
        finally:
            ray.shutdown()


def test_a_driver_without_the_token_is_refused_in_one_line(cluster: RayHosts) -> None:
    with token_env({"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN": ""}):
        with pytest.raises(ClusterUnreachable) as err:
            check_cluster(cluster.address)
    assert err.value.problem is Problem.TOKEN_NOT_SENT and "\n" not in str(err.value)


def test_three_hosts_join_with_the_token_and_a_live_run_puts_each_worker_on_its_host(driver: RayHosts,
                                                                                    tmp_path: Path) -> None:
    import ray

    nodes = [node for node in ray.nodes() if node["Alive"]]
    addr_to_resources = {node["NodeManagerAddress"]: node["Resources"] for node in nodes}
    remote, local, driver_addr = driver.addr("remote"), driver.addr("local"), driver.addr("driver")
    assert sorted(addr_to_resources) == sorted([driver_addr, remote, local])  # 3 alive nodes, 3 addresses
    assert addr_to_resources[remote]["prfaas_remote"] == 1 and "prfaas_local" not in addr_to_resources[remote]
    assert addr_to_resources[local]["prfaas_local"] == 2 and "prfaas_remote" not in addr_to_resources[local]
    assert ray.util.get_node_ip_address() == driver_addr  # the gateway listens where the hosts reach it

    doc = asyncio.run(run_live(scenario(driver.address), tmp_path / "run", embedded_broker=False))
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert len(requests) > 0 and (requests["status"] == "completed").all(), requests[["status", "fail_reason"]]
    assert doc["summary"]["completed"] == len(requests)
    assert (requests["route"] == "prfaas").any()  # some KV left the remote host's worker
    hosts = doc["meta"]["engine_details"]["worker_hosts"]
    assert {name: host["ip"] for name, host in hosts.items()} == {
        "remote-prefill-0": remote, "local-prefill-0": local, "local-decode-1": local}
    assert doc["meta"]["link_backend"] == "host"  # the link is the real path between the two hosts
    crossed = doc["meta"]["engine_details"]["link_bytes_to_local"]
    print(f"shaped remote -> local: {crossed} B; link: {doc['meta']['engine_details']['link_description']}")
    shipped = requests.loc[requests["route"] == "prfaas", "kv_bytes"].sum()
    assert crossed >= shipped > 0  # every remote prefill's KV went through the remote host's shaped class
    for host in ("remote", "local"):  # and the shaping is gone from each host's interface
        h = driver.rehearsal.host(host)
        qdiscs = subprocess.run(["ip", "netns", "exec", h.netns, "tc", "qdisc", "show", "dev", h.ifname],
                                check=True, capture_output=True, text=True).stdout
        assert "htb" not in qdiscs, qdiscs
    assert ray.is_initialized()  # the run joined the driver's Ray and left it as it found it
