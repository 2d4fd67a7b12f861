"""Moving estimates the dual-timescale scheduler re-profiles with: prefill speed per cluster, usable
cross-DC egress, queue depths and a window of recent arrivals.

Observations and times come in as arguments; nothing here reads a clock, a socket or a file.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from emulator.control.curve import Curve
from emulator.control.profiles import PiecewiseLinear
from emulator.control.types import Cluster

# A speed sample outside [1/20, 20] x the profile is a measurement error (a preempted worker, a
# request that hit a cache), not a device: it is clamped so one outlier cannot swing the estimate.
SPEED_CLAMP = (0.05, 20.0)
# Congestion derates the measured capacity: 1 % retransmits cost 10 % (loss-limited TCP delivers
# far below the raw rate, Mathis ~ 1/sqrt(loss)), and every 1x of RTT inflation beyond the
# tolerance costs 25 % (a standing queue means the sender already offers more than the path takes).
RETRANS_PENALTY = 10.0
RTT_TOLERANCE = 0.2
RTT_PENALTY = 0.25
MIN_DERATE = 0.25


def _check_alpha(alpha: float) -> None:
    if not 0 < alpha <= 1:
        raise ValueError(f"ewma alpha: {alpha} must lie in (0, 1]; 1 keeps only the last sample")


@dataclass(slots=True)
class Ewma:
    """Exponentially weighted moving average; the first sample seeds it."""

    alpha: float
    value: float | None = None

    def update(self, x: float) -> float:
        self.value = x if self.value is None else self.value + self.alpha * (x - self.value)
        return self.value


class SpeedEstimator:
    """Per-cluster speed factor: profiled T_prefill(l) over the observed service time (1 = as
    profiled, 2 = twice as fast), so a slowed or throttled cluster shows up in the model."""

    def __init__(self, profiles: dict[Cluster, PiecewiseLinear], alpha: float) -> None:
        _check_alpha(alpha)
        # Curve: PiecewiseLinear.at's values to the bit, compiled (this runs once per prefill)
        self._profiles = {cluster: Curve.from_table(table) for cluster, table in profiles.items()}
        self._ewma = {cluster: Ewma(alpha) for cluster in profiles}

    def observe(self, cluster: Cluster, input_len: float, service_s: float) -> None:
        if not (0 < service_s < math.inf) or not input_len >= 0:
            raise ValueError(f"prefill observation: service_s={service_s}, input_len={input_len}; "
                             f"need a positive time and a length >= 0")
        ratio = self._profiles[cluster](float(input_len)) / service_s
        low, high = SPEED_CLAMP
        self._ewma[cluster].update(low if ratio < low else (high if ratio > high else ratio))

    def factor(self, cluster: Cluster) -> float:
        value = self._ewma[cluster].value
        return 1.0 if value is None else value


class LinkObservation:
    """One interval of the cross-DC link as the transport saw it. Read-only by convention: a plain
    class, compiled a native object, where a NamedTuple's __new__ runs interpreted (one per
    simulated second on the virtual engine's hot path, issue 28).

    egress_utilization: the fraction of the interval the sender had KV bytes in flight, so goodput
    divided by it is the rate the link delivered while busy (its usable capacity).
    """

    __slots__ = ("at_s", "goodput_bytes_per_s", "egress_utilization", "retrans_rate", "rtt_inflation")

    def __init__(self, at_s: float, goodput_bytes_per_s: float, egress_utilization: float, retrans_rate: float,
                 rtt_inflation: float) -> None:
        self.at_s, self.goodput_bytes_per_s, self.egress_utilization = at_s, goodput_bytes_per_s, egress_utilization
        self.retrans_rate = retrans_rate  # retransmitted / sent segments
        self.rtt_inflation = rtt_inflation  # smoothed RTT / minimum RTT, >= 1

    @property
    def measured(self) -> tuple[float, float, float, float]:
        """Everything but the time: each must be finite and >= 0."""
        return self.goodput_bytes_per_s, self.egress_utilization, self.retrans_rate, self.rtt_inflation


class LinkEstimator:
    """Usable egress bandwidth: measured capacity derated by congestion, smoothed by an EWMA.

    Intervals with almost no traffic carry no capacity information; they still update congestion
    so a clean link after a lossy one lets the estimate recover.
    """

    def __init__(self, nominal_bytes_per_s: float, alpha: float, retrans_trigger: float,
                 rtt_trigger: float, min_utilization: float = 0.05) -> None:
        _check_alpha(alpha)
        self.nominal_bytes_per_s = nominal_bytes_per_s
        self._capacity = Ewma(alpha, nominal_bytes_per_s)
        self._derate = Ewma(alpha, 1.0)
        self._retrans_trigger = retrans_trigger
        self._rtt_trigger = rtt_trigger
        self._min_utilization = min_utilization
        self.last: LinkObservation | None = None

    def observe(self, obs: LinkObservation) -> None:
        for value in obs.measured:
            if not 0 <= value < math.inf:  # also false for NaN
                raise ValueError(f"link observation at {obs.at_s} s: {obs.measured} must be finite and >= 0")
        self.last = obs
        if obs.egress_utilization >= self._min_utilization:
            self._capacity.update(obs.goodput_bytes_per_s / min(obs.egress_utilization, 1.0))
        excess_rtt = max(0.0, obs.rtt_inflation - 1.0 - RTT_TOLERANCE)
        derate = 1.0 - RETRANS_PENALTY * obs.retrans_rate - RTT_PENALTY * excess_rtt
        self._derate.update(max(MIN_DERATE, derate))

    @property
    def usable_bytes_per_s(self) -> float:
        assert self._capacity.value is not None and self._derate.value is not None
        return self._capacity.value * self._derate.value

    @property
    def is_congested(self) -> bool:
        last = self.last
        return last is not None and (
            last.retrans_rate >= self._retrans_trigger or last.rtt_inflation >= self._rtt_trigger
        )


class QueueDepths:
    """Requests waiting per stage at one instant. Read-only by convention (a plain class, as
    LinkObservation)."""

    __slots__ = ("at_s", "remote", "local_prefill", "decode")

    def __init__(self, at_s: float, remote: int, local_prefill: int, decode: int) -> None:
        self.at_s, self.remote, self.local_prefill, self.decode = at_s, remote, local_prefill, decode

    def surges(self, trigger: int) -> list[str]:
        """Names and depths of the queues at or over `trigger`."""
        depths = (("remote", self.remote), ("local prefill", self.local_prefill),
                  ("decode", self.decode))
        return [f"{name} {depth}" for name, depth in depths if depth >= trigger]


class ArrivalWindow:
    """Arrival times and input lengths of the last `window_s` seconds (at most `max_samples`)."""

    def __init__(self, window_s: float, max_samples: int) -> None:
        self.window_s = window_s
        # times and lengths side by side (the same maxlen drops both ends together): lengths()
        # then hands numpy a deque of floats, without unpacking a tuple per arrival
        self._times: deque[float] = deque(maxlen=max_samples)
        self._lengths: deque[float] = deque(maxlen=max_samples)
        self._first_s: float | None = None

    def observe(self, now_s: float, input_len: float) -> None:
        if not input_len >= 0:
            raise ValueError(f"arrival at {now_s} s: input_len={input_len} must be >= 0")
        if self._first_s is None:
            self._first_s = now_s
        self._times.append(now_s)
        self._lengths.append(float(input_len))

    def _prune(self, now_s: float) -> None:
        times, lengths, start = self._times, self._lengths, now_s - self.window_s
        while times and times[0] < start:
            times.popleft()
            lengths.popleft()

    def lengths(self, now_s: float) -> np.ndarray:
        self._prune(now_s)
        return np.array(self._lengths, dtype=float)

    def rate_per_s(self, now_s: float) -> float:
        """Arrivals per second over the window (or since the first arrival, if sooner)."""
        self._prune(now_s)
        if self._first_s is None:
            return 0.0
        span = min(self.window_s, now_s - self._first_s)
        times = self._times
        if times and len(times) == times.maxlen:
            span = now_s - times[0]  # the cap dropped older arrivals of the window
        return len(times) / span if span > 0 else 0.0
