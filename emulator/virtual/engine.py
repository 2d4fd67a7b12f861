"""The virtual engine's entry points: `simulate` (one scenario on the event loop, in memory) and
`run_virtual` (the same, recorded as a live run is: requests.parquet, timeseries.parquet,
summary.json, report.html). Baseline configurations and saturation runs are in baselines.py.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import emulator.virtual.accel_on  # noqa: F401  (first: the compiled build, when current, runs the modules below)
from emulator.auto_rate import is_auto, modelled_rate, with_arrival_rate
from emulator.control.types import FailReason, RequestSpec
from emulator.plane import ControlPlane, make_control_plane
from emulator.plane.inputs import host_costs
from emulator.run.ending import EndPolicy
from emulator.run.meta import make_run_meta
from emulator.scenario import Scenario
from emulator.telemetry.outcome import RunOutcome, stopped_detail, stopped_reason
from emulator.telemetry.recorder import RunRecorder
from emulator.telemetry.records import RequestRecord
from emulator.telemetry.run_meta import EngineKind, RunMeta
from emulator.telemetry.timeseries import TimeseriesRow
from emulator.virtual.budget import EndBudget, SimEnd
from emulator.virtual.core import Simulator
from emulator.virtual.costs import CostModel
from emulator.virtual.gateway import Gateway
from emulator.virtual.link import FluidLink
from emulator.virtual.loops import Arrivals, Progress, RunLoops, RunStopped, StopCheck, scenario_link_states
from emulator.workload.build import arrival_horizon_s, build_workload, num_due
from emulator.workload.coverage import WorkloadCoverage

log = logging.getLogger(__name__)
APPROXIMATIONS = (
    "link: TCP as a fluid (emulator/virtual/tcp.py): slow start on new connections, a loss-limited rate "
    "per connection (a cache's last layer, sent after its prefill, on as many as it has 1 MiB chunks; one "
    "sender's caches on its connections in the order they started, by their chunks left on a lossless "
    "link; each cache's rate drawn around the mean "
    "with the spread its expected loss events give), shares per connection, newcomers behind a deep "
    "drop-tail queue weighted down and let in a buffer's worth at a time in the order they started, the "
    "senders' RTT over the standing queue of produced bytes, a backlog past the buffer overflowing it once "
    "the senders' window (one, growing at a fitted share of the rate) outgrows it, the caches behind the "
    "loss arriving with the retransmission (overflow.py); a window shrunk over an idle spell is a lower "
    "loss constant for the next pipelined cache; no packets (a lost tail's timeout is in the drawn rate, "
    "not a stall)",
    "layer-wise pipelining: each layer's KV goes when that layer ends (layers of equal time; their sizes the "
    "preset's own, else 1 / pipeline_layers each but the profile's measured last), the last after the prefill",
    "decode: the step at the batch size a request joins with (constant up to BS_max without a batch "
    "table), not re-timed as the batch changes",
    "local prefill -> decode KV over RDMA at a fixed rate, no sharing",
)


@dataclass(frozen=True, slots=True)
class Simulation:
    """One simulated run, in memory. `gateway` and `loops` are kept for tests and tools."""

    records: list[RequestRecord]
    samples: list[dict[str, float | None]]  # TimeseriesRow's columns
    plane: ControlPlane
    costs: CostModel
    gateway: Gateway
    loops: RunLoops
    num_requests: int
    coverage: WorkloadCoverage
    num_events: int
    end_s: float
    wall_s: float
    end: SimEnd = SimEnd.ALL_ENDED  # why the event loop stopped (emulator.virtual.budget)
    budget: EndBudget = EndBudget(0.0, 0)  # the time and event budgets it ran under
    stop: RunStopped | None = None  # set when a StopCheck ended it: who, when; what was open failed `interrupted`
    num_stopped_open: int = 0  # requests still open at that stop

    @property
    def is_stopped(self) -> bool:
        return self.end is SimEnd.STOPPED


def simulate(scenario: Scenario, *, until: float | None = None, progress: Progress | None = None,
             requests: list[RequestSpec] | None = None, plane: ControlPlane | None = None,
             stop: StopCheck | None = None, budget: EndBudget | None = None) -> Simulation:
    """Run `scenario` until every request has ended (or until simulated time `until`, leaving the
    rest open, or until `stop()` says so at a sample, failing the rest `interrupted`: the run is then
    `stopped`, and `stop()`'s answer, when a string, names who stopped it), and never past
    its time and event budgets (`budget`, by default EndBudget.of the scenario: see
    emulator.virtual.budget), which fail what is still open `unfinished`. `requests` and `plane`
    default to the scenario's own (build_workload, make_control_plane); passing them in saves
    rebuilding them for repeated runs."""
    wall_start = time.perf_counter()
    rate = None
    if is_auto(scenario):  # rate_per_s: auto on this engine: a share of what its cost model sustains
        plane = plane or make_control_plane(scenario)
        scenario, rate = modelled_rate(scenario, plane)
    workload = None
    if plane is None and requests is None and scenario.workload.trace is not None \
            and arrival_horizon_s(scenario) == scenario.duration_s:
        # the requests up to duration_s are the optimizer's length sample too: read the trace once
        # (reading a 4,000-request trace costs more than simulating it, issue 15)
        workload = build_workload(scenario)
        plane = make_control_plane(scenario, requests=workload.requests)
    plane = plane or make_control_plane(scenario)
    if requests is None:
        workload = workload or build_workload(scenario, arrival_horizon_s(scenario))
        requests, coverage = workload.requests, workload.coverage
    else:
        coverage = WorkloadCoverage("given", num_due(requests, scenario))
    coverage = coverage if rate is None else with_arrival_rate(coverage, rate)
    log.info("workload: %s", coverage.statement)
    budget = budget or EndBudget.of(scenario.duration_s, len(requests), scenario.drain_s)
    costs = make_costs(scenario, plane)
    sim = Simulator()
    to_local, to_remote = scenario_link_states(scenario, scenario.link)
    local = scenario.clusters.local
    n_p = start_n_p(scenario, plane)
    gateway = Gateway(sim, plane, costs, FluidLink(sim, to_local, random.Random(f"{scenario.seed}:to_local")),
                      FluidLink(sim, to_remote, random.Random(f"{scenario.seed}:to_remote")),
                      num_remote=scenario.clusters.remote.instances, num_local=local.instances, n_p=n_p,
                      block_tokens=scenario.prefix_cache.block_tokens,
                      use_index=needs_index(scenario, requests),
                      ending=EndPolicy.of(scenario.duration_s, scenario.drain_s))
    arrival = scenario.workload.arrival
    arrivals = Arrivals(sim, gateway, requests, arrival.rate_per_s if arrival is not None else None,
                        scenario.duration_s)
    loops = RunLoops(sim, gateway, scenario, arrivals, progress, stop)
    arrivals.start()
    loops.start()
    stop_at: RunStopped | None = None
    num_run = num_open = 0
    core = gateway.core
    with cycle_collector_paused():
        try:
            num_run = sim.run(until, horizon_s=budget.end_s, max_events=budget.max_events)
        except RunStopped as stopped:
            stop_at, num_open = stopped, len(core.open)
            log.warning("run %s: %d requests still open fail `interrupted`", stopped, num_open)
            gateway.execute(core.stop(FailReason.INTERRUPTED, stopped_detail(stopped.by), sim.now))
    end = SimEnd.STOPPED if stop_at is not None else budget.end(
        num_run=num_run, num_left=len(sim), next_s=sim.next_time(), until=until)
    if end is not SimEnd.UNTIL and core.open:
        log.warning("%s: %d requests still open; failing them", end.value, len(core.open))
        gateway.execute(core.drain_over(max(sim.now, budget.end_s)) if end is SimEnd.TIME_BUDGET
                        else core.stop(FailReason.UNFINISHED, budget.detail(end, sim.now), sim.now))
    return Simulation(gateway.core.records, loops.samples, plane, costs, gateway, loops, len(requests), coverage,
                      sim.num_events, sim.now, time.perf_counter() - wall_start, end, budget, stop_at, num_open)


def make_costs(scenario: Scenario, plane: ControlPlane) -> CostModel:
    """The plane's inputs as costs, with what the profile adds (the decode step by batch size and
    context, the host every worker shares: emulator.plane.inputs.host_costs). The host's compute
    factor scales the compute the nodes charge, not the plane's inputs the scheduler models with."""
    host = host_costs(scenario)
    inputs, factor = plane.inputs, host.compute_factor
    batch = host.decode_step_by_batch_s
    if factor != 1.0:
        inputs = dataclasses.replace(inputs, prefill_remote_s=inputs.prefill_remote_s.scaled(factor),
                                     prefill_local_s=inputs.prefill_local_s.scaled(factor),
                                     decode_step_s=inputs.decode_step_s * factor)
        batch = None if batch is None else batch.scaled(factor)
    return CostModel.from_inputs(inputs, plane.profile_source, decode_batch=batch,
                                 busy_slowdown=host.busy_slowdown, host_cores=host.host_cores,
                                 kv_tail_bytes=host.kv_tail_bytes, decode_context=host.decode_context,
                                 layer_bytes=host.layer_bytes)


