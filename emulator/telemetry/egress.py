"""Egress from a link's byte counter, checked against the capacity the link had while it was measured.

Both engines' samplers measure through one `EgressMeter` (issue 26). A rate is counted over the
widest interval its bytes could have crossed in, from the start of the previous read to the end of
this one, so a read that answers late, or a loop that resumes late, can only lower it. A rate
above the link's capacity over that interval (the highest capacity in force in it, which allows the
instant of a change), plus the link's own granularity (`LinkSlack`), is a bug: the meter refuses it
with a TelemetryError naming the sample. Pure and clock-free: every call is given its times.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from emulator.errors import TelemetryError
from emulator.telemetry.metrics import check_finite

MIN_RATE_INTERVAL_S = 1e-3  # a rate over a shorter interval is noise (and over 1e-310 s, infinite)
# A float counter (the virtual fluid link's) drifts by ~1e-16 of its size per addition: allow 1e-9 of
# its size (millions of additions) and of the allowance, so a slow link after a fast one is not refused.
_ROUNDING = 1e-9


class CounterRead:
    """A byte counter's value, read somewhere within [start_s, end_s] (run seconds): a read that
    crosses a thread or a socket is not instantaneous, and only its bracket is known.
    Read-only by convention. A plain class, as EgressSample: compiled with the virtual engine
    (emulator/virtual/accel.py), a native object where a frozen dataclass runs its generated
    __init__ interpreted (the virtual sampler builds one of each per simulated second, issue 28)."""

    __slots__ = ("start_s", "end_s", "total_bytes")

    def __init__(self, start_s: float, end_s: float, total_bytes: float) -> None:
        self.start_s, self.end_s, self.total_bytes = start_s, end_s, total_bytes

    @classmethod
    def at(cls, t_s: float, total_bytes: float) -> CounterRead:
        """An instantaneous read (the virtual engine's fluid counter)."""
        return CounterRead(t_s, t_s, total_bytes)


@dataclass(frozen=True, slots=True)
class LinkSlack:
    """What a measured window may carry beyond capacity x length, and why; all zero for a fluid link.

    lag_s: bytes serialised before a change still arrive this long after it (propagation delay plus
      jitter), so the window's capacity is looked up this far back.
    burst_s: seconds of capacity a window may hold beyond its own length: deliveries bunched by
      jitter (twice the jitter), and a shaper that falls behind and catches up in a burst.
    burst_bytes: a counter counts a packet (or a relay's chunk) whole when it is written, so a
      window may hold one more at either end.
    """

    lag_s: float = 0.0
    burst_s: float = 0.0
    burst_bytes: float = 0.0

    def widest(self, other: LinkSlack) -> LinkSlack:
        return LinkSlack(max(self.lag_s, other.lag_s), max(self.burst_s, other.burst_s),
                         max(self.burst_bytes, other.burst_bytes))


FLUID = LinkSlack()


class EgressSample:
    """A rate and the interval it was measured over. `bit_per_s` is None before a first interval;
    the capacities are None when the link was unshaped at some point of it. Read-only by
    convention (a plain class: see CounterRead)."""

    __slots__ = ("bit_per_s", "since_s", "until_s", "peak_capacity_bit_per_s", "mean_capacity_bit_per_s")

    def __init__(self, bit_per_s: float | None, since_s: float, until_s: float,
                 peak_capacity_bit_per_s: float | None, mean_capacity_bit_per_s: float | None) -> None:
        self.bit_per_s, self.since_s, self.until_s = bit_per_s, since_s, until_s
        self.peak_capacity_bit_per_s = peak_capacity_bit_per_s  # the highest capacity in force over the interval
        self.mean_capacity_bit_per_s = mean_capacity_bit_per_s  # time-weighted over the interval

    @property
    def utilization(self) -> float | None:
        """Egress over the capacity the interval offered (its time-weighted mean, so a sample that
        straddles a link change is measured against both capacities, each for its share)."""
        if self.bit_per_s is None or not self.mean_capacity_bit_per_s:
            return None
        return self.bit_per_s / self.mean_capacity_bit_per_s


class EgressMeter:
    """bit/s from a monotonically growing byte counter, sample to sample, against a capacity log.

    `read(..., advance=True)` measures since the last advancing read and moves the baseline there
    (the recorded timeseries); `advance=False` measures the same way but leaves the baseline (a
    snapshot published at once for a control message), so the recorded intervals stay whole. A
    counter that went backwards (a restarted relay) re-bases at 0 bit/s; an interval under
    `min_interval_s` repeats the last sample. `set_capacity` logs a link change at its time; a change
    that lands somewhere within a call is logged as the higher of both at its start, then the new one
    at its end. The slack is the widest of every link the meter has seen (a bound, never too tight).
    """

    def __init__(self, capacity_bit_per_s: float | None, slack: LinkSlack = FLUID, *, t_s: float = 0.0,
                 min_interval_s: float = MIN_RATE_INTERVAL_S) -> None:
        self.slack, self.min_interval_s = slack, min_interval_s
        self._times: list[float] = [-math.inf]  # capacity log: _capacities[i] holds from _times[i]
        self._capacities: list[float | None] = [capacity_bit_per_s]
        self._base: CounterRead | None = None
        self.last = EgressSample(None, t_s, t_s, None, None)

    def set_capacity(self, t_s: float, capacity_bit_per_s: float | None, slack: LinkSlack | None = None) -> None:
        check_finite("link change time", t_s)
        self._times.append(max(t_s, self._times[-1]))
        self._capacities.append(capacity_bit_per_s)
        if slack is not None:
            self.slack = self.slack.widest(slack)

    def read(self, read: CounterRead, *, advance: bool = True) -> EgressSample:
        """The rate since the baseline read; TelemetryError if it is above the link's capacity."""
        check_finite("egress sample time", read.end_s)
        base = self._base
        if base is None or read.total_bytes < base.total_bytes:
            peak, mean = self._capacity(read.start_s, read.end_s)
            sample = EgressSample(None if base is None else 0.0, read.start_s, read.end_s, peak, mean)
        elif read.end_s - base.start_s < self.min_interval_s:
            return self.last
        else:
            since, until = base.start_s, read.end_s
            num_bytes = read.total_bytes - base.total_bytes
            peak, mean = self._capacity(since, until)
            sample = EgressSample(num_bytes * 8 / (until - since), since, until, peak, mean)
            self._check(sample, num_bytes, read.total_bytes)
        if advance or base is None:
            self._base, self.last = read, sample
            self._forget(read.start_s - self.slack.lag_s)
        return sample

    def _capacity(self, since_s: float, until_s: float) -> tuple[float | None, float | None]:
        """(peak, time-weighted mean) of the capacity in force over [since_s, until_s]; peak looks
        `slack.lag_s` further back, for the bytes still on their way from before a change."""
        times = self._times
        first = max(bisect.bisect_right(times, since_s - self.slack.lag_s) - 1, 0)
        last = max(bisect.bisect_right(times, until_s) - 1, 0)
        window = self._capacities[first:last + 1]
        if any(c is None for c in window):
            return None, None
        peak = max(window)  # type: ignore[type-var]
        if until_s <= since_s:
            return peak, peak
        mean_from, bits = max(bisect.bisect_right(times, since_s) - 1, 0), 0.0
        for i in range(mean_from, last + 1):
            start, end = max(times[i], since_s), min(times[i + 1] if i + 1 < len(times) else until_s, until_s)
            bits += self._capacities[i] * max(end - start, 0.0)  # type: ignore[operator]
        return peak, bits / (until_s - since_s)

    def _check(self, sample: EgressSample, num_bytes: float, total_bytes: float) -> None:
        """A sample above what the link could carry over its interval is a bug: refuse it."""
        peak = sample.peak_capacity_bit_per_s
        if peak is None:
            return
        slack = self.slack
        interval_s = sample.until_s - sample.since_s
        allowed_bits = peak * (interval_s + slack.burst_s) + (slack.burst_bytes + _ROUNDING * total_bytes) * 8
        if num_bytes * 8 > allowed_bits * (1 + _ROUNDING):
            raise TelemetryError(
                f"egress sample at t={sample.until_s:.3f}s: {sample.bit_per_s:.6g} bit/s over "
                f"[{sample.since_s:.3f}, {sample.until_s:.3f}] s is {num_bytes * 8 / (peak * interval_s):.3g}x "
                f"the link's {peak:.6g} bit/s (at most {allowed_bits / interval_s:.6g} bit/s with the link's "
                "granularity); a sample above its link's capacity is a bug in the sampler: report this run")

    def _forget(self, before_s: float) -> None:
        """Drop capacity entries no later interval can reach (the one in force at `before_s` stays)."""
        keep_from = bisect.bisect_right(self._times, before_s) - 1
        if keep_from > 0:
            del self._times[:keep_from], self._capacities[:keep_from]
