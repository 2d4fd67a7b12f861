"""The run lock: one holder per run id on this machine, whatever PRFAAS_STATE_DIR says, released
when its holder ends however it ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.net.run_lock import RunIdInUse, acquire, holder_pid, lock_path

ROOT = Path(__file__).resolve().parents[3]
HOLD = """
import sys, time
from emulator.net.run_lock import acquire
acquire(sys.argv[1])
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_claim_is_refused_in_one_line_naming_the_run_and_its_holder(run_id):
    lock = acquire(run_id)
    try:
        with pytest.raises(RunIdInUse) as refused:
            acquire(run_id)
        assert str(refused.value) == (f"run_id: {run_id} is in use by a live run (pid {os.getpid()}); "
                                      "pick another run id, or stop that run first")
        assert refused.value.pid == os.getpid() and holder_pid(run_id) == os.getpid()
    finally:
        lock.release()
    assert holder_pid(run_id) is None and not lock_path(run_id).exists()
    acquire(run_id).release()  # free again


def test_the_lock_does_not_depend_on_the_state_folder(run_id, tmp_path, monkeypatch):
    monkeypatch.setenv("PRFAAS_STATE_DIR", str(tmp_path / "a"))
    lock = acquire(run_id)
    try:
        monkeypatch.setenv("PRFAAS_STATE_DIR", str(tmp_path / "b"))
        with pytest.raises(RunIdInUse):
            acquire(run_id)
        assert tmp_path not in lock_path(run_id).parents
    finally:
        lock.release()


@pytest.mark.live
def test_a_killed_holder_frees_the_id(run_id):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, run_id], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert holder_pid(run_id) == holder.pid
        with pytest.raises(RunIdInUse, match=f"pid {holder.pid}"):
            acquire(run_id)
    finally:
        holder.kill()
        holder.wait()
    assert holder_pid(run_id) is None
    acquire(run_id).release()


def test_a_lock_file_planted_as_a_link_is_refused(run_id, tmp_path):
    target = tmp_path / "target"
    target.write_text("keep")
    path = lock_path(run_id)
    path.symlink_to(target)
    try:
        with pytest.raises(Exception, match="run_id"):
            acquire(run_id)
        assert target.read_text() == "keep"
    finally:
        path.unlink()
