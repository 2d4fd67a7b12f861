"""The Live page's tiles: the run's own figures, from the bus while it runs and from its record once
it has ended (issue 26: after Stop the tiles said Failed 0 and 11/29 while the results said 18)."""

from __future__ import annotations

from app.live_tiles import arrivals_words, bus_tiles, knob_tiles, link_words, record_tiles
from app.live_view import TILES, FeedBuffer
from emulator.telemetry.schemas import KnobState, MetricsSnapshot, RequestCounts, StatusMessage

LINK = {"bandwidth_mbit": 50.0, "delay_ms": 10.0, "jitter_ms": 0.0, "loss_pct": 0.0}


def _view():
    buffer = FeedBuffer()
    buffer.add("abc123", StatusMessage(run_id="abc123", t_s=0.0, state="running", engine="live",
                                       link_backend="tun"), 0.0)
    buffer.add("abc123", MetricsSnapshot(
        run_id="abc123", t_s=12.0, threshold_tokens=4096, link=LINK,
        requests=RequestCounts(arrived=29, completed=11, failed=0, in_flight=18),
        knobs=KnobState(policy="prfaas", affinity="cost", rate_per_s=0.5)), 1.0)
    return buffer.view("abc123")


def _values(tiles) -> dict[str, str]:
    return {tile.title: tile.value for tile in tiles}


def test_while_running_the_tiles_are_the_last_snapshot() -> None:
    tiles = _values(bus_tiles(_view(), "running", 30.0))
    assert tiles == {TILES["state"]: "running", TILES["run_time"]: "12.0 / 30", TILES["arrived"]: "11 / 29",
                     TILES["failed"]: "0"}
    assert _values(knob_tiles(_view())) == {TILES["threshold"]: "4,096", TILES["link"]: "50 Mbit/s · 10 ms",
                                            TILES["arrivals"]: "0.5/s", TILES["link_backend"]: "tun"}


def test_once_recorded_the_tiles_are_the_record_a_stopped_run_says_stopped() -> None:
    doc = {"summary": {"duration_s": 12.4, "requests": 29, "completed": 11, "failed_count": 18},
           "meta": {"outcome": "stopped", "end_reason": "stopped at t = 12.4 s by SIGINT"}}
    tiles = _values(record_tiles(doc))
    assert tiles == {TILES["state"]: "stopped", TILES["run_time"]: "12.4", TILES["arrived"]: "11 / 29",
                     TILES["failed"]: "18"}


def test_link_and_arrivals_in_words() -> None:
    assert link_words({}) == "-"
    assert link_words(LINK | {"bandwidth_mbit": None, "loss_pct": 1.0}) == "unshaped · 10 ms · 1 % loss"
    assert arrivals_words(None) == "-"
    assert arrivals_words(KnobState(policy="prfaas", affinity="cost", rate_per_s=2.0, is_paused=True)) == "paused"
