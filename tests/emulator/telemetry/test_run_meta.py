"""RunMeta: one record of a run's metadata for both engines, round-tripped through summary.json."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from emulator.errors import TelemetryError
from emulator.plane import make_control_plane
from emulator.run.meta import make_run_meta
from emulator.scenario import load_scenario
from emulator.telemetry.recorder import RunRecorder, load_run
from emulator.telemetry.run_meta import EngineKind, RunMeta

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def meta() -> RunMeta:
    scenario = load_scenario(ROOT / "scenarios" / "live-worker-crash.yaml")
    return make_run_meta(scenario, make_control_plane(scenario), engine=EngineKind.LIVE, run_id="r1a2b3",
                         link_backend="tun", link_backend_reason="netem unavailable: kernel lacks sch_netem",
                         knob_changes=["t=16.0s kill remote-prefill-0: done"], notes=["link backend: tun"],
                         end_reason="run ended", engine_details={"worker_pids": {"remote-prefill-0": 4242}})


def test_run_meta_round_trips_through_summary_json(tmp_path: Path, meta: RunMeta) -> None:
    RunRecorder(tmp_path).finish(meta)
    _, _, doc = load_run(tmp_path)
    assert RunMeta.from_json(doc["meta"]) == meta
    assert json.loads((tmp_path / "summary.json").read_text())["meta"] == meta.as_json()


def test_run_meta_reads_the_scenario_and_plane_once_for_both_engines(meta: RunMeta) -> None:
    assert (meta.engine, meta.scenario, meta.seed, meta.policy) == ("live", "live-worker-crash", 2, "prfaas")
    assert meta.model == "kimi-linear-mini (small)" and meta.threshold_start == 2048
    assert meta.link == {"bandwidth_mbit": 200, "delay_ms": 10, "loss_pct": 0}
    assert meta.scheduler is None or meta.scheduler == {"short_term": False, "long_term": False}


def test_run_meta_refuses_an_unknown_engine_and_a_meta_without_its_keys(meta: RunMeta) -> None:
    with pytest.raises(TelemetryError, match="meta.engine = 'analytic'"):
        RunMeta(**{**meta.as_json(), "engine": "analytic"})
    with pytest.raises(TelemetryError, match="meta lacks scenario, seed"):
        RunMeta.from_json({"engine": "live"})
    optional = {f.name for f in fields(RunMeta)} - {"decisions", "knob_changes", "notes", "end_reason",
                                                     "engine_details"}
    assert RunMeta.from_json({k: v for k, v in meta.as_json().items() if k in optional}).notes == []
