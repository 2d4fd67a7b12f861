"""The Live page headless (AppTest) against a real broker: a probe client plays the run's gateway,
so each knob's control message is read off the bus as the run would read it."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from app.live_charts import CHART_TITLES
from app.live_view import TILES
from emulator.telemetry.labels import format_number

PAGE = Path(__file__).resolve().parents[2] / "app" / "pages" / "1_Live.py"
CHART_KEYS = {"live_ttft", "live_egress", "live_queues", "live_share", "live_link"}


def _knob(app: AppTest, kind: str, name: str):
    """The knob widget `name`: its key is `live_k_<name>`, with a suffix once the run has moved it
    (a widget is made anew, never set in place: app.knob_sync.renewed)."""
    return next(w for w in app.get(kind) if re.fullmatch(f"live_k_{name}(_[0-9]+)?", w.key or ""))


def _ok(app: AppTest) -> AppTest:
    assert not app.exception, [e.message for e in app.exception]
    return app


def _until(app: AppTest, done: Callable[[AppTest], bool], timeout_s: float = 15.0) -> AppTest:
    """Rerun the page until `done` holds: the subscriber files messages in the background."""
    deadline = time.monotonic() + timeout_s
    while True:
        _ok(app.run())
        if done(app):
            return app
        assert time.monotonic() < deadline, "the page never showed it: " + " | ".join(
            str(e.value) for e in [*app.caption, *app.info, *app.error, *app.success])
        time.sleep(0.2)


def _texts(app: AppTest) -> str:
    return " | ".join(str(e.value) for e in [*app.caption, *app.markdown, *app.info, *app.error,
                                             *app.success, *app.warning])


def _charts(app: AppTest) -> dict[str, tuple[dict, dict[str, pd.DataFrame]]]:
    """The page's Vega-Lite charts by title: (spec, {dataset name: frame}), as the browser gets them
    (the datasets travel as Arrow beside the spec)."""
    titles = {title: key for key, title in CHART_TITLES.items()}
    charts = {}
    for chart in app.get("vega_lite_chart"):
        spec = json.loads(chart.proto.spec)
        data = {d.name: pa.ipc.open_stream(d.data.data).read_all().to_pandas() for d in chart.proto.datasets}
        charts[titles[spec["description"]]] = (spec, data)
    return charts


def _series(chart: tuple[dict, dict[str, pd.DataFrame]], name: str) -> list[float]:
    series = chart[1]["series"]
    return series.loc[series["series"] == name, "value"].tolist()


def _chart_keys(app: AppTest) -> set[str]:
    return set(_charts(app))


def _metrics(app: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in app.metric}


def _watching(fake_run) -> AppTest:
    """The page on `fake_run`, running, with two snapshots and one request in. The page's subscriber
    is connected before the run publishes (the bus keeps nothing for late subscribers), so the test
    does not depend on an earlier test having started it."""
    app = AppTest.from_file(str(PAGE), default_timeout=30)
    app.query_params["run"] = fake_run.run_id
    _until(app, lambda a: "subscriber connected" in _texts(a))
    fake_run.status("running")
    fake_run.snapshot(0.5, egress_bit_per_s=0.0)
    fake_run.snapshot(1.0, egress_bit_per_s=42e6, ttft_p50_s=0.8, ttft_p90_s=1.2)
    fake_run.event("rq-1", "arrived", 0.2, detail={"input_len": 3000})
    fake_run.event("rq-1", "routed", 0.2, route="prfaas", node="remote-prefill-0", reason="3000 > t 2048")
    fake_run.event("rq-1", "prefill_start", 0.3, route="prfaas", node="remote-prefill-0")
    fake_run.event("rq-1", "prefill_end", 0.7, route="prfaas", node="remote-prefill-0")
    fake_run.event("rq-1", "transfer_end", 0.9, route="prfaas", node="remote-prefill-0")
    fake_run.event("rq-1", "first_token", 1.0, route="prfaas", node="local-decode-1",
                   detail={"ttft_s": 0.8})
    return _until(app, lambda a: "Last snapshot: t = 1.00 s" in _texts(a)
                  and not _knob(a, "slider", "threshold").disabled and _first_token_shown(a))


def _first_token_shown(app: AppTest) -> bool:
    """The last of the request's events has reached the page (events come after the snapshots)."""
    tables = [d.value for d in app.dataframe if "ttft_s" in d.value.columns]
    return bool(tables) and len(tables[0]) > 0 and tables[0]["ttft_s"].iloc[0] == 0.8


