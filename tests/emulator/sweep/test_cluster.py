"""The multi-node path: a sweep joins a two-node Ray cluster (two Ray nodes on this machine, one
CPU each) by address and its tasks run on both nodes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

pytestmark = pytest.mark.live  # every test here starts a process


@pytest.fixture
def two_nodes() -> Iterator[Any]:
    """A head and a worker node of 1 CPU each on this machine (ray.cluster_utils.Cluster); the
    process's signal handlers are put back after (Ray's node leaves a SIGTERM handler behind)."""
    import ray
    from ray.cluster_utils import Cluster

    from emulator.sweep.runner import signal_handlers_kept

    assert not ray.is_initialized(), "another module's Ray is still up"
    with signal_handlers_kept():
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
            yield cluster
        finally:
            cluster.shutdown()


def test_sweep_on_two_nodes_uses_both(two_nodes: Any, write_sweep: Callable[..., Path], tmp_path: Path) -> None:
    import ray

    from emulator.sweep import load_sweep, run_sweep

    sweep = load_sweep(write_sweep("axes:\n  workload.arrival.rate_per_s: {values: [1.0, 1.5, 2.0, 2.5]}\n"
                                   "seeds: [0, 1]\nmetrics: [throughput_rps]\n"))
    result = run_sweep(sweep, tmp_path / "out", address=two_nodes.address)
    assert (result.num_ran, result.num_failed) == (8, 0)
    assert result.doc["ray"] == {"mode": "joined", "address": two_nodes.address, "num_cpus": 2, "num_nodes": 2}
    rows = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
    assert set(rows["node_id"]) == {node.node_id for node in two_nodes.list_all_nodes()}
    assert not ray.is_initialized()  # the sweep disconnected from the cluster it joined
