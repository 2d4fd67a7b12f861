"""`rate_per_s: auto` on the live engine: the run times its own workers once they are up, offers
AUTO_LOAD of the capacity those times give, draws its requests at that rate, and records the rate
and how it was measured (emulator/live/calibration.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pandas as pd
import pytest

from emulator.auto_rate import AUTO_LOAD, with_rate
from emulator.live.session import run_live
from emulator.scenario import parse_scenario
from emulator.workload.build import build_requests

from .test_engine import assert_nothing_left

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and TUN need CAP_NET_ADMIN")


def test_auto_is_measured_on_the_workers_and_recorded(tmp_path: Path) -> None:
    sc = parse_scenario({
        "name": "live-auto", "engine": "live", "seed": 3, "duration_s": 6.0,
        "model": {"preset": "kimi-linear-mini", "size": "tiny"},
        "clusters": {"remote": {"instances": 1, "device": "cpu"},
                     "local": {"instances": 2, "device": "cpu", "prefill_instances": 1, "decode_max_batch": 4}},
        "link": {"bandwidth_mbit": 200, "delay_ms": 5},
        "router": {"policy": "prfaas", "threshold_tokens": 1024},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": "auto"},
                     "input_len": {"kind": "uniform", "min": 200, "max": 3000},
                     "output_len": {"kind": "fixed", "tokens": 6}, "max_requests": 12},
    }, Path.cwd())
    doc = asyncio.run(run_live(sc, tmp_path / "run", embedded_broker=True))
    rate = doc["meta"]["workload"]["arrival_rate"]
    assert rate["source"] == "measured" and rate["how"].startswith("timed on the workers at start in ")
    assert "prefill of " in rate["how"] and " local, " in rate["how"] and "decode step" in rate["how"]
    assert rate["rate_per_s"] == pytest.approx(AUTO_LOAD * rate["capacity_per_s"])
    assert rate["statement"] in doc["meta"]["workload"]["statement"]
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    drawn = [r for r in build_requests(with_rate(sc, rate["rate_per_s"])) if r.arrival_s < sc.duration_s]
    assert sorted(requests["id"]) == sorted(r.id for r in drawn)  # the requests drawn at the measured rate
    assert (requests["status"] == "completed").all()
    assert_nothing_left(doc)
