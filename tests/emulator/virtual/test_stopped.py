"""A virtual run its user stops (the stop callback the CLI's signal handler feeds) ends `stopped`:
what was open fails `interrupted` with who stopped it, the record says when and by whom, and its
`expect:` is not judged, while the same run left alone is judged."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from emulator.scenario import Scenario
from emulator.telemetry.outcome import stopped_reason
from emulator.telemetry.recorder import load_run
from emulator.virtual.engine import run_virtual

Small = Callable[..., Scenario]
EXPECT = {"completed_fraction": {"min": 1.0}, "ttft_p90_s": {"max": 0.001}}  # the second fails on a full run


def stop_at_sample(n: int, by: str) -> Callable[[], str | None]:
    """A StopCheck that answers `by` from its `n`-th call on (one call per simulated second)."""
    calls: list[None] = []

    def stop() -> str | None:
        calls.append(None)
        return by if len(calls) >= n else None

    return stop


def test_a_stop_through_the_callback_records_stopped_and_not_judged(small: Small, tmp_path: Path) -> None:
    scenario = small(duration_s=60, expect=EXPECT)
    doc = run_virtual(scenario, tmp_path, stop=stop_at_sample(10, "SIGTERM"))
    meta, summary = doc["meta"], doc["summary"]
    assert (meta["outcome"], meta["stopped_by"]) == ("stopped", "SIGTERM")
    assert meta["engine_details"]["sim"]["end"] == "stopped"
    at_s = meta["stopped_at_s"]
    assert 0 < at_s < scenario.duration_s
    num_interrupted = summary["failed_by_reason"].get("interrupted", 0)
    assert num_interrupted > 0 and summary["failed_count"] == num_interrupted  # only the stop failed any
    assert meta["end_reason"] == stopped_reason("SIGTERM", at_s, num_interrupted)
    assert summary["completed_fraction"] < 1.0  # a bound that would fail, had it been judged
    assert (doc["expect_status"], doc["expect_failures"]) == ("not_judged", [])
    assert doc["expect_note"].startswith("not judged: the run was stopped")
    requests, _, _ = load_run(tmp_path)
    failed = requests[requests["status"] == "failed"]
    assert set(requests["status"]) == {"completed", "failed"} and len(failed) == num_interrupted
    assert set(failed["fail_detail"]) == {"the run was stopped (SIGTERM) before this request ended"}


def test_the_same_run_left_alone_is_finished_and_judged(small: Small, tmp_path: Path) -> None:
    doc = run_virtual(small(duration_s=20, expect=EXPECT), tmp_path, stop=lambda: None)
    assert (doc["meta"]["outcome"], doc["meta"]["stopped_by"], doc["meta"]["end_reason"]) == (
        "finished", None, "run ended")
    assert doc["expect_status"] == "failed" and len(doc["expect_failures"]) == 1
    assert doc["expect_failures"][0].startswith("ttft_p90_s = ")


def test_a_stop_that_names_no_one_is_the_callers(small: Small, tmp_path: Path) -> None:
    """A StopCheck that answers True (a plain predicate) stops the run as well."""
    doc = run_virtual(small(duration_s=60), tmp_path, stop=lambda: True)
    assert doc["meta"]["outcome"] == "stopped" and doc["meta"]["stopped_by"] is None
    assert "by its caller's stop" in doc["meta"]["end_reason"]
    assert doc["expect_status"] == "none"
