"""summary.json's `meta` as the pages read it (app.recorded_meta): a full record reads as RunMeta
says, an older or partial one keeps what it has, and a `meta` that is not an object is named, on
the Runs page too, without the page failing."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.recorded_meta import RecordedMeta
from app.runs_view import list_runs
from emulator.errors import TelemetryError
from emulator.telemetry.outcome import RunOutcome
from emulator.telemetry.run_meta import RunMeta

PAGE = Path(__file__).resolve().parents[2] / "app" / "pages" / "2_Runs.py"
# RecordedMeta's fields that are RunMeta's own under the same name
MIRRORED = ("scenario", "engine", "model", "link_backend", "threshold_start", "n_p_start", "lambda_max_model",
            "end_reason")
FULL = RunMeta(
    engine="live", scenario="classroom-basic", seed=7, run_id="abc123", model="kimi-linear-mini (small)",
    profile="measured", policy="incremental-threshold", prefix_rule="incremental", affinity="least-loaded",
    scheduler={"short_term": True, "long_term": False}, threshold_start=19_620, n_p_start=3, lambda_max_model=3.58,
    link={"bandwidth_mbit": 100.0, "delay_ms": 10.0, "loss_pct": 0.0}, link_backend="netem",
    link_backend_reason="link backend: netem", transport={"connections": 8, "congestion": "cubic"},
    decisions=["t=125.0s scheduler: window mean 24431 tokens: t 19620 -> 17140 (model: 3.58 req/s)"],
    knob_changes=["t=20.0s control: arrivals paused"], end_reason="stopped at t = 30.0 s by SIGINT",
    outcome="stopped", stopped_by="SIGINT", stopped_at_s=30.0,
    workload={"statement": "replayed 40 of 50 rows (capped)", "limits": ["max_requests 40"],
              "arrival_rate": {"rate_per_s": 0.42, "source": "measured"}},
    control_events=[{"at_s": 20.0, "pause_arrivals": True}],
)


def test_a_full_record_reads_as_run_meta_says() -> None:
    meta = RecordedMeta.from_json(json.loads(json.dumps(FULL.as_json())))  # as it comes off disk
    assert {name: getattr(meta, name) for name in MIRRORED} == {name: getattr(FULL, name) for name in MIRRORED}
    assert (meta.outcome, meta.link_note, meta.bandwidth_mbit) == (RunOutcome.STOPPED, "link backend: netem", 100.0)
    assert (meta.workload_statement, meta.is_workload_cut) == ("replayed 40 of 50 rows (capped)", True)
    assert meta.arrival_rate_per_s == 0.42 and meta.control_events == ({"at_s": 20.0, "pause_arrivals": True},)
    assert [(e.t_s, e.source) for e in meta.log] == [(20.0, "control"), (125.0, "scheduler")]
    assert meta.as_recorded == FULL.as_json() and meta.problem is None


def test_the_mirrored_fields_keep_run_metas_names() -> None:
    assert set(MIRRORED) <= {f.name for f in fields(RunMeta)} & {f.name for f in fields(RecordedMeta)}


def test_an_older_record_keeps_what_it_has() -> None:
    older = {"engine": "live", "scenario": "fixture", "link_note": "link backend: proxy (no root)",
             "end_reason": "run interrupted by a signal before this request ended"}
    with pytest.raises(TelemetryError, match="meta lacks"):
        RunMeta.from_json(older)  # why the pages do not read it so
    meta = RecordedMeta.from_json(older)
    assert (meta.scenario, meta.engine, meta.link_note) == ("fixture", "live", "link backend: proxy (no root)")
    assert meta.outcome is RunOutcome.STOPPED  # from its end reason, as outcome_of reads it
    assert (meta.model, meta.threshold_start, meta.lambda_max_model, meta.workload_statement) == (None,) * 4
    assert meta.log == () and meta.control_events == () and meta.problem is None


@pytest.mark.parametrize(("key", "value"), [
    ("threshold_start", "19620"), ("threshold_start", True), ("lambda_max_model", "fast"), ("scenario", 5),
    ("link", "100 Mbit"), ("control_events", {"at_s": 1.0}),
])
def test_a_value_of_another_type_reads_as_missing(key: str, value: object) -> None:
    meta = RecordedMeta.from_json({key: value})
    assert meta == RecordedMeta(as_recorded=meta.as_recorded)


@pytest.mark.parametrize(("raw", "kind"), [([], "array"), ("meta", "string"), (3, "number"), (False, "boolean")])
def test_a_meta_that_is_not_an_object_is_named(raw: object, kind: str) -> None:
    meta = RecordedMeta.from_json(raw)
    assert meta.problem == (f"summary.json's meta is a JSON {kind}, not an object of the run's settings; "
                            "re-record the run")
    assert meta.scenario is None and meta.outcome is RunOutcome.FINISHED


def test_no_meta_at_all_is_a_record_of_nothing() -> None:
    assert RecordedMeta.from_doc({"summary": {}}) == RecordedMeta()


@pytest.fixture
def bad_meta_runs(tmp_path: Path, make_run) -> Path:
    """runs/: `good`, and `bad-meta`, whose summary.json holds a list as its meta."""
    root = tmp_path / "runs"
    make_run(root / "good")
    doc = make_run(root / "bad-meta")
    (root / "bad-meta" / "summary.json").write_text(json.dumps({**doc, "meta": ["not", "an", "object"]}))
    return root


def test_a_run_whose_meta_is_not_an_object_is_named_and_the_others_list(bad_meta_runs: Path) -> None:
    listing = list_runs(bad_meta_runs)
    assert [run.name for run in listing.runs] == ["good"]
    assert "summary.json's meta is a JSON array" in dict(listing.problems)["bad-meta"]
    app = AppTest.from_file(str(PAGE), default_timeout=30).run()
    app.text_input(key="runs_dir").set_value(str(bad_meta_runs)).run()
    assert not app.exception, [e.message for e in app.exception]
    assert list(app.dataframe[0].value["run"]) == ["good"]
    warnings = " ".join(w.value for w in app.warning)
    assert "`bad-meta`" in warnings and "meta is a JSON array" in warnings
