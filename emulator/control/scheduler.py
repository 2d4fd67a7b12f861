"""The dual-timescale scheduler: a short-term loop re-searches the threshold t when the link, the
prefill speeds or the queues change, and a long-term loop moves local instances between prefill and
decode when the traffic shifts. It returns decisions with reasons; the caller applies them (drains
a node before flipping it, sets the router's t). Time comes in as arguments; no clock, no I/O.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from emulator.control.control_state import ControlState, RouterConfig, whole_threshold
from emulator.control.estimators import (
    ArrivalWindow,
    LinkEstimator,
    LinkObservation,
    QueueDepths,
    SpeedEstimator,
)
from emulator.control.profiles import LengthSamples
from emulator.control.throughput_model import (
    ModelInputs,
    OperatingPoint,
    SplitSearch,
    optimize,
    optimize_threshold,
)
from emulator.control.types import Affinity, Cluster, NodeId, PrefixRule, Role, RoutePolicy


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Knobs of both loops. `hysteresis` is relative: t moves only by more than that fraction, and
    a split changes only for more than that fraction of Lambda_max."""

    short_term_enabled: bool = True
    short_interval_s: float = 5.0
    egress_util_trigger: float = 0.9
    queue_depth_trigger: int = 16
    hysteresis: float = 0.1
    dwell_intervals: int = 2  # short intervals a decrease of t must persist before it applies
    long_term_enabled: bool = True
    long_interval_s: float = 120.0
    ewma_alpha: float = 0.3
    retrans_trigger: float = 0.01  # retransmitted fraction that counts as congestion
    rtt_inflation_trigger: float = 1.5  # smoothed / minimum RTT that counts as congestion
    arrival_window_s: float = 300.0
    max_window_samples: int = 20_000
    min_window_samples: int = 50  # fewer arrivals say too little about the length distribution

    def __post_init__(self) -> None:
        positive = ("short_interval_s", "long_interval_s", "arrival_window_s",
                    "egress_util_trigger", "retrans_trigger")
        for name in positive:
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"scheduler.{name}: {value} must be a positive finite number")
        checks = (
            ("hysteresis", 0 <= self.hysteresis < 1, "a fraction in [0, 1)"),
            ("ewma_alpha", 0 < self.ewma_alpha <= 1, "a weight in (0, 1]"),
            ("queue_depth_trigger", self.queue_depth_trigger >= 1, "at least 1 request"),
            ("dwell_intervals", self.dwell_intervals >= 1, "at least 1 interval"),
            ("rtt_inflation_trigger", self.rtt_inflation_trigger > 1, "a ratio above 1"),
            ("min_window_samples", 2 <= self.min_window_samples <= self.max_window_samples,
             "at least 2 and at most max_window_samples"),
        )
        for name, ok, fix in checks:
            if not ok:
                raise ValueError(f"scheduler.{name}: {getattr(self, name)} is invalid; use {fix}")


@dataclass(frozen=True, slots=True)
class ThresholdChange:
    at_s: float
    old_t: float
    new_t: float
    reason: str


@dataclass(frozen=True, slots=True)
class RoleChange:
    """Drain `node`, then flip it. Local nodes keep their index through flips: the index is the
    node's slot in the local cluster, prefill slots first (local-prefill-0 .. local-decode-7)."""

    at_s: float
    node: NodeId
    from_role: Role
    to_role: Role
    reason: str


Decision = ThresholdChange | RoleChange


@dataclass(frozen=True, slots=True)
class Conditions:
    """What the model is fed beyond its profiles: usable egress and per-cluster speed factors."""

    egress_bytes_per_s: float
    speed_remote: float
    speed_local: float

    def drift(self, other: Conditions) -> float:
        """The largest relative difference of any field."""
        return max(abs(a / b - 1) for a, b in zip(self._values(), other._values(), strict=True))

    def describe_change(self, old: Conditions) -> str:
        """The fields that moved by more than 1 % since `old`, in words."""
        parts = []
        if abs(self.egress_bytes_per_s / old.egress_bytes_per_s - 1) > 0.01:
            parts.append(f"usable egress {_rate(old.egress_bytes_per_s)} -> {_rate(self.egress_bytes_per_s)}")
        for name, before, now in (("remote", old.speed_remote, self.speed_remote),
                                  ("local", old.speed_local, self.speed_local)):
            if abs(now / before - 1) > 0.01:
                parts.append(f"{name} prefill speed x{before:.2f} -> x{now:.2f}")
        return ", ".join(parts) or "estimates drifted"

    def _values(self) -> tuple[float, float, float]:
        return (self.egress_bytes_per_s, self.speed_remote, self.speed_local)


