"""The ledger: what a run created is found and removed, even after the run crashed."""

import subprocess
import time

from emulator.net import netns
from emulator.net.ledger import Ledger, process_start_time, sweep
from emulator.net.names import netns_name

from .conftest import needs_root


@needs_root
def test_sweep_removes_a_crashed_runs_namespaces_and_processes(run_id):
    ledger = Ledger.open(run_id)
    name = netns_name(run_id, "remote")
    ledger.record("netns", name=name)
    netns.create_netns(name)
    child = subprocess.Popen(["sleep", "60"])
    ledger.record("pid", pid=child.pid)
    del ledger  # the run "crashes": nothing is torn down by its owner

    removed = sweep(run_id)
    assert f"netns {name}" in removed and f"pid {child.pid}" in removed
    assert name not in netns.list_netns()
    assert child.wait(timeout=5) is not None


@needs_root
def test_teardown_tolerates_what_is_already_gone_and_never_kills_a_reused_pid(run_id):
    ledger = Ledger.open(run_id)
    ledger.record("netns", name=netns_name(run_id, "local"))  # recorded, never created
    child = subprocess.Popen(["sleep", "60"])
    ledger.record("pid", pid=child.pid)
    ledger.entries[-1]["start_time"] = process_start_time(child.pid) - 1  # as if the pid were reused
    assert ledger.teardown() == []
    time.sleep(0.1)
    assert child.poll() is None  # the unrelated process still runs
    child.kill()
    child.wait()