@contextmanager
def cycle_collector_paused() -> Iterator[None]:
    """Pause Python's cycle collector for the event loop. A run allocates millions of short-lived
    objects and keeps every record, so the collector keeps rescanning a growing heap (6 % of a
    case-study run) to find the few cycles a run makes; refcounting still frees the rest, and the
    cycles are collected once the collector is back on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def needs_index(scenario: Scenario, requests: list[RequestSpec]) -> bool:
    """Whether the prefix index can ever report a hit. A hit starts at a prompt's first block
    (the index matches chains from their root), so when no two requests share their first block
    hash and no node is killed (a retried request could meet its own blocks), every lookup
    misses whatever is inserted: skipping the inserts then changes no decision, and saves most of
    the cost of a run without shared prefixes."""
    if any(event.kill is not None for event in scenario.timeline):
        return True
    firsts = [request.block_hashes[0] for request in requests if request.block_hashes]
    return len(set(firsts)) != len(firsts)


def run_virtual(scenario: Scenario, out_dir: str | Path, progress: Progress | None = None,
                stop: StopCheck | None = None) -> dict[str, Any]:
    """Simulate `scenario` and record it as a live run is; returns the summary.json document.
    `stop` (asked once a simulated second) ends the simulation early; the record is written all the same."""
    return record_run(scenario, simulate(scenario, progress=progress, stop=stop), out_dir)


def record_run(scenario: Scenario, result: Simulation, out_dir: str | Path) -> dict[str, Any]:
    """Write a simulated run's four files (emulator.telemetry.recorder); returns summary.json."""
    recorder = RunRecorder(out_dir)
    for record in result.records:
        recorder.add_request(record)
    for row in result.samples:
        recorder.add_row(TimeseriesRow(**row))
    expect = {str(metric): bounds.model_dump(exclude_none=True) for metric, bounds in scenario.expect.items()}
    return recorder.finish(run_meta(scenario, result), expect=expect,
                           duration_s=run_duration_s(result.records))


