"""A stopped run on the Runs page: listed as `stopped` (an older record too, by its end reason), and
opened, it says when and by whom it stopped and that its `expect:` was not judged, in words; a
finished run's failed bound is named by its label, not the checker's raw line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.outcome_view import Tone, outcome_lines
from app.runs_view import list_runs, listing_table
from emulator.telemetry.outcome import stopped_reason
from emulator.telemetry.recorder import RunRecorder
from tests.app.conftest import run_records, write_run

PAGE = Path(__file__).resolve().parents[2] / "app" / "pages" / "2_Runs.py"
STOP = stopped_reason("SIGINT", 2.5, 1)


def write_stopped(out: Path, older: bool = False) -> dict:
    """A run its user stopped at t = 2.5 s, its expect bound missed; `older`: recorded before
    `outcome` existed (the end reason said `run interrupted`, and expect_failures held the raw line)."""
    recorder = RunRecorder(out)
    for record in run_records(1.0):
        recorder.add_request(record)
    meta = {"engine": "live", "scenario": "fixture-stopped", "link_backend": "tun", "outcome": "stopped",
            "stopped_by": "SIGINT", "stopped_at_s": 2.5, "end_reason": STOP}
    doc = recorder.finish(meta, expect={"ttft_p90_s": {"max": 1.0}})
    if older:
        doc["meta"] = {k: v for k, v in meta.items() if k not in ("outcome", "stopped_by", "stopped_at_s")}
        doc["meta"]["end_reason"] = "run interrupted by a signal before this request ended"
        doc["expect_failures"] = ["ttft_p90_s = 1.12 > max 1.0"]
        for key in ("expect_status", "expect_note"):
            del doc[key]
        (out / "summary.json").write_text(json.dumps(doc))
    return doc


def test_the_listing_says_stopped_for_new_and_older_records(tmp_path: Path) -> None:
    write_run(tmp_path / "finished")
    write_stopped(tmp_path / "stopped")
    write_stopped(tmp_path / "older", older=True)
    table = listing_table(list_runs(tmp_path)).set_index("run")
    assert table["status"].to_dict() == {"finished": "finished", "stopped": "stopped", "older": "stopped"}


def test_a_stopped_run_says_when_and_that_expect_was_not_judged(tmp_path: Path) -> None:
    lines = outcome_lines(write_stopped(tmp_path / "stopped"))
    assert [line.tone for line in lines] == [Tone.WARNING, Tone.INFO]
    assert lines[0].text == f"**Stopped**: {STOP}"
    assert lines[1].text == ("**Expect**: not judged: the run was stopped before its end, so its figures cover "
                             "only the part that ran\n- TTFT P90 (s): 1.12, bound max 1: not judged")
    older = outcome_lines(write_stopped(tmp_path / "older", older=True))
    assert [line.tone for line in older] == [Tone.WARNING, Tone.INFO] and "not judged" in older[1].text


def test_a_finished_runs_missed_bound_is_named_by_its_label(tmp_path: Path) -> None:
    lines = outcome_lines(write_run(tmp_path / "finished"))
    assert [(line.tone, line.text) for line in lines] == [
        (Tone.WARNING, "**Expect**: 1 of 1 bounds failed\n- TTFT P90 (s): 1.12, bound max 1: FAILED")]


@pytest.mark.slow
def test_the_runs_page_lists_and_opens_a_stopped_run(tmp_path: Path) -> None:
    write_run(tmp_path / "runs" / "finished")
    write_stopped(tmp_path / "runs" / "stopped")
    app = AppTest.from_file(str(PAGE), default_timeout=30).run()
    app.text_input(key="runs_dir").set_value(str(tmp_path / "runs")).run()
    assert not app.exception, [e.message for e in app.exception]
    listing = app.dataframe[0].value.set_index("run")
    assert listing["status"].to_dict() == {"stopped": "stopped", "finished": "finished"}
    app.selectbox(key="runs_open").set_value("stopped").run()
    assert not app.exception, [e.message for e in app.exception]
    assert {m.label: m.value for m in app.metric}["Outcome"] == "stopped"
    assert [w.value for w in app.warning] == [f"**Stopped**: {STOP}"]
    assert any(i.value.startswith("**Expect**: not judged: the run was stopped") for i in app.info)
    assert not any("expect failed" in w.value for w in app.warning)
