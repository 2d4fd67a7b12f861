"""The reaper: a run whose process dies without tearing down is swept anyway; an orderly teardown
leaves nothing of the reaper behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emulator.net.ledger import process_start_time, state_root, sweep
from emulator.net.names import new_run_id
from emulator.net.netns import list_netns
from emulator.net.spec import parse_link_spec
from emulator.net.topology import Topology

from .conftest import needs_root

ROOT = Path(__file__).resolve().parents[3]
HOLD = """
import sys, time
from emulator.net.spec import parse_link_spec
from emulator.net.topology import Topology
Topology(parse_link_spec({"bandwidth_mbit": 100, "delay_ms": 1}), backend=sys.argv[2], run_id=sys.argv[1]).up()
print("up", flush=True)
time.sleep(600)
"""


def _reapers(run_id: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"emulator.net.reaper" in cmdline and run_id.encode() in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.live
@pytest.mark.parametrize("backend", [pytest.param("tun", marks=[needs_root, pytest.mark.root]), "proxy"])
def test_a_killed_run_is_swept_by_its_reaper(backend: str) -> None:
    run_id = new_run_id()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, run_id, backend], cwd=ROOT, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"up\n"
        assert (state_root() / run_id / "ledger.json").exists()
        if backend == "tun":
            assert len(list_netns(f"prf-{run_id}-")) == 2
        holder.send_signal(signal.SIGKILL)  # no teardown of its own
        holder.wait(10)
        deadline = time.monotonic() + 20
        while (state_root() / run_id).exists() or list_netns(f"prf-{run_id}-") or _reapers(run_id):
            assert time.monotonic() < deadline, f"run {run_id} was not swept: {list_netns(f'prf-{run_id}-')}"
            time.sleep(0.2)
    finally:
        if holder.poll() is None:
            holder.kill()
        subprocess.run([sys.executable, "-m", "emulator", "net", "down", "--run-id", run_id], cwd=ROOT,
                       capture_output=True)


@pytest.mark.live
def test_an_orderly_teardown_lets_the_reaper_go_unused() -> None:
    run_id = new_run_id()
    topology = Topology(parse_link_spec({"bandwidth_mbit": 100, "delay_ms": 1}), backend="proxy", run_id=run_id)
    topology.up()
    assert _reapers(run_id)
    topology.down()
    assert not _reapers(run_id)  # down() waits for it
    assert not (state_root() / run_id).exists()


@needs_root
@pytest.mark.root
def test_a_killed_run_in_a_state_folder_made_world_writable_is_still_swept(tmp_path: Path) -> None:
    """The reaper holds its own copy of the ledger: an untrusted folder is not read, and not needed."""
    run_id, state = new_run_id(), tmp_path / "state"
    env = {**os.environ, "PRFAAS_STATE_DIR": str(state)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, run_id, "tun"], cwd=ROOT, stdout=subprocess.PIPE, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"up\n"
        relay = next(int(e["pid"]) for e in json.loads((state / run_id / "ledger.json").read_text())
                     if e["kind"] == "pid")
        state.chmod(0o777)
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        deadline = time.monotonic() + 20
        while list_netns(f"prf-{run_id}-") or _reapers(run_id) or process_start_time(relay) is not None:
            assert time.monotonic() < deadline, f"run {run_id} was not swept: {list_netns(f'prf-{run_id}-')}"
            time.sleep(0.2)
    finally:
        if holder.poll() is None:
            holder.kill()
        sweep(run_id, force=True)
