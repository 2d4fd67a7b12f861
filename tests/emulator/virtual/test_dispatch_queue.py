"""Dispatch against queueing theory: with deterministic service, sending each prompt to the node with
the least work left is the same as one shared FCFS queue (M/D/c), so the virtual engine's prefill
queue waits must match a shared-queue simulation on the same arrivals (issue 28)."""

from __future__ import annotations


import pytest

from emulator.control.types import Cluster
from emulator.plane import make_control_plane
from emulator.virtual.engine import simulate
from tests.emulator.virtual.mdc_reference import mdc_scenario, shared_queue_waits



@pytest.mark.parametrize("load", [0.5, 0.7, 0.85])
def test_mean_prefill_wait_matches_a_shared_fcfs_queue_at_three_instances(load: float) -> None:
    scenario = mdc_scenario(load, num_requests=3000)
    service_s = make_control_plane(scenario).router.prefill_s(Cluster.LOCAL, scenario.workload.input_len.tokens)
    records = simulate(scenario).records
    assert {r.status for r in records} == {"completed"} and len(records) > 2500
    assert len({r.prefill_node for r in records}) == 3
    engine = sum(r.queue_s for r in records) / len(records)
    reference = shared_queue_waits(sorted(r.arrival_s for r in records), service_s, 3)
    assert reference > 0.05 * service_s  # the load makes prompts wait
    assert engine == pytest.approx(reference, rel=0.05)
