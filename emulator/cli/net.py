"""`python -m emulator net up|down|status`: bring a shaped link up by hand, inspect, clean up."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from emulator.errors import TopologyError
from emulator.net.ledger import LEDGER_FILE, Ledger, find_run_dir, known_run_ids, liveness, sweep_report
from emulator.net.names import PREFIX
from emulator.net.netns import list_netns
from emulator.net.spec import parse_link_spec
from emulator.net.state_files import read_json
from emulator.net.topology import Topology

SHAPE_FLAGS = ("bandwidth_mbit", "delay_ms", "jitter_ms", "loss_pct", "loss_correlation_pct", "queue_packets")


def add_parser(sub: argparse._SubParsersAction) -> None:
    net = sub.add_parser("net", help="shaped links between datacenter namespaces")
    actions = net.add_subparsers(dest="net_command", required=True)
    up = actions.add_parser("up", help="bring a link up and hold it until Ctrl-C or SIGTERM")
    up.add_argument("--backend", default="auto", choices=("auto", "netem", "tun", "proxy"))
    up.add_argument("--run-id", default=None, help="6 hex digits (default: a new one)")
    up.add_argument("--mtu", type=int, default=9000)
    for flag in SHAPE_FLAGS:
        up.add_argument("--" + flag.replace("_", "-"), dest=flag, type=float, default=None)
    down = actions.add_parser("down", help="remove what runs whose process has ended left behind: namespaces, "
                                           "links, relays (all such runs by default)")
    down.add_argument("--run-id", default=None)
    down.add_argument("--force", action="store_true",
                      help="also remove runs whose process still runs (their runs fail)")
    actions.add_parser("status", help="list this project's runs, namespaces and backends")


def run(args: argparse.Namespace) -> int:
    if args.net_command == "up":
        return _up(args)
    if args.net_command == "down":
        return _down(args.run_id, args.force)
    print(json.dumps(status(), indent=1))
    return 0


def _down(run_id: str | None, force: bool) -> int:
    """Whether a run is live is judged from its own resources (emulator/net/ledger.py `liveness`),
    whatever state folder this is called from."""
    report = sweep_report(run_id, force=force)
    for rid, why in sorted(report.live.items()):
        if force:
            print(f"warning: run {rid} is live ({why.describe()}); --force removed it, and the run fails",
                  file=sys.stderr)
        else:
            print(f"run {rid} is live ({why.describe()}): left alone; stop it, or use --force", file=sys.stderr)
    print(json.dumps({"removed": report.removed, "kept": [] if force else sorted(report.live)}))
    return 0


def _up(args: argparse.Namespace) -> int:
    shape = {k: getattr(args, k) for k in SHAPE_FLAGS if getattr(args, k) is not None}
    if "queue_packets" in shape:
        shape["queue_packets"] = int(shape["queue_packets"])
    spec = parse_link_spec(shape, where="net up")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Topology(spec, backend=args.backend, run_id=args.run_id, mtu=args.mtu) as topo:
        print(json.dumps(topo.status()), flush=True)
        print(f"link up (run {topo.run_id}); Ctrl-C or SIGTERM removes it",
              file=sys.stderr, flush=True)
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    return 0


def status() -> dict:
    """Every run known here; a run whose files cannot be read is listed as unreadable, with one
    warning line on stderr, and the rest are listed as usual."""
    runs = [_run_status(run_id) for run_id in known_run_ids()]
    for run in runs:
        if "unreadable" in run:
            print(f"warning: run {run['run_id']}: unreadable: {run['unreadable']}", file=sys.stderr)
    return {"runs": runs, "namespaces": list_netns(f"{PREFIX}-")}


def _run_status(run_id: str) -> dict:
    why = liveness(run_id)
    run: dict = {"run_id": run_id, "live": why.describe() if why else None, "status": None, "ledger": []}
    problems = []
    try:
        folder = find_run_dir(run_id)
    except TopologyError as err:
        return {**run, "unreadable": str(err)}
    for name in ("status.json", LEDGER_FILE):
        if folder is None or not os.path.lexists(folder / name):
            continue
        try:
            run["status" if name == "status.json" else "ledger"] = (
                read_json(folder / name) if name == "status.json" else Ledger.open(run_id).entries)
        except TopologyError as err:
            problems.append(str(err))
    if run["status"] is not None and not isinstance(run["status"], dict):
        run["status"], problems = None, [*problems, "status.json: not a JSON object"]
    return {**run, "unreadable": "; ".join(problems)} if problems else run
