"""The virtual engine end to end: every request ends once, bytes are conserved, runs repeat
exactly, decode batches stay within BS_max, the timeline acts, and the files match a live run's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from emulator.scenario import Scenario, load_scenario
from emulator.telemetry.recorder import FILES, TIMESERIES_COLUMNS, load_run
from emulator.telemetry.records import REQUEST_FIELDS, RequestRecord
from emulator.virtual.engine import run_virtual, simulate
from emulator.virtual.tcp import WIRE_PER_BYTE
from tests.emulator.virtual.conftest import SMALL

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
Small = Callable[..., Scenario]


def _ends_once(records: list[RequestRecord], num_requests: int) -> None:
    counts = Counter(r.id for r in records)
    assert len(counts) == num_requests and set(counts.values()) == {1}
    assert all(r.status == "completed" or r.fail_reason for r in records)


def test_every_request_ends_once_and_link_bytes_equal_remote_kv(small: Small) -> None:
    result = simulate(small())
    _ends_once(result.records, result.num_requests)
    assert all(r.status == "completed" for r in result.records)
    remote = [r for r in result.records if r.route == "prfaas"]
    assert 0 < len(remote) < len(result.records)
    link = result.gateway.link
    assert link.bytes_delivered == sum(r.kv_bytes for r in remote)
    assert link.bytes_sent == pytest.approx(link.bytes_delivered * WIRE_PER_BYTE, rel=1e-9)  # with the headers
    for r in result.records:  # the lifecycle is in order
        assert r.arrival_s <= r.prefill_start_s < r.prefill_end_s <= r.transfer_end_s <= r.first_token_s
        assert r.first_token_s < r.finish_s and r.ttft_s == pytest.approx(r.first_token_s - r.arrival_s)
        assert r.incremental_len == r.input_len - r.cached_len


def test_same_seed_gives_identical_requests_parquet(small: Small, tmp_path: Path) -> None:
    loops = {"short_term": {"enabled": True, "interval_s": 2.0}, "long_term": {"enabled": True, "interval_s": 10.0}}
    scenario = small(duration_s=30, scheduler=loops)
    run_virtual(scenario, tmp_path / "a")
    run_virtual(scenario, tmp_path / "b")
    a, b = (pd.read_parquet(tmp_path / d / "requests.parquet") for d in ("a", "b"))
    pd.testing.assert_frame_equal(a, b)
    assert (tmp_path / "a" / "requests.parquet").read_bytes() == (tmp_path / "b" / "requests.parquet").read_bytes()
    run_virtual(small(duration_s=30, seed=8, scheduler=loops), tmp_path / "c")
    assert not pd.read_parquet(tmp_path / "c" / "requests.parquet")["arrival_s"].equals(a["arrival_s"])


def test_a_lossy_links_draws_repeat_with_the_seed(small: Small) -> None:
    """Each cache draws its loss-limited rate from the link's generator, seeded by the scenario: a
    run repeats exactly (the spread itself: test_link_tcp.py)."""
    lossy = {"bandwidth_mbit": 10000, "delay_ms": 20, "loss_pct": 0.5}

    def transfers() -> list[tuple[str, float | None]]:
        records = simulate(small(link=lossy, duration_s=20)).records
        return [(r.id, r.transfer_end_s) for r in sorted(records, key=lambda r: r.id) if r.route == "prfaas"]

    first = transfers()
    assert first == transfers() and sum(end is not None for _, end in first) > 10


def test_decode_batches_never_exceed_bs_max(small: Small) -> None:
    """Long outputs and BS_max 2 keep the decode instances full: waiting happens, overlap never > 2."""
    scenario = small(clusters={"remote": {"instances": 2, "device": "fast"},
                               "local": {"instances": 4, "device": "slow", "prefill_instances": 2,
                                         "decode_max_batch": 2}},
                     workload={"output_len": {"kind": "fixed", "tokens": 400}},
                     drain_s=3600)  # the queue of 8 s decodes takes longer than the default drain
    result = simulate(scenario)
    _ends_once(result.records, result.num_requests)
    waited = 0
    for node in {r.decode_node for r in result.records}:
        spans = sorted((r.first_token_s, r.finish_s) for r in result.records if r.decode_node == node)
        for start, _ in spans:
            assert sum(s <= start < e for s, e in spans) <= 2
        waited += sum(r.first_token_s > r.transfer_end_s + 1e-9 for r in result.records if r.decode_node == node)
    assert waited > 0  # the limit was actually reached
    assert max(n.peak_active for n in result.gateway.decode_nodes) == 2


def test_killed_instances_hand_their_requests_to_others_and_come_back(small: Small) -> None:
    # One local prefill slot, so local-decode-3 (slot 3) is a name the schema and the slot agree on.
    scenario = small(clusters={"remote": {"instances": 2, "device": "fast"},
                               "local": {"instances": 4, "device": "slow", "prefill_instances": 1}},
                     timeline=[{"at_s": 10, "kill": "remote-prefill-0"}, {"at_s": 12, "kill": "local-decode-2"},
                               {"at_s": 30, "restart": "remote-prefill-0"}])
    result = simulate(scenario)
    _ends_once(result.records, result.num_requests)
    nodes = Counter(r.prefill_node for r in result.records if 10 < r.prefill_start_s < 30)
    assert nodes["remote-prefill-0"] == 0 and nodes["remote-prefill-1"] > 0
    assert Counter(r.prefill_node for r in result.records if r.prefill_start_s > 31)["remote-prefill-0"] > 0
    assert not any(r.decode_node == "local-decode-2" and r.first_token_s > 12 for r in result.records)
    assert result.loops.knob_changes[0].startswith("t=10.0s timeline: kill remote-prefill-0")
    link = result.gateway.link
    assert link.bytes_delivered == sum(r.kv_bytes for r in result.records if r.route == "prfaas")


def test_bandwidth_abundant_rule_ships_cached_prefixes_between_clusters(small: Small) -> None:
    sharing = {"prefix_sharing": {"num_prefixes": 3, "shared_blocks": 8}}
    scarce = simulate(small(workload=sharing))
    abundant = simulate(small(workload=sharing, router={"prefix_rule": "bandwidth-abundant"}))
    _ends_once(abundant.records, abundant.num_requests)
    hits = [sum(r.cached_len > 0 for r in run.records) for run in (scarce, abundant)]
    assert 0 < hits[0] < hits[1]  # shipping a prefix lets more requests reuse one
    assert scarce.gateway.reverse_link.bytes_delivered == 0 < abundant.gateway.reverse_link.bytes_delivered
    remote_kv = sum(r.kv_bytes for r in abundant.records if r.route == "prfaas")
    assert abundant.gateway.link.bytes_delivered >= remote_kv


def test_with_every_prefill_node_down_requests_fail_with_a_reason(small: Small) -> None:
    kills = [{"at_s": 5, "kill": n} for n in ("remote-prefill-0", "remote-prefill-1",
                                               "local-prefill-0", "local-prefill-1")]
    result = simulate(small(timeline=kills, duration_s=20))
    _ends_once(result.records, result.num_requests)
    reasons = Counter(r.fail_reason for r in result.records if r.status == "failed")
    assert reasons["no_prefill_node"] > 0
    assert all(r.status == "failed" for r in result.records if r.arrival_s > 5.01)


def test_timeline_link_and_knob_changes_act_at_their_time(small: Small) -> None:
    scenario = small(timeline=[{"at_s": 20, "link": {"bandwidth_mbit": 1000}},
                               {"at_s": 40, "set": {"router.threshold_tokens": 1000000}}])
    result = simulate(scenario)
    samples = pd.DataFrame(result.samples)
    assert samples.loc[samples.t_s < 20, "link_capacity_bit_per_s"].eq(10e9).all()
    assert samples.loc[samples.t_s >= 20, "link_capacity_bit_per_s"].eq(1e9).all()
    assert samples.loc[samples.t_s >= 40, "threshold_tokens"].eq(1000000).all()
    assert not any(r.route == "prfaas" and r.arrival_s > 40 for r in result.records)
    slow = [r.transfer_end_s - r.prefill_end_s for r in result.records if r.route == "prfaas" and 21 < r.arrival_s < 39]
    fast = [r.transfer_end_s - r.prefill_end_s for r in result.records if r.route == "prfaas" and r.arrival_s < 19]
    assert sum(slow) / len(slow) > 3 * sum(fast) / len(fast)  # a tenth of the bandwidth shows


def test_the_rate_knob_plays_the_same_arrivals_faster_for_the_whole_duration(small: Small) -> None:
    """Open loop: at twice the rate the same arrival pattern plays twice as fast, and arrivals go
    on (further down the same seeded workload) until the run's duration, not until the list that
    the base rate would have used is spent."""
    base = simulate(small(duration_s=40))
    fast = simulate(small(duration_s=40, timeline=[{"at_s": 10, "set": {"workload.arrival.rate_per_s": 6.0}}]))
    workload = {r.id: r.arrival_s for r in fast.loops.arrivals.requests}
    assert {r.id: r.arrival_s for r in base.records}.items() <= workload.items()  # the same workload, extended
    for r in fast.records:
        expected = workload[r.id] if workload[r.id] <= 10 else 10 + (workload[r.id] - 10) / 2
        assert r.arrival_s == pytest.approx(expected)
    assert len(fast.records) > 1.5 * len(base.records)
    assert max(r.arrival_s for r in fast.records) > 36


def test_run_virtual_writes_the_files_of_a_live_run(small: Small, tmp_path: Path) -> None:
    doc = run_virtual(small(duration_s=20, expect={"completed_fraction": {"min": 1.0}}), tmp_path)
    assert all((tmp_path / name).is_file() for name in FILES)
    requests, timeseries, loaded = load_run(tmp_path)
    assert tuple(requests.columns) == REQUEST_FIELDS
    assert tuple(timeseries.columns) == TIMESERIES_COLUMNS
    assert timeseries["t_s"].diff().dropna().eq(1.0).all()  # one row per simulated second
    assert loaded == doc and doc["expect_failures"] == []
    meta = doc["meta"]
    assert meta["engine"] == "virtual" and meta["profile"] == "profile linear"
    assert (meta["threshold_start"], meta["n_p_start"], meta["policy"]) == (8000, 2, "prfaas")
    assert doc["summary"]["requests"] == len(requests)


@pytest.mark.parametrize("name", ["paper-case-study", "mooncake-replay"])
def test_repository_scenarios_run_virtually(name: str) -> None:
    scenario = load_scenario(SCENARIOS / f"{name}.yaml")
    result = simulate(scenario)
    _ends_once(result.records, result.num_requests)
    assert all(r.status == "completed" for r in result.records)
    routes = Counter(r.route for r in result.records)
    assert routes["prfaas"] > 0 and routes["local"] > 0
    if name == "mooncake-replay":  # its hash ids share prefixes: the index is used and hits
        assert result.gateway.core.use_index and sum(r.cached_len > 0 for r in result.records) > 0
    else:
        assert result.loops.decisions  # the scheduler's loops ran and acted


def test_more_tcp_connections_lift_a_lossy_links_cap(small: Callable[..., Scenario]) -> None:
    """transport.connections sets how many Mathis flows a lossy transfer gets: on a 1 % loss,
    40 ms RTT link one connection's ~0.35 MB/s binds, and 8 of them move the KV about 8x faster
    (a last layer of half the cache, 40-100 MiB, has chunks for all 8: tcp.tail_lanes). Read on
    the first cache of each prefill and decode worker pair: a later one also queues behind its
    sender's older caches (test_link.py), minutes on one connection."""
    lossy = {"bandwidth_mbit": 10000, "delay_ms": 20, "loss_pct": 1.0}
    profile = SMALL["model"]["profile"]
    model = {"profile": {**profile, "kv_tail_mib": [mib / 2 for mib in profile["kv_mib"]]}}
    exposed = {}
    for connections in (1, 8):
        records = simulate(small(link=lossy, transport={"connections": connections}, duration_s=20, model=model,
                                 drain_s=3600)).records  # one connection takes minutes per KV
        remote = sorted((r for r in records if r.route == "prfaas" and r.status == "completed"),
                        key=lambda r: r.prefill_start_s)
        first: dict[tuple[str, str], RequestRecord] = {}
        for r in remote:
            first.setdefault((r.prefill_node, r.decode_node), r)
        assert len(first) == 4  # 2 remote prefill workers x 2 decode workers
        exposed[connections] = sum(r.transfer_end_s - r.prefill_end_s for r in first.values()) / len(first)
    assert 6 < exposed[1] / exposed[8] < 9, exposed


