"""One live run from start to teardown: topology, broker, workers, gateway, the loops, the record.

`run_live` is what `python -m emulator run --engine live` calls. Set-up happens in order and every
piece is undone in reverse, whatever happens in between (end of scenario, Ctrl-C, SIGTERM, a crash):
open requests end `failed` with the reason, workers stop, the broker stops, namespaces go.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emulator.auto_rate import is_auto
from emulator.control.types import Cluster, FailReason
from emulator.errors import PrfaasError, RecordError
from emulator.live.calibration import Calibration, calibration_lengths, resolve_live_workload
from emulator.live.capacity import check_live_start
from emulator.live.gateway import Gateway, GatewaySettings
from emulator.live.host_topology import make_topology
from emulator.live.launcher import WorkerProcesses, plan_workers, speed_notes
from emulator.live.loops import RunLoops
from emulator.live.nodes import NodeState, NodeTable
from emulator.live.placement import Placement, place_workers
from emulator.live.ray_hosting import RayHosting, open_hosting
from emulator.live.stop_signals import StopEvent, stop_on_signals
from emulator.live.teardown import BUDGET_S, Step, Teardown, in_thread, settle
from emulator.net.backend import TO_LOCAL
from emulator.net.ledger import Ledger
from emulator.net.names import check_run_id, new_run_id
from emulator.net.topology import LOCAL, Topology
from emulator.plane import ControlPlane, make_control_plane
from emulator.run.board import NodeBoard
from emulator.run.ending import EndPolicy
from emulator.run.meta import make_run_meta
from emulator.scenario import Scenario
from emulator.telemetry.atomic_write import make_dir, write_atomic
from emulator.telemetry.broker import EmbeddedBroker
from emulator.telemetry.bus import TelemetryBus
from emulator.telemetry.outcome import RunOutcome, stopped_detail, stopped_reason
from emulator.telemetry.recorder import RunRecorder
from emulator.telemetry.run_meta import EngineKind, RunMeta
from emulator.telemetry.schemas import StatusMessage
from emulator.wire import protocol as p
from emulator.workload.build import LIVE_RATE_HEADROOM, Workload, arrival_horizon_s, build_workload
from emulator.workload.coverage import WorkloadCoverage

log = logging.getLogger(__name__)
Progress = Callable[[int, int, float], None]  # (requests ended, total, seconds since start)
STARTUP_TIMEOUT_S = 120.0
WORKER_KILL_MARGIN_S = 0.5  # of the workers' step budget: left for SIGKILL and reaping


async def run_live(scenario: Scenario, out_dir: Path, broker_url: str | None = None,
                   progress: Progress | None = None, embedded_broker: bool = True,
                   link_backend: str = "auto", run_id: str | None = None) -> dict[str, Any]:
    """Run `scenario` on real processes and a real link; returns the summary.json document.

    `run_id` names the namespaces and MQTT topics (default: a fresh one). However the run ends, the
    teardown (emulator/live/teardown.py) runs in order with a budget per step; the record is written
    once as soon as every request has ended, before anything that can hang, and again, complete,
    after the link is gone."""
    check_live_start(scenario)  # before anything is spawned
    placement = await asyncio.to_thread(place_workers, scenario.clusters)  # before any namespace exists
    run_id = check_run_id(run_id, "run_id") if run_id is not None else new_run_id()  # RunIdError: one line
    workload = None if is_auto(scenario) else build_workload(  # auto: drawn once the workers are timed
        scenario, arrival_horizon_s(scenario, headroom=LIVE_RATE_HEADROOM))
    plane = make_control_plane(scenario)
    hosting = open_hosting(scenario, plane.n_p)  # Ray's placement preflight: one line, before anything starts
    topology = make_topology(scenario.link, run_id, hosting, plan_workers(scenario, plane.n_p), link_backend)
    broker: EmbeddedBroker | None = None
    bus: TelemetryBus | None = None
    session: LiveSession | None = None
    teardown = Teardown()
    error: BaseException | None = None
    with stop_on_signals(teardown.hurry) as stop:  # a signal ends the run and its record, never a step
        try:
            await asyncio.to_thread(topology.up)
            if broker_url is None and embedded_broker:
                broker = await asyncio.to_thread(EmbeddedBroker().start)
                Ledger.open(run_id).record("pid", pid=broker.pid, name="mqtt-broker")
                broker_url = broker.url
            bus = await TelemetryBus(broker_url, run_id, link_base=lambda: topology.spec).__aenter__()
            session = LiveSession(scenario, run_id, topology, plane, bus, out_dir, placement, teardown, hosting)
            await session.run(workload, progress, stop)
        except BaseException as err:  # the teardown below runs first; then it is raised
            error = err
        await _release(teardown, topology, bus, broker)
        doc = await session.write_record(complete=True) if session is not None and session.loops else None
    if hosting is not None:
        await asyncio.to_thread(hosting.close)
    if error is not None:
        raise error
    if not doc:  # neither write went through (disk full, read-only, ...): the one line that says why
        raise (session.record_error if session is not None else None) or RecordError(
            f"record: {str(out_dir)!r} not written; the log above says why")
    return doc


async def _release(teardown: Teardown, topology: Topology, bus: TelemetryBus | None,
                   broker: EmbeddedBroker | None) -> None:
    """The teardown's shared-infrastructure steps: telemetry, broker, link, stray tasks."""
    if bus is not None:
        await teardown.step(Step.TELEMETRY, bus.__aexit__(None, None, None))
    if broker is not None:
        pid = broker.pid
        await teardown.step(Step.BROKER, in_thread(broker.stop), kill=lambda: _kill_pid(pid, "mqtt broker"))
    relay_pid = getattr(topology.backend, "pid", None)
    await teardown.step(Step.LINK, in_thread(topology.down),
                        kill=lambda: _kill_pid(relay_pid, "link relay") if relay_pid else [])
    strays = asyncio.all_tasks() - {asyncio.current_task()}
    if strays:
        await teardown.step(Step.STRAYS, _end_strays(strays, teardown))


