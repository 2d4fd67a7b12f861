"""`python -m emulator run SCENARIO [--engine live|virtual] [--out DIR] [--broker URL] [--set a.b=v]`.

Writes DIR/requests.parquet, timeseries.parquet, summary.json and report.html; prints a short
summary and each `expect:` bound, held or failed; exits 1 when one fails. A progress bar shows on a
terminal; elsewhere (a log, CI) a progress line every 5 s of wall time.

Ctrl-C (SIGINT) or SIGTERM stops the run: what is open fails `interrupted` and the record is written
whole before anything else, its outcome `stopped`; further signals are absorbed (stop_signals.py; the
live engine's own handlers hurry its teardown, after the record). A stopped run's `expect:` is not
judged, and the command exits 128 + the signal (130 for SIGINT, 143 for SIGTERM), as a shell reports
a command a signal ended. A record the disk refuses is one line (exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from emulator.cli.progress import LOG_EVERY_S, ProgressReporter, progress_every
from emulator.cli.stop_signals import StopSignals
from emulator.net.names import check_run_id
from emulator.errors import ScenarioError
from emulator.scenario import Scenario, apply_overrides, load_scenario, parse_scenario
from emulator.telemetry.atomic_write import make_dir
from emulator.telemetry.figures import EGRESS_KEY, egress_bit_per_s, format_rate
from emulator.telemetry.labels import format_number, label
from emulator.telemetry.outcome import ExpectStatus, RunOutcome, bound_rows, exit_code, outcome_of, verdict_of
from emulator.telemetry.run_meta import workload_statement

COMMANDS = ("run",)
SUMMARY_KEYS = ("requests", "completed", "failed_count", "ttft_p50_s", "ttft_p90_s", "tpot_mean_s",
                "throughput_rps", "prfaas_fraction")
LABEL_WIDTH = 26


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("run", help="run a scenario on the live or virtual engine and record it")
    parser.add_argument("scenario", help="path to a scenario YAML file")
    parser.add_argument("--engine", choices=("live", "virtual"), help="override the scenario's engine")
    parser.add_argument("--out", type=Path, help="output directory (default runs/<scenario>-<time>)")
    parser.add_argument("--broker", metavar="URL", help="mqtt://[user:pass@]host:port of a real broker "
                        "(default: an embedded broker on 127.0.0.1)")
    parser.add_argument("--no-broker", action="store_true", help="record locally only, publish nothing")
    parser.add_argument("--link-backend", default="auto", choices=("auto", "netem", "tun", "proxy"),
                        help="live engine: which shaped-link backend (default: the best available)")
    parser.add_argument("--ray", metavar="ADDRESS", help="live engine: place the workers on the nodes of the Ray "
                        "cluster at HOST:PORT (`auto`: the one started on this machine; `local`: a private one), "
                        "by the scenario's ray.remote_resource / ray.local_resource; sets the scenario's ray.address")
    parser.add_argument("--run-id", help="live engine: the run id in namespaces and MQTT topics (6 hex digits)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                        help="override a scenario field (repeatable), e.g. router.threshold_tokens=8000")
    parser.add_argument("--progress-every", type=progress_every, default=LOG_EVERY_S, metavar="S",
                        help=f"seconds between progress lines when stderr is not a terminal (default {LOG_EVERY_S:g})")


def run(args: argparse.Namespace) -> int:
    run_id = None if args.run_id is None else check_run_id(args.run_id, "--run-id")
    scenario = apply_overrides(load_scenario(args.scenario), args.overrides)
    engine = args.engine or scenario.engine
    scenario = with_ray(scenario, engine, args.ray)
    out = args.out or Path("runs") / f"{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if engine == "live":  # a run the machine cannot hold is refused before it leaves a folder behind
        from emulator.live.capacity import check_live_start

        check_live_start(scenario)
    make_dir(out)  # a folder that cannot be made is one line now, not a lost run later
    bar = ProgressReporter("requests ended", sys.stderr.isatty(), log_every_s=args.progress_every)

    def progress(done: int, total: int, elapsed_s: float) -> None:
        bar(done, total, f"run time {elapsed_s:.1f} s")

    try:
        if engine == "live":
            from emulator.live.session import run_live

            # the live engine holds the signals while it runs (emulator/live/session.py)
            doc = asyncio.run(run_live(scenario, out, args.broker, progress, embedded_broker=not args.no_broker,
                                       link_backend=args.link_backend, run_id=run_id))
        else:
            from emulator.virtual.engine import run_virtual

            with StopSignals() as signals:
                doc = run_virtual(scenario, out, progress=progress, stop=signals.stop_requested)
    finally:
        bar.close()
    with StopSignals(final=True):  # the record is written: a signal now is absorbed, and ignored after
        print_summary(doc, out)
    return exit_code(doc["meta"], verdict_of(doc))


def with_ray(scenario: Scenario, engine: str, address: str | None) -> Scenario:
    """The scenario with `--ray ADDRESS` as its ray.address (the section's defaults otherwise);
    refused for the virtual engine, which places nothing."""
    if engine != "live" and (address is not None or scenario.ray is not None):
        where = f"--ray {address}" if address is not None else "ray"
        raise ScenarioError(f"{where}: only the live engine places workers on Ray nodes; "
                            "drop it or run with --engine live")
    if address is None:
        return scenario
    ray = (scenario.ray.model_dump() if scenario.ray is not None else {}) | {"address": address}
    return parse_scenario({**scenario.model_dump(mode="json"), "ray": ray}, Path.cwd())


def print_summary(doc: dict[str, Any], out: Path) -> None:
    """What ran, the headline figures under their labels (labels.py), and each `expect:` bound."""
    summary, meta = doc["summary"], doc["meta"]
    print(f"{meta.get('scenario')} ({meta.get('engine')}): {out}")
    if statement := workload_statement(meta):
        print(f"  workload: {statement}")
    outcome, ended = outcome_of(meta), str(meta.get("end_reason") or "")
    if outcome is not RunOutcome.FINISHED or ended != "run ended":
        print(f"  ended: {ended}")
    for key in SUMMARY_KEYS:
        print(f"  {label(key):<{LABEL_WIDTH}} {format_number(summary.get(key))}")
    print(f"  {label(EGRESS_KEY):<{LABEL_WIDTH}} {format_rate(egress_bit_per_s(summary))}")
    verdict = verdict_of(doc)
    lines = expect_lines(summary, doc.get("expect") or {}, judged=verdict.status is not ExpectStatus.NOT_JUDGED)
    if lines:
        print(f"  expect: {verdict.note}")
        print("\n".join(f"    {line}" for line in lines))


def expect_lines(summary: dict[str, Any], expect: dict[str, dict[str, float]], judged: bool = True) -> list[str]:
    """One line per bound: the figure, its value, the bound, and `held` or `FAILED: <why>` (the same
    check as summary.json's expect_failures), or `not judged` on a run that did not run to its end."""
    named = [(f"{row.label} [{row.metric}]", row) for row in bound_rows(summary, expect, judged)]
    width = max((len(name) for name, _ in named), default=0)  # the columns line up whatever the names
    return [f"{name:<{width}} {row.value:>10}  {row.bound:<12}  {row.verdict}" for name, row in named]
