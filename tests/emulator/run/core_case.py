"""A tiny run for the run core's tests: a real control plane from a small scenario and its board.

Slots: 0 remote-prefill-0, 1 local-prefill-0, 2 local-decode-1, 3 local-decode-2. The PrfaaS
threshold is 1000 tokens, so LONG prompts go remote and SHORT ones stay local; blocks are 64 tokens.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from emulator.control.types import RequestSpec
from emulator.plane import make_control_plane
from emulator.run.board import NodeBoard
from emulator.run.core import RunCore
from emulator.run.journey import Journey
from emulator.scenario import parse_scenario

ROOT = Path(__file__).resolve().parents[3]
REMOTE, LOCAL_PREFILL, DECODE_A, DECODE_B = 0, 1, 2, 3
LONG, SHORT = 2000, 500  # input tokens over and under the threshold
BLOCK_TOKENS = 64

DOC: dict[str, Any] = {
    "name": "core", "engine": "virtual", "seed": 1, "duration_s": 10,
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


def make_core(**sections: Any) -> RunCore:
    """The core of DOC with top-level sections merged in (e.g. `router={"policy": "local-only"}`)."""
    doc = copy.deepcopy(DOC)
    for key, value in sections.items():
        doc[key] = {**doc[key], **value} if isinstance(value, dict) else value
    scenario = parse_scenario(doc, ROOT)
    plane = make_control_plane(scenario)
    local = scenario.clusters.local
    board = NodeBoard(scenario.clusters.remote.instances, local.instances, plane.n_p)
    return RunCore(plane.router, plane.index, plane.scheduler, board, block_tokens=BLOCK_TOKENS)


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


def start(core: RunCore, rid: str, input_len: int, now: float) -> Journey:
    """Arrive and route a request (its prefill node and its decode node)."""
    journey = core.arrive(spec(rid, input_len), now)
    assert core.route(journey, now) is not None
    return journey
