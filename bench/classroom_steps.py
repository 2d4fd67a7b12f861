"""How long each Classroom step takes on this machine, and whether its run keeps the step's promise.

Runs every variant of every step as its button does (emulator.api.start_run, the step's overrides,
one embedded broker), times it from the start to the record (start-up until the first arrival, the
scenario's duration, then the drain), makes step 5's burst as the step tells the learner to (the rate
x BURST_FACTOR for BURST_S seconds, over the run's control topic) with the run open on the Live page
in chromium, as the step has the learner watch it (on two cores the page's redraws can slow the
run's drain), and judges the run's record with the step's promise (app.classroom_promises). It
also checks that the run applied the burst and its end and no other rate: the 51 s and 57 s once
measured here were runs whose open page sent the old rate back a second into the burst (a retired
widget's echo, fixed since); with the burst held the step took 83 s, as full suites found (78-79 s).
The Classroom page states these times (app.classroom_times). Measure on a machine with nothing else
running. Live steps need root.

    python bench/classroom_steps.py [--quick] [--check] [--steps 1,3]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.classroom_promises import RunRecord  # noqa: E402
from app.classroom_times import RESULTS  # noqa: E402
from app.classroom_view import BURST_FACTOR, BURST_S, STEPS, Step, Variant, variant_scenario  # noqa: E402
from emulator.api import SCENARIOS_DIR, start_run  # noqa: E402
from emulator.telemetry.broker import EmbeddedBroker  # noqa: E402
from emulator.telemetry.watch import TopicWatch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 600.0
BURST_AFTER_S = 10.0  # into the arrivals, the learner raises the rate
RUNNING = ": running"  # the run's log line once its arrivals start (emulator/live/session.py)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
VIEWPORT = {"width": 1400, "height": 2200}  # the browser tests' whole page (tests/e2e/browser.py)


@contextlib.contextmanager
def live_page(broker_url: str, run_id: str, work: Path):
    """The dashboard (on the bench's broker) with the run open on its Live page in chromium, until
    the block ends: the step's learner watches it there."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from dashboard_live import CHROMIUM, serve
    from playwright.sync_api import sync_playwright

    with serve(work / "dashboard-runs", work / "dashboard.log", broker_url) as (url, _pid), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(f"{url}/Live?run={run_id}")
            page.get_by_role("heading", name="Live control room").wait_for(timeout=60_000)
            yield page
        finally:
            browser.close()


def _wait_running(log: Path, handle, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and handle.is_running:
        if log.exists() and RUNNING in log.read_text(errors="replace"):
            return time.monotonic()
        time.sleep(0.1)
    return time.monotonic()


def _burst(broker_url: str, run_id: str) -> dict[str, float]:
    """The learner's burst: the run's own rate (its snapshots say it) x BURST_FACTOR, then back."""
    metrics, control = f"prfaas/{run_id}/metrics", f"prfaas/{run_id}/control/arrival_rate"
    with TopicWatch(broker_url, metrics) as watch:
        snapshot = watch.wait_for(metrics, lambda m: (m.get("knobs") or {}).get("rate_per_s"), timeout_s=30)
        rate = float(snapshot["knobs"]["rate_per_s"])
        watch.publish(control, {"v": 1, "rate_per_s": rate * BURST_FACTOR})
        time.sleep(BURST_S)
        watch.publish(control, {"v": 1, "rate_per_s": rate})
    return {"rate_per_s": rate, "burst_rate_per_s": rate * BURST_FACTOR, "burst_s": BURST_S}


def measure(step: Step, variant: Variant, broker_url: str, out: Path) -> dict:
    scenario = variant_scenario(step, variant)
    load_before = os.getloadavg()
    start = time.monotonic()
    handle = start_run(SCENARIOS_DIR / step.scenario, variant.engine, broker_url, variant.overrides, out_dir=out)
    is_burst = variant.engine == "live" and step.title == "A burst"
    burst = None
    with live_page(broker_url, handle.run_id, out.parent) if is_burst else contextlib.nullcontext():
        running = _wait_running(handle.log_path, handle, RUN_TIMEOUT_S)
        if is_burst:
            time.sleep(max(0.0, running + BURST_AFTER_S - time.monotonic()))
            burst = _burst(broker_url, handle.run_id)
        code = handle.process.wait(timeout=RUN_TIMEOUT_S)
    wall = time.monotonic() - start
    startup = running - start if variant.engine == "live" else 0.0
    record = RunRecord.read(out, scenario)
    verdicts = [dataclasses.asdict(v) for v in (variant.promise(record) if variant.promise else [])]
    workload = record.meta.get("workload") or {}
    if burst is not None:  # the rates the run applied: the burst and its end, nobody else's
        burst["applied"] = [(e["at_s"], e["set"]["workload.arrival.rate_per_s"]) for e in record.meta.get(
            "control_events", []) if "workload.arrival.rate_per_s" in e.get("set", {})]
        burst["held"] = [round(rate, 6) for _, rate in burst["applied"]] == [
            round(burst["burst_rate_per_s"], 6), round(burst["rate_per_s"], 6)]
    return {"step": step.title, "variant": variant.label, "engine": variant.engine, "scenario": step.scenario,
            "overrides": list(variant.overrides), "exit_code": code, "duration_s": scenario.duration_s,
            "wall_s": round(wall, 1), "startup_s": round(startup, 1),
            "drain_s": round(max(wall - startup - scenario.duration_s, 0.0), 1) if variant.engine == "live" else 0.0,
            "arrival_rate": workload.get("arrival_rate"), "requests": record.summary.get("requests"),
            "burst": burst, "verdicts": verdicts, "load_avg_before": [round(x, 2) for x in load_before]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="virtual variants only (no root needed)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a run breaks its step's promise or the burst was not held")
    parser.add_argument("--steps", default="", help="comma-separated step numbers (default: all)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    wanted = {int(n) for n in args.steps.split(",") if n.strip()} or set(range(1, len(STEPS) + 1))
    chosen = [(n, s, v) for n, s in enumerate(STEPS, 1) if n in wanted for v in s.variants
              if not (args.quick and v.engine == "live")]
    if any(v.engine == "live" for *_, v in chosen) and os.geteuid() != 0:
        print("bench/classroom_steps.py: live steps need root (namespaces and the tun link); try --quick",
              file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="prf-classroom-"))
    broker = EmbeddedBroker().start()
    try:
        runs = [measure(step, variant, broker.url, work / f"step{n}-{i}")
                for n, step, variant in chosen for i in [step.variants.index(variant)]]
    finally:
        broker.stop()
    old = json.loads(args.out.read_text()).get("runs", []) if args.out.exists() and args.steps else []
    kept = [r for r in old if (r["step"], r["variant"]) not in {(r2["step"], r2["variant"]) for r2 in runs}]
    result = {"bench": "classroom_steps", "git_sha": subprocess.run(
                  ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip(),
              "cpus": os.cpu_count(), "note": "load_avg_before: other work on the machine skews the times",
              "runs": kept + runs, "work_dir": str(work)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    broken = 0
    for r in runs:
        held = all(v["held"] for v in r["verdicts"]) and (r["burst"] is None or r["burst"]["held"])
        broken += not held
        burst = "" if r["burst"] is None else "  burst held" if r["burst"]["held"] else \
            f"  BURST NOT HELD: rates applied {r['burst']['applied']}"
        print(f"{r['step'][:34]:34} {r['variant'][:16]:16} {r['wall_s']:6.1f} s  start-up {r['startup_s']:5.1f} s  "
              f"{'kept' if held else 'BROKEN'}{burst}")
    print(f"results: {args.out}")
    return 1 if args.check and broken else 0


if __name__ == "__main__":
    sys.exit(main())
