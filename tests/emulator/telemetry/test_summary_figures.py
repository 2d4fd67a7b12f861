"""The trace-study figures of the summary (issue 15): prefix hits per cluster, the paper's no-queue
TTFT, offloaded share, egress in the link's unit and the per-node figures, against numbers worked
out by hand from a few records; and how the views read them, old summaries included."""

from __future__ import annotations

import pytest

from emulator.telemetry.figures import (
    NodeFigures,
    egress_bit_per_s,
    format_node,
    format_rate,
    node_figures,
    rate_label,
)
from emulator.telemetry.records import RequestRecord, noqueue_ttft_s, summarize

DURATION_S = 20.0


def record(rid: str, route: str, node: str, decode: str, *, input_len: int, cached_len: int, arrival: float,
           start: float, end: float, transfer: tuple[float, float] | None = None, first_token: float | None = None,
           failed: bool = False) -> RequestRecord:
    return RequestRecord(
        id=rid, arrival_s=arrival, input_len=input_len, cached_len=cached_len,
        incremental_len=input_len - cached_len, route=route, prefill_node=node, decode_node=decode,
        queue_s=start - arrival, prefill_start_s=start, prefill_end_s=end,
        transfer_start_s=None if transfer is None else transfer[0],
        transfer_end_s=None if transfer is None else transfer[1], kv_bytes=1_000_000,
        first_token_s=first_token, ttft_s=None if first_token is None else first_token - arrival,
        tpot_s=None if failed else 0.05, output_len=8, finish_s=end + 1.0,
        status="failed" if failed else "completed", fail_reason="link_down" if failed else None)


def study() -> list[RequestRecord]:
    """Five requests: two queue on local-prefill-0 (a hotspot), one on local-prefill-1, two remote
    (the second fails after its prefill)."""
    return [
        # no transfer (local KV stays put): no-queue TTFT = prefill 1.0
        record("a", "local", "local-prefill-0", "local-decode-0", input_len=4000, cached_len=3000,
               arrival=0.0, start=1.0, end=2.0, first_token=2.5),
        # KV done 0.5 s after the prefill: 1.0 + 0.5
        record("b", "local", "local-prefill-0", "local-decode-1", input_len=2000, cached_len=1000,
               arrival=1.0, start=2.0, end=3.0, transfer=(2.5, 3.5), first_token=3.6),
        # KV done before the prefill ended (streamed layer by layer): nothing exposed, 0.4
        record("c", "local", "local-prefill-1", "local-decode-0", input_len=1000, cached_len=0,
               arrival=2.0, start=2.0, end=2.4, transfer=(2.1, 2.3), first_token=2.5),
        # remote: prefill 3.0 + 0.5 exposed = 3.5
        record("d", "prfaas", "remote-prefill-0", "local-decode-0", input_len=10_000, cached_len=2000,
               arrival=3.0, start=3.5, end=6.5, transfer=(4.0, 7.0), first_token=7.2),
        # failed after its prefill: it counts for its node, not for the hit fraction or the TTFTs
        record("e", "prfaas", "remote-prefill-0", "local-decode-1", input_len=8000, cached_len=8000,
               arrival=4.0, start=6.5, end=8.5, failed=True),
    ]


def test_noqueue_ttft_is_prefill_plus_exposed_transfer() -> None:
    by_id = {r.id: r for r in study()}
    assert [noqueue_ttft_s(by_id[i]) for i in "abcde"] == pytest.approx([1.0, 1.5, 0.4, 3.5, 2.0])
    # not ttft - queue: that would add the wait for a decode slot and the first decode step (a: 1.5)
    assert by_id["a"].ttft_s - by_id["a"].queue_s == pytest.approx(1.5)
    unstarted = RequestRecord(id="x", arrival_s=0.0, input_len=1, cached_len=0, incremental_len=1,
                              output_len=1, status="failed", fail_reason="worker_lost")
    assert noqueue_ttft_s(unstarted) is None


