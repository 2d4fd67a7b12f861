"""`python -m emulator net up|down|status` as a user runs it, in separate processes."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from emulator.net.netns import list_netns

from .conftest import needs_root

REPO = Path(__file__).resolve().parents[3]


def emulator(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emulator", *args], capture_output=True, text=True,
                          timeout=60, **kwargs)


def test_bad_link_flags_exit_2_with_one_line():
    out = emulator("net", "up", "--delay-ms", "-5")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: net up.delay_ms: -5.0 is invalid (input should be greater than or equal to 0); "
        "use 0 for no added delay, at most 10000"
    ]


@needs_root
def test_up_status_down_leave_nothing_behind(run_id):
    up = subprocess.Popen(
        [sys.executable, "-m", "emulator", "net", "up", "--run-id", run_id,
         "--bandwidth-mbit", "50", "--delay-ms", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        first = json.loads(up.stdout.readline())
        assert first["run_id"] == run_id and first["backend"] in ("netem", "tun") and first["reason"]
        status = json.loads(emulator("net", "status").stdout)
        mine = [r for r in status["runs"] if r["run_id"] == run_id]
        assert mine and mine[0]["status"]["backend"] == first["backend"]
        assert f"prf-{run_id}-remote" in status["namespaces"]

        up.send_signal(signal.SIGKILL)  # a crash: the run's reaper and `net down` must still clean up
        up.wait(timeout=10)
        down = emulator("net", "down", "--run-id", run_id)
        assert down.returncode == 0 and isinstance(json.loads(down.stdout)["removed"], list)
        deadline = time.monotonic() + 10
        while list_netns(f"prf-{run_id}"):  # whichever of the two got there first
            assert time.monotonic() < deadline, list_netns(f"prf-{run_id}")
            time.sleep(0.2)
        procs = subprocess.run(["pgrep", "-af", run_id], capture_output=True, text=True).stdout
        assert "relay" not in procs
    finally:
        if up.poll() is None:
            up.kill()


@needs_root
def test_down_leaves_a_live_run_alone_unless_forced(run_id):
    up = subprocess.Popen([sys.executable, "-m", "emulator", "net", "up", "--run-id", run_id, "--backend", "tun"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert json.loads(up.stdout.readline())["run_id"] == run_id
        down = emulator("net", "down")
        assert down.returncode == 0 and run_id in json.loads(down.stdout)["kept"]
        assert f"run {run_id} is live (pid {up.pid}): left alone; stop it, or use --force" in down.stderr
        assert f"prf-{run_id}-remote" in list_netns(f"prf-{run_id}") and up.poll() is None

        forced = emulator("net", "down", "--run-id", run_id, "--force")
        assert forced.returncode == 0 and f"netns prf-{run_id}-remote" in json.loads(forced.stdout)["removed"]
        assert f"warning: run {run_id} is live (pid {up.pid})" in forced.stderr
        assert not list_netns(f"prf-{run_id}")
    finally:
        up.terminate()
        up.wait(timeout=20)