def test_renders_with_no_run(live_env: str) -> None:
    app = _ok(AppTest.from_file(str(PAGE), default_timeout=30).run())
    assert app.title[0].value == "Live control room"
    assert f"MQTT broker: {live_env} (from $PRFAAS_BROKER_URL) · subscriber connected" in _texts(app)
    assert app.selectbox(key="live_scenario").value == "live-quickstart.yaml"
    assert app.radio(key="live_engine").value == "live"
    assert not app.error


def test_shows_a_running_run_its_backend_charts_and_requests(fake_run) -> None:
    app = _watching(fake_run)
    metrics = _metrics(app)
    assert metrics["State"] == "running" and metrics["Link backend"] == "proxy"
    assert metrics["Threshold (tokens)"] == "2,048" and metrics["Run time (s)"] == "1.0 / 30"
    assert "Why this backend: not root: no network namespaces" in _texts(app)
    assert "Workload: generated (poisson): 30 requests" in _texts(app)  # the run's own statement
    charts = _charts(app)
    assert set(charts) == CHART_KEYS
    assert _series(charts["live_ttft"], "TTFT P50")[-1] == 0.8
    right_axis = charts["live_ttft"][0]["layer"][1]["layer"]  # the threshold, on the right
    assert [layer["transform"][0]["filter"]["equal"] for layer in right_axis] == ["threshold"]
    assert _series(charts["live_egress"], "egress") == [0.0, 42.0]
    assert _series(charts["live_egress"], "link capacity") == [200.0, 200.0]
    roles, requests = (d.value for d in app.dataframe)
    assert roles["node"].tolist()[0] == "remote-prefill-0"
    row = requests.iloc[0]
    assert (row["request"], row["route"], row["reason"]) == ("rq-1", "prfaas", "3000 > t 2048")
    assert row["ttft_s"] == 0.8 and row["transfer_s"] == pytest.approx(0.2)


def test_a_run_seen_only_on_the_bus_shows_its_progress(fake_run) -> None:
    """A run started in a terminal: the page knows its duration from the run's status alone."""
    app = _watching(fake_run)
    assert [p.proto.text for p in app.get("progress")] == ["1 of 30 s"]
    fake_run.status(duration_s=None)  # a run from before the status said it: no bar, no guess
    _until(app, lambda a: not a.get("progress"))
    assert _metrics(app)["Run time (s)"] == "1.0"


def test_threshold_knob_publishes_and_shows_the_runs_answer(fake_run) -> None:
    app = _watching(fake_run)
    assert _knob(app, "slider", "threshold").value == 2048  # from the run's snapshot
    for tokens in (2176, 2304, 2432):  # steps of the slider: nothing is sent until Apply
        _ok(_knob(app, "slider", "threshold").set_value(tokens).run())
    assert not fake_run.sent("threshold")
    _knob(app, "slider", "threshold").set_value(3072)  # a form sends its values with the submit
    _ok(app.button(key="live_apply_threshold").click().run())
    assert fake_run.control("threshold") == {"v": 1, "tokens": 3072}
    assert fake_run.sent("threshold") == [{"v": 1, "tokens": 3072}]  # one message, not one per step
    assert "threshold -> 3072 tokens**: waiting" in _texts(app)
    fake_run.snapshot(2.0, threshold=3072)  # the gateway's snapshot right after applying it
    _until(app, lambda a: any("threshold -> 3072 tokens**: applied: the run reports it at t = 2.0 s"
                              in s.value for s in a.success))


