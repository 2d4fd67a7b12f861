"""The concurrent loops of a running live scenario: arrivals, timeline, metrics, scheduler, knobs.

Each loop is short and owns one concern; `run` starts them together and ends the run when every
request has ended, when the drain deadline passes, or when the operator stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import statistics
from collections.abc import Awaitable, Callable
from typing import Any

from emulator.control.types import RequestSpec
from emulator.errors import TelemetryError
from emulator.knobs import timeline_event
from emulator.live.gateway import Gateway
from emulator.live.knobs import knob_state
from emulator.live.launcher import WorkerProcesses
from emulator.live.pacing import WorkloadClock
from emulator.live.teardown import BUDGET_S, Step, in_thread, settle
from emulator.net.backend import TO_LOCAL
from emulator.net.shaped_stream import MAX_CHUNK_BYTES
from emulator.net.spec import LinkSpec
from emulator.net.topology import Topology
from emulator.run import protocol as ev, timeline
from emulator.run.feed import Interval
from emulator.run.steering import Steering
from emulator.scenario import Scenario
from emulator.telemetry.bus import TelemetryBus
from emulator.telemetry.egress import CounterRead, EgressMeter, LinkSlack
from emulator.telemetry.schemas import MAX_NOTE_CHARS, MetricsSnapshot, NoteEvent, QueueDepths
from emulator.telemetry.timeseries import BIT_PER_MBIT
from emulator.workload.build import num_due

log = logging.getLogger(__name__)
METRICS_PERIOD_S = 0.5  # >= 2 Hz, as design.md asks
MIN_EGRESS_INTERVAL_S = METRICS_PERIOD_S / 5  # a control snapshot sooner repeats the recorded rate
SHAPER_STALL_S = 0.1  # a relay's writer late by this much catches up in a burst (measured: see link_slack)
SCHEDULER_PERIOD_S = 1.0


class RunLoops:
    def __init__(self, scenario: Scenario, gateway: Gateway, topology: Topology, workers: WorkerProcesses,
                 bus: TelemetryBus, requests: list[RequestSpec],
                 announce: Callable[[str, str], Awaitable[None]]) -> None:
        self.scenario, self.gateway, self.topology, self.workers, self.bus = scenario, gateway, topology, workers, bus
        self.requests = requests
        self.announce = announce  # publishes a status message (state, note)
        arrival = scenario.workload.arrival
        self.clock = WorkloadClock(arrival.rate_per_s if arrival is not None else None)
        self.steering = Steering(gateway.core, topology.spec, can_pause=True)
        gateway.run_action = self._run_action
        def meter() -> EgressMeter:
            return EgressMeter(_capacity(topology.spec), link_slack(topology), t_s=gateway.now(),
                               min_interval_s=MIN_EGRESS_INTERVAL_S)

        self.egress = meter()  # the recorded timeseries' window
        self.tick_egress = meter()  # the scheduler's: its link reading spans the period since its last tick
        self._last_read: CounterRead | None = None  # the link counter as the last snapshot read it
        self.egress_refused: list[str] = []  # samples above the link's capacity: a sampler bug, tests hold it empty
        self._snapshotting = asyncio.Lock()  # one snapshot at a time: counter reads reach the meter in order
        self.snapshots: list[MetricsSnapshot] = []  # the recorded timeseries: one per METRICS_PERIOD_S
        self.latest: MetricsSnapshot | None = None  # what was last published (knobs publish at once)
        self.link_bytes_to_local: int | None = None  # as of the last snapshot: the record needs no relay
        self.decisions: list[str] = []
        self.knob_changes: list[str] = []
        self.control_events: list[dict[str, Any]] = []  # applied control messages, as timeline events
        self.duration_s = 0.0
        self._arrivals_done = asyncio.Event()
        self._ended = asyncio.Event()  # every loop checks it: a swallowed cancellation cannot keep one going
        self._tasks: list[asyncio.Task] = []

    async def run(self, stop: asyncio.Event, progress: Callable[[int, int, float], None] | None) -> str:
        """Run until the scenario ends or `stop` is set; the caller then calls `stop_loops`."""
        self._tasks = [asyncio.create_task(coro, name=f"loop-{coro.__name__.strip('_')}") for coro in (
            self._drive(), self._timeline(), self._metrics(), self._schedule(), self._commands())]
        return await self._wait_for_end(stop, progress, self._tasks)

    async def stop_loops(self) -> list[str]:
        """End arrivals and every loop, then record a last snapshot; returns the loops that did not end.

        Cancelling once is not enough: on CPython 3.11 a cancellation that lands as a publish
        completes is swallowed inside `asyncio.wait_for` (gh-86296), and a loop that only ends by
        cancellation then runs, and publishes, forever. So the loops also watch `_ended`, and
        `settle` cancels again until each has ended."""
        self.duration_s = self.gateway.now()
        self._ended.set()
        self.clock.pause()  # no arrival is admitted from here on
        stuck = await settle(self._tasks, BUDGET_S[Step.LOOPS])
        await self._snapshot(record=True)
        return [task.get_name() for task in stuck]

    async def _wait_for_end(self, stop: asyncio.Event, progress, tasks: list[asyncio.Task]) -> str:
        """Until the core ends the run (emulator.run.ending: every request ended after the
        arrivals, or the drain is over) or `stop` is set."""
        total, gateway, core = num_due(self.requests, self.scenario), self.gateway, self.gateway.core
        while True:
            for task in tasks:  # a loop that died is a bug: end the run loudly, not at the deadline
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise task.exception()
            if progress is not None:
                progress(len(core.records), total, gateway.now())
            if stop.is_set():
                return "run interrupted by a signal before this request ended"
            if self._arrivals_done.is_set() and not core.arrivals_over:
                await gateway.execute(core.end_arrivals(gateway.now()))
            if core.arrivals_over and core.end_reason is None and gateway.now() > core.ending.end_s:
                await gateway.execute(core.drain_over(gateway.now()))
            if core.end_reason is not None:
                return core.end_reason
            gateway.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gateway.changed.wait(), 0.5)

    async def _drive(self) -> None:
        """Admit each request when its (possibly rescaled) arrival time comes, until the run's
        duration is over (open loop: the list reaches past it, for a rate knob turned up)."""
        try:
            for spec in self.requests:
                left_s = self.scenario.duration_s - self.gateway.now()
                try:
                    await asyncio.wait_for(self.clock.wait_until(spec.arrival_s), max(left_s, 0.0))
                except TimeoutError:
                    return  # due after the duration: arrivals are over
                if self._ended.is_set():
                    return
                await self.gateway.admit(spec)
        finally:
            self._arrivals_done.set()
            self.gateway.changed.set()

    async def _timeline(self) -> None:
        for event in self.scenario.timeline:
            await asyncio.sleep(max(0.0, event.at_s - self.gateway.now()))
            if self._ended.is_set():
                return
            if event.burst is not None:
                continue  # part of the arrivals already
            await self.gateway.execute(self.steering.timeline(event))
            await self._snapshot(record=False)

    async def _update_link(self, spec: LinkSpec) -> None:
        """Reshape the link off the loop: a relay or netlink request may take seconds on a loaded
        machine, and metrics, knobs and workers must keep flowing meanwhile."""
        old, meters = self.topology.spec, (self.egress, self.tick_egress)
        during, slack = _peak(_capacity(old), _capacity(spec)), link_slack(self.topology, spec)
        for meter in meters:
            meter.set_capacity(self.gateway.now(), during, slack)
        try:
            await in_thread(lambda: self.topology.update(spec))
        finally:  # in force from somewhere within the call: the meter allows the higher until its end
            for meter in meters:
                meter.set_capacity(self.gateway.now(), _capacity(self.topology.spec))

    async def _run_action(self, act: ev.Action) -> None:
        """What the core asks of the run outside its requests and nodes: the real link, the
        wall-clock arrivals, a worker's process, the logs, the end."""
        if isinstance(act, ev.ReshapeLink):
            await self._update_link(act.spec)
            self.steering.link = self.topology.spec  # as the link now stands
        elif isinstance(act, ev.SetArrivalRate):
            self.clock.set_rate(act.rate_per_s)
        elif isinstance(act, ev.PauseArrivals):
            (self.clock.resume if act.resume else self.clock.pause)()
        elif isinstance(act, ev.KillNode | ev.RestartNode):
            self._node_process(act)
        elif isinstance(act, ev.Note):
            await self._note(act.source, act.words, self.decisions if act.source == "scheduler" else self.knob_changes)
        elif isinstance(act, ev.EndRun):
            self.gateway.changed.set()

    def _node_process(self, act: ev.KillNode | ev.RestartNode) -> None:
        """Kill or restart a worker's process; its connection closing (or a new hello) tells the
        gateway, which hands the run core the node loss (or return)."""
        spawn_name = self.gateway.nodes.at(act.slot).spawn_name
        done = self.workers.kill(spawn_name) if isinstance(act, ev.KillNode) else self.workers.restart(spawn_name)
        if not done:
            log.info("%s %s: %s", "kill" if isinstance(act, ev.KillNode) else "restart", spawn_name,
                     "not running" if isinstance(act, ev.KillNode) else "still running")

    async def _commands(self) -> None:
        async for command in self.bus.commands():
            if self._ended.is_set():
                return
            acts = self.steering.command(command)
            note = acts[-1]
            assert isinstance(note, ev.Note)
            if not note.refused and (event := timeline_event(command, self.gateway.now())) is not None:
                self.control_events.append(event)
            await self.gateway.execute(acts)
            # publish the effect at once (knob-to-effect is measured on it); the recorded timeseries
            # keeps its METRICS_PERIOD_S cadence, so a flood of commands cannot grow it
            await self._snapshot(record=False)
            await self.announce("running", f"control: {note.words}")  # the status topic says what it took

    async def _metrics(self) -> None:
        while not self._ended.is_set():
            await self._snapshot(record=True)
            await asyncio.sleep(METRICS_PERIOD_S)

    async def _snapshot(self, record: bool) -> None:
        """Publish a snapshot now; keep it in the recorded timeseries when `record`, whose samples
        alone move the egress baseline (a control message's snapshot measures since the last one).

        Snapshots take turns, and each is stamped by its counter read's own bracket: a read that
        answers late, or a loop that resumes it late, once divided 0.3 s of bytes by the
        milliseconds to the next snapshot's read (issue 26)."""
        async with self._snapshotting:
            read = await in_thread(self._read_link)  # the relay answers over a socket: off the loop
            self._last_read = read
            try:
                sample = self.egress.read(read, advance=record)
            except TelemetryError as err:  # never shown nor kept; the next sample spans this interval too
                self.egress_refused.append(str(err))
                log.warning("%s", err)
                return
            gateway, spec, t_s = self.gateway, self.topology.spec, max(read.end_s, 0.0)
            retrans, rtt = self._link_view()
            depths = gateway.nodes.queue_depths()
            snapshot = MetricsSnapshot(
                run_id=gateway.settings.run_id, t_s=t_s,
                ttft_p50_s=gateway.core.ttft.percentile(50, t_s), ttft_p90_s=gateway.core.ttft.percentile(90, t_s),
                requests=gateway.counts(), queues=QueueDepths(**depths), egress_bit_per_s=sample.bit_per_s or 0.0,
                link_capacity_bit_per_s=_capacity(spec), link_utilization=sample.utilization,
                retrans_rate=retrans, rtt_ms=rtt, threshold_tokens=gateway.router.config.threshold_tokens,
                roles=gateway.nodes.roles(), devices=gateway.nodes.devices(), hosts=gateway.nodes.hosts(), link=_link_fields(spec),
                knobs=knob_state(gateway.core.state, gateway.scheduler is not None, self.clock),
            )
            self.latest = snapshot
            if record:
                self.snapshots.append(snapshot)
            await self.bus.publish_metrics(snapshot)

    def _read_link(self) -> CounterRead:
        """The remote -> local byte counter, bracketed by the run's clock (in a thread), or at the
        instant a relay read it when its stamp lies within the bracket (the shared monotonic clock)."""
        start_s = self.gateway.now()
        link = self.topology.counters()
        end_s = self.gateway.now()
        if link.read_at_monotonic is not None and start_s <= (at := self.gateway.rel(link.read_at_monotonic)) <= end_s:
            start_s = end_s = at
        counters = link.directions.get(TO_LOCAL)
        if counters is not None:
            self.link_bytes_to_local = counters.bytes
        return CounterRead(start_s, end_s, counters.bytes if counters is not None else 0)

    def _link_view(self) -> tuple[float | None, float | None]:
        """Retransmission rate and RTT over the remote prefill workers' senders."""
        links = [n.stats.link for n in self.gateway.nodes if n.stats is not None and n.stats.link is not None
                 and n.cluster.value == "remote"]
        if not links:
            return None, None
        return statistics.fmean(s.retrans_rate for s in links), max(s.rtt_ms for s in links)

    async def _schedule(self) -> None:
        if self.gateway.scheduler is None:
            return
        while not self._ended.is_set():
            await asyncio.sleep(SCHEDULER_PERIOD_S)
            interval = self._interval()
            if interval is not None:  # nothing measured yet: no tick
                await self.gateway.execute(self.steering.tick(self.gateway.now(), interval))

    def _interval(self) -> Interval | None:
        """The period since the last tick as the scheduler reads it: the link's goodput and
        utilization from its byte counter over that one window (the scheduler takes their ratio for
        the link's capacity: the senders' last 0.25 s of acknowledged bytes over the last snapshot's
        utilization read 165 Mbit/s on a 10 Mbit/s link), the remote senders' TCP view of loss and
        RTT, and the pools' queues. None until a snapshot has read the link."""
        snapshot, read = self.latest, self._last_read
        if snapshot is None or read is None:
            return None
        try:
            sample = self.tick_egress.read(read)
        except TelemetryError as err:  # a sampler bug, as the snapshots' (egress_refused): no reading this period
            self.egress_refused.append(str(err))
            log.warning("%s", err)
            return None
        links = [n.stats.link for n in self.gateway.nodes if n.stats and n.stats.link and n.cluster.value == "remote"]
        inflation = max((s.rtt_inflation for s in links), default=1.0)
        q = snapshot.queues
        return Interval((sample.bit_per_s or 0.0) / 8, sample.utilization or 0.0, snapshot.retrans_rate or 0.0,
                        inflation, q.remote_prefill, q.local_prefill, q.decode)

    async def _note(self, source: str, what: str, into: list[str]) -> None:
        """Log and record one line of the knob or decision log, and publish it as it happens."""
        now = self.gateway.now()
        line = timeline.note(now, source, what)
        log.info("%s", line)
        into.append(line)
        await self.bus.publish_event(NoteEvent(run_id=self.gateway.settings.run_id, t_s=max(now, 0.0),
                                               source=source, what=what[:MAX_NOTE_CHARS]))