def test_a_rate_burst_runs_the_whole_duration_and_its_queues_build_then_drain(small: Small) -> None:
    """The classroom burst, 0.5 -> 3 -> 0.5 requests/s: arrivals follow the rate in force to the
    end of the run (the burst does not use the workload up), and the queues it builds drain."""
    burst = simulate(small(duration_s=100, workload={"arrival": {"kind": "poisson", "rate_per_s": 0.5}},
                           timeline=[{"at_s": 30, "set": {"workload.arrival.rate_per_s": 3.0}},
                                     {"at_s": 60, "set": {"workload.arrival.rate_per_s": 0.5}}]))
    arrivals = sorted(r.arrival_s for r in burst.records)
    assert arrivals[-1] > 90 and all(r.status == "completed" for r in burst.records)
    during = sum(30 <= t < 60 for t in arrivals) / 30
    before, after = sum(t < 30 for t in arrivals) / 30, sum(t >= 60 for t in arrivals) / 40
    assert during > 3 * max(before, after)  # the rate in force, within Poisson noise
    queued = [s["queue_remote_prefill"] + s["queue_local_prefill"] for s in burst.samples]
    times = [s["t_s"] for s in burst.samples]
    peak = max(q for q, t in zip(queued, times, strict=True) if 30 <= t < 65)
    assert peak > max(q for q, t in zip(queued, times, strict=True) if t < 30)
    assert all(q == 0 for q, t in zip(queued, times, strict=True) if t > 95)
