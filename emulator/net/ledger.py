"""The cleanup ledger: every namespace and process a run creates, recorded as it is made.

The run that claims an id holds its lock (emulator/net/run_lock.py) and its ledger in memory for the
run's life; its own teardown walks that copy in reverse and tolerates "already gone", whatever has
become of the state folder since. The file in the state folder is for others after a crash: `sweep`
reads it (only from a private folder) and removes leftovers by the project prefix, but never those
of a run that is live by its own resources (its lock, processes in its namespaces, its owner).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from emulator import paths
from emulator.errors import TopologyError
from emulator.net import kernel_entries, netns
from emulator.net.names import PREFIX, check_run_id, run_id_of
from emulator.net.run_lock import RunIdInUse, RunLock, acquire, holder_pid, lock_dir
from emulator.net.state_files import StateFileError, make_private_dir, private_dir_problem, read_json, write_json

log = logging.getLogger(__name__)
LEDGER_FILE = "ledger.json"
ENTRY_KINDS = ("owner", "pid", "netns", *kernel_entries.KERNEL_KINDS)
PID_KINDS = ("owner", "pid")
MAX_NAME_CHARS = 64
_FIX = f"remove it or set {paths.Env.STATE_DIR} to a folder of your own"


def state_root() -> Path:
    """Where run directories live (emulator.paths.state_dir decides), created if missing.

    Teardown kills the pids a ledger names, so the folder must be ours alone: it is created 0700,
    and one that another user owns or others can write is refused (a planted /tmp/prfaas-<uid>).
    """
    root = paths.state_dir()
    make_private_dir(root, "state dir", _FIX)
    return root


def run_dir(run_id: str) -> Path:
    path = state_root() / check_run_id(run_id)
    make_private_dir(path, "state dir", _FIX)
    return path


def find_run_dir(run_id: str) -> Path | None:
    """`run_id`'s folder in this state folder if there is one (TopologyError if it is not private);
    unlike `run_dir`, never creates it."""
    path = state_root() / check_run_id(run_id)
    if not os.path.lexists(path):
        return None
    if (problem := private_dir_problem(path)) is not None:
        raise TopologyError(f"run folder {path}: {problem}; remove it")
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


def check_entries(run_id: str, value: object) -> list[dict]:
    """A ledger read from a file, entry by entry: StateFileError (one line) on the first that is not
    one this code writes; a namespace outside the run's own prefix is never accepted."""
    if not isinstance(value, list):
        raise StateFileError(f"{LEDGER_FILE}: not a list of entries")
    for i, entry in enumerate(value):
        kind = entry.get("kind") if isinstance(entry, dict) else None
        pid, name = (entry.get("pid"), entry.get("name")) if isinstance(entry, dict) else (None, None)
        start = entry.get("start_time") if isinstance(entry, dict) else None
        if kind not in ENTRY_KINDS:
            problem = "not an entry of a known kind"
        elif kind in kernel_entries.KERNEL_KINDS:
            if (problem := kernel_entries.entry_problem(run_id, entry)) is None:
                continue
        elif kind in PID_KINDS and (type(pid) is not int or pid <= 0 or (start is not None and type(start) is not int)):
            problem = "pid and start_time must be positive integers"
        elif name is not None and (not isinstance(name, str) or len(name) > MAX_NAME_CHARS):
            problem = f"name must be text of at most {MAX_NAME_CHARS} characters"
        elif kind == "netns" and not (isinstance(name, str) and name.startswith(f"{PREFIX}-{run_id}-")):
            problem = f"a namespace not named {PREFIX}-{run_id}-*"
        else:
            continue
        raise StateFileError(f"{LEDGER_FILE}: entry {i}: {problem}")
    return value


