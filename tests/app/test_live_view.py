"""The Live page's buffer and tables: bounded per run, copied consistently, built from messages."""

from __future__ import annotations

import math
import threading
import time

import pandas as pd
import pytest

from app.live_charts import egress_spec
from app.live_view import (
    METRIC_COLUMNS,
    REQUEST_COLUMNS,
    FeedBuffer,
    RunView,
    bus_phase,
    metrics_frame,
    recorded_frame,
    requests_table,
    roles_table,
    run_phase,
)
from emulator.telemetry.schemas import (
    ErrorEvent,
    NoteEvent,
    QueueDepths,
    RequestCounts,
    RequestEvent,
    StatusMessage,
)

from .conftest import snap


def event(rid: str, kind: str, t_s: float, **fields) -> RequestEvent:
    return RequestEvent(run_id="abc123", t_s=t_s, request_id=rid, event=kind, **fields)


def status(state: str) -> StatusMessage:
    return StatusMessage(run_id="abc123", t_s=0.0, state=state, engine="live")


def test_buffer_files_each_kind_under_its_run() -> None:
    buffer = FeedBuffer()
    error = ErrorEvent(run_id="abc123", t_s=1.0, topic="prfaas/abc123/control/x", error="no")
    for at_s, message in enumerate([status("running"), snap(0.5), event("r1", "arrived", 0.6), error]):
        buffer.add("abc123", message, float(at_s))
    view = buffer.view("abc123")
    assert view.status.state == "running" and view.latest.t_s == 0.5 and view.metrics_at_s == (1.0,)
    assert [e.event for e in view.events] == ["arrived"] and view.errors == ((3.0, error),)
    assert view.version == 4 and view.last_at_s == 3.0
    assert buffer.view("other") == RunView("other") and buffer.version("other") == 0
    with pytest.raises(TypeError):
        buffer.add("abc123", RequestCounts(), 5.0)


def test_buffer_is_bounded_per_kind_and_in_runs() -> None:
    buffer = FeedBuffer(max_runs=2, max_snapshots=3, max_events=2)
    for i in range(5):
        buffer.add("run-a", snap(float(i)), float(i))
        buffer.add("run-a", event(f"r{i}", "arrived", float(i)), float(i))
    view = buffer.view("run-a")
    assert [s.t_s for s in view.metrics] == [2.0, 3.0, 4.0]
    assert [e.request_id for e in view.events] == ["r3", "r4"]
    buffer.add("run-b", snap(0.0), 10.0)
    buffer.add("run-c", snap(0.0), 11.0)  # the least recently heard-from run is forgotten
    assert buffer.run_ids() == ["run-c", "run-b"]
    assert buffer.view("run-a").metrics == ()


def test_views_stay_consistent_while_a_thread_appends() -> None:
    buffer = FeedBuffer(max_snapshots=100)
    stop = threading.Event()

    def feed() -> None:
        i = 0
        while not stop.is_set():
            buffer.add("abc123", snap(float(i)), float(i))
            i += 1

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        for _ in range(200):
            view = buffer.view("abc123")
            assert len(view.metrics) == len(view.metrics_at_s) <= 100
            assert [s.t_s for s in view.metrics] == list(view.metrics_at_s)
    finally:
        stop.set()
        writer.join()


@pytest.mark.parametrize(("messages", "now_s", "phase"), [
    ([], 0.0, "waiting"),
    ([(0.0, status("starting"))], 1.0, "waiting"),
    ([(0.0, status("running")), (0.5, snap(0.1))], 1.0, "running"),
    ([(0.0, status("running")), (0.5, snap(0.1))], 100.0, "ended"),  # silent for STALE_S
    ([(0.0, snap(0.1)), (0.5, status("finished"))], 1.0, "ended"),
])
def test_bus_phase(messages, now_s: float, phase: str) -> None:
    buffer = FeedBuffer()
    for at_s, message in messages:
        buffer.add("abc123", message, at_s)
    assert bus_phase(buffer.view("abc123"), now_s) == phase


def test_run_phase_knows_its_own_processes() -> None:
    empty = RunView("abc123", last_at_s=0.0)
    assert run_phase(empty, 100.0, "live", process_running=True) == "waiting"  # silent but alive
    assert run_phase(empty, 1.0, "live", process_running=False) == "ended"
    assert run_phase(empty, 1.0, "virtual", process_running=True) == "virtual"


