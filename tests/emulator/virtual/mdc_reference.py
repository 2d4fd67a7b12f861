"""The M/D/c reference of the dispatch test and bench/dispatch.py: a scenario with c local prefill
instances, fixed prompts and Poisson arrivals at a given load, and the mean wait of one shared FCFS
queue in front of c servers, simulated on a given arrival sequence (the engine's own arrivals)."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from emulator.scenario import Scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[3]

PROMPT_TOKENS = 4000
# A linear local profile: T_prefill(4000) = 0.3 + 5.7 * 3000 / 99000 s = 0.473 s.
PROFILE: dict[str, Any] = {"name": "linear", "lengths_tokens": [1000, 100000], "kv_mib": [10.0, 500.0],
                           "prefill_s": {"fast": [0.1, 2.0], "slow": [0.3, 6.0]},
                           "decode_step_ms": {"slow": 20}}
SERVICE_S = 0.3 + 5.7 * (PROMPT_TOKENS - 1000) / 99000


def mdc_scenario(load: float, *, num_requests: int, servers: int = 3, seed: int = 11) -> Scenario:
    return parse_scenario(mdc_doc(load, num_requests=num_requests, servers=servers, seed=seed), ROOT)


def mdc_doc(load: float, *, num_requests: int, servers: int = 3, seed: int = 11) -> dict[str, Any]:
    """Local-only, `servers` prefill instances at utilisation `load`, decode never the bottleneck
    (three instances with room for every request), single-token outputs; about `num_requests`
    Poisson arrivals. A plain document, so bench/dispatch.py can hand it to another revision."""
    rate = load * servers / SERVICE_S
    return {
        "name": f"md{servers}-load-{round(load * 100)}", "engine": "virtual", "seed": seed,
        "duration_s": round(num_requests / rate, 3),
        "model": {"profile": PROFILE},
        "clusters": {"remote": {"instances": 1, "device": "fast"},
                     "local": {"instances": servers + 3, "device": "slow", "prefill_instances": servers,
                               "decode_max_batch": 1000}},
        "link": {"bandwidth_mbit": 10000, "delay_ms": 5},
        "router": {"policy": "local-only", "threshold_tokens": 8000},
        "scheduler": {"short_term": {"enabled": False}, "long_term": {"enabled": False}},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": rate},
                     "input_len": {"kind": "fixed", "tokens": PROMPT_TOKENS},
                     "output_len": {"kind": "fixed", "tokens": 1}},
    }


def shared_queue_waits(arrivals_s: Sequence[float], service_s: float, servers: int) -> float:
    """Mean wait of FCFS arrivals (sorted) at one queue served by `servers` identical servers:
    each starts on the earliest free server, at its arrival or when that server frees."""
    free_s = [0.0] * servers
    total = 0.0
    for arrival in arrivals_s:
        start = max(arrival, heapq.heappop(free_s))
        total += start - arrival
        heapq.heappush(free_s, start + service_s)
    return total / len(arrivals_s)
