"""A live run's id is its own: a second `run --engine live` with the id of a run that is live refuses
in one line before it starts anything, and the first run's link, relay and reaper are untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.net.ledger import Ledger, process_start_time
from emulator.net.netns import list_netns
from tests.emulator.live.test_stop import write_scenario

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and TUN need CAP_NET_ADMIN")]
REPO_ROOT = Path(__file__).resolve().parents[3]


def test_a_live_run_with_the_id_of_a_live_run_refuses_before_touching_anything(run_id, tmp_path):
    holder = subprocess.Popen([sys.executable, "-m", "emulator", "net", "up", "--backend", "tun", "--run-id",
                               run_id], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert holder.stdout is not None and json.loads(holder.stdout.readline())["run_id"] == run_id
        relay = next(int(e["pid"]) for e in Ledger.open(run_id).entries if e["kind"] == "pid")
        started, spaces = process_start_time(relay), list_netns(f"prf-{run_id}-")
        scenario = write_scenario(tmp_path / "sc.yaml", duration_s=2.0, link_at_s=None)
        second = subprocess.run([sys.executable, "-m", "emulator", "run", str(scenario), "--engine", "live",
                                 "--link-backend", "tun", "--run-id", run_id, "--out", str(tmp_path / "out")],
                                cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr
        assert second.stderr.splitlines() == [
            f"error: run_id: {run_id} is in use by a live run (pid {holder.pid}); pick another run id, "
            "or stop that run first"]
        assert list_netns(f"prf-{run_id}-") == spaces and process_start_time(relay) == started
        assert holder.poll() is None and not (tmp_path / "out" / "logs").exists()  # no worker was started
    finally:
        holder.terminate()
        holder.wait(timeout=30)
