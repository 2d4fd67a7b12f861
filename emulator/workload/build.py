"""A scenario's workload section turned into requests: the one place schema meets generators.

Generated workloads and trace replays both end as a sorted list of RequestSpec; timeline bursts
join the generated arrivals. The engines call `build_requests`; nothing here knows about engines.
"""

from __future__ import annotations

from bisect import bisect_left

from emulator.control.types import RequestSpec
from emulator.scenario import Scenario
from emulator.scenario.workload import (
    EmpiricalLength as EmpiricalLengthSpec,
    FixedLength as FixedLengthSpec,
    GammaArrival,
    LognormalLength,
    OnOffArrival,
    PoissonArrival,
    UniformLength as UniformLengthSpec,
)
from emulator.workload.arrivals import ArrivalSpec, Burst, GammaArrivals, OnOffArrivals, PoissonArrivals, RateChange
from emulator.workload.generator import PrefixSharing, generate_requests
from emulator.workload.lengths import EmpiricalLength, FixedLength, LengthDist, LogNormalLength, UniformLength
from emulator.workload.traces import TraceSpec, read_trace


def arrival_process(spec: PoissonArrival | GammaArrival | OnOffArrival) -> ArrivalSpec:
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


def num_due(requests: list[RequestSpec], duration_s: float) -> int:
    """How many of `requests` arrive within `duration_s` at the scenario's own pace (a progress
    total: a rate knob moves it)."""
    return bisect_left([r.arrival_s for r in requests], duration_s)


def build_requests(scenario: Scenario, horizon_s: float | None = None) -> list[RequestSpec]:
    """Every request the workload holds up to `horizon_s` of workload time (default: the
    duration), sorted by arrival; the same scenario and seed give the same list, and a longer
    horizon only appends to it."""
    horizon = scenario.duration_s if horizon_s is None else horizon_s
    workload, block_tokens = scenario.workload, scenario.prefix_cache.block_tokens
    if workload.trace is not None:
        trace = workload.trace
        cap = min(workload.max_requests, trace.max_requests or workload.max_requests)
        spec = TraceSpec(trace.format, str(trace.path), trace.time_scale, trace.length_scale, cap, block_tokens)
        return [r for r in read_trace(spec) if r.arrival_s < horizon]
    bursts = [Burst(e.at_s, e.burst.requests, e.burst.over_s) for e in scenario.timeline if e.burst is not None]
    sharing = workload.prefix_sharing
    return generate_requests(
        arrival_process(workload.arrival),
        length_distribution(workload.input_len),
        length_distribution(workload.output_len),
        duration_s=horizon,
        seed=scenario.seed,
        max_requests=workload.max_requests,
        block_tokens=block_tokens,
        prefix_sharing=None if sharing is None else PrefixSharing(sharing.num_prefixes, sharing.shared_blocks),
        rate_changes=[RateChange(c.at_s, c.rate_per_s) for c in workload.rate_changes],
        bursts=bursts,
    )
