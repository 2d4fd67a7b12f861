"""A live run whose workers live on the nodes of a Ray cluster (issue 30, first slice): a local
`ray.cluster_utils.Cluster` with a head, a node offering `prfaas_remote` and one offering two units
of `prfaas_local`; live-quickstart, shortened, runs through `run_live` with `ray.address` at it.
The workers are WorkerHost actors' processes; the topology stays on this host (one machine)."""

from __future__ import annotations

import asyncio
import copy
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from emulator.errors import ScenarioError
from emulator.live.session import run_live
from emulator.net.ledger import process_start_time
from emulator.scenario import Scenario, parse_scenario

pytestmark = [pytest.mark.slow, pytest.mark.live,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and TUN need CAP_NET_ADMIN")]
REPO = Path(__file__).resolve().parents[3]
QUICKSTART = yaml.safe_load((REPO / "scenarios" / "live-quickstart.yaml").read_text())


def scenario(address: str, duration_s: float = 10, max_requests: int = 6, **ray: str) -> Scenario:
    """live-quickstart for `duration_s` at a fixed small rate, its workers on the cluster at `address`."""
    doc = copy.deepcopy(QUICKSTART)
    doc.update(duration_s=duration_s, drain_s=30, ray={"address": address, **ray}, expect={})
    doc["workload"].update(arrival={"kind": "poisson", "rate_per_s": 0.6}, max_requests=max_requests)
    return parse_scenario(doc, REPO / "scenarios")


@pytest.fixture
def ray_cluster() -> Iterator[tuple[Any, Any, Any]]:
    """(cluster, remote node, local node): a head with no prfaas resource, then one node per cluster."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray.cluster_utils import Cluster

    from emulator.ray_cluster import signal_handlers_kept

    with signal_handlers_kept():  # Ray's nodes leave a SIGTERM handler behind (emulator/ray_cluster.py)
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            remote = cluster.add_node(num_cpus=1, resources={"prfaas_remote": 1})
            local = cluster.add_node(num_cpus=1, resources={"prfaas_local": 2})
            cluster.wait_for_nodes()
            yield cluster, remote, local
        finally:
            cluster.shutdown()


def run(sc: Scenario, out: Path, progress: Any = None) -> tuple[dict, pd.DataFrame]:
    doc = asyncio.run(run_live(sc, out, progress=progress, embedded_broker=False))
    return doc, pd.read_parquet(out / "requests.parquet")


def assert_no_worker_left(doc: dict) -> None:
    pids = doc["meta"]["engine_details"]["worker_pids"]
    assert len(pids) == 3
    for name, pid in pids.items():  # every "host" is this machine here, so its pids are ours to check
        assert process_start_time(pid) is None, f"{name} (pid {pid}) is still running"


def test_workers_run_on_the_nodes_offering_their_clusters_resource(ray_cluster, tmp_path: Path) -> None:
    cluster, remote, local = ray_cluster
    doc, requests = run(scenario(cluster.address), tmp_path / "run")
    assert len(requests) > 0 and (requests["status"] == "completed").all(), requests[["status", "fail_reason"]]
    assert doc["summary"]["completed"] == len(requests)
    assert (requests["route"] == "prfaas").any()  # some KV crossed from the remote node's worker
    hosts = doc["meta"]["engine_details"]["worker_hosts"]
    assert {name: host["node_id"] for name, host in hosts.items()} == {
        "remote-prefill-0": remote.node_id, "local-prefill-0": local.node_id, "local-decode-1": local.node_id}
    assert_no_worker_left(doc)
    logs = tmp_path / "run" / "logs"
    assert all((logs / f"{name}.log").is_file() for name in hosts)  # brought back from the nodes


def test_a_lost_node_fails_or_retries_its_requests_and_the_record_is_complete(ray_cluster, tmp_path: Path) -> None:
    """Prompts go remote (threshold 0) until the remote cluster's node is removed, once the first
    request has ended (the remote worker served it: on a busy machine its first prefill can take
    longer than any fixed moment); after that its worker is lost, so what arrives later is
    prefilled locally."""
    cluster, remote, _ = ray_cluster
    removed_at: list[float] = []

    def progress(num_ended: int, total: int, elapsed_s: float) -> None:
        if num_ended >= 1 and not removed_at:  # mid-run: the remote worker has served, arrivals flowing
            removed_at.append(elapsed_s)
            threading.Thread(target=cluster.remove_node, args=(remote,), daemon=True).start()

    sc = scenario(cluster.address, duration_s=16, max_requests=10)
    sc = parse_scenario({**sc.model_dump(mode="json"), "router": {**sc.router.model_dump(mode="json"),
                                                                  "threshold_tokens": 0}}, REPO / "scenarios")
    doc, requests = run(sc, tmp_path / "run", progress)
    assert removed_at
    assert len(requests) > 0 and requests["status"].isin(["completed", "failed"]).all()
    failed = requests[requests["status"] == "failed"]
    assert failed["fail_reason"].notna().all() and (failed["fail_reason"] != "").all()
    before = requests[requests["finish_s"] <= removed_at[0]]
    after = requests[requests["arrival_s"] > removed_at[0] + 3.0]  # the loss is seen within 3 s
    assert (before["prefill_node"] == "remote-prefill-0").any(), requests  # the remote node served before it went
    assert len(after) > 0 and (after["status"] == "completed").all()
    assert after["prefill_node"].str.startswith("local-").all()
    assert doc["meta"]["engine_details"]["record"] == "complete"
    assert_no_worker_left(doc)


def test_a_resource_no_node_offers_is_refused_before_anything_starts(ray_cluster, tmp_path: Path) -> None:
    cluster, _, _ = ray_cluster
    with pytest.raises(ScenarioError) as err:
        asyncio.run(run_live(scenario(cluster.address, remote_resource="prfaas_gpu_box"), tmp_path / "run",
                             embedded_broker=False))
    line = str(err.value)
    assert line.startswith(f"ray.remote_resource: no node of the cluster at {cluster.address} offers prfaas_gpu_box")
    assert "\n" not in line
    assert not (tmp_path / "run").exists()  # nothing started, nothing written