@pytest.mark.parametrize(("knob", "act", "payload"), [
    ("policy", lambda a: _knob(a, "selectbox", "policy").set_value("local-only"),
     {"v": 1, "policy": "local-only"}),
    ("scheduler", lambda a: _knob(a, "toggle", "short_term").set_value(True),
     {"v": 1, "short_term": True, "long_term": False}),
    ("affinity", lambda a: _knob(a, "selectbox", "affinity").set_value("longest-prefix"),
     {"v": 1, "mode": "longest-prefix"}),
    ("arrival_rate", lambda a: _knob(a, "number_input", "rate_per_s").set_value(3.0),
     {"v": 1, "rate_per_s": 3.0}),
    ("pause", lambda a: a.button(key="live_pause").click(), {"v": 1}),
    ("resume", lambda a: a.button(key="live_resume").click(), {"v": 1}),
])
def test_each_knob_publishes_its_control_message(fake_run, knob: str, act, payload: dict) -> None:
    app = _watching(fake_run)
    _ok(act(app).run())
    assert fake_run.control(knob) == payload
    assert not app.error


def test_link_knob_sends_all_four_fields_and_is_checked_against_the_run(fake_run) -> None:
    app = _watching(fake_run)
    assert _knob(app, "number_input", "bandwidth_mbit").value == 200.0  # the run's link
    _knob(app, "number_input", "bandwidth_mbit").set_value(50.0)
    _knob(app, "number_input", "delay_ms").set_value(25.0)
    _ok(app.button(key="live_apply_link").click().run())
    assert fake_run.control("link") == {"v": 1, "bandwidth_mbit": 50.0, "delay_ms": 25.0,
                                        "jitter_ms": 0.0, "loss_pct": 0.0}
    fake_run.snapshot(2.0, link_capacity_bit_per_s=50e6,
                      link={"bandwidth_mbit": 50.0, "delay_ms": 25.0, "jitter_ms": 0.0, "loss_pct": 0.0})
    _until(app, lambda a: any("**link -> 50 Mbit/s, 25 ms ± 0 ms, 0 % loss**: applied" in s.value
                              for s in a.success))


@pytest.mark.parametrize(("name", "value", "message"), [
    ("rate_per_s", 0.0, "Not sent: control/arrival_rate: rate_per_s = 0.0 is invalid"),
    ("loss_pct", 150.0, "Not sent: control/link.loss_pct: 150.0 is invalid"),
    ("delay_ms", -5.0, "Not sent: control/link.delay_ms: -5.0 is invalid"),
    ("bandwidth_mbit", 0.0, "Not sent: control/link.bandwidth_mbit: 0.0 is invalid"),
])
def test_invalid_values_are_refused_before_publishing(fake_run, name: str, value: float, message: str) -> None:
    app = _watching(fake_run)
    _knob(app, "number_input", name).set_value(value)
    if name != "rate_per_s":
        app.button(key="live_apply_link").click()
    _ok(app.run())
    assert len(app.error) == 1 and app.error[0].value.startswith(message), app.error[0].value
    time.sleep(0.5)
    assert fake_run.probe.on(f"prfaas/{fake_run.run_id}/control/link") == []
    assert fake_run.probe.on(f"prfaas/{fake_run.run_id}/control/arrival_rate") == []


def test_a_refusal_from_the_run_is_shown(fake_run) -> None:
    app = _watching(fake_run)
    _ok(_knob(app, "selectbox", "policy").set_value("all-remote").run())
    fake_run.control("policy")
    fake_run.refuse("policy", "control/policy: not now; try later", t_s=1.5)
    _until(app, lambda a: any("router policy -> all-remote**: refused: control/policy: not now" in e.value
                              for e in a.error))


def test_the_schedulers_decisions_are_marked_and_listed_as_they_happen(fake_run) -> None:
    app = _watching(fake_run)
    assert "None yet: no knob has been turned" in _texts(app)
    fake_run.note(0.9, "scheduler", "link goodput below the model's egress (held 2 intervals): t 2048 -> 3200 "
                                    "(model: 0.91 req/s, p 0.30, bottleneck prfaas)")
    _until(app, lambda a: any(d.value.shape[0] == 1 for d in a.dataframe if "why" in d.value.columns))
    decisions = next(d.value for d in app.dataframe if "why" in d.value.columns)
    assert decisions.iloc[0].tolist() == [0.9, "threshold 2048 -> 3200 tokens",
                                          "link goodput below the model's egress (held 2 intervals); model: 0.91 "
                                          "req/s, p 0.30, bottleneck prfaas"]
    charts = _charts(app)
    for key in ("live_ttft", "live_egress"):  # a dotted marker at 0.9 s on the threshold and egress charts
        assert charts[key][1]["decisions"][["t_s", "label"]].values.tolist() == [[0.9, "t 2,048→3,200"]]


