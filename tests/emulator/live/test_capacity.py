"""A live run's worker count against the machine: refused before anything spawns, in one line that
names clusters.*.instances and the machine's cores and memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.errors import ScenarioError
from emulator.limits import LIVE_WORKER_BYTES, LIVE_WORKERS_PER_CORE
from emulator.live.capacity import check_live_capacity
from emulator.scenario import apply_overrides, load_scenario

REPO = Path(__file__).resolve().parents[3]
GIB = 1 << 30


def test_the_shipped_live_scenarios_fit_a_two_core_24_gib_machine():
    for path in sorted((REPO / "scenarios").glob("live-*.yaml")) + [REPO / "scenarios" / "classroom-basic.yaml"]:
        check_live_capacity(load_scenario(path), cores=2, memory_bytes=24 * GIB)


def test_too_many_workers_for_the_cores():
    s = apply_overrides(load_scenario(REPO / "scenarios" / "live-quickstart.yaml"),
                        ["clusters.remote.instances=100"])
    with pytest.raises(ScenarioError) as err:
        check_live_capacity(s, cores=2, memory_bytes=1024 * GIB)
    text = str(err.value)
    assert text.startswith("clusters.remote.instances + clusters.local.instances: 102 live workers")
    assert "2 cores" in text and "1024 GiB" in text and "\n" not in text
    assert f"at most {2 * LIVE_WORKERS_PER_CORE}" in text


def test_too_many_workers_for_the_memory():
    s = load_scenario(REPO / "scenarios" / "live-quickstart.yaml")
    with pytest.raises(ScenarioError, match=r"3 live workers .*\(64 cores and 2 GiB"):
        check_live_capacity(s, cores=64, memory_bytes=2 * GIB)
    check_live_capacity(s, cores=64, memory_bytes=int(3 * LIVE_WORKER_BYTES / 0.75) + GIB)


@pytest.mark.live
def test_the_run_command_refuses_before_spawning(tmp_path):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "emulator", "run", "scenarios/live-quickstart.yaml",
                          "--no-broker", "--out", str(tmp_path / "r"), "--set", "clusters.remote.instances=4000"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith(
        "error: clusters.remote.instances + clusters.local.instances: 4002 live workers")
    assert not (tmp_path / "r").exists()
