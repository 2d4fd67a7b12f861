"""A run's decision and knob logs read back as (time, what, why), as the engines word them."""

from __future__ import annotations

import pytest

from emulator.telemetry.decision_log import LogEntry, log_entries, parse_line, split_stamp

THRESHOLD = ("t=125.0s scheduler: traffic window mean 24431 tokens (held 2 intervals): t 19620 -> 17140 "
             "(model: 3.58 req/s, p 0.50, bottleneck pd-prefill)")
FLIP = ("t=360.0s scheduler: 14 arrivals in 60 s (0.23 req/s, mean 9000 tokens): split 4:4 carries 1.00 req/s, "
        "5:3 carries 1.20; drain, then flip local-decode-4 to prefill (n_p 4 -> 5, target 5)")


@pytest.mark.parametrize(("line", "stamp"), [
    ("t=125.0s scheduler: x", (125.0, "scheduler: x")),
    ("t=3s control: y", (3.0, "control: y")),
    ("t=1e2s a: b", (100.0, "a: b")),
    ("no time here", (None, "no time here")),
    ("t=nans x", (None, "t=nans x")),
])
def test_split_stamp(line: str, stamp: tuple[float | None, str]) -> None:
    assert split_stamp(line) == stamp


def test_a_threshold_decision_says_what_changed_and_why() -> None:
    assert parse_line(THRESHOLD) == LogEntry(
        125.0, "scheduler", "threshold 19620 -> 17140 tokens",
        "traffic window mean 24431 tokens (held 2 intervals); model: 3.58 req/s, p 0.50, bottleneck: local prefill")


def test_a_role_flip_says_which_node_and_why() -> None:
    entry = parse_line(FLIP)
    assert entry.what == "drain, then flip local-decode-4 to prefill (n_p 4 -> 5, target 5)"
    assert entry.why.startswith("14 arrivals in 60 s") and entry.why.endswith("5:3 carries 1.20")


def test_knob_changes_name_who_changed_them() -> None:
    timeline = parse_line("t=20.0s timeline: link -> 10 Mbit/s, 10 ms, 0 % loss")
    assert timeline == LogEntry(20.0, "timeline", "link -> 10 Mbit/s, 10 ms, 0 % loss", "the scenario's timeline")
    assert parse_line("t=4.5s control: threshold -> 8000").why == "a control message (dashboard or MQTT)"
    assert parse_line("odd line") == LogEntry(None, "", "odd line", "")


def test_log_entries_merge_both_logs_in_time_order() -> None:
    meta = {"decisions": [THRESHOLD, FLIP], "knob_changes": ["t=20.0s timeline: link -> 10 Mbit/s", "late", 7]}
    entries = log_entries(meta)
    assert [e.t_s for e in entries] == [20.0, 125.0, 360.0, None]
    assert log_entries({}) == () and log_entries({"decisions": None}) == ()