@dataclass
class Ledger:
    """`entries` in creation order. A claimed ledger (`claim`) holds the run's lock and writes to the
    folder it was claimed in; `on_record` sees each new entry (the run's reaper keeps a copy)."""

    run_id: str
    entries: list[dict]
    directory: Path | None = None
    lock: RunLock | None = None
    on_record: Callable[[dict], None] | None = None
    _unwritten: bool = field(default=False, repr=False)

    @classmethod
    def open(cls, run_id: str) -> Ledger:
        """The run's own ledger when this process holds `run_id` (one object per run: what a part of
        the run records, its reaper and its teardown see), else what the state folder holds
        (StateFileError when the file is unreadable)."""
        if (claimed := _CLAIMED.get(run_id)) is not None:
            return claimed
        folder = find_run_dir(run_id)
        path = folder / LEDGER_FILE if folder is not None else None
        return cls(run_id, check_entries(run_id, read_json(path)) if path and os.path.lexists(path) else [])

    @classmethod
    def claim(cls, run_id: str) -> Ledger:
        """The ledger of a new run: its lock taken (RunIdInUse, touching nothing, when a live run has
        the id), what a dead run of the same id left swept, and the owner recorded."""
        lock = acquire(run_id)
        try:
            if (live := _live_by_resources(run_id)) is not None:
                raise RunIdInUse(run_id, live.pid)
            if leftovers := remove_run(run_id):
                log.warning("run %s: removed what an earlier run of this id left: %s", run_id, ", ".join(leftovers))
            ledger = cls(run_id, [], run_dir(run_id), lock)
            ledger.record("owner", pid=os.getpid())
        except BaseException:
            lock.release()
            raise
        _CLAIMED[run_id] = ledger
        return ledger

    @property
    def folder(self) -> Path:
        """Where this ledger is written: the folder it was claimed in, else this state folder's."""
        return self.directory or run_dir(self.run_id)

    def owner_pid(self) -> int | None:
        """The pid of the process that recorded first while it still runs, else None."""
        owner = next((e for e in self.entries if e["kind"] == "owner"), None)
        if owner is None or process_start_time(int(owner["pid"])) != owner.get("start_time"):
            return None
        return int(owner["pid"])

    def record(self, kind: str, **fields: object) -> None:
        """Append one created object and persist at once, so a crash right after still finds it.
        A claimed ledger whose folder is no longer private keeps the entry in memory only."""
        if not self.entries and kind != "owner":
            self._append({"kind": "owner", "pid": os.getpid()})
        self._append({"kind": kind, **fields})

    def _append(self, entry: dict) -> None:
        if "pid" in entry:
            entry["start_time"] = process_start_time(int(entry["pid"]))  # type: ignore[arg-type]
        self.entries.append(entry)
        if self.on_record is not None:
            self.on_record(entry)
        directory = self.folder
        if (problem := self._folder_problem(directory)) is not None:
            if not self._unwritten:
                log.warning("run %s: state dir %s: %s; its ledger is kept in memory only", self.run_id,
                            directory, problem)
            self._unwritten = True
            return
        write_json(directory / LEDGER_FILE, self.entries)

    @staticmethod
    def _folder_problem(directory: Path) -> str | None:
        return private_dir_problem(directory.parent) or private_dir_problem(directory)

    def teardown(self) -> list[str]:
        """Undo every entry, newest first, then remove the run's folder; returns what was removed.
        A claimed ledger keeps its lock until `release`."""
        removed = []
        for entry in reversed(self.entries):
            try:
                if undo_entry(entry):
                    removed.append(describe_entry(entry))
            except (OSError, TopologyError) as err:
                log.warning("teardown of %s failed: %s", entry, err)
        self.entries = []
        try:
            directory = self.folder
            if (problem := self._folder_problem(directory)) is not None:
                raise TopologyError(f"state dir {directory}: {problem}")
            shutil.rmtree(directory, ignore_errors=True)
        except TopologyError as err:
            log.warning("run %s: %s; its files there are left in place (remove them by hand)", self.run_id, err)
        return removed

    def release(self) -> None:
        """Give the run id back (a claimed ledger, once its teardown is done); idempotent."""
        if self.lock is not None:
            if _CLAIMED.get(self.run_id) is self:
                del _CLAIMED[self.run_id]
            self.lock.release()


_CLAIMED: dict[str, Ledger] = {}  # run id -> the ledger this process claimed it with, until released


def describe_entry(entry: dict) -> str:
    if entry["kind"] in kernel_entries.KERNEL_KINDS:
        return kernel_entries.describe(entry)
    return f"{entry['kind']} {entry.get('name', entry.get('pid'))}"


