"""A scenario's workload section turned into requests: the one place schema meets generators.

Generated workloads and trace replays both end as a sorted list of RequestSpec; timeline bursts
join the generated arrivals. The engines call `build_requests`; nothing here knows about engines.
"""

from __future__ import annotations

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


def build_requests(scenario: Scenario) -> list[RequestSpec]:
    """Every request of the run, sorted by arrival; the same scenario and seed give the same list."""
    workload, block_tokens = scenario.workload, scenario.prefix_cache.block_tokens
    if workload.trace is not None:
        trace = workload.trace
        cap = min(workload.max_requests, trace.max_requests or workload.max_requests)
        spec = TraceSpec(trace.format, str(trace.path), trace.time_scale, trace.length_scale, cap, block_tokens)
        return [r for r in read_trace(spec) if r.arrival_s < scenario.duration_s]
    bursts = [Burst(e.at_s, e.burst.requests, e.burst.over_s) for e in scenario.timeline if e.burst is not None]
    sharing = workload.prefix_sharing
    return generate_requests(
        arrival_process(workload.arrival),
        length_distribution(workload.input_len),
        length_distribution(workload.output_len),
        duration_s=scenario.duration_s,
        seed=scenario.seed,
        max_requests=workload.max_requests,
        block_tokens=block_tokens,
        prefix_sharing=None if sharing is None else PrefixSharing(sharing.num_prefixes, sharing.shared_blocks),
        rate_changes=[RateChange(c.at_s, c.rate_per_s) for c in workload.rate_changes],
        bursts=bursts,
    )
