"""What drives a virtual run besides the requests' own events: arrivals played on a workload clock
whose speed the rate knob changes (as the live engine's WorkloadClock), the scenario timeline (link
changes, knobs, kills, restarts), and the 1 s sampler that records a timeseries row and feeds and
ticks the scheduler. Bursts need nothing here: they are part of the built requests.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from emulator.control.types import RequestSpec
from emulator.run import protocol as ev, timeline
from emulator.run.feed import Interval
from emulator.run.steering import Steering
from emulator.run.workload_clock import WorkloadTime
from emulator.scenario import Scenario
from emulator.scenario.parts import TimelineEvent
from emulator.telemetry.egress import CounterRead, EgressMeter
from emulator.telemetry.metrics import check_row, sorted_percentile
from emulator.virtual.core import Simulator
from emulator.virtual.gateway import Gateway
from emulator.virtual.link import LinkState
from emulator.virtual.tcp import LOSS_C, LOSS_C_AFTER_IDLE, PACKET_BYTES, WIRE_PER_BYTE, smoothed_rtt_s
from emulator.workload.build import num_due

log = logging.getLogger(__name__)
SAMPLE_PERIOD_S = 1.0
Progress = Callable[[int, int, float], None]  # (requests ended, total, simulated seconds)
StopCheck = Callable[[], str | bool | None]  # who asked the run to stop (`SIGINT`), True, or None/False to go on


class RunStopped(Exception):
    """Raised by the sampler when `StopCheck` says so: it leaves the event loop between two events,
    every entity consistent, and `simulate` fails what is open `interrupted`."""

    def __init__(self, by: str | None, at_s: float) -> None:
        super().__init__(f"stopped at t={at_s:g} s" + (f" by {by}" if by else ""))
        self.by, self.at_s = by, at_s


def link_states(spec: Any, connections: int, loss_rate_factor: float = 1.0) -> tuple[LinkState, LinkState]:
    """(remote -> local, local -> remote) of a scenario LinkSpec with `connections` TCP connections
    per transfer (transport.connections); the RTT spans both delays, the buffer is each direction's
    queue_packets of full segments, each KV byte what the shaper counts of it with its headers, the
    loss-limited rates scaled by the host's `loss_rate_factor` (profile.host)."""
    rtt_s = spec.to_local.delay_s + spec.to_remote.delay_s

    def state(way: Any) -> LinkState:
        return LinkState(way.rate_bytes_per_s, way.delay_s, way.loss_pct / 100, rtt_s, connections,
                         way.queue_packets * PACKET_BYTES, loss_c=LOSS_C * loss_rate_factor,
                         loss_c_after_idle=LOSS_C_AFTER_IDLE * loss_rate_factor, wire_per_byte=WIRE_PER_BYTE)

    return state(spec.to_local), state(spec.to_remote)


def scenario_link_states(scenario: Scenario, spec: Any) -> tuple[LinkState, LinkState]:
    """link_states of `spec` (the scenario's link, or a timeline's reshape of it) as the scenario's
    run carries it: its transport's connections, its profile's host's loss_rate_factor."""
    profile = scenario.model.measured_profile
    host = None if profile is None else profile.host
    return link_states(spec, scenario.transport.connections, 1.0 if host is None else host.loss_rate_factor)


class Arrivals:
    """Hands the gateway one request at a time, so the heap holds one pending arrival.

    The requests' `arrival_s` are workload time, played against simulated time by the run core's
    WorkloadTime (the live engine's clock too): the rate knob changes its speed, keeping the
    arrival pattern's shape, and re-plans the next arrival.
    """

    def __init__(self, sim: Simulator, gateway: Gateway, requests: list[RequestSpec],
                 base_rate_per_s: float | None, end_s: float) -> None:
        self.sim, self.gateway, self.requests = sim, gateway, requests
        self.clock = WorkloadTime(base_rate_per_s, sim.now)
        self.end_s = end_s  # the run's duration: no arrival is admitted after it (open loop)
        self.next_index = 0
        self.is_stopped = False  # the next arrival falls after end_s
        self._gen = 0

    @property
    def is_done(self) -> bool:
        return self.is_stopped or self.next_index >= len(self.requests)

    def start(self) -> None:
        self._arm()

    def set_rate(self, rate_per_s: float) -> None:
        self.clock.set_rate(rate_per_s, self.sim.now)
        self._arm()

    def _arm(self) -> None:
        """Schedule the next arrival (a generation number voids the one planned before), or the
        end of the arrivals: now when the list is spent, at the duration when the next one falls
        after it (a rate change before then re-plans)."""
        self._gen = gen = self._gen + 1
        requests, index = self.requests, self.next_index
        if index < len(requests):  # not is_done (once per request: no property call)
            at = self.clock.due_at(requests[index].arrival_s, self.sim.now)
            self.is_stopped = at >= self.end_s
            if not self.is_stopped:
                self.sim.schedule(at, self._arrive, gen)
                return
        self.sim.schedule(max(self.sim.now, self.end_s) if index < len(requests) else self.sim.now, self._over, gen)

    def _arrive(self, gen: int) -> None:
        if gen != self._gen:
            return  # re-planned by a rate change
        self.gateway.arrive(self.requests[self.next_index])
        self.next_index += 1
        self._arm()

    def _over(self, gen: int) -> None:
        if gen == self._gen:
            self.is_stopped = True
            self.gateway.arrivals_over()