def link_slack(topology: Topology, spec: LinkSpec | None = None) -> LinkSlack:
    """What the live link's byte counter may show beyond its capacity (emulator.telemetry.egress):
    bytes on their way arrive up to delay + jitter after a change; jitter bunches deliveries (twice
    the jitter); a relay's writer that falls behind catches up in a burst (SHAPER_STALL_S, several
    times the longest lateness seen on a loaded 2-core machine); a packet, or a proxy relay's chunk,
    is counted whole at either end of a window."""
    shape = (spec or topology.spec).to_local
    packet_bytes = topology.mtu if topology.uses_netns else MAX_CHUNK_BYTES
    return LinkSlack(lag_s=shape.delay_s + shape.jitter_s, burst_s=2 * shape.jitter_s + SHAPER_STALL_S,
                     burst_bytes=2 * packet_bytes)


def _capacity(spec: LinkSpec) -> float | None:
    """The remote -> local shaping rate in bit/s; None when unshaped."""
    return None if spec.bandwidth_mbit is None else spec.bandwidth_mbit * BIT_PER_MBIT


def _peak(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(a, b)


def _link_fields(spec: LinkSpec) -> dict[str, float | None]:
    return {k: v for k, v in spec.model_dump(exclude={"reverse"}).items() if v is None or isinstance(v, int | float)}
