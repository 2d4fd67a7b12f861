"""A run's outcome and its `expect:` verdict: a stopped run is `stopped` and its bounds are not
judged; older records (no `outcome`, no `expect_status`) read back the same way; the CLI's exit
status follows from the record."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from emulator.errors import TelemetryError
from emulator.plane import make_control_plane
from emulator.run.meta import make_run_meta
from emulator.scenario import load_scenario
from emulator.telemetry.outcome import (
    ExpectStatus,
    ExpectVerdict,
    RunOutcome,
    bound_rows,
    exit_code,
    judge,
    outcome_of,
    stopped_reason,
    verdict_of,
)
from emulator.telemetry.recorder import RunRecorder, load_run
from emulator.telemetry.records import RequestRecord
from emulator.telemetry.run_meta import EngineKind, RunMeta

SUMMARY = {"completed_fraction": 11 / 29, "ttft_p90_s": 0.8}
EXPECT = {"completed_fraction": {"min": 1.0}, "ttft_p90_s": {"max": 2.0}}
OLD_STOP = "run interrupted by a signal before this request ended"  # the words before `outcome` existed
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def run_meta() -> RunMeta:
    scenario = load_scenario(ROOT / "scenarios" / "live-worker-crash.yaml")
    return make_run_meta(scenario, make_control_plane(scenario), engine=EngineKind.LIVE, run_id="a1b2c3",
                         link_backend="tun", link_backend_reason="test")


@pytest.mark.parametrize(("outcome", "status", "failures", "note"), [
    (RunOutcome.FINISHED, ExpectStatus.FAILED, ("completed_fraction = 0.37931 < min 1.0",), "1 of 2 bounds failed"),
    (RunOutcome.STOPPED, ExpectStatus.NOT_JUDGED, (),
     "not judged: the run was stopped before its end, so its figures cover only the part that ran"),
    (RunOutcome.FAILED, ExpectStatus.NOT_JUDGED, (),
     "not judged: the run failed, so its figures cover only the part that ran"),
])
def test_only_a_finished_run_is_judged(outcome: RunOutcome, status: ExpectStatus, failures: tuple[str, ...],
                                       note: str) -> None:
    verdict = judge(SUMMARY, EXPECT, outcome)
    assert (verdict.status, verdict.failures, verdict.note) == (status, failures, note)


def test_bounds_that_hold_and_a_scenario_without_bounds() -> None:
    assert judge(SUMMARY, {"ttft_p90_s": {"max": 2.0, "min": 0.1}}, RunOutcome.FINISHED).note == "all 2 bounds held"
    assert judge(SUMMARY, {}, RunOutcome.STOPPED).status is ExpectStatus.NONE


@pytest.mark.parametrize(("meta", "outcome"), [
    ({"end_reason": "run ended"}, RunOutcome.FINISHED),
    ({"end_reason": "run ended: simulated-time budget of 3610 s spent"}, RunOutcome.FINISHED),
    ({"end_reason": OLD_STOP}, RunOutcome.STOPPED),
    ({"end_reason": "run interrupted by a signal: requests still open failed `interrupted`"}, RunOutcome.STOPPED),
    ({"end_reason": "run failed: worker exited"}, RunOutcome.FAILED),
    ({}, RunOutcome.FINISHED),
    ({"outcome": "stopped", "end_reason": "run ended"}, RunOutcome.STOPPED),  # the recorded value wins
    ({"outcome": ["stopped"], "end_reason": OLD_STOP}, RunOutcome.STOPPED),  # not a value: read the words
])
def test_the_outcome_of_new_and_older_records(meta: dict, outcome: RunOutcome) -> None:
    assert outcome_of(meta) is outcome


def test_an_older_stopped_record_is_not_judged_either() -> None:
    """A summary.json from before `expect_status`: its raw failures were judged on a stopped run."""
    old = {"summary": SUMMARY, "expect": EXPECT, "meta": {"end_reason": OLD_STOP},
           "expect_failures": ["completed_fraction = 0.37931 < min 1.0"]}
    assert verdict_of(old).status is ExpectStatus.NOT_JUDGED and verdict_of(old).failures == ()
    finished = {**old, "meta": {"end_reason": "run ended"}}
    assert verdict_of(finished).failures == ("completed_fraction = 0.37931 < min 1.0",)


def test_bound_rows_say_not_judged_on_every_bound() -> None:
    judged, not_judged = bound_rows(SUMMARY, EXPECT), bound_rows(SUMMARY, EXPECT, judged=False)
    assert [row.verdict for row in judged] == ["FAILED: completed_fraction = 0.37931 < min 1.0", "held"]
    assert [row.verdict for row in not_judged] == ["not judged", "not judged"]
    assert (judged[0].metric, judged[0].label, judged[0].value) == ("completed_fraction", "completed fraction", "0.379")


@pytest.mark.parametrize(("meta", "status", "code"), [
    ({"outcome": "stopped", "stopped_by": "SIGINT"}, ExpectStatus.NOT_JUDGED, 130),
    ({"outcome": "stopped", "stopped_by": "SIGTERM"}, ExpectStatus.NOT_JUDGED, 143),
    ({"outcome": "stopped", "stopped_by": None}, ExpectStatus.NONE, 130),
    ({"outcome": "stopped", "stopped_by": "its caller"}, ExpectStatus.NONE, 130),
    ({"outcome": "finished"}, ExpectStatus.FAILED, 1),
    ({"outcome": "finished"}, ExpectStatus.HELD, 0),
    ({"outcome": "finished"}, ExpectStatus.NONE, 0),
])
def test_the_exit_status_follows_the_record(meta: dict, status: ExpectStatus, code: int) -> None:
    assert exit_code(meta, ExpectVerdict(status, (), "")) == code


def test_stopped_reason_says_when_and_by_whom() -> None:
    assert stopped_reason("SIGINT", 12.34, 18) == (
        "stopped at t = 12.3 s by SIGINT (Ctrl-C, or the Live page's Stop); 18 requests still open failed "
        "`interrupted`")
    assert "by its caller's stop;" in stopped_reason(None, 1.0, 0)


def _record(i: int, status: str) -> RequestRecord:
    failed = status == "failed"
    return RequestRecord(id=f"r{i}", arrival_s=float(i), input_len=100, cached_len=0, incremental_len=100,
                         output_len=4, status=status, fail_reason="interrupted" if failed else None,
                         finish_s=None if failed else i + 1.0, ttft_s=None if failed else 0.5)


def test_a_stopped_run_records_stopped_and_not_judged(tmp_path: Path, run_meta: RunMeta) -> None:
    """The recorder's document: the outcome in meta, the verdict in words, no expect failure."""
    meta = replace(run_meta, outcome="stopped", stopped_by="SIGTERM", stopped_at_s=3.5,
                   end_reason=stopped_reason("SIGTERM", 3.5, 2))
    recorder = RunRecorder(tmp_path)
    for i, status in enumerate(("completed", "failed", "failed")):
        recorder.add_request(_record(i, status))
    doc = recorder.finish(meta, {"completed_fraction": {"min": 1.0}})
    _, _, loaded = load_run(tmp_path)
    assert loaded == json.loads(json.dumps(doc))
    assert loaded["meta"]["outcome"] == "stopped" and loaded["meta"]["stopped_by"] == "SIGTERM"
    assert (loaded["expect_status"], loaded["expect_failures"]) == ("not_judged", [])
    assert loaded["expect_note"].startswith("not judged: the run was stopped")
    assert RunMeta.from_json(loaded["meta"]) == meta
    assert "expect: not judged" in (tmp_path / "report.html").read_text()
    finished = RunRecorder(tmp_path / "f")
    finished.add_request(_record(0, "failed"))
    doc = finished.finish(run_meta, {"completed_fraction": {"min": 1.0}})
    assert (doc["expect_status"], doc["expect_failures"]) == ("failed", ["completed_fraction = 0.0 < min 1.0"])


def test_an_older_meta_reads_its_outcome_from_its_words(run_meta: RunMeta) -> None:
    old = {k: v for k, v in run_meta.as_json().items() if k not in ("outcome", "stopped_by", "stopped_at_s")}
    assert RunMeta.from_json({**old, "end_reason": OLD_STOP}).outcome == "stopped"
    assert RunMeta.from_json(old).outcome == "finished"
    with pytest.raises(TelemetryError, match="meta.outcome = 'paused'; use one of finished, stopped, failed"):
        RunMeta.from_json({**old, "outcome": "paused"})
