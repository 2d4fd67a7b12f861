"""A scenario's workload section turned into requests: the one place schema meets generators.

Generated workloads and trace replays both end as a sorted list of RequestSpec; timeline bursts
join the generated arrivals. The engines call `build_requests`; nothing here knows about engines.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

from emulator.control.types import RequestSpec
from emulator.errors import ScenarioError
from emulator.limits import MAX_REQUESTS
from emulator.scenario import Scenario
from emulator.scenario.workload import (
    AUTO_RATE,
    EmpiricalLength as EmpiricalLengthSpec,
    FixedLength as FixedLengthSpec,
    GammaArrival,
    LognormalLength,
    OnOffArrival,
    PoissonArrival,
    UniformLength as UniformLengthSpec,
)
from emulator.workload.arrivals import ArrivalSpec, Burst, GammaArrivals, OnOffArrivals, PoissonArrivals, RateChange
from emulator.workload.coverage import WorkloadCoverage
from emulator.workload.generator import PrefixSharing, generate_requests
from emulator.workload.lengths import (
    EmpiricalLength,
    FixedLength,
    LengthDist,
    LogNormalLength,
    UniformLength,
    check_lengths,
)
from emulator.workload.lines import RowCheck
from emulator.workload.traces import Stop, TraceSpec, check_trace, read_trace


def arrival_process(spec: PoissonArrival | GammaArrival | OnOffArrival) -> ArrivalSpec:
    if spec.rate_per_s == AUTO_RATE:  # an engine resolves it first (emulator/auto_rate.py)
        raise ScenarioError("workload.arrival.rate_per_s: auto is sized to the machine when a run starts; "
                            "run the scenario, or give a number of requests per second to draw its requests")
    if isinstance(spec, PoissonArrival):
        return PoissonArrivals(spec.rate_per_s)
    if isinstance(spec, GammaArrival):
        return GammaArrivals(spec.rate_per_s, spec.cv)
    return OnOffArrivals(spec.rate_per_s, spec.on_s, spec.off_s)


def length_distribution(
    spec: FixedLengthSpec | UniformLengthSpec | LognormalLength | EmpiricalLengthSpec,
) -> LengthDist:
    if isinstance(spec, FixedLengthSpec):
        return FixedLength(spec.tokens)
    if isinstance(spec, UniformLengthSpec):
        return UniformLength(spec.min, spec.max)
    if isinstance(spec, LognormalLength):
        return LogNormalLength(spec.mu, spec.sigma, spec.min, spec.max)
    return EmpiricalLength.from_path(spec.path)


RATE_PATH = "workload.arrival.rate_per_s"
LIVE_RATE_HEADROOM = 10.0  # a live operator's rate knob may play the workload up to this much faster


def arrival_horizon_s(scenario: Scenario, *, headroom: float = 1.0) -> float:
    """How much workload time to draw arrivals for, so that they last the run's whole duration at
    any rate in force (open loop): the duration at the fastest pace the timeline sets (its highest
    `workload.arrival.rate_per_s` over the scenario's), times `headroom` for knobs turned while the
    run goes (LIVE_RATE_HEADROOM on the live engine). The arrival drivers stop at `duration_s` of
    run time, so what lies beyond is never admitted; `workload.max_requests` still caps the list."""
    arrival = scenario.workload.arrival
    base = arrival.rate_per_s if arrival is not None else None
    fastest = 1.0
    if base:
        rates = [event.set[RATE_PATH] for event in scenario.timeline
                 if event.set is not None and isinstance(event.set.get(RATE_PATH), int | float)]
        fastest = max([1.0, *(rate / base for rate in rates)])
    return scenario.duration_s * fastest * max(headroom, 1.0)


def played_workload_s(scenario: Scenario) -> float:
    """The workload time the run's duration plays at the paces its timeline sets: a
    `workload.arrival.rate_per_s` event sets the pace to rate / the scenario's rate (for a trace,
    the rate is the factor itself), as WorkloadTime does. Knobs turned during a live run are not
    foreseen."""
    arrival = scenario.workload.arrival
    base = arrival.rate_per_s if arrival is not None else 1.0
    played, since, speed = 0.0, 0.0, 1.0
    for event in scenario.timeline:
        rate = event.set.get(RATE_PATH) if event.set is not None else None
        if isinstance(rate, int | float) and event.at_s < scenario.duration_s:
            played += speed * (event.at_s - since)
            since, speed = event.at_s, rate / base
    return played + speed * (scenario.duration_s - since)


def num_due(requests: list[RequestSpec], scenario: Scenario) -> int:
    """How many of `requests` arrive within the run's duration at the paces its timeline sets
    (a progress total: a live rate knob moves it)."""
    return bisect_left([r.arrival_s for r in requests], played_workload_s(scenario))


@dataclass(frozen=True, slots=True)
class Workload:
    """A run's requests, sorted by arrival, and what of the scenario's workload they cover."""

    requests: list[RequestSpec]
    coverage: WorkloadCoverage


def build_requests(scenario: Scenario, horizon_s: float | None = None) -> list[RequestSpec]:
    """build_workload's requests alone."""
    return build_workload(scenario, horizon_s).requests