def test_a_slow_start_is_not_taken_for_an_end() -> None:
    """A live run that calibrates its workers can say `starting` and then nothing for longer than
    STALE_S: while its process runs it is still starting, not over (the page kept polling only then)."""
    buffer = FeedBuffer()
    buffer.add("abc123", StatusMessage(run_id="abc123", t_s=0.0, state="starting", engine="live"), 0.0)
    view = buffer.view("abc123")
    assert bus_phase(view, 100.0) == "ended"  # from the bus alone: silent too long
    assert run_phase(view, 100.0, "live", process_running=True) == "waiting"
    buffer.add("abc123", snap(1.0), 100.0)
    assert run_phase(buffer.view("abc123"), 200.0, "live", process_running=True) == "running"
    buffer.add("abc123", StatusMessage(run_id="abc123", t_s=9.0, state="finished", engine="live"), 201.0)
    assert run_phase(buffer.view("abc123"), 202.0, "live", process_running=True) == "ended"  # writing its record


def test_metrics_frame_shares_and_gaps() -> None:
    frame = metrics_frame([snap(0.0), snap(5.0, prfaas=1, local=1, ttft_p50_s=0.5),
                           snap(10.0, prfaas=1, local=3), snap(15.0, prfaas=3, local=3,
                                                               queues=QueueDepths(decode=2))])
    assert frame["remote_share"].tolist()[1:] == [0.5, 0.25, 0.5]
    assert frame["remote_share"].isna().tolist()[0]
    # last 10 s: at 15 s, since t = 5 s: 2 more remote, 2 more local
    assert frame["recent_remote_share"].tolist()[1:] == [0.5, 0.25, 0.5]
    assert frame["ttft_p50_s"].isna().tolist() == [True, False, True, True]  # no data is not zero
    assert frame["decode"].tolist() == [0, 0, 0, 2]
    assert metrics_frame([]).empty


@pytest.mark.parametrize(("capacity", "unit", "shown"), [(50e6, "Mbit/s", [40.0, 50.0]),
                                                         (10e9, "Gbit/s", [0.04, 10.0]),
                                                         (None, "Mbit/s", [40.0, math.nan])])
def test_egress_chart_converts_bit_per_s_at_display_time(capacity: float | None, unit: str,
                                                         shown: list[float]) -> None:
    frame = metrics_frame([snap(1.0, egress_bit_per_s=40e6, link_capacity_bit_per_s=capacity)])
    assert frame["egress_bit_per_s"].tolist() == [40e6]  # the frame keeps the snapshot's unit
    spec = egress_spec(frame)
    assert [layer["encoding"]["y"]["title"] for layer in spec["layer"][0]["layer"][:2]] == [unit, unit]
    series = spec["datasets"]["series"]
    assert series["series"].tolist() == ["egress", "link capacity"]
    assert series["value"].tolist() == pytest.approx(shown, nan_ok=True)  # an unshaped link: a gap
    assert egress_spec(metrics_frame([]))["layer"][0]["layer"][0]["encoding"]["y"]["title"] == "Mbit/s"


def test_requests_table_has_route_reason_and_ttft_breakdown() -> None:
    events = [
        event("r1", "arrived", 0.0, detail={"input_len": 3000}),
        event("r1", "routed", 0.0, route="prfaas", node="remote-prefill-0", reason="3000 > t"),
        event("r2", "arrived", 0.5, detail={"input_len": 500}),
        event("r2", "routed", 0.5, route="local", node="local-prefill-0", reason="500 <= t"),
        event("r1", "prefill_start", 0.25, route="prfaas"),
        event("r1", "prefill_end", 1.0, route="prfaas"),
        event("r1", "transfer_end", 1.5, route="prfaas"),
        event("r1", "first_token", 1.75, route="prfaas", detail={"ttft_s": 1.75}),
        event("r2", "failed", 2.0, route="local", reason="worker lost"),
    ]
    table = requests_table(events)
    assert tuple(table.columns) == REQUEST_COLUMNS
    assert table["request"].tolist() == ["r2", "r1"]  # newest arrival first
    r2, r1 = table.iloc[0], table.iloc[1]
    assert (r2["status"], r2["reason"], r2["input_len"]) == ("failed", "worker lost", 500)
    assert (r1["status"], r1["route"], r1["node"]) == ("decoding", "prfaas", "remote-prefill-0")
    assert (r1["queue_s"], r1["prefill_s"], r1["transfer_s"], r1["ttft_s"]) == (0.25, 0.75, 0.5, 1.75)
    assert len(requests_table(events, limit=1)) == 1