def test_trace_study_figures_by_hand() -> None:
    summary = summarize(study(), DURATION_S)
    # completed no-queue TTFTs sorted: 0.4, 1.0, 1.5, 3.5; P50 rank 1.5, P90 rank 2.7
    assert summary["ttft_noqueue_mean_s"] == pytest.approx(6.4 / 4)
    assert summary["ttft_noqueue_p50_s"] == pytest.approx(1.25)
    assert summary["ttft_noqueue_p90_s"] == pytest.approx(1.5 + 0.7 * 2.0)
    # completed requests' cached / input tokens; e (8000 of 8000 cached) failed and is left out
    assert summary["prefix_hit_fraction"] == pytest.approx(6000 / 17_000)
    assert summary["prefix_hit_fraction_remote"] == pytest.approx(2000 / 10_000)
    assert summary["prefix_hit_fraction_local"] == pytest.approx(4000 / 7000)
    # offloaded: 2 of 5 requests, 18,000 of 25,000 input tokens
    assert summary["prfaas_fraction"] == pytest.approx(0.4)
    assert summary["prfaas_input_token_fraction"] == pytest.approx(0.72)
    # remote KV: 2 MB over 20 s
    assert summary["egress_bit_per_s_mean"] == pytest.approx(2e6 * 8 / 20)
    assert summary["egress_gbps_mean"] == pytest.approx(2e6 * 8 / 20 / 1e9)
    assert summary["prefill_nodes"] == {
        "local-prefill-0": {"requests": 2, "busy_fraction": pytest.approx(2.0 / 20),
                            "queue_mean": pytest.approx(2.0 / 20)},
        "local-prefill-1": {"requests": 1, "busy_fraction": pytest.approx(0.4 / 20), "queue_mean": 0.0},
        "remote-prefill-0": {"requests": 2, "busy_fraction": pytest.approx(5.0 / 20),
                             "queue_mean": pytest.approx((0.5 + 2.5) / 20)},  # d waited 0.5 s, e 2.5 s
    }
    assert list(summary["prefill_nodes"]) == ["local-prefill-0", "local-prefill-1", "remote-prefill-0"]
    # completed requests only: e was placed on local-decode-1 but failed
    assert summary["decode_nodes"] == {"local-decode-0": {"requests": 3}, "local-decode-1": {"requests": 1}}


def test_nodes_are_listed_by_index_not_text() -> None:
    records = [record(str(i), "local", f"local-prefill-{i}", f"local-decode-{i}", input_len=10, cached_len=0,
                      arrival=0.0, start=0.0, end=0.1, first_token=0.2) for i in (10, 9, 2)]
    summary = summarize(records, 1.0)
    assert list(summary["prefill_nodes"]) == ["local-prefill-2", "local-prefill-9", "local-prefill-10"]
    assert list(summary["decode_nodes"]) == ["local-decode-2", "local-decode-9", "local-decode-10"]


def test_zero_duration_has_no_node_rates() -> None:
    summary = summarize(study(), 0.0)
    assert summary["prefill_nodes"]["local-prefill-0"] == {"requests": 2, "busy_fraction": None, "queue_mean": None}
    assert summary["egress_bit_per_s_mean"] is None


def test_views_read_the_node_table_and_egress() -> None:
    summary = summarize(study(), DURATION_S)
    rows = node_figures(summary)
    assert [(r.node, r.role, r.requests) for r in rows] == [
        ("local-prefill-0", "prefill", 2), ("local-prefill-1", "prefill", 1), ("remote-prefill-0", "prefill", 2),
        ("local-decode-0", "decode", 3), ("local-decode-1", "decode", 1)]
    assert rows[0].busy_fraction == pytest.approx(0.1) and rows[3].busy_fraction is None
    assert format_node(rows[0]) == "2 req, busy 10.0%, queue 0.1"
    assert format_node(rows[3]) == "3 req" and format_node(None) == "-"
    hotspot = NodeFigures("local-prefill-0", "prefill", 6383, 0.998, 2343.4)
    assert format_node(hotspot) == "6,383 req, busy 99.8%, queue 2,343"
    assert format_rate(egress_bit_per_s(summary)) == "0.8 Mbit/s"


@pytest.mark.parametrize(("bit_per_s", "text"), [
    (8.7e6, "8.7 Mbit/s"), (42.1e9, "42.1 Gbit/s"), (1e9, "1 Gbit/s"), (0.0, "0 Mbit/s"), (None, "-"),
])
def test_egress_shows_in_the_unit_of_its_size(bit_per_s: float | None, text: str) -> None:
    """The issue's complaint: a Mbit/s link's egress showed as 0.0087 Gbit/s."""
    assert format_rate(bit_per_s) == text


def test_a_common_unit_suits_the_largest() -> None:
    assert rate_label([8.7e6, 2e9, None]) == ("Gbit/s", 1e9)
    assert rate_label([8.7e6, None]) == ("Mbit/s", 1e6)
    assert rate_label([None]) == ("Mbit/s", 1e6)


def test_an_old_summary_reads_as_no_data() -> None:
    """A summary recorded before these figures: egress from egress_gbps_mean, no node rows, and
    malformed entries are skipped rather than fatal."""
    old = {"egress_gbps_mean": 0.0087, "ttft_p90_s": 1.0}
    assert egress_bit_per_s(old) == pytest.approx(8.7e6)
    assert format_rate(egress_bit_per_s(old)) == "8.7 Mbit/s"
    assert node_figures(old) == ()
    odd = {"prefill_nodes": {"n": "busy", "m": {"requests": "many", "busy_fraction": True}}, "decode_nodes": []}
    assert node_figures(odd) == (NodeFigures("m", "prefill", None, None, None),)
    assert egress_bit_per_s({"egress_bit_per_s_mean": None, "egress_gbps_mean": None}) is None
