"""A worker host's private dir outlives an actor killed before `close` (a lost node, `ray.kill`):
the next host on that machine, and the run that owned it, remove such dirs, and only those whose
actor is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.live.ray_workers import HOST_DIR_PREFIX, OWNER_FILE, WorkerHost, sweep_host_dirs

pytestmark = pytest.mark.live  # each test starts worker-host processes
REPO = Path(__file__).resolve().parents[3]
MAKE_HOST = ("import sys, time; from emulator.live.ray_workers import WorkerHost; "
             "print(WorkerHost('remote-prefill-0').dir, flush=True); time.sleep(600)")


def _host_process(tmp: Path) -> tuple[subprocess.Popen, Path]:
    """A process holding a WorkerHost made in `tmp`, and its dir."""
    proc = subprocess.Popen([sys.executable, "-c", MAKE_HOST], cwd=REPO, env={**os.environ, "TMPDIR": str(tmp)},
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_a_killed_hosts_dir_is_swept_and_a_live_hosts_is_kept(tmp_path: Path) -> None:
    killed, killed_dir = _host_process(tmp_path)
    live, live_dir = _host_process(tmp_path)
    try:
        (killed_dir / "remote-prefill-0.settings.json").write_text("{}")
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
        foreign = tmp_path / f"{HOST_DIR_PREFIX}shared"  # not private: not a host's
        foreign.mkdir(mode=0o755)
        (foreign / OWNER_FILE).write_text(f"{killed.pid} 1")
        assert killed_dir.is_dir() and live_dir.is_dir()

        assert sweep_host_dirs(tmp_path) == [killed_dir]
        assert not killed_dir.exists() and live_dir.is_dir() and foreign.is_dir()
    finally:
        live.kill()
        live.wait(10)


def test_a_host_closed_in_order_leaves_nothing_and_sweeps_on_start(tmp_path: Path, monkeypatch) -> None:
    killed, killed_dir = _host_process(tmp_path)
    killed.kill()
    killed.wait(10)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    host = WorkerHost("decode-0")
    assert not killed_dir.exists() and host.dir.parent == tmp_path
    host.close()
    assert list(tmp_path.iterdir()) == []
