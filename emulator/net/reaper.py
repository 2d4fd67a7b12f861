"""A run's last line of defence: a small process that outlives its parent only to clean up after it.

`Topology.up` starts one per run right after claiming the run id, and hands it each ledger entry as
it is recorded (one JSON line on its stdin), so the reaper holds the run's ledger itself, whatever
becomes of the state folder. An orderly `Topology.down` tears the run down first and then says
"released" before closing the pipe, so the reaper exits unused. When the parent dies any other way
(SIGKILL, a crash in teardown, a dashboard killed with its runs), the pipe reaches EOF unreleased;
the reaper takes the run's lock (the kernel freed it with the parent) and removes what its copy of
the ledger names, then the run's namespaces by name.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

from emulator.net import ledger
from emulator.net.names import check_run_id
from emulator.net.run_lock import RunIdInUse, acquire
from emulator.net.state_files import StateFileError
from emulator.paths import REPO_ROOT

log = logging.getLogger(__name__)
RELEASED = b"released"
MAX_LINE_BYTES = 4_096  # one ledger entry
MAX_ENTRIES = 10_000
LOCK_WAIT_S = 10.0  # the parent's lock is freed as it dies; a forked helper of it may hold it a moment


class Reaper:
    """The parent's handle: `send` mirrors a ledger entry; `release()` after an orderly teardown
    lets the reaper exit unused."""

    def __init__(self, run_ledger: ledger.Ledger) -> None:
        self.run_id = run_ledger.run_id
        log_path = run_ledger.folder / "reaper.log"
        with open(log_path, "ab") as log_file:
            # its own session: a Ctrl-C meant for the run must not take the reaper with it
            self._proc = subprocess.Popen([sys.executable, "-m", "emulator.net.reaper", self.run_id,
                                           str(os.getpid())],
                                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log_file,
                                          cwd=REPO_ROOT, start_new_session=True)
        self._is_broken = False
        for entry in run_ledger.entries:
            self.send(entry)

    def send(self, entry: dict) -> None:
        self._write(json.dumps(entry).encode() + b"\n")

    def _write(self, data: bytes) -> None:
        if self._proc.stdin is None or self._proc.stdin.closed or self._is_broken:
            return
        try:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except OSError as err:  # it died: the run goes on, without its last line of defence
            self._is_broken = True
            log.warning("reaper of run %s (pid %d) is gone (%s)", self.run_id, self._proc.pid, err)

    def release(self, timeout_s: float = 5.0) -> None:
        self._write(RELEASED + b"\n")
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("reaper of run %s (pid %d) still running after %.0f s", self.run_id, self._proc.pid,
                        timeout_s)


def read_until_eof(fd: int) -> tuple[list[dict], bool]:
    """The entries sent, and whether "released" came, once the parent closed the pipe or died."""
    entries: list[dict] = []
    is_released, buffer = False, b""
    while chunk := os.read(fd, 65536):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        if len(buffer) > MAX_LINE_BYTES:
            buffer = b""  # not one of ours: dropped
        for line in lines:
            if line == RELEASED:
                is_released = True
            elif len(entries) < MAX_ENTRIES and len(line) <= MAX_LINE_BYTES:
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    log.warning("reaper: an entry that is not JSON was dropped")
    return entries, is_released


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s reaper %(levelname)s %(message)s")
    if len(argv) != 2 or not argv[1].isdigit():
        log.error("usage: python -m emulator.net.reaper RUN_ID PARENT_PID")
        return 2
    run_id, parent = check_run_id(argv[0]), int(argv[1])
    entries, is_released = read_until_eof(sys.stdin.fileno())
    if is_released:
        return 0  # torn down in order
    log.warning("run %s: its process ended without tearing down; sweeping", run_id)
    try:
        lock = acquire(run_id, wait_s=LOCK_WAIT_S)
    except RunIdInUse as err:
        if err.pid != parent:
            log.warning("run %s: the id now belongs to pid %s; left alone", run_id, err.pid)
            return 0
        lock = None  # still held through a helper the parent forked: the parent itself is gone
    try:
        run_ledger = ledger.Ledger(run_id, ledger.check_entries(run_id, entries))
    except StateFileError as err:
        log.warning("run %s: %s; removing its namespaces by name only", run_id, err)
        run_ledger = ledger.Ledger(run_id, [])
    try:
        for item in ledger.remove_run(run_id, run_ledger):
            log.warning("run %s: removed %s", run_id, item)
    finally:
        if lock is not None:
            lock.release()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
