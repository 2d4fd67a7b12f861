"""A run as a scenario file that replays it: the scenario it started from (overrides applied) with
the operator's control messages joined to its timeline, so a dashboard session replays headlessly
with `python -m emulator run`. Documents only; nothing here runs or reads a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from emulator.scenario.schema import Scenario, parse_scenario


def replay_document(scenario: Scenario, control_events: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The scenario as a plain document whose timeline also holds `control_events` (timeline
    events, as a live run records its applied knobs in meta.control_events), in time order; a
    knob sent at the moment of a scripted event comes after it, as it did in the run. Knobs turned
    after duration_s (while the run drained) have no timeline event and are left out
    (`late_events` names them). Checked by parsing it back, so a document that would not load is
    never handed out."""
    doc = scenario.model_dump(mode="json", exclude_defaults=True)
    kept = [dict(event) for event in control_events if event not in late_events(scenario, control_events)]
    timeline = [*doc.get("timeline", ()), *kept]
    doc["timeline"] = sorted(timeline, key=lambda event: event["at_s"])  # stable: scripted first
    parse_scenario(doc, Path.cwd())
    return doc


def late_events(scenario: Scenario, control_events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The knobs turned after the scenario's duration: a timeline ends there."""
    return [event for event in control_events if event["at_s"] > scenario.duration_s]


def replay_yaml(scenario: Scenario, control_events: Sequence[Mapping[str, Any]] = (), *,
                source: str = "", untimed: Sequence[str] = ()) -> str:
    """`replay_document` as YAML with a header that says where it came from and what it left out:
    knobs turned while the run drained, and `untimed`, changes no timeline event can replay
    (pausing and resuming arrivals), one line each."""
    header = (f"# {scenario.name}, saved from {source or 'a run'} with its knob changes as timeline events.\n"
              "# Replay it with: python -m emulator run THIS_FILE.yaml\n")
    for event in late_events(scenario, control_events):
        change = {k: v for k, v in event.items() if k != "at_s"}
        header += (f"# left out: at {event['at_s']:g} s, after duration_s = {scenario.duration_s:g} (the run was "
                   f"draining): {change}\n")
    for change in untimed:
        header += f"# left out: {' '.join(change.split())} (no timeline event replays it)\n"  # one line
    return header + yaml.safe_dump(replay_document(scenario, control_events), sort_keys=False)
