"""The cleanup ledger: every namespace, device and process a run creates, recorded as it is made.

Teardown walks the ledger in reverse and tolerates "already gone"; `sweep` finds what a crashed run
left behind by the project prefix, so `net down` works even when no ledger survived.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from emulator.net import netns
from emulator.net.names import PREFIX, check_run_id, run_id_of

log = logging.getLogger(__name__)


def state_root() -> Path:
    """Where run directories live: $PRFAAS_STATE_DIR, else /run/prfaas as root, else a temp dir."""
    if env := os.environ.get("PRFAAS_STATE_DIR"):
        return Path(env)
    return Path("/run/prfaas") if os.geteuid() == 0 else Path(f"/tmp/prfaas-{os.geteuid()}")


def run_dir(run_id: str) -> Path:
    path = state_root() / check_run_id(run_id)
    path.mkdir(parents=True, exist_ok=True)
    return path


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot), None if it is gone.

    Recorded with each pid so teardown never kills an unrelated process that reused the number.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _stop_process(pid: int, start_time: int | None, grace_s: float = 3.0) -> bool:
    if start_time is None or process_start_time(pid) != start_time:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if process_start_time(pid) != start_time:
            return True
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return True


@dataclass
class Ledger:
    run_id: str
    entries: list[dict]

    @classmethod
    def open(cls, run_id: str) -> Ledger:
        path = run_dir(run_id) / "ledger.json"
        entries = json.loads(path.read_text()) if path.exists() else []
        return cls(run_id, entries)

    @property
    def path(self) -> Path:
        return run_dir(self.run_id) / "ledger.json"

    def record(self, kind: str, **fields: object) -> None:
        """Append one created object and persist at once, so a crash right after still finds it."""
        if kind == "pid":
            fields["start_time"] = process_start_time(int(fields["pid"]))  # type: ignore[arg-type]
        self.entries.append({"kind": kind, **fields})
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.entries, indent=1))
        tmp.replace(self.path)

    def teardown(self) -> list[str]:
        """Undo every entry, newest first; returns what was actually removed."""
        removed = []
        for entry in reversed(self.entries):
            try:
                if _undo(entry):
                    removed.append(f"{entry['kind']} {entry.get('name', entry.get('pid'))}")
            except OSError as err:
                log.warning("teardown of %s failed: %s", entry, err)
        self.entries = []
        shutil.rmtree(run_dir(self.run_id), ignore_errors=True)
        return removed


def _undo(entry: dict) -> bool:
    if entry["kind"] == "pid":
        return _stop_process(int(entry["pid"]), entry.get("start_time"))
    if entry["kind"] == "netns":
        return netns.remove_netns(entry["name"])
    raise ValueError(f"ledger: unknown entry kind {entry['kind']!r}")


def known_run_ids() -> list[str]:
    """Run ids that have a run directory or a namespace on this machine."""
    root = state_root()
    dirs = {p.name for p in root.iterdir() if run_id_of(f"{PREFIX}-{p.name}-")} if root.exists() else set()
    spaces = {run_id_of(n) for n in netns.list_netns(f"{PREFIX}-")}
    return sorted(dirs | {r for r in spaces if r})


def sweep(run_id: str | None = None) -> list[str]:
    """Tear down one run, or every run of this project: ledgers first, then leftovers by prefix."""
    removed = []
    for rid in [run_id] if run_id else known_run_ids():
        removed += Ledger.open(rid).teardown()
        for name in netns.list_netns(f"{PREFIX}-{rid}-"):
            if netns.remove_netns(name):
                removed.append(f"netns {name}")
    return removed
