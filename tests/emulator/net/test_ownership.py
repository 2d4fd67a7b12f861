"""Ownership, not location: whatever state folder `net down` or a second run is started from, a live
run's namespaces, relay and reaper are its own; a run's own teardown finishes even in a state folder
that turned untrusted mid-run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.net.ledger import Ledger, process_start_time
from emulator.net.netns import list_netns
from emulator.net.spec import parse_link_spec
from emulator.net.topology import Topology

from .conftest import needs_root

pytestmark = [needs_root, pytest.mark.root]
REPO = Path(__file__).resolve().parents[3]


def emulator(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emulator", *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env=env)


def processes_naming(run_id: str) -> set[int]:
    """Pids whose command line names the run (its reaper, its relay's ends), this test excluded."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if run_id.encode() in cmdline and b"emulator" in cmdline:
            found.add(int(entry.name))
    return found


class NetUp:
    """`python -m emulator net up --backend tun --run-id RUN` held in the background: a live run."""

    def __init__(self, run_id: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "emulator", "net", "up", "--backend", "tun", "--run-id",
                                      run_id, "--bandwidth-mbit", "50"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.status = json.loads(self.proc.stdout.readline())
        assert self.status["run_id"] == run_id
        self.pid = self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def live_run(run_id: str) -> Iterator[NetUp]:
    up = NetUp(run_id)
    try:
        yield up
    finally:
        up.stop()


def snapshot(run_id: str) -> tuple[list[str], set[int]]:
    return list_netns(f"prf-{run_id}-"), processes_naming(run_id)


@pytest.mark.parametrize("scope", ["named", "all"])
def test_down_from_another_state_folder_leaves_a_live_run_alone(run_id, live_run, tmp_path, scope):
    before = snapshot(run_id)
    assert before[0] == [f"prf-{run_id}-local", f"prf-{run_id}-remote"] and before[1]
    other = {**os.environ, "PRFAAS_STATE_DIR": str(tmp_path / "other")}
    down = emulator("net", "down", *(["--run-id", run_id] if scope == "named" else []), env=other)
    assert down.returncode == 0, down.stderr
    assert run_id in json.loads(down.stdout)["kept"]
    assert f"run {run_id} is live (pid {live_run.pid} holds its lock): left alone; stop it, or use --force" \
        in down.stderr.splitlines()
    assert snapshot(run_id) == before and live_run.proc.poll() is None


def test_down_leaves_a_namespace_with_a_process_inside_alone(run_id):
    name = f"prf-{run_id}-remote"
    subprocess.run(["ip", "netns", "add", name], check=True)
    inside = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while str(inside.pid) not in subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                                                    text=True).stdout.split():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        down = emulator("net", "down", "--run-id", run_id)
        assert down.returncode == 0 and json.loads(down.stdout) == {"removed": [], "kept": [run_id]}
        assert down.stderr.splitlines() == [
            f"run {run_id} is live (pid {inside.pid} runs in its namespace {name}): left alone; stop it, "
            "or use --force"]
        assert name in list_netns() and inside.poll() is None
    finally:
        inside.kill()
        inside.wait()
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.mark.parametrize("folder", ["same", "other"])
def test_a_second_run_with_a_live_runs_id_refuses_before_touching_anything(run_id, live_run, tmp_path, folder):
    runs = json.loads(emulator("net", "status").stdout)["runs"]
    ledger = next(r["ledger"] for r in runs if r["run_id"] == run_id)
    relay = next(entry["pid"] for entry in ledger if entry["kind"] == "pid")
    relay_start = process_start_time(relay)
    before = snapshot(run_id)
    env = {**os.environ, "PRFAAS_STATE_DIR": str(tmp_path / "other")} if folder == "other" else None
    second = emulator("net", "up", "--backend", "tun", "--run-id", run_id, env=env)
    assert second.returncode == 2
    assert second.stderr.splitlines() == [
        f"error: run_id: {run_id} is in use by a live run (pid {live_run.pid}); pick another run id, "
        "or stop that run first"]
    assert snapshot(run_id) == before  # no namespace removed or added, no reaper or relay started
    assert process_start_time(relay) == relay_start and live_run.proc.poll() is None
    if folder == "other":
        assert not (tmp_path / "other" / run_id).exists()


def test_a_second_topology_in_this_process_refuses_and_its_down_touches_nothing(run_id, live_run):
    before = snapshot(run_id)
    second = Topology(parse_link_spec({"bandwidth_mbit": 10}), backend="tun", run_id=run_id)
    with pytest.raises(Exception, match=f"run_id: {run_id} is in use by a live run"):
        second.up()
    assert second.down() == []  # the run_live path: its teardown runs after the failed up
    assert snapshot(run_id) == before and live_run.proc.poll() is None


def test_the_owners_teardown_finishes_in_a_state_folder_made_world_writable(run_id, tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("PRFAAS_STATE_DIR", str(state))
    topology = Topology(parse_link_spec({"bandwidth_mbit": 100, "delay_ms": 1}), backend="tun", run_id=run_id).up()
    relay = topology.backend.pid
    state.chmod(0o777)  # mid-run: the folder is no longer private
    removed = topology.down()
    assert {f"netns prf-{run_id}-remote", f"netns prf-{run_id}-local"} <= set(removed)
    assert list_netns(f"prf-{run_id}-") == [] and process_start_time(relay) is None
    assert not processes_naming(run_id)  # its reaper went too


def test_a_pid_recorded_after_the_folder_turned_untrusted_is_still_torn_down(run_id, tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("PRFAAS_STATE_DIR", str(state))
    topology = Topology(parse_link_spec({"bandwidth_mbit": 100}), backend="tun", run_id=run_id).up()
    child = subprocess.Popen(["sleep", "60"])
    try:
        state.chmod(0o777)
        Ledger.open(run_id).record("pid", pid=child.pid, name="restarted worker")  # as the live engine's parts do
        assert "restarted worker" not in (state / run_id / "ledger.json").read_text()  # kept in memory only
        removed = topology.down()
        assert "pid restarted worker" in removed and child.wait(timeout=10) is not None
        assert list_netns(f"prf-{run_id}-") == []
    finally:
        child.kill()
        child.wait()