def build_workload(scenario: Scenario, horizon_s: float | None = None) -> Workload:
    """Every request the workload holds up to `horizon_s` of workload time (default: the
    duration), sorted by arrival, with what it covers; the same scenario and seed give the same
    list, and a longer horizon only appends to it."""
    horizon = scenario.duration_s if horizon_s is None else horizon_s
    if scenario.workload.trace is not None:
        return _trace_workload(scenario, horizon)
    return _generated_workload(scenario, horizon)


def check_files(scenario: Scenario) -> list[tuple[str, RowCheck]]:
    """Every row of the files the workload names (a trace, empirical lengths), read as a run would
    read them, for `validate`: (what, its check) per file."""
    workload = scenario.workload
    checks = []
    if (trace := workload.trace) is not None:
        spec = TraceSpec(trace.format, str(trace.path), trace.time_scale, trace.length_scale,
                         block_tokens=scenario.prefix_cache.block_tokens)
        checks.append((f"trace {trace.path}", check_trace(spec)))
    for key in ("input_len", "output_len"):
        if isinstance(dist := getattr(workload, key), EmpiricalLengthSpec):
            checks.append((f"workload.{key} lengths {dist.path}", check_lengths(dist.path)))
    return checks


def _cap(scenario: Scenario) -> tuple[int, str]:
    """The request cap in force and the field that sets it: the smallest the scenario names, else
    the ceiling every run has (emulator/limits.py)."""
    workload = scenario.workload
    trace_cap = workload.trace.max_requests if workload.trace is not None else None
    named = [(cap, field) for cap, field in ((workload.max_requests, "workload.max_requests"),
                                            (trace_cap, "workload.trace.max_requests")) if cap is not None]
    return min(named, default=(MAX_REQUESTS, "the ceiling on requests per run (emulator/limits.py)"))


def _window(scenario: Scenario) -> str:
    return f"duration_s = {scenario.duration_s:g} ends arrivals before the trace ends"


def _trace_workload(scenario: Scenario, horizon_s: float) -> Workload:
    trace, block_tokens = scenario.workload.trace, scenario.prefix_cache.block_tokens
    cap, cap_field = _cap(scenario)
    spec = TraceSpec(trace.format, str(trace.path), trace.time_scale, trace.length_scale, cap, block_tokens,
                     skip_bad_rows=trace.bad_rows == "skip")
    replay = read_trace(spec, horizon_s)
    due = num_due(replay.requests, scenario)
    limits = []
    if replay.stop is Stop.CAP and due == len(replay.requests):
        limits.append(f"{cap_field} = {cap:,}")
    if replay.stop is Stop.HORIZON or due < len(replay.requests):
        limits.append(_window(scenario))
    coverage = WorkloadCoverage(f"{Path(trace.path).name} ({trace.format})", due, replay.num_rows, tuple(limits),
                                replay.num_skipped, replay.skipped, is_trace=True)
    return Workload(replay.requests, coverage)


def _generated_workload(scenario: Scenario, horizon_s: float) -> Workload:
    workload, block_tokens = scenario.workload, scenario.prefix_cache.block_tokens
    cap, cap_field = _cap(scenario)
    bursts = [Burst(e.at_s, e.burst.requests, e.burst.over_s) for e in scenario.timeline if e.burst is not None]
    sharing = workload.prefix_sharing
    requests = generate_requests(
        arrival_process(workload.arrival),
        length_distribution(workload.input_len),
        length_distribution(workload.output_len),
        duration_s=horizon_s,
        seed=scenario.seed,
        max_requests=cap,
        block_tokens=block_tokens,
        prefix_sharing=None if sharing is None else PrefixSharing(sharing.num_prefixes, sharing.shared_blocks),
        rate_changes=[RateChange(c.at_s, c.rate_per_s) for c in workload.rate_changes],
        bursts=bursts,
    )
    due = num_due(requests, scenario)
    limits = []
    if len(requests) == cap and due == cap:  # the cap, not the duration, ended the arrivals
        limits.append(f"{cap_field} = {cap:,} ends arrivals at {requests[-1].arrival_s:,.1f} s of "
                      f"duration_s = {scenario.duration_s:g}")
    coverage = WorkloadCoverage(f"generated ({workload.arrival.kind})", due, limits=tuple(limits))
    return Workload(requests, coverage)
