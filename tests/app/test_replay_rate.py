"""A run saved as a scenario from the Live page replays at the rate it ran at when its scenario's
rate was `auto`: the saved file names that rate, so a replay draws the same arrivals."""

from __future__ import annotations

from pathlib import Path

import yaml

from app.live_results import replay_file
from app.recorded_meta import RecordedMeta
from emulator.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_a_saved_auto_run_names_the_rate_it_ran_at() -> None:
    scenario = load_scenario(SCENARIOS / "live-quickstart.yaml")
    assert scenario.workload.arrival.rate_per_s == "auto"
    meta = {"workload": {"arrival_rate": {"rate_per_s": 0.42, "source": "measured"}}, "control_events": []}
    saved = yaml.safe_load(replay_file(scenario, "live", RecordedMeta.from_json(meta), "abc123"))
    assert saved["workload"]["arrival"]["rate_per_s"] == 0.42
    unknown = yaml.safe_load(replay_file(scenario, "live", RecordedMeta.from_json({"control_events": []}), "abc123"))
    assert unknown["workload"]["arrival"]["rate_per_s"] == "auto"  # no record of it: auto again