def test_the_backend_reason_stays_when_a_knob_note_arrives(fake_run) -> None:
    app = _watching(fake_run)
    fake_run.status(note="control: link -> 30 Mbit/s, 10 ms ± 0 ms, 0 % loss")
    _until(app, lambda a: "Latest from the run: control: link -> 30 Mbit/s" in _texts(a))
    assert "Why this backend: not root: no network namespaces" in _texts(app)


@pytest.mark.parametrize("final", ["finished", "stopped"])
def test_knobs_are_off_once_the_run_has_finished(fake_run, final: str) -> None:
    app = _watching(fake_run)
    fake_run.status(final)
    _until(app, lambda a: _knob(a, "slider", "threshold").disabled)
    assert "This run is over; its knobs are off." in _texts(app)
    assert _metrics(app)["State"] == final  # the run's own last word, not the page's `ended`


def test_starts_a_virtual_run_and_shows_its_results(live_env: str, tmp_path: Path) -> None:
    app = _ok(AppTest.from_file(str(PAGE), default_timeout=30).run())
    app.radio(key="live_engine").set_value("virtual")
    app.number_input(key="live_duration").set_value(20.0)
    app.number_input(key="live_connections").set_value(8)
    _ok(app.button(key="live_start").click().run())
    assert not app.error
    run_id = app.selectbox(key="live_watch").value
    assert _knob(app, "slider", "threshold").disabled  # a virtual run takes no knobs
    _until(app, lambda a: "Completed" in _metrics(a), timeout_s=60)
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("live-quickstart-") and runs[0].name.endswith(run_id)
    meta = json.loads((runs[0] / "summary.json").read_text())["meta"]
    assert meta["transport"] == {"connections": 8, "congestion": "cubic"}  # the start option reached the run
    assert f"Recorded in `{runs[0]}`" in _texts(app)
    summary = json.loads((runs[0] / "summary.json").read_text())["summary"]
    _until(app, lambda a: "live_ttft" in _chart_keys(a))  # the live charts, drawn from the record
    assert _chart_keys(app) == CHART_KEYS
    metrics = _metrics(app)
    assert metrics["Throughput (req/s)"] == format_number(summary["throughput_rps"])
    assert metrics["Λ_max, model (req/s)"] == format_number(meta["lambda_max_model"])
    assert [b.proto.label for b in app.get("download_button")] == ["Save as scenario (YAML)"]


def test_every_bad_start_override_is_listed(live_env: str, tmp_path: Path) -> None:
    app = _ok(AppTest.from_file(str(PAGE), default_timeout=30).run())
    app.text_area(key="live_overrides").set_value("routr.x=1\nbad\nrouter.threshold_tokens=-5")
    _ok(app.button(key="live_start").click().run())
    assert [line.split(":")[0] for line in app.error[0].value.splitlines()] == [
        "- --set routr", "- --set bad", "- router.threshold_tokens"]


@pytest.mark.parametrize(("overrides", "message"), [
    ("router.threshold_tokens=-5", "router.threshold_tokens"),
    ("no.such.field=1", "no"),
])
def test_bad_start_overrides_are_refused(live_env: str, tmp_path: Path, overrides: str, message: str) -> None:
    app = _ok(AppTest.from_file(str(PAGE), default_timeout=30).run())
    app.text_area(key="live_overrides").set_value(overrides)
    _ok(app.button(key="live_start").click().run())
    assert len(app.error) == 1 and message in app.error[0].value
    assert not (tmp_path / "runs").exists()  # nothing started


