"""`python -m emulator net up|down|status` as a user runs it, in separate processes."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emulator.net.netns import list_netns

from .conftest import needs_root

REPO = Path(__file__).resolve().parents[3]


def emulator(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emulator", *args], capture_output=True, text=True,
                          timeout=60, **kwargs)


@pytest.mark.live
def test_bad_link_flags_exit_2_with_one_line():
    out = emulator("net", "up", "--delay-ms", "-5")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: net up.delay_ms: -5.0 is invalid (input should be greater than or equal to 0); "
        "use 0 for no added delay, or from 0.001 to 10000"
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
        assert f"run {run_id} is live (pid {up.pid} holds its lock): left alone; stop it, or use --force" \
            in down.stderr.splitlines()
        assert f"prf-{run_id}-remote" in list_netns(f"prf-{run_id}") and up.poll() is None

        forced = emulator("net", "down", "--run-id", run_id, "--force")
        assert forced.returncode == 0 and f"netns prf-{run_id}-remote" in json.loads(forced.stdout)["removed"]
        assert f"warning: run {run_id} is live (pid {up.pid} holds its lock); --force removed it, and the run fails" \
            in forced.stderr.splitlines()
        assert not list_netns(f"prf-{run_id}")
    finally:
        up.terminate()
        up.wait(timeout=20)


@pytest.mark.live
def test_status_lists_every_run_and_names_each_unreadable_file_in_one_line(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    outside = tmp_path / "secret.txt"
    outside.write_text('{"secret": "not the state folder\'s"}')
    files = {
        "a00001": json.dumps({"backend": "tun", "reason": "netem unavailable"}),  # the one readable run
        "a00002": '{"backend": "tun", ',  # cut short
        "a00003": " " * (2 << 20) + "{}",  # 2 MiB
        "a00004": "[" * 100_000 + "]" * 100_000,  # nested past any decoder's recursion
        "a00005": None,  # a symlink out of the folder
        "a00006": "FIFO",  # would block a plain read forever
    }
    for run_id, text in files.items():
        (state / run_id).mkdir(mode=0o700)
        path = state / run_id / "status.json"
        if text is None:
            path.symlink_to(outside)
        elif text == "FIFO":
            os.mkfifo(path)
        else:
            path.write_text(text)
    (state / "a00007").symlink_to(tmp_path)  # a run folder that is a link
    (state / "a00008").mkdir(mode=0o700)
    (state / "a00008" / "ledger.json").write_text('[{"kind": "pid", "pid": "1; rm"}]')  # not a ledger
    out = emulator("net", "status", env={**os.environ, "PRFAAS_STATE_DIR": str(state)})
    assert out.returncode == 0, out.stderr
    runs = {r["run_id"]: r for r in json.loads(out.stdout)["runs"]}
    assert runs["a00001"]["status"] == {"backend": "tun", "reason": "netem unavailable"}
    assert "unreadable" not in runs["a00001"]
    bad = {f"a0000{i}" for i in range(2, 9)}
    assert set(runs) >= bad and "secret" not in out.stdout
    for run_id in bad:
        assert runs[run_id]["status"] is None and runs[run_id]["unreadable"], runs[run_id]
    lines = out.stderr.splitlines()
    assert len(lines) == len(bad) and all(line.startswith("warning: run a0000") for line in lines), lines
    assert sorted(line.split()[2].rstrip(":") for line in lines) == sorted(bad)


@pytest.mark.live
def test_down_removes_a_dead_run_whose_ledger_is_unreadable_and_says_why_in_one_line(tmp_path):
    state = tmp_path / "state"
    (state / "a00009").mkdir(mode=0o700, parents=True)
    state.chmod(0o700)
    (state / "a00009" / "ledger.json").write_text('[{"kind": "netns", "name": "not-ours"}]')
    out = emulator("net", "down", "--run-id", "a00009", env={**os.environ, "PRFAAS_STATE_DIR": str(state)})
    assert out.returncode == 0 and json.loads(out.stdout) == {"removed": [], "kept": []}
    assert out.stderr.splitlines() == [
        "run a00009: ledger not used (ledger.json: entry 0: a namespace not named prf-a00009-*); "
        "removing its namespaces by name"]
    assert not (state / "a00009").exists()
