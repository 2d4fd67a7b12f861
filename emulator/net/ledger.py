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
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from emulator import paths
from emulator.errors import TopologyError
from emulator.net import netns
from emulator.net.names import PREFIX, check_run_id, run_id_of

log = logging.getLogger(__name__)


def state_root() -> Path:
    """Where run directories live (emulator.paths.state_dir decides), created if missing.

    Teardown kills the pids a ledger names, so the folder must be ours alone: it is created 0700,
    and one that another user owns or others can write is refused (a planted /tmp/prfaas-<uid>).
    """
    root = paths.state_dir()
    _make_private_dir(root)
    return root


def _make_private_dir(path: Path) -> None:
    fix = f"remove it or set {paths.Env.STATE_DIR} to a folder of your own"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.lstat()
    except OSError as err:
        raise TopologyError(f"state dir {path}: cannot create it ({err.strerror}); {fix}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise TopologyError(f"state dir {path}: not a folder (a link or a file); {fix}")
    if info.st_uid != os.geteuid():
        raise TopologyError(f"state dir {path}: owned by uid {info.st_uid}, not by you (uid {os.geteuid()}); {fix}")
    if info.st_mode & 0o022:
        raise TopologyError(f"state dir {path}: writable by others; chmod 700 it, or {fix}")


def run_dir(run_id: str) -> Path:
    path = state_root() / check_run_id(run_id)
    _make_private_dir(path)
    return path


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot), None if it is gone or a zombie.

    Recorded with each pid so teardown never kills an unrelated process that reused the number.
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


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

    def owner_pid(self) -> int | None:
        """The pid of the process that owns this run while it still runs, else None.

        The owner is whoever recorded first (the run's own process: `Topology.up`); `sweep` leaves
        a run alone while its owner lives, so `net down` never destroys another user's live run.
        """
        owner = next((e for e in self.entries if e["kind"] == "owner"), None)
        if owner is None or process_start_time(int(owner["pid"])) != owner["start_time"]:
            return None
        return int(owner["pid"])

    def record(self, kind: str, **fields: object) -> None:
        """Append one created object and persist at once, so a crash right after still finds it."""
        if not self.entries:
            pid = os.getpid()
            self.entries.append({"kind": "owner", "pid": pid, "start_time": process_start_time(pid)})
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
    if entry["kind"] == "owner":  # the run's own process: never killed by its teardown
        return False
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


def live_runs(run_id: str | None = None) -> dict[str, int]:
    """Run id -> owner pid of the runs (one, or all) whose owner process still runs."""
    owners = {rid: Ledger.open(rid).owner_pid() for rid in ([run_id] if run_id else known_run_ids())}
    return {rid: pid for rid, pid in owners.items() if pid is not None}


def sweep(run_id: str | None = None, force: bool = False) -> list[str]:
    """Tear down one run, or every run of this project: ledgers first, then leftovers by prefix.

    A run whose owner process still runs is left alone unless `force`; returns what was removed.
    """
    removed = []
    for rid in [run_id] if run_id else known_run_ids():
        ledger = Ledger.open(rid)
        if not force and (pid := ledger.owner_pid()) is not None:
            log.info("run %s: its owner (pid %d) is running; left alone", rid, pid)
            continue
        removed += ledger.teardown()
        for name in netns.list_netns(f"{PREFIX}-{rid}-"):
            if netns.remove_netns(name):
                removed.append(f"netns {name}")
    return removed