def test_roles_table_lists_remote_nodes_first() -> None:
    table = roles_table(snap(0.0, roles={"local-decode-1": "decode", "remote-prefill-0": "prefill",
                                         "local-prefill-0": "prefill"}))
    assert table["node"].tolist() == ["remote-prefill-0", "local-decode-1", "local-prefill-0"]
    assert roles_table(None).empty


def test_roles_table_shows_each_nodes_device_where_the_run_knows_it() -> None:
    table = roles_table(snap(0.0, roles={"remote-prefill-0": "prefill", "local-decode-1": "decode"},
                             devices={"remote-prefill-0": "cuda:1"}))
    assert table.columns.tolist() == ["node", "role", "host", "device"]
    assert table["device"].iloc[0] == "cuda:1" and pd.isna(table["device"].iloc[1])  # not known yet: blank


def test_roles_table_shows_each_nodes_host() -> None:
    table = roles_table(snap(0.0, roles={"remote-prefill-0": "prefill", "local-decode-1": "decode"},
                             hosts={"remote-prefill-0": "10.9.0.2 (node 3f2a9c1e)", "local-decode-1": "10.9.0.3"}))
    assert table["host"].tolist() == ["10.9.0.2 (node 3f2a9c1e)", "10.9.0.3"]


def test_the_knob_and_decision_log_is_kept_per_run_in_order() -> None:
    buffer = FeedBuffer()
    notes = [NoteEvent(run_id="r1", t_s=float(i), source="scheduler", what=f"t {i}") for i in range(3)]
    for i, note in enumerate(notes):
        buffer.add("r1", note, float(i))
    buffer.add("r2", NoteEvent(run_id="r2", t_s=0.5, source="control", what="threshold -> 3072 tokens"), 0.5)
    assert buffer.view("r1").notes == tuple(notes)
    assert [n.what for n in buffer.view("r2").notes] == ["threshold -> 3072 tokens"]


def test_a_record_draws_with_the_live_columns() -> None:
    """A recorded run's timeseries in metrics_frame's columns; the share routed remote from its
    requests' routes by arrival time (the timeseries does not hold it)."""
    timeseries = pd.DataFrame({"t_s": [0.0, 1.0, 2.0, 3.0], "ttft_p50_s": [None, 0.5, 0.6, 0.7],
                               "queue_remote_prefill": [0, 1, 0, 0], "queue_local_prefill": [0, 2, 1, 0],
                               "queue_decode": [0, 0, 1, 0], "egress_bit_per_s": [0.0, 8e6, 4e6, 0.0]})
    requests = pd.DataFrame({"arrival_s": [0.2, 0.9, 1.5, 2.5], "route": ["prfaas", "local", "prfaas", None]})
    frame = recorded_frame(requests, timeseries)
    assert list(frame.columns[:len(METRIC_COLUMNS)]) == list(METRIC_COLUMNS)
    assert frame["routed"].tolist() == [0, 2, 3, 3]  # the unrouted (failed before routing) is left out
    assert frame["remote_share"].tolist()[1:] == [0.5, 2 / 3, 2 / 3] and math.isnan(frame["remote_share"][0])
    assert frame["local_prefill"].tolist() == [0, 2, 1, 0]
    assert frame["arrived"].isna().all()  # not recorded: a gap, not zero


def test_a_request_not_yet_routed_reads_dashes_not_none() -> None:
    table = requests_table([RequestEvent(run_id="r1", t_s=0.1, request_id="rq-1", event="arrived")])
    assert table.loc[0, ["status", "route", "node", "reason"]].tolist() == ["queued", "-", "-", "-"]


def test_wait_for_news_wakes_when_the_run_says_something() -> None:
    """The Live page holds a redraw for a knob's answer on this, so the answer shows as it is filed."""
    buffer = FeedBuffer()
    buffer.add("abc123", snap(1.0), 0.0)
    version = buffer.version("abc123")
    assert buffer.wait_for_news("abc123", version, timeout_s=0.05) == version  # nothing new: times out
    timer = threading.Timer(0.1, lambda: buffer.add("other", snap(2.0), 1.0))  # another run's news
    later = threading.Timer(0.3, lambda: buffer.add("abc123", snap(2.0), 1.0))
    timer.start()
    later.start()
    started = time.monotonic()
    assert buffer.wait_for_news("abc123", version, timeout_s=10.0) == version + 1
    assert time.monotonic() - started < 5.0  # woken by the filing, not by the timeout
    timer.join()
    later.join()
