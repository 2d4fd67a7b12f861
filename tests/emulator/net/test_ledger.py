"""The ledger: what a run created is found and removed, even after the run crashed."""

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emulator.errors import TopologyError
from emulator.net import netns
from emulator.net.ledger import Ledger, process_start_time, run_dir, sweep
from emulator.net.names import netns_name

from .conftest import needs_root

ROOT = Path(__file__).resolve().parents[3]


@needs_root
def test_sweep_removes_a_crashed_runs_namespaces_and_processes(run_id):
    ledger = Ledger.open(run_id)
    name = netns_name(run_id, "remote")
    ledger.record("netns", name=name)
    netns.create_netns(name)
    child = subprocess.Popen(["sleep", "60"])
    ledger.record("pid", pid=child.pid)
    del ledger  # the run "crashes": nothing is torn down by its owner (this process, alive: hence force)

    removed = sweep(run_id, force=True)
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


OWNER = """
import sys, time
from emulator.net import netns
from emulator.net.ledger import Ledger
from emulator.net.names import netns_name
run_id = sys.argv[1]
name = netns_name(run_id, "remote")
Ledger.open(run_id).record("netns", name=name)
netns.create_netns(name)
print("up", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _owner(run_id: str, hold_s: float) -> subprocess.Popen:
    """A run's owner in a process of its own: it records a namespace, then holds it (or exits)."""
    proc = subprocess.Popen([sys.executable, "-c", OWNER, run_id, str(hold_s)], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "up"
    return proc


@needs_root
def test_sweep_keeps_a_run_whose_owner_is_alive_and_force_removes_it(run_id):
    owner = _owner(run_id, 60)
    name = netns_name(run_id, "remote")
    try:
        assert all(name not in item for item in sweep())  # every run: a live one is not touched
        assert all(name not in item for item in sweep(run_id))  # nor when named
        assert name in netns.list_netns()
        assert Ledger.open(run_id).owner_pid() == owner.pid
        assert f"netns {name}" in sweep(run_id, force=True)
        assert name not in netns.list_netns()
    finally:
        owner.kill()
        owner.wait()


@needs_root
def test_sweep_removes_a_run_whose_owner_is_gone(run_id):
    owner = _owner(run_id, 0)
    owner.wait(timeout=10)
    name = netns_name(run_id, "remote")
    assert f"netns {name}" in sweep()
    assert name not in netns.list_netns()


def test_the_state_dir_is_private_and_must_be_ours(tmp_path, monkeypatch):
    monkeypatch.setenv("PRFAAS_STATE_DIR", str(tmp_path / "state"))
    path = run_dir("abc123")
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o700

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # umask-proof: writable by anyone, as a planted /tmp/prfaas-<uid> would be
    monkeypatch.setenv("PRFAAS_STATE_DIR", str(shared))
    with pytest.raises(TopologyError, match="writable by others"):
        run_dir("abc123")


@needs_root
def test_a_state_dir_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, 12345, 12345)
    monkeypatch.setenv("PRFAAS_STATE_DIR", str(foreign))
    with pytest.raises(TopologyError, match="owned by uid 12345"):
        run_dir("abc123")
