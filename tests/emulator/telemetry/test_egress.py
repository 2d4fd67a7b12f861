"""The egress meter: rates by hand, the widest interval of a bracketed read, a peek that leaves the
baseline, a link change measured against both capacities, and the refusal of a sample above the
link's capacity (issue 26); then a property: on a model shaped link, reads at any phase, with any
latency, around link changes at any phase, are never above capacity and never refused."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from emulator.errors import TelemetryError
from emulator.telemetry.egress import CounterRead, EgressMeter, LinkSlack

at = CounterRead.at


def test_rate_between_reads_by_hand() -> None:
    meter = EgressMeter(None)
    assert meter.read(at(0.0, 0)).bit_per_s is None  # one read: no interval yet
    assert meter.read(at(2.0, 25_000_000)).bit_per_s == pytest.approx(100e6)  # 200 Mbit over 2 s
    assert meter.read(at(2.0, 26_000_000)).bit_per_s == pytest.approx(100e6)  # same instant: the last
    assert meter.read(at(3.0, 26_250_000)).bit_per_s == pytest.approx(10e6)  # counted from t = 2.0
    assert meter.read(at(4.0, 1_000)).bit_per_s == 0.0  # counter reset: re-base, never negative
    assert meter.read(at(5.0, 126_000)).bit_per_s == pytest.approx(1e6)


def test_a_rate_over_a_subnormal_interval_stays_finite() -> None:
    """8,000 bit / 1e-310 s was inf: an interval under 1 ms repeats the last sample, and the next
    is counted over the whole interval."""
    meter = EgressMeter(None)
    meter.read(at(0.0, 0))
    assert meter.read(at(1e-310, 1_000)).bit_per_s is None
    assert meter.read(at(5e-4, 2_000)).bit_per_s is None
    assert meter.read(at(1.0, 125_000)).bit_per_s == pytest.approx(1e6)  # counted from t = 0


def test_a_bracketed_read_counts_over_the_widest_interval() -> None:
    """A read that answered 0.25 s late: its bytes may have crossed from the previous read's start to
    its own end, so the rate is counted over that, and can only come out low."""
    meter = EgressMeter(100e6)
    meter.read(CounterRead(1.0, 1.001, 0))
    sample = meter.read(CounterRead(2.0, 2.25, 1_250_000))
    assert (sample.since_s, sample.until_s) == (1.0, 2.25)
    assert sample.bit_per_s == pytest.approx(10e6 / 1.25)


def test_a_peek_measures_since_the_baseline_and_leaves_it() -> None:
    meter = EgressMeter(100e6, min_interval_s=0.1)
    meter.read(at(0.0, 0))
    meter.read(at(1.0, 1_250_000))  # 10 Mbit/s
    soon = meter.read(at(1.05, 1_400_000), advance=False)
    assert (soon.bit_per_s, soon.since_s, soon.until_s) == (pytest.approx(10e6), 0.0, 1.0)  # the last sample
    peek = meter.read(at(1.5, 2_500_000), advance=False)
    assert (peek.bit_per_s, peek.since_s) == (pytest.approx(20e6), 1.0)
    after = meter.read(at(2.0, 2_500_000))
    assert (after.bit_per_s, after.since_s) == (pytest.approx(10e6), 1.0)  # the peek moved nothing


def test_a_link_change_is_measured_against_both_capacities() -> None:
    """100 -> 10 Mbit/s at t = 1.3 within the sample [1, 2]: 37 Mbit crossed, which is the
    interval's whole offer (utilization 1), above the new capacity and below the old."""
    meter = EgressMeter(100e6)
    meter.read(at(1.0, 0))
    meter.set_capacity(1.3, 10e6)
    sample = meter.read(at(2.0, 4_625_000))
    assert sample.bit_per_s == pytest.approx(37e6)
    assert (sample.peak_capacity_bit_per_s, sample.mean_capacity_bit_per_s) == (100e6, pytest.approx(37e6))
    assert sample.utilization == pytest.approx(1.0)
    after = meter.read(at(3.0, 4_625_000 + 1_250_000))
    assert (after.bit_per_s, after.peak_capacity_bit_per_s) == (pytest.approx(10e6), 10e6)
    with pytest.raises(TelemetryError, match=r"^egress sample at t=4.000s: 2e\+07 bit/s over \[3.000, 4.000\] s "
                                             r"is 2x the link's 1e\+07 bit/s"):
        meter.read(at(4.0, 4_625_000 + 3_750_000))


def test_the_issue_sample_is_refused_naming_it() -> None:
    """The classroom-basic row: a read stamped 0.3 s after its bytes were counted, then the next read
    1.2 ms later, on a 50 Mbit/s link: 13 Gbit/s, which the meter refuses in one line."""
    meter = EgressMeter(50e6, LinkSlack(lag_s=0.01, burst_s=0.1, burst_bytes=18_000))
    meter.read(at(49.0, 0))
    meter.read(at(49.798, 3_125_000))  # counted at 49.5, stamped at 49.798
    with pytest.raises(TelemetryError, match=r"^egress sample at t=49.799s: 1.2\d+e\+10 bit/s over "
                                             r"\[49.798, 49.799\] s is 2\d\dx the link's 5e\+07 bit/s") as caught:
        meter.read(at(49.7992, 3_125_000 + 1_868_750))  # 0.299 s of bytes
    assert "\n" not in str(caught.value)