def run_duration_s(records: list[RequestRecord]) -> float:
    """From the start (t = 0) to the last ending, as a live run's duration (throughput_rps)."""
    return max((r.finish_s for r in records if r.finish_s is not None), default=0.0)


def run_meta(scenario: Scenario, result: Simulation) -> RunMeta:
    """summary.json's `meta`: what ran, with which settings, and what the engine assumed."""
    stop = result.stop
    if stop is not None:
        ended, outcome = stopped_reason(stop.by, stop.at_s, result.num_stopped_open), RunOutcome.STOPPED
    else:
        num_unfinished = sum(r.fail_reason == FailReason.UNFINISHED for r in result.records)
        by_policy = result.end in (SimEnd.ALL_ENDED, SimEnd.TIME_BUDGET) and result.gateway.core.end_reason
        ended = by_policy or result.budget.words(result.end, num_unfinished)
        outcome = RunOutcome.FINISHED
    return make_run_meta(
        scenario, result.plane, engine=EngineKind.VIRTUAL, link_backend="simulated",
        link_backend_reason="the virtual engine's fluid link model", decisions=result.loops.decisions,
        knob_changes=result.loops.knob_changes, end_reason=ended, outcome=outcome,
        stopped_by=stop.by if stop is not None else None, stopped_at_s=stop.at_s if stop is not None else None,
        workload=result.coverage.as_json(),
        engine_details={
            "costs": result.costs.as_meta(),
            "prefix_index": "used" if result.gateway.core.use_index else "skipped: no block is shared",
            "sim": {"events": result.num_events, "end_s": result.end_s, "wall_s": round(result.wall_s, 4),
                    "link_bytes_delivered": result.gateway.link.bytes_delivered,
                    **result.budget.as_meta(result.end)},
            "approximations": [*APPROXIMATIONS, *cost_notes(result.costs)],
        })


def cost_notes(costs: CostModel) -> list[str]:
    """What the profile's batch table and shared host add to APPROXIMATIONS (nothing without)."""
    notes = []
    if costs.decode_batch is not None:
        notes.append("decode: a request's step is the batch table's at the batch size it joins, kept to its end")
    if costs.decode_context is not None:
        notes.append("decode: the step scales with the batch's mean prompt length as it joins (the profile's "
                     "decode_context_factor), not with the tokens decoded since")
    if costs.busy_slowdown:
        notes.append("shared host: a prefill or decode join takes the slowdown of the workers busy as it "
                     "starts (itself included), kept to its end")
    return notes


def start_n_p(scenario: Scenario, plane: ControlPlane) -> int:
    """Local prefill instances at the start (emulator.plane.control_plane.start_n_p decides)."""
    return plane.n_p