def test_a_run_that_fails_to_start_shows_its_reason(live_env: str) -> None:
    app = _ok(AppTest.from_file(str(PAGE), default_timeout=30).run())
    app.selectbox(key="live_scenario").set_value("paper-case-study.yaml").run()
    assert app.radio(key="live_engine").value == "virtual"  # the scenario's own engine
    app.radio(key="live_engine").set_value("live")
    _ok(app.button(key="live_start").click().run())
    _until(app, lambda a: bool(a.error), timeout_s=60)
    assert "ended with exit code 2 and no results" in app.error[0].value
    assert "model.preset: the live engine runs a model_stub preset" in app.error[0].value


def test_a_run_opened_elsewhere_brings_the_selectors_and_its_start_threshold(live_env: str) -> None:
    """The Classroom and the Sweeps page open a run on this page (live_focus): the scenario and
    engine selectors follow it, and the paper run's greyed threshold knob shows the t it ran at
    on a range that reaches the scenario's longest input."""
    app = _ok(AppTest.from_file(str(PAGE), default_timeout=30).run())
    app.selectbox(key="live_scenario").set_value("paper-case-study.yaml").run()
    app.number_input(key="live_duration").set_value(60.0)
    _ok(app.button(key="live_start").click().run())
    run_id = app.selectbox(key="live_watch").value
    # the run's end: its tiles from its record (how it ended, simulated time, counts) beside its results
    _until(app, lambda a: TILES["lambda_max_model"] in _metrics(a) and _metrics(a)[TILES["state"]] == "finished",
           timeout_s=60)
    assert {TILES[k] for k in ("state", "simulated_time", "arrived", "failed", "completed", "failed_count",
                               "ttft_p50_s", "ttft_p90_s", "prfaas_fraction", "throughput_rps")} <= set(_metrics(app))
    app.selectbox(key="live_scenario").set_value("live-quickstart.yaml").run()
    assert app.radio(key="live_engine").value == "live"
    app.session_state["live_focus"] = run_id  # as the Classroom's start button leaves it
    _ok(app.run())
    assert app.selectbox(key="live_scenario").value == "paper-case-study.yaml"
    assert app.radio(key="live_engine").value == "virtual" and app.selectbox(key="live_watch").value == run_id
    knob = _knob(app, "slider", "threshold")
    assert knob.disabled and knob.value == 19_620 and knob.max >= 131_072


def test_the_live_tiles_carry_the_titles_the_tour_names(fake_run) -> None:
    app = _watching(fake_run)
    assert {TILES[k] for k in ("state", "link_backend", "run_time", "arrived", "failed", "threshold")} <= set(
        _metrics(app))
    assert _knob(app, "number_input", "rate_per_s").label == "Arrival rate (req/s)"
    assert "KV caches cross" in _knob(app, "number_input", "bandwidth_mbit").help
    assert "one-way delay" in _knob(app, "number_input", "delay_ms").help
    assert "least estimated time to first token" in _knob(app, "selectbox", "affinity").help


def test_the_node_table_shows_each_nodes_device(fake_run) -> None:
    app = AppTest.from_file(str(PAGE), default_timeout=30)
    app.query_params["run"] = fake_run.run_id
    _until(app, lambda a: "subscriber connected" in _texts(a))  # the bus keeps nothing for late subscribers
    fake_run.status("running")
    fake_run.snapshot(1.0, devices={"remote-prefill-0": "cuda:0", "local-prefill-0": "cuda:2", "local-decode-1": "cpu"},
                      hosts={"remote-prefill-0": "10.9.0.2", "local-prefill-0": "10.9.0.3", "local-decode-1": "10.9.0.3"})
    _until(app, lambda a: any("device" in d.value.columns for d in a.dataframe))
    nodes = next(d.value for d in app.dataframe if "device" in d.value.columns)
    assert nodes.to_dict("records") == [
        {"node": "remote-prefill-0", "role": "prefill", "host": "10.9.0.2", "device": "cuda:0"},
        {"node": "local-decode-1", "role": "decode", "host": "10.9.0.3", "device": "cpu"},
        {"node": "local-prefill-0", "role": "prefill", "host": "10.9.0.3", "device": "cuda:2"},
    ]