async def _end_strays(tasks: set[asyncio.Task], teardown: Teardown) -> None:
    """Tasks a part left running (a telemetry client, a worker connection): `asyncio.run` would
    otherwise wait for them, with one cancellation, at exit."""
    abandoned = await settle(tasks, BUDGET_S[Step.STRAYS])
    teardown.add_killed([f"task {t.get_name()} (abandoned)" for t in abandoned])


def _kill_pid(pid: int | None, what: str) -> list[str]:
    if pid is None:
        return []
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
        return [f"{what} (pid {pid})"]
    return []


class LiveSession:
    def __init__(self, scenario: Scenario, run_id: str, topology: Topology, plane: ControlPlane, bus: TelemetryBus,
                 out_dir: Path, placement: Placement, teardown: Teardown | None = None,
                 hosting: RayHosting | None = None) -> None:
        self.scenario, self.run_id, self.topology, self.plane, self.bus = scenario, run_id, topology, plane, bus
        self.placement, self.teardown, self.hosting = placement, teardown or Teardown(), hosting
        self.loops: RunLoops | None = None
        self.link_bytes_to_local: int | None = None
        self.out_dir = Path(out_dir)
        self.plans = plan_workers(scenario, plane.n_p)
        board = NodeBoard(scenario.clusters.remote.instances, scenario.clusters.local.instances, plane.n_p)
        self.nodes = NodeTable(board, [w.spawn_name for w in self.plans],  # the plans are in slot order
                               [self.placement.of(w.cluster, w.index).label for w in self.plans],
                               hosting.hosts(self.plans) if hosting else [socket.gethostname()] * len(self.plans))
        settings = GatewaySettings(run_id, scenario.seed, scenario.prefix_cache.block_tokens)
        self.gateway = Gateway(settings, plane, self.nodes, self._kv_target, bus,
                               EndPolicy.of(scenario.duration_s, scenario.drain_s))
        self.log_dir = self.out_dir / "logs"  # one file per worker, kept with the run's record
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.workers: WorkerProcesses | None = None
        self._conn_tasks: set[asyncio.Task] = set()
        self.calibration = Calibration(calibration_lengths(plane.inputs.lengths))  # for rate_per_s: auto
        self.end_reason = ""
        self.outcome = RunOutcome.FINISHED
        self.stopped_by: str | None = None  # the signal that stopped the run, once one did
        self.stopped_at_s: float | None = None
        self.coverage: WorkloadCoverage | None = None  # set by run()
        self.doc: dict[str, Any] = {}
        self.record_error: RecordError | None = None  # why the last write failed, if it did
        status = topology.status()
        self.notes = [f"link backend: {status['backend']} ({status['reason']})", *status["warnings"],
                      *speed_notes(scenario), *self.placement.notes, *([hosting.note()] if hosting else [])]
        for note in self.notes:
            log.info("%s", note)

    def _kv_target(self, cluster: Cluster, port: int) -> tuple[str, int]:
        """Remote prefill crosses the shaped link; local prefill stays inside `local`."""
        if cluster is Cluster.REMOTE:
            return self.topology.target(LOCAL, port)
        return self.topology.address(LOCAL), port

    async def run(self, workload: Workload | None, progress: Progress | None, stop: StopEvent) -> None:
        """Start the workers, run the loops, then the run's own teardown steps (the caller releases
        telemetry, the broker and the link, then calls `write_record(complete=True)`). No `workload`:
        the rate is `auto`, resolved by timing the workers once they are up (live/calibration.py)."""
        self.coverage = workload.coverage if workload is not None else None
        host = self.hosting.gateway_host if self.hosting else "127.0.0.1"  # Ray: the driver node's address
        server = await asyncio.start_server(self._serve_worker, host, 0, limit=p.STREAM_LIMIT)
        args = (self.scenario, self.topology, server.sockets[0].getsockname()[1], self.log_dir,
                Ledger.open(self.run_id), self.placement)
        self.workers = self.hosting.make_workers(self.plans, *args) if self.hosting else WorkerProcesses(*args)
        end_reason, error = "run ended", None
        try:
            await self._status("starting", "; ".join(self.notes))
            for plan in self.plans:
                self.workers.start(plan)
            await self._wait_for_workers(stop)
            if workload is None:
                await self._status("starting", "timing the workers for rate_per_s: auto")
                self.scenario, workload = await resolve_live_workload(
                    self.scenario, self.plane, self.nodes, self.calibration, stop)
            self.coverage = workload.coverage
            log.info("workload: %s", self.coverage.statement)
            self.gateway.t0 = time.monotonic()
            await self._status("running")
            self.loops = RunLoops(self.scenario, self.gateway, self.topology, self.workers, self.bus, workload.requests,
                                  self._status)
            end_reason = await self.loops.run(stop, progress)
            if stop.is_set():  # read as the loops return, with no await between: a later signal is absorbed
                self.outcome, self.stopped_by = RunOutcome.STOPPED, stop.by
        except BaseException as err:  # raised again once the teardown has run
            end_reason, error, self.outcome = f"run failed: {err}", err, RunOutcome.FAILED
        await self._tear_down(server, end_reason, error)
        if error is not None:
            raise error

    async def _tear_down(self, server: asyncio.Server, end_reason: str, error: BaseException | None) -> None:
        """Stop arrivals, fail what is open, write the record, stop workers and their connections."""
        t, self.end_reason = self.teardown, end_reason
        if self.loops is not None:
            stuck = await t.step(Step.LOOPS, self.loops.stop_loops())
            t.add_killed([f"loop {name} (abandoned)" for name in stuck or []])
        stopped = self.outcome is RunOutcome.STOPPED
        detail = stopped_detail(self.stopped_by) if stopped else end_reason
        note = f"stopping ({self.stopped_by or 'stop'}): what is open fails `interrupted`" if stopped else end_reason
        await t.step(Step.STATUS, self._status("failed" if error else "draining", note))
        reason = open_fail_reason(self.outcome)
        await t.step(Step.FAIL_OPEN, self.gateway.stop(reason, detail))  # also marks the core stopping
        self._fail_rest(reason, detail)
        if stopped:
            self.stopped_at_s = self.loops.duration_s if self.loops is not None else max(self.gateway.now(), 0.0)
            num_open = sum(r.fail_reason == FailReason.INTERRUPTED for r in self.gateway.core.records)
            self.end_reason = stopped_reason(self.stopped_by, self.stopped_at_s, num_open)
        if self.loops is not None:  # before anything that can hang: workers, the broker, the link
            await self.write_record(complete=False)
        await t.step(Step.WORKERS, self._stop_workers(), kill=self.workers.kill_all)
        await t.step(Step.CONNECTIONS, self._close_connections(server))
        counters = await t.step(Step.LINK_COUNTERS, in_thread(self.topology.counters))
        if counters is not None and (crossed := counters.directions.get(TO_LOCAL)) is not None:
            self.link_bytes_to_local = crossed.bytes
        if self.loops is not None and error is None:
            summary = self.doc["summary"] if self.doc else {}
            note = (f"{summary.get('completed', 0)} completed, {summary.get('failed_count') or 0} failed; "
                    f"{self.end_reason}")
            await t.step(Step.STATUS, self._status("stopped" if stopped else "finished", note))

    def _fail_rest(self, reason: FailReason, detail: str) -> None:
        """End, without any I/O, whatever the gateway's stop did not reach within its budget."""
        self.gateway.core.stop(reason, detail, self.gateway.now())

    async def _wait_for_workers(self, stop: asyncio.Event) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not all(n.is_up for n in self.nodes) and not stop.is_set():
            if gone := self.workers.exited():
                raise PrfaasError(f"workers exited during start-up: {gone}; see logs in {self.log_dir}")
            if time.monotonic() > deadline:
                late = [n.name for n in self.nodes if not n.is_up]
                raise PrfaasError(f"workers not up after {STARTUP_TIMEOUT_S:g} s: {late}; logs in {self.log_dir}")
            self.gateway.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.gateway.changed.wait(), 1.0)

    async def _serve_worker(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One worker's control connection: a proven hello, then messages until it closes.

        A refused connection never touches a node: only an admitted one is ever a node's writer."""
        self._conn_tasks.add(asyncio.current_task())
        node: NodeState | None = None
        try:
            node = await self._admit(reader, writer)
            if node is None:
                return
            if node.role.value != node.spawn_name.split("-")[1]:  # restarted after a role flip
                await node.send(p.SetRole(role=node.role.value))
            self.gateway.changed.set()
            while (msg := await p.read_message(reader)) is not None:
                if isinstance(msg, p.Calibrated):
                    self.calibration.on_answer(node, msg)
                    continue
                try:
                    await self.gateway.on_message(node, msg)
                except Exception:  # a bug handling one message must not cost the run a healthy node
                    log.exception("gateway: handling %s from %s failed", msg.op, node.name)
        except (PrfaasError, ConnectionError, OSError) as err:
            log.warning("control connection of %s: %s", node.name if node else "a worker", err)
        finally:
            if node is not None and node.writer is writer:
                await self.gateway.node_lost(node, "its process ended or its connection closed")
            writer.close()
            self._conn_tasks.discard(asyncio.current_task())

    async def _admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> NodeState | None:
        """The node this connection proves to be, now connected; None (logged once) when refused:
        closed to make room for a newer one, no valid proof, an id this run did not start, or a node
        whose connection is still open (a restarted worker comes after its old connection closed)."""
        if self.workers is None:
            return None
        gate = self.workers.gate
        admission = await gate.admit(reader, writer)  # a handshake slot in the peer's class, then the proof
        hello, node = admission.hello, None
        if hello is not None:
            node = self.nodes.get(hello.node)
            if node is None or node.spawn_name != hello.node:
                node, admission = None, dataclasses.replace(admission, reason="not a node of this run")
            elif node.writer is not None and not node.writer.is_closing():
                node, admission = None, dataclasses.replace(admission, reason="already connected")
        if node is None:
            gate.refuse(admission.claimed, admission.reason)
            return None
        node.join(writer, hello)
        await self.gateway.node_joined(node)
        return node

    async def _stop_workers(self) -> None:
        """Shutdown over each control connection (never waiting on one that does not read), SIGTERM,
        then SIGKILL for whoever has not exited when the step's budget is nearly spent."""
        for node in self.nodes:
            if node.is_up and node.writer is not None and not node.writer.is_closing():
                with contextlib.suppress(ConnectionError, OSError):
                    node.writer.write(p.encode(p.Shutdown()))
        if self.workers is None:
            return
        self.workers.terminate_all()
        deadline = time.monotonic() + BUDGET_S[Step.WORKERS] - WORKER_KILL_MARGIN_S
        while self.workers.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self.teardown.add_killed(self.workers.kill_all())
        deadline = time.monotonic() + WORKER_KILL_MARGIN_S
        while self.workers.alive() and time.monotonic() < deadline:  # reap the killed
            await asyncio.sleep(0.02)

    async def _close_connections(self, server: asyncio.Server) -> None:
        server.close()
        abandoned = await settle(list(self._conn_tasks), BUDGET_S[Step.CONNECTIONS] / 2)
        self.teardown.add_killed([f"task {t.get_name()} (abandoned)" for t in abandoned])

    async def _status(self, state: str, note: str = "") -> None:
        log.info("run %s: %s", self.run_id, state)
        status = self.topology.status()
        await self.bus.publish_status(StatusMessage(
            run_id=self.run_id, t_s=max(self.gateway.now(), 0.0), state=state, engine="live",
            link_backend=status["backend"], link_backend_reason=status["reason"], note=note or self.notes[0],
            threshold_tokens=self.gateway.router.config.threshold_tokens, duration_s=self.scenario.duration_s,
            workload=self.coverage.statement if self.coverage is not None else ""))

    async def write_record(self, complete: bool) -> dict[str, Any]:
        """Write the run's directory; first right after every request has ended (`complete=False`),
        then again after the teardown, with its steps. Each write replaces the files whole."""
        recorder = RunRecorder(self.out_dir)
        for record in self.gateway.core.records:
            recorder.add_request(record)
        for snapshot in list(self.loops.snapshots if self.loops is not None else []):
            recorder.add_snapshot(snapshot)
        tokens = self.gateway.tokens  # completed requests' tokens, listed in arrival order
        outputs = [json.dumps({"id": r.id, "tokens": tokens[r.id]}) + "\n"
                   for r in sorted(self.gateway.core.records, key=lambda r: r.arrival_s) if r.id in tokens]
        meta = self._meta(complete)

        expect = {k.value if hasattr(k, "value") else k: v.model_dump(exclude_none=True)
                  for k, v in self.scenario.expect.items()}

        def write() -> dict[str, Any]:
            try:  # every file whole or not at all (atomic_write.py)
                make_dir(self.out_dir)
                write_atomic(self.out_dir / "outputs.jsonl", lambda path: Path(path).write_text("".join(outputs)))
                return recorder.finish(meta, expect, self.loops.duration_s if self.loops is not None else None)
            except RecordError as err:
                self.record_error = err
                raise

        doc = await self.teardown.step(Step.RECORD, in_thread(write))
        self.doc = doc or self.doc
        return self.doc

    def _meta(self, complete: bool) -> RunMeta:
        status, loops = self.topology.status(), self.loops
        link_bytes = self.link_bytes_to_local if self.link_bytes_to_local is not None else (
            loops.link_bytes_to_local if loops is not None else None)
        return make_run_meta(
            self.scenario, self.plane, engine=EngineKind.LIVE, run_id=self.run_id,
            link_backend=status["backend"], link_backend_reason=status["reason"],
            decisions=loops.decisions if loops is not None else (),
            knob_changes=loops.knob_changes if loops is not None else (), notes=self.notes,
            control_events=loops.control_events if loops is not None else (),
            end_reason=self.end_reason, outcome=self.outcome, stopped_by=self.stopped_by,
            stopped_at_s=self.stopped_at_s, workload=self.coverage.as_json() if self.coverage else None,
            engine_details={
                "link_description": status["description"], "mqtt": self.bus.status_note,
                "worker_logs": str(self.log_dir),
                "worker_pids": self.workers.pids() if self.workers else {},
                "worker_hosts": self.workers.hosts() if self.workers else {},
                "worker_devices": self.nodes.devices(),
                "link_bytes_to_local": link_bytes,
                "record": "complete" if complete else "written before the teardown; not rewritten after it",
                "teardown": self.teardown.as_list(), "teardown_killed": self.teardown.killed(),
            })


def open_fail_reason(outcome: RunOutcome) -> FailReason:
    """The tag for requests still open when the run ends: its user stopped it (a signal), the run
    failed, or it ran out of time (its drain, emulator/live/loops.py)."""
    return {RunOutcome.STOPPED: FailReason.INTERRUPTED, RunOutcome.FAILED: FailReason.RUN_FAILED}.get(
        outcome, FailReason.UNFINISHED)
