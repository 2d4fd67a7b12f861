"""A model of a saturated shaped link for the live loops' snapshot tests, and the loops around it.

`ModelLink` stands in for the Topology the loops read: its byte counter is the exact integral of
the capacity in force over wall-clock time (every byte the shaper lets through, none late), so any
egress a snapshot reports above that capacity is the snapshot's error, never the link's. A read
samples the counter at once and then takes `read_delay_s` to answer (a relay answering over a socket
on a loaded machine, or a loop that resumes late), stamped with the instant it was read when
`stamps` (as a relay stamps its answer); a link change lands `update_delay_s` into its call, as a
relay's reshape does.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path

from emulator.live.gateway import Gateway, GatewaySettings
from emulator.live.loops import RunLoops
from emulator.live.nodes import NodeTable
from emulator.net.backend import TO_LOCAL, DirectionCounters, LinkCounters
from emulator.net.spec import LinkSpec
from emulator.net.topology import Topology
from emulator.plane import make_control_plane
from emulator.run.board import NodeBoard
from emulator.run.ending import EndPolicy
from emulator.scenario import Scenario, parse_scenario
from emulator.telemetry.control_messages import ControlCommand
from emulator.telemetry.schemas import MetricsSnapshot

ROOT = Path(__file__).resolve().parents[3]
# live-bandwidth-drop's shape, with the short-term scheduler on: the loops as a class would run them
SCENARIO = {
    "name": "egress-truth", "engine": "live", "seed": 2, "duration_s": 60,
    "model": {"preset": "kimi-linear-mini", "size": "small"},
    "clusters": {"remote": {"instances": 1, "device": "cpu"},
                 "local": {"instances": 2, "device": "cpu", "prefill_instances": 1, "decode_max_batch": 8}},
    "link": {"bandwidth_mbit": 50, "delay_ms": 10},
    "router": {"policy": "prfaas", "threshold_tokens": "auto"},
    "scheduler": {"short_term": {"enabled": True, "interval_s": 3}, "long_term": {"enabled": False}},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 0.5},
                 "input_len": {"kind": "uniform", "min": 256, "max": 4096},
                 "output_len": {"kind": "fixed", "tokens": 16}},
}


class ModelLink:
    """Topology's `spec`, `counters` and `update`, on a fluid link that is always busy."""

    mtu, uses_netns = 9000, True

    def __init__(self, spec: LinkSpec) -> None:
        self.spec = spec
        self._lock = threading.Lock()
        self._since = time.monotonic()
        self._bytes = 0.0  # carried up to `_since`
        self.read_delays_s: deque[float] = deque()  # per read, in order; then `read_delay_s`
        self.read_delay_s = 0.002  # a relay's round trip
        self.update_delay_s = 0.05
        self.stamps = False
        self.changes: list[tuple[float, float | None]] = []  # (monotonic time it took effect, bit/s)

    def _rate_bytes_per_s(self) -> float:
        return self.spec.to_local.rate_bytes_per_s

    def _capacity_bit_per_s(self) -> float | None:
        rate = self._rate_bytes_per_s()
        return None if rate == float("inf") else rate * 8

    def peak_bit_per_s(self, since_monotonic: float, until_monotonic: float, first: float | None) -> float | None:
        """The highest capacity in force over the interval, from the changes as they took effect."""
        in_force = [first] + [c for t, c in self.changes if t <= since_monotonic]
        window = [in_force[-1]] + [c for t, c in self.changes if since_monotonic < t <= until_monotonic]
        return None if None in window else max(window)  # type: ignore[type-var]

    def _carry(self) -> float:
        """Bytes so far (the lock held): the capacity integrated up to now."""
        now = time.monotonic()
        self._bytes += (now - self._since) * self._rate_bytes_per_s()
        self._since = now
        return self._bytes

    def counters(self) -> LinkCounters:
        with self._lock:
            total, at = int(self._carry()), self._since
            delay_s = self.read_delays_s.popleft() if self.read_delays_s else self.read_delay_s
        time.sleep(delay_s)
        return LinkCounters({TO_LOCAL: DirectionCounters(bytes=total)}, at if self.stamps else None)

    def update(self, spec: LinkSpec) -> None:
        time.sleep(self.update_delay_s / 2)
        with self._lock:
            self._carry()
            self.spec = spec
            self.changes.append((self._since, self._capacity_bit_per_s()))
        time.sleep(self.update_delay_s / 2)


class RecordingBus:
    """The loops' bus: keeps what they publish and hands them the commands a test queues."""

    def __init__(self) -> None:
        self.metrics: list[MetricsSnapshot] = []
        self.queue: asyncio.Queue[ControlCommand | None] = asyncio.Queue()

    async def publish_metrics(self, snapshot: MetricsSnapshot) -> bool:
        self.metrics.append(snapshot)
        return True

    async def publish_event(self, event: object) -> bool:
        return True

    async def commands(self) -> AsyncIterator[ControlCommand]:
        while (command := await self.queue.get()) is not None:
            yield command


def make_loops(link: ModelLink | Topology, scenario: Scenario | None = None) -> tuple[RunLoops, RecordingBus]:
    """RunLoops of a real gateway and control plane (no worker is started) over `link`."""
    scenario = scenario or parse_scenario(SCENARIO, ROOT)
    plane = make_control_plane(scenario)
    board = NodeBoard(scenario.clusters.remote.instances, scenario.clusters.local.instances, plane.n_p)
    nodes = NodeTable(board, [f"n{slot}" for slot in board.slots])
    bus = RecordingBus()
    gateway = Gateway(GatewaySettings("egresstest", scenario.seed, scenario.prefix_cache.block_tokens),
                      plane, nodes, lambda cluster, port: ("127.0.0.1", port), bus,
                      EndPolicy.of(scenario.duration_s, scenario.drain_s))

    async def announce(state: str, note: str) -> None:
        return None

    loops = RunLoops(scenario, gateway, link, None, bus, [], announce)  # type: ignore[arg-type]
    return loops, bus