class DualTimescaleScheduler:
    """Feed it observations, call `tick(now_s)` regularly, apply what it returns.

    Short term (every `short_interval_s`): when egress nears its trigger, the transport reports
    congestion, a queue surges, the estimates drifted since the last search, or the split changed,
    it re-searches t at the current N_p with the estimated bandwidth and speeds. An increase of t
    (fewer remote requests) applies at once; a decrease must persist for `dwell_intervals` while
    the link is neither congested nor at its trigger, so a noisy link cannot make t oscillate.
    Long term (every `long_interval_s`): from the arrivals in the window it recomputes the best
    N_p with t free and flips one node per tick toward it.

    The threshold and the loops' on/off live in the run's ControlState (`state`; without one the
    scheduler makes its own from `threshold` and `config`): the scheduler writes the t it chooses
    there, and an operator's t or loop switch there is what its next tick starts from.
    """

    def __init__(self, inputs: ModelInputs, config: SchedulerConfig | None = None, *,
                 threshold: float | None = None, n_p: int | None = None, start_s: float = 0.0,
                 state: ControlState | None = None):
        self._cfg = cfg = config or SchedulerConfig()
        if state is not None:
            threshold = state.threshold_tokens
        if threshold is None or n_p is None:
            point = optimize(inputs).prfaas
            threshold = point.t if threshold is None else threshold
            n_p = point.n_p if n_p is None else n_p
        if not 1 <= n_p < inputs.num_local or not threshold >= 0:
            raise ValueError(f"scheduler start: n_p={n_p} must lie in 1..{inputs.num_local - 1} "
                             f"and threshold={threshold} must be >= 0")
        if state is None:
            state = ControlState(
                RouterConfig(RoutePolicy.PRFAAS, whole_threshold(threshold), PrefixRule.BANDWIDTH_SCARCE,
                             Affinity.COST),
                short_term_enabled=cfg.short_term_enabled, long_term_enabled=cfg.long_term_enabled)
        self.state = state
        self._inputs = inputs
        self._roles = [Role.PREFILL] * n_p + [Role.DECODE] * (inputs.num_local - n_p)
        self._speeds = SpeedEstimator({Cluster.REMOTE: inputs.prefill_remote_s,
                                       Cluster.LOCAL: inputs.prefill_local_s}, cfg.ewma_alpha)
        self._link = LinkEstimator(inputs.egress_bytes_per_s, cfg.ewma_alpha, cfg.retrans_trigger,
                                   cfg.rtt_inflation_trigger)
        self._queues: QueueDepths | None = None
        self._arrivals = ArrivalWindow(cfg.arrival_window_s, cfg.max_window_samples)
        self._lengths = inputs.lengths
        self._last_short_s = self._last_long_s = start_s
        self._searched = self.estimates  # the conditions the current t was chosen for
        self._pending: tuple[int, float, str] | None = None  # (intervals seen, least new t, why)
        self._resplit = False  # the split changed since the last search of t
        self._relengths = ""  # the length sample was refreshed since the last search: how
        self._target_n_p: int | None = None
        self._split_search: tuple[Conditions, SplitSearch] | None = None  # the last re-plan's
        self._split_reason = ""
        self._operator_t = state.threshold_tokens  # t as the last tick left it

    # ---- observations ----

    def observe_prefill(self, cluster: Cluster, input_len: float, service_s: float,
                        now_s: float) -> None:
        """One prefill's service time (queueing excluded) on `cluster`."""
        self._speeds.observe(cluster, input_len, service_s)

    def observe_link(self, now_s: float, goodput_bytes_per_s: float, egress_utilization: float,
                     retrans_rate: float, rtt_inflation: float) -> None:
        """One interval of the cross-DC link (see LinkObservation for what each field means)."""
        self._link.observe(LinkObservation(now_s, goodput_bytes_per_s, egress_utilization,
                                           retrans_rate, rtt_inflation))

    def observe_queues(self, now_s: float, remote: int, local_prefill: int, decode: int) -> None:
        self._queues = QueueDepths(now_s, remote, local_prefill, decode)

    def observe_arrival(self, now_s: float, input_len: float) -> None:
        """An arriving request's uncached input length."""
        self._arrivals.observe(now_s, input_len)

    # ---- state ----

    @property
    def current_threshold(self) -> float:
        return self.state.threshold_tokens

    @property
    def current_n_p(self) -> int:
        return self._roles.count(Role.PREFILL)

    @property
    def local_nodes(self) -> tuple[NodeId, ...]:
        return tuple(NodeId(Cluster.LOCAL, role, i) for i, role in enumerate(self._roles))

    @property
    def estimates(self) -> Conditions:
        return Conditions(self._link.usable_bytes_per_s, self._speeds.factor(Cluster.REMOTE),
                          self._speeds.factor(Cluster.LOCAL))

    def estimated_inputs(self) -> ModelInputs:
        """The model's inputs re-profiled with the current estimates and length sample."""
        est = self.estimates
        return dataclasses.replace(
            self._inputs, egress_bytes_per_s=est.egress_bytes_per_s, lengths=self._lengths,
            prefill_remote_s=self._inputs.prefill_remote_s.scaled(1 / est.speed_remote),
            prefill_local_s=self._inputs.prefill_local_s.scaled(1 / est.speed_local),
        )

    @property
    def config(self) -> SchedulerConfig:
        """The loops' settings, with their on/off as the control state has them now."""
        state = self.state
        return dataclasses.replace(self._cfg, short_term_enabled=state.short_term_enabled,
                                   long_term_enabled=state.long_term_enabled)

    # ---- decisions ----

    def tick(self, now_s: float) -> list[Decision]:
        """Run whichever loop is due; at most one role flip and one threshold change per tick."""
        cfg, state = self._cfg, self.state
        decisions: list[Decision] = []
        if self._operator_t != state.threshold_tokens:  # an operator set t: a pending decrease is void
            self._pending = None
        if state.long_term_enabled:
            if now_s - self._last_long_s >= cfg.long_interval_s:
                self._last_long_s = now_s
                self._plan_split(now_s)
            if (flip := self._next_flip(now_s)) is not None:
                decisions.append(flip)
        if state.short_term_enabled and now_s - self._last_short_s >= cfg.short_interval_s:
            self._last_short_s = now_s
            if (change := self._search_threshold(now_s)) is not None:
                decisions.append(change)
        self._operator_t = state.threshold_tokens
        return decisions

    def _triggers(self) -> list[str]:
        """Why the short-term loop should search now, in words; empty when nothing changed."""
        cfg, link, found = self._cfg, self._link.last, []
        if link is not None and link.egress_utilization >= cfg.egress_util_trigger:
            found.append(f"egress {link.egress_utilization:.2f} of {_rate(self._link.usable_bytes_per_s)}")
        if link is not None and self._link.is_congested:
            found.append(f"{link.retrans_rate * 100:.1f} % retransmits, "
                         f"RTT x{link.rtt_inflation:.2f}")
        if self._queues is not None and (surges := self._queues.surges(cfg.queue_depth_trigger)):
            found.append(f"queue surge ({', '.join(surges)} >= {cfg.queue_depth_trigger})")
        if self.estimates.drift(self._searched) > cfg.hysteresis:
            found.append(self.estimates.describe_change(self._searched))
        if self._resplit:
            found.append(f"split now {self.current_n_p}:{len(self._roles) - self.current_n_p}")
        if self._relengths:
            found.append(self._relengths)
        return found

    def _link_is_hot(self) -> bool:
        link = self._link.last
        return link is not None and (
            self._link.is_congested or link.egress_utilization >= self._cfg.egress_util_trigger
        )

    def _search_threshold(self, now_s: float) -> ThresholdChange | None:
        triggers = self._triggers()
        if not triggers and self._pending is None:
            return None
        new_t, point = self._best_threshold()
        self._searched, self._resplit, self._relengths = self.estimates, False, ""
        old_t = self.state.threshold_tokens
        why = ", ".join(triggers)
        if abs(new_t - old_t) <= self._cfg.hysteresis * max(old_t, 1.0):
            self._pending = None
            return None
        if new_t < old_t and self._link_is_hot():
            self._pending = None  # never offer a congested or nearly full link more traffic
            return None
        if new_t < old_t:  # more remote traffic: only once the better conditions have lasted
            seen, least, first_why = self._pending or (0, 0.0, why)
            seen, least = seen + 1, max(least, new_t)
            if seen < self._cfg.dwell_intervals:
                self._pending = (seen, least, first_why)
                return None
            new_t, why = least, f"{first_why or why} (held {seen} intervals)"
        self._pending = None
        self.state.set_threshold(whole_threshold(new_t))
        return ThresholdChange(now_s, old_t, new_t, f"{why}: t {old_t:.0f} -> {new_t:.0f} "
                               f"({_describe(point())})")

    def _best_threshold(self) -> tuple[float, Callable[[], OperatingPoint]]:
        """optimize_threshold's t at the current split, and its whole operating point on demand
        (only a change is described). A re-plan searched every split moments ago (the long-term
        loop runs first in the same tick, and its new length sample triggers this search): while
        the estimates and the sample are those it used, its result is reused."""
        n_p, searched = self.current_n_p, self._split_search
        if searched is not None and searched[0] == self.estimates and searched[1].inputs.lengths is self._lengths:
            search = searched[1]
            return search.best_t(n_p), lambda: search.point(n_p)
        point = optimize_threshold(self.estimated_inputs(), n_p)
        return point.t, lambda: point

    def _plan_split(self, now_s: float) -> None:
        """Set the target N_p from the arrival window; clear it when the split is fine."""
        lengths = self._arrivals.lengths(now_s)
        if lengths.size < self._cfg.min_window_samples:
            return
        self._lengths = LengthSamples.from_samples(lengths)
        self._relengths = f"traffic window mean {lengths.mean():.0f} tokens"
        inputs = self.estimated_inputs()
        splits = range(1, inputs.num_local)
        search = SplitSearch.run(inputs, splits)
        self._split_search = (self.estimates, search)
        capacities = search.capacities()  # optimize_threshold's lambda_max per n_p
        current_n_p = self.current_n_p
        current = capacities[current_n_p - 1]
        best_n_p = max(splits, key=lambda n_p: capacities[n_p - 1])
        best = capacities[best_n_p - 1]
        if best <= current * (1 + self._cfg.hysteresis):
            self._target_n_p = None
            return
        self._target_n_p = best_n_p
        rate = self._arrivals.rate_per_s(now_s)
        num_local = inputs.num_local
        self._split_reason = (
            f"{lengths.size} arrivals in {self._cfg.arrival_window_s:.0f} s ({rate:.2f} req/s, "
            f"mean {lengths.mean():.0f} tokens): split {current_n_p}:{num_local - current_n_p} carries "
            f"{current:.2f} req/s, {best_n_p}:{num_local - best_n_p} carries {best:.2f}"
        )

    def _next_flip(self, now_s: float) -> RoleChange | None:
        """One node toward the target split: the lowest decode slot becomes prefill, or the
        highest prefill slot becomes decode, so prefill slots stay a prefix of the cluster."""
        target = self._target_n_p
        if target is None:  # the common case: checked before counting roles (once per tick)
            return None
        n_p = self.current_n_p
        if target == n_p:
            self._target_n_p = None
            return None
        if target > n_p:
            slot, old, new = self._roles.index(Role.DECODE), Role.DECODE, Role.PREFILL
        else:
            slot = max(i for i, role in enumerate(self._roles) if role is Role.PREFILL)
            old, new = Role.PREFILL, Role.DECODE
        self._roles[slot] = new
        self._resplit = True
        node = NodeId(Cluster.LOCAL, old, slot)
        reason = (f"{self._split_reason}; drain, then flip {node} to {new.value} "
                  f"(n_p {n_p} -> {self.current_n_p}, target {target})")
        return RoleChange(now_s, node, old, new, reason)


def _rate(bytes_per_s: float) -> str:
    """A link rate in the unit that shows it: 7.2 Gbit/s, 9.8 Mbit/s."""
    bits = bytes_per_s * 8
    return f"{bits / 1e9:.1f} Gbit/s" if bits >= 1e9 else f"{bits / 1e6:.1f} Mbit/s"


def _describe(point: OperatingPoint) -> str:
    return (f"model: {point.lambda_max:.2f} req/s, p {point.p:.2f}, "
            f"bottleneck {point.bottleneck.value}")
