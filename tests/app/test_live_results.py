"""A run saved from the Live page as a scenario file: the engine it ran on, its knobs as timeline
events, and the changes no timeline event replays named in its header."""

from __future__ import annotations

from pathlib import Path

import yaml

from app.live_results import replay_file
from app.recorded_meta import RecordedMeta
from emulator.api import SCENARIOS_DIR
from emulator.scenario import load_scenario

META = RecordedMeta.from_json({
    "control_events": [{"at_s": 12.0, "set": {"router.threshold_tokens": 4096}}],
    "knob_changes": ["t=12.0s control: threshold -> 4096 tokens", "t=15.5s control: arrivals paused",
                     "t=21.25s control: arrivals resumed"],
})


def test_the_file_keeps_the_engine_the_run_ran_on_and_replays(tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIOS_DIR / "live-bandwidth-drop.yaml")
    assert scenario.engine == "live"
    text = replay_file(scenario, "virtual", META, "r1")
    path = tmp_path / "saved.yaml"
    path.write_text(text)
    replayed = load_scenario(path)
    assert replayed.engine == "virtual"
    assert {"at_s": 12.0, "set": {"router.threshold_tokens": 4096}} in [
        e.model_dump(mode="json", exclude_defaults=True) for e in replayed.timeline]
    assert yaml.safe_load(text)["engine"] == "virtual"


def test_pauses_and_resumes_are_named_in_the_header_not_dropped() -> None:
    scenario = load_scenario(SCENARIOS_DIR / "live-quickstart.yaml")
    header = [line for line in replay_file(scenario, "live", META, "r2").splitlines() if line.startswith("#")]
    assert "# left out: at 15.5 s: arrivals paused (no timeline event replays it)" in header
    assert "# left out: at 21.25 s: arrivals resumed (no timeline event replays it)" in header
    assert not any("threshold" in line for line in header)  # a timed knob is replayed, not left out
