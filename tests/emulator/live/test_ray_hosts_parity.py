"""One scenario, two placements (issue 30): live-quickstart shortened (seed 57, 20 s at a fixed
0.6 requests/s) on this host (no `ray:` section: the link in this host's namespaces) and across the
rehearsed 3-host Ray cluster (the KV on the real path between the hosts, shaped there). Moving the
workers onto hosts must not change what the run decides or, beyond 10 %, how fast it answers: the
same request ids routed the same way, every request completed, TTFT within 10 % request by request.

Other load on a small machine moves one run's TTFT by more than 10 % (local prefill medians of 0.40
and 1.13 s for the same requests; in the full suite one three-host run's prefills took 30 % longer
than the other's), so each placement runs three times, in the order one, three, three, one, one,
three (a load that drifts through the test weighs on both alike). Each request's TTFT is its
median over a placement's three runs, and the test holds the median over requests of three hosts'
TTFT over one host's: one disturbed run does not decide, and each request is compared with itself
(a P50 over 12 requests of two kinds, 5 local near 0.3 s and 7 remote near 1.1 s, is the mean of the
two fastest remote ones, and moved by 24 % between placements whose per-route medians agreed).
All runs happen while the cluster is up, so its idle daemons load every run. Where the kernel lacks
sch_netem a HostLink shapes rate only, so the link's delay is 0 on both placements: the same link.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml

from emulator.live.session import run_live
from emulator.net.netem_backend import probe_netem_support
from emulator.ray_cluster import signal_handlers_kept
from emulator.scenario import Scenario, parse_scenario

from .ray_hosts import RayHosts, ray_hosts, token_env

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.live,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces, a bridge and tc"),
              pytest.mark.skipif(not shutil.which("ip"), reason="needs iproute2's ip to run `ray start` in a host")]
REPO = Path(__file__).resolve().parents[3]
QUICKSTART = yaml.safe_load((REPO / "scenarios" / "live-quickstart.yaml").read_text())
SEED = 57  # pinned: the quickstart's own seed may change
MAX_NUM_REQUESTS = 12  # 20 s at 0.6/s: the same 12 arrivals (seed 57) in both runs
TTFT_TOLERANCE = 0.10


def scenario(address: str | None, has_netem: bool) -> Scenario:
    """live-quickstart for 20 s at a fixed 0.6 requests/s; with `address`, its workers on that cluster."""
    doc = copy.deepcopy(QUICKSTART)
    doc.update(duration_s=20, drain_s=60, expect={}, seed=SEED)
    if not has_netem:
        doc["link"] = {**doc["link"], "delay_ms": 0}
    if address is not None:
        doc["ray"] = {"address": address}
    doc["workload"].update(arrival={"kind": "poisson", "rate_per_s": 0.6}, max_requests=MAX_NUM_REQUESTS)
    return parse_scenario(doc, REPO / "scenarios")


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayHosts]:
    with signal_handlers_kept(), ray_hosts() as hosts:
        yield hosts


def _run(scn: Scenario, out: Path) -> tuple[dict, pd.DataFrame]:
    doc = asyncio.run(run_live(scn, out, embedded_broker=False))
    return doc, pd.read_parquet(out / "requests.parquet").set_index("id").sort_index()


def _figures(name: str, doc: dict, requests: pd.DataFrame) -> str:
    """One line of what explains a TTFT difference: per route, median TTFT, prefill and transfer."""
    parts = [f"{name}: link {doc['meta']['link_backend']}, TTFT P50 {requests['ttft_s'].median():.3f} s, "
             f"load {os.getloadavg()[0]:.2f}"]
    for route, group in requests.groupby("route"):
        prefill = (group["prefill_end_s"] - group["prefill_start_s"]).median()
        transfer = (group["transfer_end_s"] - group["transfer_start_s"]).median()
        parts.append(f"{route} x{len(group)}: TTFT {group['ttft_s'].median():.3f} prefill {prefill:.3f} "
                     f"queue {group['queue_s'].median():.3f} transfer {transfer:.3f}")
    return "; ".join(parts)


# Measured here (2 cores, no sch_netem): one host 0.965 s, three hosts 0.969 s (+0.5 %) with the Ray
# workers at the launcher's nice 10; before, Ray's nice 15 plus the worker's 10 put them at 19. Under
# other load on the machine single runs still moved by 12-40 % either way, hence the six runs.
def test_one_host_and_three_hosts_route_alike_and_answer_within_10_percent(cluster: RayHosts,
                                                                           tmp_path: Path) -> None:
    has_netem = probe_netem_support().is_available
    runs: dict[str, list[pd.DataFrame]] = {"one": [], "three": []}
    for i, where in enumerate(("one", "three", "three", "one", "one", "three")):
        doc, requests = _run_on(where, cluster, has_netem, tmp_path / f"{i}-{where}")
        print(_figures(f"{where} host(s) #{i}", doc, requests))
        assert doc["meta"]["link_backend"] == "host" if where == "three" else doc["meta"]["link_backend"] != "host"
        assert len(requests) == MAX_NUM_REQUESTS
        assert (requests["status"] == "completed").all(), requests[["status", "fail_reason"]]
        runs[where].append(requests)

    routes = [r["route"].to_dict() for r in runs["one"] + runs["three"]]
    assert all(r == routes[0] for r in routes)  # the same ids, each routed the same way, in every run
    assert set(routes[0].values()) == {"prfaas", "local"}  # both routes exercised: "same" means something
    one, three = (pd.concat([r["ttft_s"] for r in runs[where]], axis=1).median(axis=1) for where in ("one", "three"))
    ratio = float((three / one).median())
    print(f"TTFT, each request's median over its 3 runs: three hosts / one host, median over requests {ratio:.3f}")
    assert abs(ratio - 1.0) <= TTFT_TOLERANCE, (three / one).round(3).to_dict()


def _run_on(where: str, cluster: RayHosts, has_netem: bool, out: Path) -> tuple[dict, pd.DataFrame]:
    """One run on this host ("one") or across the cluster ("three", this process its driver meanwhile)."""
    import ray

    if where == "one":
        return _run(scenario(None, has_netem), out)
    with signal_handlers_kept(), token_env(cluster.env()):
        ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
        try:
            return _run(scenario(cluster.address, has_netem), out)
        finally:
            ray.shutdown()
