"""One end-of-run policy on both engines (emulator.run.ending): the same overloaded scenario, run
live and virtually, ends its drain with the same failure reason and detail, in words the record and
`compare` show side by side."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from emulator.telemetry.compare import compare_runs, format_table
from emulator.virtual.engine import run_virtual
from tests.emulator.live.test_engine import run, scenario

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and TUN need CAP_NET_ADMIN")
DETAIL = "still open 1 s after the scenario's 4 s (the run's drain)"


def test_an_overloaded_scenario_fails_the_same_requests_for_the_same_reason_on_both_engines(tmp_path: Path) -> None:
    overloaded = {"arrival": {"kind": "poisson", "rate_per_s": 60.0},
                  "input_len": {"kind": "uniform", "min": 4000, "max": 6000},
                  "output_len": {"kind": "fixed", "tokens": 6}, "max_requests": 240}
    sc = scenario(duration_s=4.0, drain_s=1.0, workload=overloaded)
    live_doc, live = run(sc, tmp_path, broker_url=None, embedded_broker=False)
    virtual_doc = run_virtual(sc, tmp_path / "virtual")
    virtual = pd.read_parquet(tmp_path / "virtual" / "requests.parquet")
    for doc, requests in ((live_doc, live), (virtual_doc, virtual)):
        failed = requests[requests["status"] == "failed"]
        assert len(failed) > 0 and set(failed["fail_reason"]) == {"unfinished"}
        assert set(failed["fail_detail"]) == {DETAIL}
        assert doc["meta"]["end_reason"] == (f"run ended: {len(failed)} requests still open 1 s after the "
                                             f"scenario's 4 s failed unfinished")
        assert doc["summary"]["failed_by_reason"] == {"unfinished": len(failed)}
    comparison = compare_runs(tmp_path / "run", tmp_path / "virtual")
    assert [(f.reason, f.a, f.b) for f in comparison.failures] == [
        ("unfinished", int((live["status"] == "failed").sum()), int((virtual["status"] == "failed").sum()))]
    assert "unfinished" in format_table(comparison)
