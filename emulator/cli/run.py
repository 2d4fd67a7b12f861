"""`python -m emulator run SCENARIO [--engine live|virtual] [--out DIR] [--broker URL] [--set a.b=v]`.

Writes DIR/requests.parquet, timeseries.parquet, summary.json and report.html; prints a short
summary; exits 1 when an `expect:` bound of the scenario fails. A progress bar shows on a terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from emulator.scenario import apply_overrides, load_scenario
from emulator.telemetry.figures import egress_bit_per_s, format_rate
from emulator.telemetry.run_meta import workload_statement

COMMANDS = ("run",)
SUMMARY_KEYS = ("requests", "completed", "failed_count", "ttft_p50_s", "ttft_p90_s", "tpot_mean_s",
                "throughput_rps", "prfaas_fraction")


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
    parser.add_argument("--run-id", help="live engine: the run id in namespaces and MQTT topics (6 hex digits)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                        help="override a scenario field (repeatable), e.g. router.threshold_tokens=8000")


class ProgressBar:
    """One line on stderr, redrawn at most 4 times a second; silent when stderr is not a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self._last = enabled, 0.0

    def __call__(self, done: int, total: int, elapsed_s: float) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self._last < 0.25 and done < total):
            return
        self._last = now
        filled = int(30 * done / total) if total else 30
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{total} requests  {elapsed_s:6.1f} s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def run(args: argparse.Namespace) -> int:
    scenario = apply_overrides(load_scenario(args.scenario), args.overrides)
    engine = args.engine or scenario.engine
    out = args.out or Path("runs") / f"{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    bar = ProgressBar(sys.stderr.isatty())
    try:
        if engine == "live":
            from emulator.live.session import run_live

            doc = asyncio.run(run_live(scenario, out, args.broker, bar, embedded_broker=not args.no_broker,
                                       link_backend=args.link_backend, run_id=args.run_id))
        else:
            from emulator.virtual.engine import run_virtual

            doc = run_virtual(scenario, out, progress=bar)
    finally:
        bar.close()
    print_summary(doc, out)
    return 1 if doc["expect_failures"] else 0


def print_summary(doc: dict[str, Any], out: Path) -> None:
    summary, meta = doc["summary"], doc["meta"]
    print(f"{meta.get('scenario')} ({meta.get('engine')}): {out}")
    if statement := workload_statement(meta):
        print(f"  workload: {statement}")
    for key in SUMMARY_KEYS:
        value = summary.get(key)
        print(f"  {key:<18} {value:.4g}" if isinstance(value, float) else f"  {key:<18} {value}")
    print(f"  {'egress_mean':<18} {format_rate(egress_bit_per_s(summary))}")
    for line in doc["expect_failures"]:
        print(f"  EXPECT FAILED: {line}")
