"""A run's last line of defence: a small process that outlives its parent only to clean up after it.

`Topology.up` starts one per run before it creates anything; it blocks on a pipe from the parent.
An orderly `Topology.down` tears the run down first and then closes the pipe, so the reaper finds
no ledger and exits. When the parent dies any other way (SIGKILL, a crash in teardown, a dashboard
killed with its runs), the pipe reaches EOF with the ledger still there, and the reaper sweeps the
run as `python -m emulator net down --run-id` would: worker processes, relays, namespaces.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from emulator.net import ledger
from emulator.net.names import check_run_id
from emulator.paths import REPO_ROOT

log = logging.getLogger(__name__)


class Reaper:
    """The parent's handle: `release()` after an orderly teardown lets the reaper exit unused."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        log_path = ledger.run_dir(run_id) / "reaper.log"
        with open(log_path, "ab") as log_file:
            # its own session: a Ctrl-C meant for the run must not take the reaper with it
            self._proc = subprocess.Popen([sys.executable, "-m", "emulator.net.reaper", run_id],
                                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log_file,
                                          cwd=REPO_ROOT, start_new_session=True)

    def release(self, timeout_s: float = 5.0) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("reaper of run %s (pid %d) still running after %.0f s", self.run_id, self._proc.pid,
                        timeout_s)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s reaper %(levelname)s %(message)s")
    if len(argv) != 1:
        log.error("usage: python -m emulator.net.reaper RUN_ID")
        return 2
    run_id = check_run_id(argv[0])
    while os.read(sys.stdin.fileno(), 4096):  # EOF: the parent closed the pipe or died
        pass
    if not (ledger.state_root() / run_id / "ledger.json").exists():
        return 0  # torn down in order
    log.warning("run %s: its process ended without tearing down; sweeping", run_id)
    for item in ledger.sweep(run_id, force=True):  # EOF on the pipe: its owner is gone
        log.warning("run %s: removed %s", run_id, item)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
