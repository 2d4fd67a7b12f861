"""Scenario files to requests: generated workloads, bursts and trace replays."""

from __future__ import annotations

from pathlib import Path

from emulator.scenario import apply_overrides, load_scenario
from emulator.workload.build import build_requests

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def test_generated_workload_is_seeded_and_bounded() -> None:
    scenario = load_scenario(SCENARIOS / "paper-case-study.yaml")
    requests = build_requests(scenario)
    assert requests == build_requests(scenario)
    assert requests != build_requests(apply_overrides(scenario, ["seed=1"]))
    assert all(0 <= r.arrival_s < scenario.duration_s for r in requests)
    assert all(128 <= r.input_len <= 131072 and r.output_len == 1024 for r in requests)
    assert [r.arrival_s for r in requests] == sorted(r.arrival_s for r in requests)
    assert 0.8 * 2.0 * 600 < len(requests) < 1.2 * 2.0 * 600  # Poisson at 2/s for 600 s
    assert all(len(r.block_hashes) == r.input_len // 512 for r in requests)


def test_timeline_bursts_join_the_arrivals() -> None:
    base = apply_overrides(load_scenario(SCENARIOS / "classroom-basic.yaml"), ["workload.arrival.rate_per_s=0.5"])
    data = base.model_dump(mode="json")
    data["timeline"] = [*data["timeline"], {"at_s": 30, "burst": {"requests": 20, "over_s": 1}}]
    data["timeline"].sort(key=lambda e: e["at_s"])
    from emulator.scenario import parse_scenario

    with_burst = parse_scenario(data, SCENARIOS)
    extra = [r for r in build_requests(with_burst) if 30 <= r.arrival_s <= 31]
    plain = [r for r in build_requests(base) if 30 <= r.arrival_s <= 31]
    assert len(extra) - len(plain) == 20


def test_mooncake_replay_uses_the_trace_with_its_prefix_hashes() -> None:
    scenario = load_scenario(SCENARIOS / "mooncake-replay.yaml")
    requests = build_requests(scenario)
    assert 0 < len(requests) <= 1000 and requests[0].id == "mc-000001"
    assert requests[0].input_len == 40160 and len(requests[0].block_hashes) == 40160 // 512
    firsts = [r.block_hashes[0] for r in requests if r.block_hashes]
    assert len(set(firsts)) < len(firsts)  # the trace's shared prefixes survive as equal hashes
