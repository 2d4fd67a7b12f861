"""bench/link_fidelity.py on issue 30's inter-host path (`--backends host`): the --check rule on
hand-made rows, then (root, slow) the quick grid measured on the rehearsed hosts, each rate row within
5 % of its set rate, RTT rows judged where netem or the host relay adds the delay, and no qdisc,
relay device or route left after."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from emulator.net.ceiling import CEILINGS, HOST_RELAY
from tests.bench.scripts import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("link_fidelity")


def _point(rate: float, mbit: float, rtt_error_ms: float | None = None, note: str | None = None) -> dict:
    return {"rate_mbit": rate, "delay_ms": 10, "loss_pct": 0.0, "jitter_ms": 0.0, "probe_mbit": mbit,
            "achieved_ratio": mbit / rate, "rtt_error_ms": rtt_error_ms, "rtt_note": note}


def test_host_check_judges_rate_both_ways_and_rtt_only_where_applied(bench: ModuleType) -> None:
    run = {"backend": "host", "leftover_qdiscs": [], "points": [
        _point(100, 99.0, note=bench.NEEDS_NETEM), _point(1000, 1060.0, note=bench.NEEDS_NETEM),
        _point(2500, 2300.0, rtt_error_ms=0.4), _point(5000, 4990.0, rtt_error_ms=1.5)]}
    assert bench.host_failures(run) == [
        "host: 1000 Mbit/s set, 1060.0 measured (> 5 % off)",
        "host: 2500 Mbit/s set, 2300.0 measured (> 5 % off)",
        "host: RTT error 1.50 ms > 1 ms at 5000 Mbit/s"]
    assert bench.host_failures({**run, "points": run["points"][:1], "leftover_qdiscs": ["remote:prf-1-e1"]}) == [
        "host: root qdisc left after close on remote:prf-1-e1"]
    assert bench.host_failures({**run, "points": [], "leftover_devices": ["local:prf-1-hr"]}) == [
        "host: relay device or route left after close: local:prf-1-hr"]


def test_where_the_host_relay_carries_the_path_rows_above_its_ceiling_are_not_judged(bench: ModuleType) -> None:
    top = CEILINGS[HOST_RELAY].rate_mbit
    run = {"backend": "host", "ceiling_of": HOST_RELAY, "leftover_qdiscs": [], "points": [
        _point(top, top * 0.99, rtt_error_ms=0.3), _point(top * 2.5, top * 1.13, rtt_error_ms=0.3)]}
    measured = {"ceiling_mbit": top, "per_packet_ceiling_mbit": None}
    assert bench.host_failures(run) == [] and bench.ceiling_failures({**run, "summary": measured}) == []
    assert bench.host_failures({**run, "ceiling_of": "host"}) == [
        f"host: {top * 2.5:g} Mbit/s set, {top * 1.13:.1f} measured (> 5 % off)"]
    # the relay measured below what it announces: --check says so, as for tun and proxy
    assert bench.ceiling_failures({**run, "summary": {**measured, "ceiling_mbit": top / 2}}) == [
        f"host relay: announced ceiling_mbit {top:g} Mbit/s, measured {top / 2:g}"]


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces, a bridge and tc")
def test_quick_grid_on_the_host_path_keeps_rate_within_5_percent(bench: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "link_fidelity.json"
    failed = bench.main(["--quick", "--backends", "host", "--check", "--out", str(out)])
    results = json.loads(out.read_text())
    assert failed == 0, bench.check(results)
    assert results["skipped"] == {}
    (run,) = results["backends"]
    clean = [p for p in run["points"] if not p["jitter_ms"]]
    assert [p["rate_mbit"] for p in clean] == list(bench.QUICK_GRID["rates"])
    # Without sch_netem the host relay carries the delayed rows, up to its announced ceiling
    top = CEILINGS[HOST_RELAY].rate_mbit if run["ceiling_of"] == HOST_RELAY else float("inf")
    for p in clean:
        if p["rate_mbit"] > top:
            continue
        assert abs(p["achieved_ratio"] - 1) <= 0.05, p
        assert p["rtt_ms"], p  # the path's own RTT is measured either way
        if p["rtt_note"] is None:
            assert p["rtt_error_ms"] <= 1.0, p
        else:
            assert p["rtt_note"] == "needs sch_netem" and p["rtt_error_ms"] is None
    assert run["leftover_qdiscs"] == [] and run["leftover_devices"] == []
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"prf-{run['run_id']}-" not in namespaces