class RunLoops:
    """The timeline and the sampler of one run; `samples` become timeseries.parquet rows."""

    def __init__(self, sim: Simulator, gateway: Gateway, scenario: Scenario, arrivals: Arrivals,
                 progress: Progress | None = None, stop: StopCheck | None = None) -> None:
        self.sim, self.gateway, self.scenario, self.arrivals = sim, gateway, scenario, arrivals
        self.progress = progress
        self.stop = stop  # asked once per sample (1 simulated second): a stop lands within one
        self.expected = num_due(arrivals.requests, scenario)  # the progress total, at its pace
        self.steering = Steering(gateway.core, scenario.link, can_pause=False)
        gateway.run_action = self._run_action
        self.samples: list[dict[str, float | None]] = []  # TimeseriesRow's columns, one dict a second
        self.decisions: list[str] = []
        self.knob_changes: list[str] = []
        self._last = (0.0, 0.0, 0.0)  # (t, link bytes sent, link busy seconds) at the last sample
        # the fluid link's counter, instantaneous and exact: a rate above the capacity in force over
        # its second (the higher one at a link change) is refused, as the live engine's (issue 26)
        self.egress = EgressMeter(_capacity_bit_per_s(gateway.link.state), t_s=sim.now)
        self._srtt_s = gateway.link.state.rtt_s  # the senders' smoothed RTT, held while they are idle

    def start(self) -> None:
        for event in self.scenario.timeline:
            if event.burst is None:
                self.sim.schedule(event.at_s, self._on_timeline, event)
        self.sim.schedule(self.sim.now, self._on_sample)

    # ---- sampler ----

    def _on_sample(self, _: object = None) -> None:
        now, gateway, link = self.sim.now, self.gateway, self.gateway.link
        link.sync()
        last_t, last_sent, last_busy = self._last
        dt = now - last_t
        sent, busy = link.bytes_sent - last_sent, link.busy_s - last_busy
        self._last = (now, link.bytes_sent, link.busy_s)
        egress = self.egress.read(CounterRead.at(now, link.bytes_sent)).bit_per_s
        state = link.state
        remote, local, decode, decode_active = gateway.queue_depths()
        capacity = state.rate_bytes_per_s
        has_rate = capacity < math.inf
        utilization = busy / dt if dt > 0 and has_rate else None
        queue_peak, was_sending = link.take_queue_peak()
        if was_sending:
            self._srtt_s = smoothed_rtt_s(state.rtt_s, queue_peak, capacity)
        core = gateway.core
        ttfts = core.ttft.sorted_values(now)
        completed, failed, in_flight = core.num_completed, core.num_failed, core.in_flight
        # TimeseriesRow's columns, as a dict of plain values: one per simulated second, and a dict
        # of scalars is built in place and never tracked by the cycle collector (tuples are, until
        # its first pass: a case-study run's rows cost 2 % more as TimeseriesRow tuples)
        self.samples.append({
            "t_s": now, "threshold_tokens": gateway.router.config.threshold_tokens,
            "egress_bit_per_s": egress,
            "link_capacity_bit_per_s": capacity * 8 if has_rate else None,
            "link_utilization": utilization, "queue_remote_prefill": remote, "queue_local_prefill": local,
            "queue_decode": decode, "ttft_p50_s": sorted_percentile(ttfts, 50),
            "ttft_p90_s": sorted_percentile(ttfts, 90), "in_flight": in_flight, "completed": completed,
            "failed": failed, "retrans_rate": state.loss, "rtt_ms": self._srtt_s * 1e3,
            "num_local_prefill": gateway.n_p, "num_decode_active": decode_active,
            "num_transfers_active": len(link.active),
        })
        check_row(self.samples[-1], now)  # no inf or NaN leaves the sampler (issue 25)
        if core.fed is not None and dt > 0:
            inflation = self._srtt_s / state.rtt_s if state.rtt_s > 0 else 1.0
            self._tick(now, sent / dt, utilization or 0.0, state.loss, inflation, remote, local, decode)
        if self.progress is not None:
            self.progress(completed + failed, self.expected, now)
        if self.stop is not None and (by := self.stop()):
            raise RunStopped(by if isinstance(by, str) else None, now)
        if in_flight or not self.arrivals.is_done:
            self.sim.schedule(now + SAMPLE_PERIOD_S, self._on_sample)

    def _tick(self, now: float, goodput: float, utilization: float, loss: float, rtt_inflation: float,
              remote: int, local: int, decode: int) -> None:
        """One interval's observations, then whatever loop is due (run.steering, as the live engine)."""
        interval = Interval(goodput, utilization, loss, rtt_inflation, remote, local, decode)
        self.gateway.execute(self.steering.tick(now, interval))

    def _on_timeline(self, event: TimelineEvent) -> None:
        self.gateway.execute(self.steering.timeline(event))

    def _run_action(self, act: ev.Action) -> None:
        """What the core asks of the run outside its requests and nodes: the fluid link, the
        arrival clock, the logs. (Pause and resume the core refuses: no wall clock to hold.)"""
        if isinstance(act, ev.ReshapeLink):
            to_local, to_remote = scenario_link_states(self.scenario, act.spec)
            self.gateway.link.set_state(to_local)
            self.egress.set_capacity(self.sim.now, _capacity_bit_per_s(to_local))
            self.gateway.reverse_link.set_state(to_remote)
        elif isinstance(act, ev.SetArrivalRate):
            self.arrivals.set_rate(act.rate_per_s)
        elif isinstance(act, ev.Note):
            line = timeline.note(self.sim.now, act.source, act.words)
            log.info("%s", line)
            (self.decisions if act.source == "scheduler" else self.knob_changes).append(line)
        elif isinstance(act, ev.EndRun):
            log.info("%.1f s: %s", self.sim.now, act.reason)
        elif isinstance(act, ev.PauseArrivals):
            raise AssertionError("the run core refuses pause on the virtual engine")


def _capacity_bit_per_s(state: LinkState) -> float | None:
    return state.rate_bytes_per_s * 8 if state.rate_bytes_per_s < math.inf else None
