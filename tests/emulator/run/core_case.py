"""A tiny run for the run core's tests: a real control plane from a small scenario, its board and
its end policy, and helpers that feed the core protocol events and read its actions.

Slots: 0 remote-prefill-0, 1 local-prefill-0, 2 local-decode-1, 3 local-decode-2. The PrfaaS
threshold is 1000 tokens, so LONG prompts go remote and SHORT ones stay local; blocks are 64 tokens.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from emulator.control.types import RequestSpec
from emulator.plane import make_control_plane
from emulator.run.board import NodeBoard
from emulator.run.core import RunCore
from emulator.run.ending import EndPolicy
from emulator.run.journey import Journey, Stage
from emulator.run.protocol import Action, Dispatch, Ended, Publish, Release, SendDecode
from emulator.run.steering import Steering
from emulator.scenario import Scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[3]
REMOTE, LOCAL_PREFILL, DECODE_A, DECODE_B = 0, 1, 2, 3
LONG, SHORT = 2000, 500  # input tokens over and under the threshold
BLOCK_TOKENS = 64
DURATION_S, DRAIN_S = 10.0, 5.0
IDLE_LOADS = [("remote-prefill-0", 0, 0, True), ("local-prefill-0", 0, 0, True)]  # `loads` of an idle run
NOTHING_HELD = ([0, 0, 0, 0], [0, 0, 0, 0])  # `held` of an idle run: prefills, decodes per slot

DOC: dict[str, Any] = {
    "name": "core", "engine": "virtual", "seed": 1, "duration_s": DURATION_S, "drain_s": DRAIN_S,
    "model": {"profile": {"name": "linear", "lengths_tokens": [1000, 100000], "kv_mib": [10.0, 500.0],
                          "prefill_s": {"fast": [0.1, 2.0], "slow": [0.3, 6.0]},
                          "decode_step_ms": {"slow": 20}}},
    "clusters": {"remote": {"instances": 1, "device": "fast"},
                 "local": {"instances": 3, "device": "slow", "prefill_instances": 1, "decode_max_batch": 4}},
    "link": {"bandwidth_mbit": 10000, "delay_ms": 5},
    "router": {"policy": "prfaas", "threshold_tokens": 1000},
    "scheduler": {"short_term": {"enabled": False}, "long_term": {"enabled": False}},
    "prefix_cache": {"block_tokens": BLOCK_TOKENS, "capacity_mib": {"remote": 64, "local": 64}},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 3.0},
                 "input_len": {"kind": "uniform", "min": 500, "max": 4000},
                 "output_len": {"kind": "fixed", "tokens": 5}},
}


def make_run(**sections: Any) -> tuple[Scenario, RunCore]:
    """The scenario of DOC with top-level sections merged in (e.g. `router={"policy": "local-only"}`)
    and its core, built as the engines build theirs."""
    doc = copy.deepcopy(DOC)
    for key, value in sections.items():
        doc[key] = {**doc[key], **value} if isinstance(value, dict) else value
    scenario = parse_scenario(doc, ROOT)
    plane = make_control_plane(scenario)
    local = scenario.clusters.local
    board = NodeBoard(scenario.clusters.remote.instances, local.instances, plane.n_p)
    core = RunCore(plane.router, plane.index, plane.scheduler, board, block_tokens=BLOCK_TOKENS,
                   ending=EndPolicy.of(scenario.duration_s, scenario.drain_s))
    return scenario, core


def make_core(**sections: Any) -> RunCore:
    return make_run(**sections)[1]


def make_steering(*, can_pause: bool = True, **sections: Any) -> Steering:
    scenario, core = make_run(**sections)
    return Steering(core, scenario.link, can_pause=can_pause)


def spec(rid: str, input_len: int, *, prompt: int = 0, arrival_s: float = 0.0) -> RequestSpec:
    """A request whose full blocks hash as prompt `prompt` (by default one of its own: no reuse)."""
    base = (prompt or int.from_bytes(rid.encode(), "big")) << 20
    hashes = tuple(base + i for i in range(input_len // BLOCK_TOKENS))
    return RequestSpec(rid, arrival_s, input_len, 5, hashes)


def loads(core: RunCore) -> list[tuple[str, int, int, bool]]:
    """What the router sees: (node, queued tokens, queued requests, up) per prefill node."""
    return [(str(load.node), load.queued_tokens, load.queued_requests, load.is_up) for load in core.board.loads]


def held(core: RunCore) -> tuple[list[int], list[int]]:
    """(prefills held, decodes held) per slot."""
    return list(core.board.prefill_held), list(core.board.decode_held)


def shown(acts: Sequence[Action]) -> list[tuple[Any, ...] | Action]:
    """Actions as comparable tuples, read when they are returned (a journey moves on afterwards):
    ("dispatch", request, attempt, prefill slot, decode slot), ("send_decode", request, attempt),
    ("release", request, attempt, stage, prefill slot, decode slot), ("ended", request, status,
    fail reason), ("publish", request, event); the dataclass actions as they are."""
    out: list[tuple[Any, ...] | Action] = []
    for act in acts:
        if isinstance(act, Dispatch):
            j = act.journey
            out.append(("dispatch", j.spec.id, j.attempt_id, j.prefill_slot, j.decode_slot))
        elif isinstance(act, SendDecode):
            out.append(("send_decode", act.journey.spec.id, act.journey.attempt_id))
        elif isinstance(act, Release):
            out.append(("release", act.journey.spec.id, act.attempt, Stage(act.stage), act.prefill_slot,
                        act.decode_slot))
        elif isinstance(act, Ended):
            out.append(("ended", act.record.id, act.record.status, act.record.fail_reason))
        elif isinstance(act, Publish):
            out.append(("publish", act.journey.spec.id, act.event))
        else:
            out.append(act)
    return out


def start(core: RunCore, rid: str, input_len: int, now: float, *, prompt: int = 0) -> Journey:
    """Arrive and route a request: the one Dispatch of its first attempt, its journey returned."""
    acts = core.arrive(spec(rid, input_len, prompt=prompt), now)
    assert len(acts) == 1 and isinstance(acts[0], Dispatch), shown(acts)
    journey = acts[0].journey
    assert journey.spec.id == rid and journey.attempts == 1 and journey.stage == Stage.ROUTED
    return journey


def advance(core: RunCore, journey: Journey, stage: Stage, now: float, *, kv_bytes: int = 4096) -> None:
    """Take a routed journey on from where it is to `stage`, by the reports of its current attempt
    (its prefill takes 0.1 s and reuses what the router found cached)."""
    attempt = journey.attempt_id
    if journey.stage < Stage.PREFILLING <= stage:
        assert shown(core.prefill_started(journey, attempt, now)) == []
    if journey.stage < Stage.TRANSFERRING <= stage:
        acts = core.prefill_done(journey, attempt, now, 0.1, journey.cached_len, kv_bytes)
        assert shown(acts)[0] == ("send_decode", journey.spec.id, attempt)
    if journey.stage < Stage.DECODING <= stage:
        assert shown(core.transfer_done(journey, attempt, now, now)) == []


def complete(core: RunCore, journey: Journey, first_s: float, end_s: float, tpot_s: float = 0.1) -> list[Any]:
    """Take a routed journey to its end: KV in by `first_s`, its first token then, its last at
    `end_s`; returns finished's actions, shown."""
    advance(core, journey, Stage.DECODING, first_s)
    assert shown(core.first_token(journey, journey.attempt_id, first_s)) == []
    return shown(core.finished(journey, journey.attempt_id, end_s, tpot_s))
