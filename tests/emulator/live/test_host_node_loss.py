"""A Ray node that dies mid-run under the host topology (issue 30: "killing a Ray node mid-run fails or
retries its requests with a reason; the record is complete"), on the rehearsed 3-host cluster
(ray_hosts.py): every prompt goes remote (threshold 0) until the remote host's node dies. The run must
end on its own with every request completed or failed with a reason, prefill what comes later
locally, write its whole record, and leave no shaping on either host, the dead one included: its
LinkHost died with the node, so the driver's ledger for that host removes its qdisc.

How the node dies: every process in the remote host's namespace gets SIGKILL, in passes until none is
left (`pull_the_plug`). That is the closest this machine comes to pulling a host's plug: the whole
user space of the host stops at once and none of it runs an exit path (the raylet does not leave the
GCS, the actor does not close its link, the worker sends no goodbye). `ray start --block`'s SIGTERM is
a clean leave instead; SIGKILL to the raylet alone lets its workers see the socket close and exit on
their own; and `ray start`'s process group is the test runner's (Popen keeps it), not the host's.
What stays unlike a dead machine: the host's kernel lives on, so it closes the dead sockets (the
gateway sees the control connection close at once, where a dead machine falls silent) and the qdisc
stays on its interface until someone removes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml

from emulator.live.host_topology import LinkHost, namespace_id, netns_here
from emulator.live.session import run_live
from emulator.net.ledger import Ledger, check_entries, find_run_dir, process_start_time
from emulator.net.names import new_run_id
from emulator.net.netns import pids_in
from emulator.net.run_lock import holder_pid
from emulator.net.state_files import StateFileError
from emulator.scenario import Scenario, parse_scenario

from .ray_hosts import RayHosts, joined_driver, on_rehearsed_hosts

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = yaml.safe_load((REPO / "scenarios" / "live-quickstart.yaml").read_text())
SEED = 57  # the arrivals KILL_AT_S is set by (the quickstart's own seed may change)
KILL_AT_S = 3.45  # seed 57 at 0.6/s: a 3,203-token prompt arrives at 3.21 s, so its remote prefill is running
# (or later: once the first request has ended, when that is after KILL_AT_S)
LOSS_SEEN_S = 3.0  # what arrives this long after the kill finds the remote worker lost
PULL_TIMEOUT_S = 10.0


def test_a_qdisc_entry_in_a_rehearsed_hosts_namespace_passes_the_ledger_check() -> None:
    """The driver records a rehearsed host's qdisc under that host's namespace, which is named for
    the rehearsal's run, not the live run's: `net down` must still take the entry after a crash."""
    run, owner = "abc123", {"kind": "owner", "pid": 1}
    host_qdisc = {"kind": "qdisc", "netns": "prf-ffffff-remote", "name": "prf-ffffff-e1", "handle": 0x1230000}
    assert check_entries(run, [owner, host_qdisc]) == [owner, host_qdisc]
    for entry in ({**host_qdisc, "netns": "ns-remote"}, {"kind": "link", "netns": "prf-ffffff-remote",
                                                        "name": "prf-abc123-br"}):
        with pytest.raises(StateFileError, match="netns must be"):
            check_entries(run, [owner, entry])


def test_a_host_is_within_reach_only_on_this_machine() -> None:
    boot_id, dev, ino = namespace_id()
    assert netns_here(boot_id, dev, ino) == ""  # this process's own namespace
    assert netns_here("another-machine", dev, ino) is None  # same inode, another boot: not ours


def test_a_link_host_of_its_own_keeps_its_ledger_where_net_down_on_that_host_looks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No run holds the id on this "host": the LinkHost claims it here, so after a crash `net down`
    here finds its ledger; `close` gives the id back and removes the folder."""
    monkeypatch.setenv("PRFAAS_STATE_DIR", str(tmp_path / "state"))
    run_id = new_run_id()
    host = LinkHost(run_id, "127.0.0.2")
    try:
        assert holder_pid(run_id) == os.getpid() and find_run_dir(run_id) is not None
        assert host.base is None and host.locate()[-1] == ""  # no private dir: the driver has nothing to remove
    finally:
        host.close()
    assert holder_pid(run_id) is None and find_run_dir(run_id) is None


