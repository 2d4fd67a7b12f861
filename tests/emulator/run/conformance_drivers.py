"""The three engines under the conformance scripts, each watched where it acts:

- `CoreDriver`: the run core alone; what it answers.
- `LiveDriver`: the live `Gateway` with its workers' control connections replaced by writers that
  keep what is written; workers' reports are the wire messages they would send. It is watched on
  the wire (Prefill, Decode, SetRole commands), on the bus (completed / failed events) and in what
  it hands its loops (EndRun).
- `VirtualDriver`: the virtual `Gateway` with its real simulated nodes on a heap that never runs:
  each node's step is triggered by hand (a prefill's end, KV arriving, a decode's end). It is
  watched in its mechanics: which simulated node holds a request, which node object was swapped
  for a flip, the records, and the end the loops are told of.

No process, socket or sleep. Times are the script's step number (seconds); the live gateway's
workers stamp their reports on the monotonic clock, as they do.
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

from emulator.control.types import FailReason, Role
from emulator.live.gateway import Gateway as LiveGateway, GatewaySettings
from emulator.live.nodes import NodeTable
from emulator.plane import ControlPlane, make_control_plane
from emulator.run import protocol as ev
from emulator.run.board import NodeBoard
from emulator.run.core import RunCore
from emulator.run.ending import EndPolicy
from emulator.run.journey import PREFILLING, TRANSFERRING, Journey
from emulator.scenario import Scenario, parse_scenario
from emulator.virtual.core import Simulator
from emulator.virtual.costs import CostModel
from emulator.virtual.gateway import Gateway as VirtualGateway
from emulator.virtual.link import FluidLink
from emulator.virtual.loops import scenario_link_states
from emulator.virtual.nodes import DecodeNode, PrefillNode
from emulator.wire import protocol as p
from tests.emulator.run.core_case import BLOCK_TOKENS, DOC, ROOT, spec

ENDING = EndPolicy.of(10.0)
KV_BYTES, SERVICE_S, TPOT_S = 4096, 0.5, 0.01


def plane_and_scenario() -> tuple[ControlPlane, Scenario]:
    scenario = parse_scenario(copy.deepcopy(DOC), ROOT)
    return make_control_plane(scenario), scenario


def _ended(record: Any) -> tuple[object, ...]:
    return ("ended", record.id, record.fail_reason or "completed")


class CoreDriver:
    def __init__(self) -> None:
        plane, scenario = plane_and_scenario()
        local = scenario.clusters.local
        self.board = NodeBoard(scenario.clusters.remote.instances, local.instances, plane.n_p)
        self.core = RunCore(plane.router, plane.index, plane.scheduler, self.board, block_tokens=BLOCK_TOKENS,
                            ending=ENDING)
        self.attempts: dict[str, list[int]] = {}  # request -> its attempt ids, oldest first

    def step(self, step: tuple[Any, ...], t: float) -> list[tuple[object, ...]]:
        kind, *args = step
        core = self.core
        if kind == "arrive":
            acts = core.arrive(spec(args[0], args[1]), t)
        elif kind in ("lost", "flip", "flipped"):
            slot = self.board.names.index(args[0])
            acts = (core.node_lost(slot, t, "gone") if kind == "lost" else
                    core.request_flip(slot, Role(args[1])) if kind == "flip" else core.flipped(slot))
        elif kind == "arrivals_over":
            acts = core.end_arrivals(t)
        elif kind == "drain_over":
            acts = core.drain_over(t)
        elif kind == "stop":
            acts = core.stop(FailReason.INTERRUPTED, "stopped", t)
        else:
            acts = core.handle(self.report(kind, args, t))
        return self.observe(acts)

    def report(self, kind: str, args: list[Any], t: float) -> ev.Event:
        rid = args[0]
        attempts = self.attempts[rid]
        if kind == "late":
            kind, attempt = args[1], attempts[-2]
        else:
            attempt = attempts[-1]
        return {"prefill_started": lambda: ev.PrefillStarted(attempt, t),
                "prefill_done": lambda: ev.PrefillDone(attempt, t, SERVICE_S, 0, KV_BYTES),
                "transfer_done": lambda: ev.TransferDone(attempt, t - 0.5, t),
                "first_token": lambda: ev.FirstToken(attempt, t),
                "finished": lambda: ev.Finished(attempt, t, TPOT_S),
                "fail": lambda: ev.AttemptFailed(attempt, t, FailReason(args[1]), "scripted")}[kind]()

    def observe(self, acts: Any) -> list[tuple[object, ...]]:
        seen: list[tuple[object, ...]] = []
        for act in acts:
            if isinstance(act, ev.Dispatch):
                journey = act.journey
                self.attempts.setdefault(journey.spec.id, []).append(journey.attempt_id)
                seen.append(("dispatch", journey.spec.id, journey.prefill_node, journey.decode_node))
            elif isinstance(act, ev.SendDecode):
                seen.append(("decode", act.journey.spec.id, act.journey.decode_node))
            elif isinstance(act, ev.Ended):
                seen.append(_ended(act.record))
            elif isinstance(act, ev.StartFlip):
                seen.append(("flip", self.board.names[act.slot], act.role.value))
            elif isinstance(act, ev.EndRun):
                seen.append(("end_run",))
        return seen


class _Wire:
    """A worker's control connection: what the gateway writes lands in the shared log."""

    def __init__(self, log: list[tuple[str, p.Message]], name: str) -> None:
        self.log, self.name = log, name

    def write(self, data: bytes) -> None:
        self.log.append((self.name, p.decode(data.rstrip(b"\n"))))

    async def drain(self) -> None:
        return None

    def is_closing(self) -> bool:
        return False