def test_propagation_lag_and_packets_are_the_links_granularity() -> None:
    # 100 -> 10 Mbit/s at 1.98 on a 50 ms link: [2, 3] delivers what crossed the wire in [1.95, 2.95]
    late = 3_000_000 / 8 + 9_700_000 / 8
    lagged = EgressMeter(100e6, LinkSlack(lag_s=0.05))
    lagged.read(at(1.0, 0))
    lagged.set_capacity(1.98, 10e6)
    lagged.read(at(2.0, 0))
    assert lagged.read(at(3.0, late)).bit_per_s == pytest.approx(12.7e6)
    fluid = EgressMeter(100e6)
    fluid.read(at(1.0, 0))
    fluid.set_capacity(1.98, 10e6)
    fluid.read(at(2.0, 0))
    with pytest.raises(TelemetryError, match="1.27x the link's 1e\\+07 bit/s"):
        fluid.read(at(3.0, late))
    # 1 kbit/s, 9000-byte packets: a window holds at most one packet more at either end
    slow = EgressMeter(1e3, LinkSlack(burst_bytes=18_000))
    slow.read(at(0.0, 0))
    assert slow.read(at(0.5, 18_000)).bit_per_s == pytest.approx(288e3)
    with pytest.raises(TelemetryError, match="at most"):
        slow.read(at(1.0, 18_000 + 27_000))


def test_an_unshaped_interval_is_not_checked() -> None:
    meter = EgressMeter(None)
    meter.read(at(0.0, 0))
    meter.set_capacity(0.5, 1e6)
    sample = meter.read(at(1.0, 10**9))
    assert (sample.bit_per_s, sample.peak_capacity_bit_per_s, sample.utilization) == (8e9, None, None)
    assert meter.read(at(2.0, 10**9 + 125_000)).peak_capacity_bit_per_s == 1e6


# ---- property: a model shaped link, read at any phase with any latency, changed at any phase ----

class ModelLink:
    """Saturated: what left the wire by t is the capacity integrated up to t - lag; the counter
    counts whole packets (`packet_bytes`; 0: a fluid counter)."""

    def __init__(self, changes: list[tuple[float, float]], first: float, lag_s: float, packet_bytes: int) -> None:
        self.changes, self.first, self.lag_s, self.packet_bytes = changes, first, lag_s, packet_bytes

    def capacity_at(self, t: float) -> float:
        return next((c for at_s, c in reversed(self.changes) if at_s <= t), self.first)

    def peak(self, since: float, until: float) -> float:
        return max([self.capacity_at(since)] + [c for at_s, c in self.changes if since < at_s <= until])

    def counter(self, t: float) -> float:
        t, bits, last, capacity = t - self.lag_s, 0.0, 0.0, self.first
        for at_s, new in self.changes:
            if at_s >= t:
                break
            bits += capacity * max(at_s - last, 0.0)
            last, capacity = max(at_s, 0.0), new
        bits += capacity * max(t - last, 0.0)
        sent = bits / 8
        return sent if not self.packet_bytes else math.floor(sent / self.packet_bytes) * self.packet_bytes


capacities = st.floats(1e3, 4e11)  # bit/s: the schema's 0.001 Mbit/s to 400 Gbit/s


@st.composite
def scenes(draw: st.DrawFn) -> tuple[ModelLink, list[tuple[float, str, object]]]:
    """A link, and what the loop does in the order it does it: (loop time, op, argument)."""
    lag_s = draw(st.sampled_from([0.0, 0.001, 0.05, 0.2]))
    packet_bytes = draw(st.sampled_from([0, 1, 1500, 9000, 65536]))
    first = draw(capacities)
    ops: list[tuple[float, str, object]] = []
    changes: list[tuple[float, float]] = []
    t, capacity = 0.0, first
    for _ in range(draw(st.integers(2, 30))):
        t += draw(st.floats(0.0, 0.6))  # the loop's next turn
        if draw(st.booleans()) and draw(st.integers(0, 3)) == 0:  # a link change: lands within its call
            new, took = draw(capacities), draw(st.floats(0.0, 0.3))
            lands = t + took * draw(st.floats(0.0, 1.0))
            changes.append((lands, new))
            ops += [(t, "change", max(capacity, new)), (t + took, "change", new)]
            capacity, t = new, t + took
            continue
        latency = draw(st.floats(0.0, 0.4))  # a relay answering late, or a loop resuming late
        counted = t + latency * draw(st.floats(0.0, 1.0))
        ops.append((t + latency, "read", (t, counted, draw(st.booleans()))))
        t += latency
    return ModelLink(changes, first, lag_s, packet_bytes), ops


@settings(max_examples=200, deadline=None)
@given(scenes())
def test_reads_at_any_phase_around_changes_never_exceed_capacity(scene: tuple[ModelLink, list]) -> None:
    link, ops = scene
    slack = LinkSlack(lag_s=link.lag_s, burst_bytes=2 * link.packet_bytes)
    meter = EgressMeter(link.first, slack)
    for _, op, arg in ops:
        if op == "change":
            meter.set_capacity(_, arg)  # type: ignore[arg-type]
            continue
        start, counted, advance = arg  # type: ignore[misc]
        total = link.counter(counted)
        sample = meter.read(CounterRead(start, _, total), advance=advance)  # refuses none
        if sample.bit_per_s:
            interval = sample.until_s - sample.since_s
            # a packet at either end, and the float model's rounding (1e-9 of its total)
            extra_bits = 16 * link.packet_bytes + 8e-9 * total
            bound = link.peak(sample.since_s - link.lag_s, sample.until_s) + extra_bits / interval
            assert sample.bit_per_s <= bound * (1 + 1e-9)
