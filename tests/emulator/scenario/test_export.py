"""A run saved as a scenario: the repository's scenarios round-trip through the document, and a
scenario with an operator's knob changes replays them headlessly as timeline events."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from emulator.knobs import timeline_event
from emulator.scenario import load_scenario, parse_scenario
from emulator.scenario.export import replay_document, replay_yaml
from emulator.telemetry.control_messages import parse_control

REPO = Path(__file__).resolve().parents[3]
SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_repository_scenario_round_trips(path: Path) -> None:
    scenario = load_scenario(path)
    assert parse_scenario(replay_document(scenario), Path.cwd()) == scenario


def _sent(knob: str, payload: dict, at_s: float) -> dict:
    """A control message as the live loops record it once applied."""
    event = timeline_event(parse_control(knob, json.dumps({"v": 1, **payload}).encode()), at_s)
    assert event is not None
    return event


def test_knob_changes_join_the_timeline_in_time_order() -> None:
    scenario = load_scenario(REPO / "scenarios" / "classroom-basic.yaml")  # events at 20 and 40 s
    events = [_sent("threshold", {"tokens": 3072}, 12.5), _sent("link", {"bandwidth_mbit": 30}, 20.0)]
    doc = replay_document(scenario, events)
    assert [(e["at_s"], next(k for k in e if k != "at_s")) for e in doc["timeline"]] == [
        (12.5, "set"), (20.0, "link"), (20.0, "link"), (40.0, "set")]
    assert doc["timeline"][2] == {"at_s": 20.0, "link": {"bandwidth_mbit": 30.0}}  # after the scripted one
    assert parse_scenario(doc, Path.cwd()).timeline[0].set == {"router.threshold_tokens": 3072}


@pytest.mark.live
def test_a_saved_run_replays_headlessly_with_its_knobs(tmp_path: Path) -> None:
    scenario = load_scenario(REPO / "scenarios" / "mooncake-replay.yaml")
    events = [_sent("threshold", {"tokens": 8192}, 30.0), _sent("policy", {"policy": "local-only"}, 60.0),
              _sent("affinity", {"mode": "off"}, 90.0), _sent("scheduler", {"short_term": False}, 100.0)]
    saved = tmp_path / "saved.yaml"
    saved.write_text(replay_yaml(scenario, events, source="a test"))
    assert yaml.safe_load(saved.read_text())["name"] == "mooncake-replay"
    out = subprocess.run([sys.executable, "-m", "emulator", "run", str(saved), "--out", str(tmp_path / "run"),
                          "--set", "workload.max_requests=300"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    changes = json.loads((tmp_path / "run" / "summary.json").read_text())["meta"]["knob_changes"]
    assert changes == ["t=30.0s timeline: threshold -> 8192 tokens", "t=60.0s timeline: router policy -> local-only",
                       "t=90.0s timeline: affinity -> off", "t=100.0s timeline: scheduler short-term off, long-term on"]


@pytest.mark.parametrize(("knob", "payload", "event"), [
    ("threshold", {"tokens": "auto"}, {"set": {"router.threshold_tokens": "auto"}}),
    ("arrival_rate", {"rate_per_s": 2.5}, {"set": {"workload.arrival.rate_per_s": 2.5}}),
    ("scheduler", {"short_term": True, "long_term": False},
     {"set": {"scheduler.short_term.enabled": True, "scheduler.long_term.enabled": False}}),
    ("link", {"delay_ms": 25, "loss_pct": 1}, {"link": {"delay_ms": 25.0, "loss_pct": 1.0}}),
    ("pause", {}, None),
    ("resume", {}, None),
])
def test_each_control_message_has_its_timeline_event(knob: str, payload: dict, event: dict | None) -> None:
    command = parse_control(knob, json.dumps({"v": 1, **payload}).encode())
    assert timeline_event(command, 7.25) == (None if event is None else {"at_s": 7.25, **event})


def test_a_knob_turned_while_the_run_drained_is_left_out_and_named() -> None:
    """A timeline ends at duration_s; a knob sent after it (the drain) cannot be replayed."""
    scenario = load_scenario(REPO / "scenarios" / "classroom-basic.yaml")  # duration_s 60
    events = [_sent("threshold", {"tokens": 3072}, 12.5), _sent("link", {"bandwidth_mbit": 30}, 61.25)]
    doc = replay_document(scenario, events)
    assert [e["at_s"] for e in doc["timeline"]] == [12.5, 20.0, 40.0]
    text = replay_yaml(scenario, events)
    assert ("# left out: at 61.25 s, after duration_s = 60 (the run was draining): "
            "{'link': {'bandwidth_mbit': 30.0}}") in text.splitlines()
    assert yaml.safe_load(text)["timeline"] == doc["timeline"]