class _Bus:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    async def publish_event(self, event: Any) -> bool:
        self.log.append(("bus", event))
        return True


class LiveDriver:
    def __init__(self) -> None:
        plane, scenario = plane_and_scenario()
        local = scenario.clusters.local
        board = NodeBoard(scenario.clusters.remote.instances, local.instances, plane.n_p)
        self.nodes = NodeTable(board, list(board.names))
        self.log: list[Any] = []
        self.gateway = LiveGateway(GatewaySettings("conformance", 0, BLOCK_TOKENS), plane, self.nodes,
                                   lambda cluster, port: ("127.0.0.1", port), _Bus(self.log), ENDING)
        self.gateway.run_action = self._run_action
        self.loop = asyncio.new_event_loop()
        for node in self.nodes:
            node.writer, node.kv_port = _Wire(self.log, node.spawn_name), 9000 + node.slot  # type: ignore[assignment]
            self.loop.run_until_complete(self.gateway.node_joined(node))
        self.core = self.gateway.core
        self.attempts: dict[str, list[int]] = {}

    async def _run_action(self, act: Any) -> None:
        if isinstance(act, ev.EndRun):
            self.log.append(("loops", act))

    def close(self) -> None:
        self.loop.close()

    def step(self, step: tuple[Any, ...], t: float) -> list[tuple[object, ...]]:
        self.log.clear()
        self.loop.run_until_complete(self._step(step, t))
        return self.observe()

    async def _step(self, step: tuple[Any, ...], t: float) -> None:
        kind, *args = step
        gateway, core = self.gateway, self.core
        if kind == "arrive":
            await gateway.admit(spec(args[0], args[1]))
        elif kind == "lost":
            await gateway.node_lost(self.nodes.get(args[0]), "gone")
        elif kind == "flip":
            await gateway.execute(core.request_flip(self.nodes.get(args[0]).slot, Role(args[1])))
        elif kind == "flipped":
            node = self.nodes.get(args[0])
            await gateway.on_message(node, p.RoleSet(role=Role.PREFILL if node.role is Role.DECODE else Role.DECODE))
        elif kind == "arrivals_over":
            await gateway.execute(core.end_arrivals(gateway.now()))
        elif kind == "drain_over":
            await gateway.execute(core.drain_over(gateway.now()))
        elif kind == "stop":
            await gateway.stop(FailReason.INTERRUPTED, "stopped")
        else:
            await self._report(kind, args, time.monotonic())  # workers stamp on the shared clock

    async def _report(self, kind: str, args: list[Any], at: float) -> None:
        """The message the worker would send, from the node that sends it."""
        attempts = self.attempts[args[0]]
        if kind == "late":
            kind, rid = args[1], attempts[-2]
        else:
            rid = attempts[-1]
        journey = self.core.by_attempt[rid]
        prefill, decode = self.nodes.at(journey.prefill_slot), self.nodes.at(journey.decode_slot)
        node, msg = {
            "prefill_started": lambda: (prefill, p.PrefillStarted(rid=rid, t=at)),
            "prefill_done": lambda: (prefill, p.PrefillDone(rid=rid, t_start=at - SERVICE_S, t_end=at, cached_len=0,
                                                            kv_bytes=KV_BYTES, first_token=7, held_s=0.0)),
            "transfer_done": lambda: (prefill, p.TransferDone(rid=rid, t_start=at - 0.5, t_end=at, status="delivered")),
            "first_token": lambda: (decode, p.FirstToken(rid=rid, t=at)),
            "finished": lambda: (decode, p.Completed(rid=rid, t=at, tokens=[7, 8], tpot_s=TPOT_S)),
            "fail": lambda: (prefill, p.Failed(rid=rid, stage="prefill", reason=FailReason(args[1]),
                                               detail="scripted")),
        }[kind]()
        await self.gateway.on_message(node, msg)

    def observe(self) -> list[tuple[object, ...]]:
        seen: list[tuple[object, ...]] = []
        for where, msg in self.log:
            if isinstance(msg, p.Prefill):
                request = self.core.by_attempt[msg.rid].spec.id
                self.attempts.setdefault(request, []).append(msg.rid)
                seen.append(("dispatch", request, self.nodes.get(where).name, msg.decode_node))
            elif isinstance(msg, p.Decode):
                seen.append(("decode", self.core.by_attempt[msg.rid].spec.id, self.nodes.get(where).name))
            elif isinstance(msg, p.SetRole):
                seen.append(("flip", self.nodes.get(where).name, str(msg.role)))
            elif where == "bus" and msg.event in ("completed", "failed"):
                seen.append(("ended", msg.request_id,
                             "completed" if msg.event == "completed" else msg.reason.split(":", 1)[0]))
            elif where == "loops":
                seen.append(("end_run",))
        return seen


