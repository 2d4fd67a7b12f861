"""The dashboard's run API: scenarios listed, a run started as a CLI child, watched and stopped."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest

from emulator.api import SCENARIOS_DIR, list_scenarios, live_capability, start_run
from emulator.errors import ScenarioError
from emulator.net import netns


def test_every_shipped_scenario_is_listed_with_its_engine() -> None:
    infos = {info.path.name: info for info in list_scenarios()}
    assert set(infos) == {p.name for p in SCENARIOS_DIR.glob("*.yaml")}
    assert infos["paper-case-study.yaml"].engine == "virtual"
    assert infos["classroom-basic.yaml"].engine == "live"


def test_a_bad_scenario_is_refused_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    with pytest.raises(ScenarioError):
        start_run(bad, out_dir=tmp_path / "out")
    assert live_capability()[1]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and TUN need CAP_NET_ADMIN")
def test_a_stopped_live_run_fails_what_is_open_and_cleans_up(tmp_path: Path) -> None:
    handle = start_run(SCENARIOS_DIR / "classroom-basic.yaml",  # at 0.5/s, not auto: arrivals known below
                       overrides=("duration_s=600", "workload.arrival.rate_per_s=0.5"), out_dir=tmp_path / "run")
    summary = tmp_path / "run" / "summary.json"
    log = tmp_path / "run" / "run.log"
    for _ in range(120):  # wait until requests flow (the workers load the model first)
        if ": running" in log.read_text() or not handle.is_running:
            break
        time.sleep(0.5)
    assert handle.is_running, handle.log_tail()
    time.sleep(12)  # the first arrivals come at 2.7, 3.1 and 4.2 s (seed 34); some are still open at the stop
    assert handle.stop() == 130, handle.log_tail()  # stopped by SIGINT, as Ctrl-C; its expect not judged
    doc = json.loads(summary.read_text())
    assert doc["meta"]["outcome"] == "stopped" and doc["expect_failures"] == []
    assert doc["meta"]["engine"] == "live" and doc["meta"]["run_id"] == handle.run_id
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert len(requests) > 0
    failed = requests[requests["status"] == "failed"]
    assert (failed["fail_reason"].str.contains("interrupted")).all()
    assert netns.list_netns(f"prf-{handle.run_id}-") == []


@pytest.mark.live
def test_a_dashboard_run_logs_its_progress_often_enough_for_a_run_of_seconds(tmp_path: Path) -> None:
    """The Live page reads a virtual run's progress from its log: a run of a few seconds must
    state its total when the simulation starts, not only at its end (a 5 s cadence wrote only the end)."""
    handle = start_run(SCENARIOS_DIR / "paper-case-study.yaml", out_dir=tmp_path / "run")
    assert handle.process.wait(timeout=120) == 0, handle.log_tail()
    lines = [line for line in handle.log_path.read_text().splitlines() if line.startswith("progress: ")]
    assert len(lines) >= 2 and lines[0].startswith("progress: 0/1,225 requests ended"), lines
    assert lines[-1].startswith("progress: 1,225/1,225 requests ended"), lines
