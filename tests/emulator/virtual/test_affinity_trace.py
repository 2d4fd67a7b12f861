"""Cache affinity on a multi-turn conversation trace at the paper's case-study scale (issue 15).

Every conversation opens with the same system prompt, about a quarter open with a short greeting
(so a prefill node caches the state at the system prompt's end, which every later prompt shares),
and each turn extends the one before. The trace opens quietly, with one greeting alone, as a real
trace's first seconds are: under strict longest-prefix the node that served it then holds a prefix
of every prompt and takes every local prefill (the hotspot issue 15 saw on a real trace: 6,383 of
6,399). The `cost` rule must spread them, serve as many requests per second as affinity off, and
reuse at least as much of the cache.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from emulator.control.types import RequestSpec, RequestStatus
from emulator.scenario import load_scenario, parse_scenario
from emulator.telemetry.records import RequestRecord
from emulator.virtual.engine import run_duration_s, simulate

ROOT = Path(__file__).resolve().parents[3]
BLOCK_TOKENS = 512  # the scenario's prefix_cache.block_tokens (the Mooncake trace's block)
SYSTEM_BLOCKS = 8  # a 4,096-token system prompt
NUM_CONVERSATIONS = 300
CONVERSATIONS_PER_S = 0.6  # about 1.5 requests/s: affinity off runs with TTFT of a few seconds
OUTPUT_TOKENS = 512


def conversation_trace(seed: int = 0) -> list[RequestSpec]:
    """Requests with chained block hashes: the system prompt's blocks are 1..8 in every prompt, a
    conversation's own blocks are numbered by conversation and position, so turn k's hashes
    extend turn k-1's (its prompt is the last prompt, the answer and a new message)."""
    rng = random.Random(seed)
    system = tuple(range(1, SYSTEM_BLOCKS + 1))
    requests, start_s = [], 0.0
    for conv in range(NUM_CONVERSATIONS):
        start_s = 0.0 if conv == 0 else max(start_s, 5.0) + rng.expovariate(CONVERSATIONS_PER_S)
        greeting = conv == 0 or rng.random() < 0.25
        first = rng.randint(16, 400) if greeting else int(min(60_000, max(512, rng.lognormvariate(9.2, 0.8))))
        input_len, at_s = SYSTEM_BLOCKS * BLOCK_TOKENS + first, start_s
        for turn in range(rng.randint(1, 6)):
            if turn:
                at_s += rng.uniform(20.0, 60.0)
                input_len += OUTPUT_TOKENS + rng.randint(200, 3000)
            own = tuple((conv + 1) * 1_000_000 + i for i in range(SYSTEM_BLOCKS, input_len // BLOCK_TOKENS))
            requests.append(RequestSpec(f"c{conv}-t{turn}", at_s, input_len, OUTPUT_TOKENS, system + own))
    return sorted(requests, key=lambda r: r.arrival_s)


TRACE = conversation_trace()


def replay(affinity: str) -> list[RequestRecord]:
    """The trace on the case study's clusters, profile and link. The scheduler's loops are off, so
    the local split stays the optimizer's and a fair share means the same thing in every run."""
    doc = load_scenario(ROOT / "scenarios" / "paper-case-study.yaml").model_dump(mode="json")
    doc["router"]["affinity"] = affinity
    doc["scheduler"] = {"short_term": {"enabled": False}, "long_term": {"enabled": False}}
    doc["duration_s"] = TRACE[-1].arrival_s + 1.0
    records = simulate(parse_scenario(doc, ROOT), requests=TRACE).records
    assert len(records) == len(TRACE)
    return records


def completed(records: list[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.status == RequestStatus.COMPLETED]


def busiest_share(records: list[RequestRecord], num_local_prefill: int) -> float:
    """The busiest local prefill node's count over its fair share of the local prefills."""
    local = Counter(r.prefill_node for r in completed(records) if r.route == "local")
    return max(local.values()) / (sum(local.values()) / num_local_prefill)


def throughput(records: list[RequestRecord]) -> float:
    """Completed requests per second of run (to the last ending, as the summary's throughput)."""
    return len(completed(records)) / run_duration_s(records)


def prefix_hit(records: list[RequestRecord]) -> float:
    done = completed(records)
    return sum(r.cached_len for r in done) / sum(r.input_len for r in done)


@pytest.fixture(scope="module")
def runs() -> dict[str, list[RequestRecord]]:
    return {affinity: replay(affinity) for affinity in ("cost", "off", "longest-prefix")}


def local_prefill_nodes(records: list[RequestRecord]) -> int:
    return len({r.prefill_node for r in records if r.prefill_node and r.prefill_node.startswith("local-prefill")})


def test_cost_spreads_local_prefills_where_longest_prefix_makes_a_hotspot(runs: dict) -> None:
    num_local = local_prefill_nodes(runs["off"])  # the optimizer's split; off uses every node
    assert num_local >= 2
    assert busiest_share(runs["longest-prefix"], num_local) > 2.0  # the hotspot this guards against
    assert busiest_share(runs["cost"], num_local) <= 2.0


def test_cost_serves_as_fast_as_affinity_off_and_reuses_at_least_as_much(runs: dict) -> None:
    assert all(r.status == RequestStatus.COMPLETED for r in runs["cost"])
    assert throughput(runs["cost"]) >= 0.95 * throughput(runs["off"])
    assert prefix_hit(runs["cost"]) >= prefix_hit(runs["off"]) > 0.0