def test_a_link_host_on_the_drivers_machine_keeps_a_private_ledger(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRFAAS_STATE_DIR", str(tmp_path / "state"))
    run_id = new_run_id()
    driver_ledger = Ledger.claim(run_id)
    try:
        host = LinkHost(run_id, "127.0.0.2")
        assert host.base is not None and host.base.name.startswith(f"prf-{run_id}-link-")
        assert host.locate()[-1] == str(host.base)
        host.close()
        assert not host.base.exists() and holder_pid(run_id) == os.getpid()  # the driver still holds the id
    finally:
        driver_ledger.teardown()
        driver_ledger.release()


def scenario(address: str) -> Scenario:
    """live-quickstart for 14 s at a fixed 0.6 requests/s (8 arrivals, seed 57), every prompt remote."""
    doc = copy.deepcopy(QUICKSTART)
    doc.update(duration_s=14, drain_s=30, ray={"address": address}, expect={}, seed=SEED)
    doc["router"] = {**doc["router"], "threshold_tokens": 0}
    doc["workload"].update(arrival={"kind": "poisson", "rate_per_s": 0.6}, max_requests=8)
    return parse_scenario(doc, REPO / "scenarios")


def pull_the_plug(netns: str) -> tuple[list[int], list[Path]]:
    """SIGKILL every process in `netns` (not this one), in passes until none is left alive (zombies
    wait for their parent); returns the pids and the private dirs of the workers killed (their
    settings files, which a dead host keeps)."""
    killed: set[int] = set()
    dirs: set[Path] = set()
    deadline = time.monotonic() + PULL_TIMEOUT_S
    while (pids := alive_in(netns)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if b"--settings" in argv:
                    dirs.add(Path(argv[argv.index(b"--settings") + 1].decode()).parent)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.02)
    return sorted(killed), sorted(dirs)


def alive_in(netns: str) -> list[int]:
    return [pid for pid in pids_in(netns) if pid != os.getpid() and process_start_time(pid) is not None]


@pytest.fixture
def driver() -> Iterator[RayHosts]:
    """A rehearsed cluster of its own (its remote node dies), this process joined as its driver."""
    with joined_driver() as hosts:
        yield hosts


def has_htb(hosts: RayHosts, host: str) -> str:
    shown = hosts.tc(host, "qdisc", "show")
    return shown if "htb" in shown else ""


def run_and_kill(hosts: RayHosts, out: Path) -> tuple[dict, dict]:
    """The run, with the remote host's plug pulled at KILL_AT_S on its clock (or once the first
    request has ended, when later); (record, what the kill saw: kill_s, pids, total, wall_s)."""
    remote_ns, seen = hosts.rehearsal.host("remote").netns, {}

    def kill() -> None:
        seen["kill_s"] = time.monotonic() - seen["t0"]
        seen["pids"], seen["dirs"] = pull_the_plug(remote_ns)

    def progress(num_ended: int, total: int, elapsed_s: float) -> None:
        seen["total"] = total
        if "t0" not in seen:  # the run's clock starts with its loops
            seen["t0"] = time.monotonic() - elapsed_s
        if num_ended >= 1 and "timer" not in seen:  # the remote host has served one: on a busy
            # machine its first prefill can end after KILL_AT_S, and a kill before it tests nothing
            seen["timer"] = threading.Timer(max(KILL_AT_S - elapsed_s, 0.0), kill)
            seen["timer"].start()

    started = time.monotonic()
    try:
        doc = asyncio.run(run_live(scenario(hosts.address), out, progress=progress, embedded_broker=False))
    finally:
        if "timer" in seen:
            seen["timer"].cancel()
            seen["timer"].join()
        for path in seen.get("dirs", []):  # the dead worker's private dir, left in this machine's /tmp
            shutil.rmtree(path, ignore_errors=True)
    seen["wall_s"] = time.monotonic() - started
    return doc, seen


def describe(doc: dict, seen: dict, requests: pd.DataFrame, open_at_kill: pd.DataFrame) -> str:
    failed = requests[requests["status"] == "failed"]
    steps = [(s["step"], s["seconds"], s["outcome"]) for s in doc["meta"]["engine_details"]["teardown"]]
    return (f"killed {len(seen['pids'])} processes of the remote host at {seen['kill_s']:.2f} s; run "
            f"{seen['wall_s']:.1f} s wall ({doc['meta'].get('end_reason')}); {len(requests)} requests: "
            f"{doc['summary']['completed']} completed, {len(failed)} failed "
            f"{failed['fail_reason'].value_counts().to_dict()}; open at the kill "
            f"{open_at_kill[['id', 'status', 'prefill_node', 'fail_reason']].values.tolist()}; teardown {steps}")


@on_rehearsed_hosts
def test_killing_the_remote_hosts_node_mid_run_fails_or_retries_its_requests_and_the_record_is_complete(
        driver: RayHosts, tmp_path: Path) -> None:
    doc, seen = run_and_kill(driver, tmp_path / "run")
    kill_s = seen["kill_s"]
    assert seen["pids"] and alive_in(driver.rehearsal.host("remote").netns) == []  # it ran, and nothing is left

    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    # every prompt went remote before the kill: those whose KV had not reached the decode worker by then
    open_at_kill = requests[(requests["arrival_s"] < kill_s) & ~(requests["transfer_end_s"] < kill_s)]
    print(describe(doc, seen, requests, open_at_kill))
    assert (tmp_path / "run" / "summary.json").is_file()
    assert len(requests) == seen["total"] > 0  # every request due is in the record
    assert requests["status"].isin(["completed", "failed"]).all(), requests[["id", "status"]]
    failed = requests[requests["status"] == "failed"]
    assert failed["fail_reason"].notna().all() and (failed["fail_reason"] != "").all()
    assert doc["summary"]["completed"] == (requests["status"] == "completed").sum()

    served_remote = requests[(requests["status"] == "completed") & (requests["prefill_node"] == "remote-prefill-0")]
    assert (requests[requests["arrival_s"] < kill_s - 0.5]["prefill_node"] == "remote-prefill-0").any()
    assert (served_remote["transfer_end_s"] < kill_s).all()  # nothing came from the dead host after it died
    retried = open_at_kill[open_at_kill["status"] == "completed"]
    assert retried["prefill_node"].str.startswith("local-").all()  # re-prefilled on the local host
    after = requests[requests["arrival_s"] > kill_s + LOSS_SEEN_S]
    assert len(after) > 0 and (after["status"] == "completed").all()
    assert after["prefill_node"].str.startswith("local-").all()

    details = doc["meta"]["engine_details"]
    assert details["record"] == "complete" and doc["meta"]["outcome"] == "finished"  # it ended on its own
    link_step = next(s for s in details["teardown"] if s["step"] == "restore and remove the link")
    assert link_step["outcome"] == "ok", details["teardown"]
    assert not has_htb(driver, "local"), has_htb(driver, "local")
    assert not has_htb(driver, "remote"), has_htb(driver, "remote")  # the dead host's: the driver removed it
    assert not list(Path(tempfile.gettempdir()).glob(f"prf-{doc['meta']['run_id']}-link-*"))