class VirtualDriver:
    def __init__(self) -> None:
        plane, scenario = plane_and_scenario()
        local = scenario.clusters.local
        self.sim = Simulator()
        to_local, to_remote = scenario_link_states(scenario, scenario.link)
        self.gateway = VirtualGateway(
            self.sim, plane, CostModel.from_inputs(plane.inputs, plane.profile_source), FluidLink(self.sim, to_local),
            FluidLink(self.sim, to_remote), num_remote=scenario.clusters.remote.instances, num_local=local.instances,
            n_p=plane.n_p, block_tokens=BLOCK_TOKENS, use_index=True, ending=ENDING)
        self.ended_run: list[ev.EndRun] = []
        self.gateway.run_action = self._run_action
        self.core = self.gateway.core
        self.journeys: dict[str, Journey] = {}

    def _run_action(self, act: Any) -> None:
        if isinstance(act, ev.EndRun):
            self.ended_run.append(act)

    def step(self, step: tuple[Any, ...], t: float) -> list[tuple[object, ...]]:
        self.sim.now = t
        before = self._holding()
        nodes_before, records_before = list(self.gateway.local), len(self.core.records)
        ends_before = len(self.ended_run)
        self._do(step)
        seen = [("dispatch", j.spec.id, where, j.decode_node) for j, where in self._holding().items()
                if before.get(j) != where and j.stage <= PREFILLING]
        seen += [("decode", j.spec.id, j.decode_node) for j in self._sent_to_decode(step)]
        seen += [_ended(r) for r in self.core.records[records_before:]]
        board = self.gateway.board
        seen += [("flip", old.name, "prefill" if isinstance(old, DecodeNode) else "decode")
                 for old, new in zip(nodes_before, self.gateway.local, strict=True) if old is not new]
        seen += [("end_run",)] * (len(self.ended_run) - ends_before)
        assert all(board.names[s] for s in board.slots)
        return seen

    def _holding(self) -> dict[Journey, str]:
        """Each request a simulated prefill node holds (in service or queued), and that node."""
        held: dict[Journey, str] = {}
        for node in [*self.gateway.remote, *self.gateway.local]:
            if isinstance(node, PrefillNode):
                for journey in [node.busy, *node.queue]:
                    if journey is not None:
                        held[journey] = node.name
        return held

    def _sent_to_decode(self, step: tuple[Any, ...]) -> list[Journey]:
        """A finished prefill's KV on its way to the decode node it was placed on (over the link,
        or over local RDMA on the heap): the simulated decode node takes it when it arrives."""
        if step[0] != "prefill_done":
            return []
        journey = self.journeys[step[1]]
        in_flight = journey.handle is not None or any(arg[0] is journey for _, _, _, arg in self.sim._heap
                                                      if isinstance(arg, tuple) and arg)
        return [journey] if journey.stage == TRANSFERRING and in_flight else []

    def _do(self, step: tuple[Any, ...]) -> None:
        kind, *args = step
        gateway, core, now = self.gateway, self.core, self.sim.now
        if kind == "arrive":
            gateway.arrive(spec(args[0], args[1]))
            if args[0] in core.open:  # else it ended at once: no step names it again
                self.journeys[args[0]] = core.open[args[0]]
        elif kind == "lost":
            gateway.execute((ev.KillNode(gateway.board.names.index(args[0])),))
        elif kind == "flip":
            gateway.execute(core.request_flip(gateway.board.names.index(args[0]), Role(args[1])))
        elif kind == "flipped":
            pass  # a simulated node flips the moment it is drained
        elif kind == "arrivals_over":
            gateway.arrivals_over()
        elif kind == "drain_over":
            gateway.execute(core.drain_over(now))
        elif kind == "stop":
            gateway.execute(core.stop(FailReason.INTERRUPTED, "stopped", now))
        else:
            self._node_step(kind, self.journeys[args[0]])

    def _node_step(self, kind: str, journey: Journey) -> None:
        """Trigger the simulated node's own event for this step (what the heap would run)."""
        gateway = self.gateway
        if kind == "prefill_started":
            assert journey.stage >= PREFILLING  # a simulated node starts a prompt as soon as it is free
        elif kind == "prefill_done":
            node = gateway.node_at(journey.prefill_slot)
            assert isinstance(node, PrefillNode) and node.busy is journey
            node._end((journey, node.epoch, SERVICE_S))
        elif kind == "transfer_done":
            gateway._on_kv_arrived((journey, journey.attempt_id))
        elif kind == "first_token":
            assert journey.first_token_s is not None  # delivered as it joined its decode batch
        elif kind == "finished":
            decode = gateway.node_at(journey.decode_slot)
            assert isinstance(decode, DecodeNode) and journey.spec.id in decode.active
            decode._finish((journey, decode.epoch, decode.step_s))
        else:
            raise AssertionError(f"a simulated node cannot report {kind}")


def driver(engine: str) -> CoreDriver | LiveDriver | VirtualDriver:
    return {"core": CoreDriver, "live": LiveDriver, "virtual": VirtualDriver}[engine]()

