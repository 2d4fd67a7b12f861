"""Capacity search (issue 17), as Vidur's config explorer does: the highest arrival rate whose TTFT
P90 (and optionally TPOT mean) meets an SLO, found by bisection on the virtual engine and set beside
the throughput model's Lambda_max for the same scenario. One scenario per call; running many points
in parallel is the sweep runner's job, and the metrics are the run summary's own (`summarize`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from emulator.analytic import optimize_scenario
from emulator.control.types import RoutePolicy
from emulator.errors import ScenarioError
from emulator.limits import MAX_DURATION_S, MAX_INTERVAL_S, MAX_RATE_PER_S, MAX_REQUESTS, MAX_STEP_S
from emulator.scenario import Scenario, apply_overrides
from emulator.telemetry.records import RequestRecord, summarize

# A probe lets about this many requests arrive: enough for a P90 and for a growing queue to show
# (the case study at 1.05 x Lambda_max grows its in-flight count by ~5 % of its arrivals at 2,000
# requests; at 300 the noise is as large as that). 2,000 requests simulate in ~0.2 s.
DEFAULT_NUM_REQUESTS = 2_000
MIN_NUM_REQUESTS = 100
# A tiny rate would otherwise stretch a probe over days of simulated time (and scheduler ticks).
MAX_PROBE_DURATION_S = 6 * 3600.0
# Overloaded: the in-flight count grew by more than this share of the arrivals in the second half
# of the arrival window. A stable run stays within ~2 % (case study, 2,000 requests, <= 0.95 x
# Lambda_max); past capacity it grows by 1 - capacity / rate.
MAX_BACKLOG_GROWTH = 0.05
DEFAULT_BRACKET = (0.25, 1.5)  # x the model's Lambda_max
MAX_PROBES = 50
_BASELINE_OF_POLICY = {RoutePolicy.LOCAL_ONLY: "homogeneous", RoutePolicy.ALL_REMOTE: "naive"}


@dataclass(frozen=True, slots=True)
class CapacitySlo:
    """The service-level objective a rate must meet: TTFT P90 and, when given, mean TPOT (seconds)."""

    ttft_p90_s: float
    tpot_mean_s: float | None = None

    def __post_init__(self) -> None:
        _check_range("slo.ttft_p90_s", self.ttft_p90_s, MAX_INTERVAL_S, "seconds")
        if self.tpot_mean_s is not None:
            _check_range("slo.tpot_mean_s", self.tpot_mean_s, MAX_STEP_S, "seconds")


@dataclass(frozen=True, slots=True)
class CapacityProbe:
    """One virtual run at `rate_per_s`. Metrics are None when no request completed."""

    rate_per_s: float
    duration_s: float  # of arrivals
    num_requests: int
    ttft_p90_s: float | None
    tpot_mean_s: float | None
    completed_fraction: float
    backlog_growth: float  # growth of the in-flight count over the second half, per arrival there
    meets_slo: bool


@dataclass(frozen=True, slots=True)
class CapacityResult:
    """The search's answer. `bracket` is (the highest rate that met the SLO, the lowest that did
    not); its ends are equal when no probe failed (the search stopped at its budget or the rate
    ceiling), and the lower end is 0 when none met. `converged`: the bracket is within tolerance."""

    rate_per_s: float
    lambda_max_model: float
    probes: tuple[CapacityProbe, ...]
    bracket: tuple[float, float]
    converged: bool

    @property
    def ratio_to_model(self) -> float | None:
        return self.rate_per_s / self.lambda_max_model if self.lambda_max_model > 0 else None


def find_capacity(scenario: Scenario, slo: CapacitySlo, *, low_rps: float | None = None,
                  high_rps: float | None = None, rel_tolerance: float = 0.05, max_probes: int = 12,
                  num_requests: int = DEFAULT_NUM_REQUESTS, duration_s: float | None = None) -> CapacityResult:
    """Bisect the arrival rate between `low_rps` and `high_rps` (default DEFAULT_BRACKET x the
    model's Lambda_max), widening the bracket down while its low end fails and up while its high
    end meets, until the bracket is within `rel_tolerance` of its low end or `max_probes` runs are
    spent. Every probe keeps the scenario's seed, so arrivals at rate r are the same draws as at
    any other rate, compressed in time: meeting the SLO is then all but monotone in the rate, and
    results repeat. `duration_s` fixes each probe's arrival window instead of `num_requests / rate`."""
    check_searchable(scenario)
    _check_range("capacity.rel_tolerance", rel_tolerance, 1.0, "a fraction", upper_open=True)
    _check_count("capacity.max_probes", max_probes, 1, MAX_PROBES)
    _check_count("capacity.num_requests", num_requests, MIN_NUM_REQUESTS, MAX_REQUESTS)
    if duration_s is not None:
        _check_range("capacity.duration_s", duration_s, MAX_DURATION_S, "seconds")
    lambda_max = model_lambda_max(scenario)
    low, high = initial_bracket(lambda_max, low_rps, high_rps)
    probes: list[CapacityProbe] = []

    def meets(rate: float) -> bool:
        probes.append(probe_rate(scenario, rate, slo, num_requests=num_requests, duration_s=duration_s))
        return probes[-1].meets_slo

    # Below this rate a probe's window holds fewer than MIN_NUM_REQUESTS arrivals, and a P90 of a
    # handful of requests meets by luck (homogeneous PD on the case study "met" 5 s at 4 requests
    # in 6 h with a no-queue TTFT P90 of 9.8 s); the search stops there and reports 0.
    min_rate = MIN_NUM_REQUESTS / (duration_s if duration_s is not None else MAX_PROBE_DURATION_S)
    best, worst = bisect_rate(meets, low, high, rel_tolerance, max_probes, min_rate=min_rate)
    top = best if worst is None else worst
    converged = worst is not None and best > 0 and top - best <= rel_tolerance * best
    return CapacityResult(best, lambda_max, tuple(probes), (best, top), converged)


def bisect_rate(meets: Callable[[float], bool], low: float, high: float, rel_tolerance: float,
                max_probes: int, *, min_rate: float = 0.0) -> tuple[float, float | None]:
    """(highest rate that met, lowest that failed or None); `meets` is called at most `max_probes`
    times. Halves the low end until it meets (not below `min_rate`: then none met), doubles the
    high end (up to MAX_RATE_PER_S) until it fails, then bisects."""
    best, worst, used = 0.0, None, 0
    rate = low
    while used < max_probes and rate >= min_rate:  # down: find a rate that meets
        used += 1
        if meets(rate):
            best = rate
            break
        worst, rate = rate, rate / 2
    if best == 0.0:
        return best, worst
    rate = high if worst is None else worst
    while worst is None and used < max_probes:  # up: find a rate that fails
        used += 1
        if not meets(rate):
            worst = rate
        elif rate >= MAX_RATE_PER_S:
            return rate, None
        else:
            best, rate = rate, min(2 * rate, MAX_RATE_PER_S)
    while worst is not None and worst - best > rel_tolerance * best and used < max_probes:
        used += 1
        mid = (best + worst) / 2
        if meets(mid):
            best = mid
        else:
            worst = mid
    return best, worst


def probe_rate(scenario: Scenario, rate_per_s: float, slo: CapacitySlo, *,
               num_requests: int = DEFAULT_NUM_REQUESTS, duration_s: float | None = None) -> CapacityProbe:
    """Simulate `scenario` at one arrival rate until every request has ended, and judge it: it
    meets the SLO when every request completed, the queue did not grow, and the summary's TTFT P90
    (and TPOT mean) are within the SLO."""
    from emulator.virtual.engine import run_duration_s, simulate  # the engine: only when a probe runs

    check_searchable(scenario)
    _check_range("capacity.rate_per_s", rate_per_s, MAX_RATE_PER_S, "requests per second")
    window_s = duration_s if duration_s is not None else min(num_requests / rate_per_s, MAX_PROBE_DURATION_S)
    variant = apply_overrides(scenario, [f"workload.arrival.rate_per_s={rate_per_s!r}",
                                         f"duration_s={window_s!r}", "workload.max_requests=null"])
    records = simulate(variant).records
    summary = summarize(records, run_duration_s(records))
    ttft, tpot = _metric(summary, "ttft_p90_s"), _metric(summary, "tpot_mean_s")
    completed = _metric(summary, "completed_fraction") or 0.0
    growth = backlog_growth(records, window_s)
    meets = (completed >= 1.0 and growth <= MAX_BACKLOG_GROWTH and ttft is not None
             and ttft <= slo.ttft_p90_s
             and (slo.tpot_mean_s is None or (tpot is not None and tpot <= slo.tpot_mean_s)))
    return CapacityProbe(rate_per_s, window_s, len(records), ttft, tpot, completed, growth, meets)


def backlog_growth(records: list[RequestRecord], window_s: float) -> float:
    """How much the in-flight count (arrived, not yet ended) grew from the middle to the end of the
    arrival window, per request that arrived in between: ~0 while the engine keeps up, 1 -
    capacity / rate past its capacity. A finite run over capacity can still meet a loose TTFT SLO
    (its queue had no time to grow far), so this is what marks it overloaded."""
    mid_s = window_s / 2
    arrived = sum(1 for r in records if mid_s < r.arrival_s <= window_s)
    if arrived == 0:
        return 0.0
    return (_in_flight(records, window_s) - _in_flight(records, mid_s)) / arrived


def _in_flight(records: list[RequestRecord], t_s: float) -> int:
    return sum(1 for r in records if r.arrival_s <= t_s and (r.finish_s is None or r.finish_s > t_s))


def model_lambda_max(scenario: Scenario) -> float:
    """The throughput model's Lambda_max for the scenario's policy: PrfaaS at the scenario's own
    threshold and split when it fixes them (else the optimum), or the baseline the policy is."""
    optimum = optimize_scenario(scenario)
    baseline = _BASELINE_OF_POLICY.get(scenario.router.policy)
    point = optimum[baseline] if baseline is not None else optimum.get("configured", optimum)
    assert isinstance(point, dict)
    return float(point["lambda_max"])


def initial_bracket(lambda_max: float, low_rps: float | None, high_rps: float | None) -> tuple[float, float]:
    """The rates the search starts from: the given ends, the missing ones from DEFAULT_BRACKET x
    Lambda_max (kept a factor 2 away from a given end)."""
    if low_rps is not None:
        _check_range("capacity.low_rps", low_rps, MAX_RATE_PER_S, "requests per second")
    if high_rps is not None:
        _check_range("capacity.high_rps", high_rps, MAX_RATE_PER_S, "requests per second")
    if (low_rps is None or high_rps is None) and not (math.isfinite(lambda_max) and lambda_max > 0):
        raise ScenarioError(f"capacity.low_rps: the throughput model's Lambda_max is {lambda_max}, so it "
                            "cannot place the bracket; give low_rps and high_rps")
    low = low_rps if low_rps is not None else DEFAULT_BRACKET[0] * lambda_max
    high = high_rps if high_rps is not None else DEFAULT_BRACKET[1] * lambda_max
    if low_rps is None and high_rps is not None:
        low = min(low, high / 2)
    if high_rps is None:
        high = min(max(high, 2 * low), MAX_RATE_PER_S)
    if not low < high:
        raise ScenarioError(f"capacity.low_rps: {low:g} is not below high_rps {high:g}; give a lower low_rps")
    return low, high


def check_searchable(scenario: Scenario) -> None:
    """Refuse what has no single arrival rate to set: a trace, or piecewise rate changes."""
    workload = scenario.workload
    if workload.trace is not None or workload.arrival is None:
        raise ScenarioError("workload.arrival: capacity search sets the arrival rate, and this workload has "
                            "none (a trace); use a generated workload (arrival + input_len + output_len)")
    if workload.rate_changes:
        raise ScenarioError(f"workload.rate_changes: {len(workload.rate_changes)} changes; capacity search "
                            "runs one constant rate, so remove them (--set workload.rate_changes=[])")


def _metric(summary: dict[str, object], key: str) -> float | None:
    value = summary[key]
    return float(value) if isinstance(value, int | float) else None


def _check_range(field: str, value: float, upper: float, unit: str, *, upper_open: bool = False) -> None:
    """0 < value <= upper (or < upper), finite; a bool is not a number here."""
    ok = (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
          and 0 < value and (value < upper if upper_open else value <= upper))
    if not ok:
        bound = f"below {upper:g}" if upper_open else f"at most {upper:g}"
        raise ScenarioError(f"{field}: {value!r} is out of range; use a positive number ({unit}), {bound}")


def _check_count(field: str, value: int, lowest: int, highest: int) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and lowest <= value <= highest):
        raise ScenarioError(f"{field}: {value!r} is out of range; use a whole number from {lowest} to {highest:,}")