def undo_entry(entry: dict) -> bool:
    if entry["kind"] == "owner":  # the run's own process: never killed by its teardown
        return False
    if entry["kind"] == "pid":
        return _stop_process(int(entry["pid"]), entry.get("start_time"))
    if entry["kind"] == "netns":
        return netns.remove_netns(entry["name"])
    if entry["kind"] in kernel_entries.KERNEL_KINDS:
        return kernel_entries.undo(entry)
    raise ValueError(f"ledger: unknown entry kind {entry['kind']!r}")


@dataclass(frozen=True, slots=True)
class Liveness:
    """Why a run is live: a process of its own, and what makes it the run's."""

    pid: int
    evidence: str  # "holds its lock", "runs in its namespace prf-...", "owns its ledger"

    def describe(self) -> str:
        return f"pid {self.pid} {self.evidence}"


def liveness(run_id: str) -> Liveness | None:
    """Whether `run_id` is live, judged by its own resources wherever it was started from: the
    holder of its lock, then the processes inside its namespaces, then its ledger's owner (this
    state folder's, when it is readable). None: nothing of the run runs."""
    if (pid := holder_pid(run_id)) is not None:
        return Liveness(pid, "holds its lock")
    return _live_by_resources(run_id)


def _live_by_resources(run_id: str) -> Liveness | None:
    for name in netns.list_netns(f"{PREFIX}-{run_id}-"):
        if pids := netns.pids_in(name):
            return Liveness(pids[0], f"runs in its namespace {name}")
    try:
        owner = Ledger.open(run_id).owner_pid()
    except TopologyError:  # unreadable or untrusted: it cannot vouch for anything
        owner = None
    if owner is not None:
        return Liveness(owner, "owns its ledger")
    return None


def known_run_ids() -> list[str]:
    """Run ids with a folder in this state folder, a namespace, or a lock on this machine."""
    root = state_root()
    dirs = {p.name for p in root.iterdir() if run_id_of(f"{PREFIX}-{p.name}-")}
    spaces = {run_id_of(n) for n in netns.list_netns(f"{PREFIX}-")}
    try:
        locks = {p.name.removesuffix(".lock") for p in lock_dir().iterdir() if p.name.endswith(".lock")}
    except OSError:
        locks = set()
    return sorted(dirs | {r for r in spaces if r} | {r for r in locks if run_id_of(f"{PREFIX}-{r}-")})


@dataclass(slots=True)
class SweepReport:
    removed: list[str] = field(default_factory=list)
    live: dict[str, Liveness] = field(default_factory=dict)  # left alone, unless forced


def sweep_report(run_id: str | None = None, force: bool = False) -> SweepReport:
    """Tear down one run, or every run known here: ledgers first, then leftovers by prefix.

    A run that is live (`liveness`) is left alone unless `force`; its lock is held while it is swept,
    so no new run of that id starts half-way."""
    report = SweepReport()
    for rid in [check_run_id(run_id)] if run_id else known_run_ids():
        try:
            lock = acquire(rid)
        except RunIdInUse as err:
            lock, why = None, Liveness(err.pid or 0, "holds its lock")
        else:
            why = _live_by_resources(rid)
        try:
            if why is not None:
                report.live[rid] = why
                if not force:
                    log.info("run %s is live (%s); left alone", rid, why.describe())
                    continue
            report.removed += remove_run(rid)
        finally:
            if lock is not None:
                lock.release()
    return report


def sweep(run_id: str | None = None, force: bool = False) -> list[str]:
    """`sweep_report`'s removed objects."""
    return sweep_report(run_id, force).removed


def remove_run(run_id: str, ledger: Ledger | None = None) -> list[str]:
    """`ledger` torn down (default: this state folder's; one that is unreadable is reported and its
    processes left, since nothing in it can be trusted, but its folder goes), then the run's
    namespaces and the links it left in this namespace (a rehearsal's bridge), by name."""
    removed = []
    try:
        removed += (ledger or Ledger.open(run_id)).teardown()
    except TopologyError as err:
        log.warning("run %s: ledger not used (%s); removing its namespaces by name", run_id, err)
        Ledger(run_id, []).teardown()  # its folder, when it is a private one
    for name in netns.list_netns(f"{PREFIX}-{run_id}-"):
        if netns.remove_netns(name):
            removed.append(f"netns {name}")
    removed += kernel_entries.remove_links_named(f"{PREFIX}-{run_id}-")
    return removed
