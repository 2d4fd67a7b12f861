"""The Live page's cost and lag: with the page open in chromium on a running live scenario, the
Streamlit server process's CPU use (target <= 25 % of one core) and the delay from a metrics
message on MQTT to its appearance in the page (target <= 1.5 s).

The server is started as `make run` starts it (embedded broker, its defaults); the scenario is
started from the page. CPU is the server process's own utime + stime (/proc; its children, the
broker and the run, are not counted), sampled each second; the reference is the same process
with the page open and no run. The delay pairs each snapshot this script receives on
`prfaas/<run>/metrics` with the first time the page's "Last snapshot: t = ..." caption shows it
or a newer one (a MutationObserver inside the page; both clocks are this machine's wall clock); the
caption heads the charts and comes in the same redraw. Also reported, to read the delay by: the
CPU of all chromium's processes over the window (on two cores the browser drawing the page and the
run's three workers share the machine). Writes bench/results/dashboard_live.json.

    python bench/dashboard_live.py [--quick] [--check]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emulator.paths import Env  # noqa: E402
from emulator.telemetry.watch import TopicWatch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "dashboard_live.json"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TARGET_CPU_PCT = 25.0
TARGET_DELAY_S = 1.5
TICKS = os.sysconf("SC_CLK_TCK")
# Records (wall ms, t) each time the page's "Last snapshot: t = X s" caption changes: a MutationObserver,
# called as the page changes its DOM (a poll every few ms would itself load the browser it measures).
OBSERVER_JS = """() => {
  window.__seen = []; let last = null;
  const look = () => {
    for (const el of document.querySelectorAll('[data-testid=stCaption], [data-testid=stCaptionContainer]')) {
      const m = el.textContent.match(/^Last snapshot: t = ([0-9.]+) s/);
      if (m && m[1] !== last) { last = m[1]; window.__seen.push([Date.now(), parseFloat(m[1])]); }
    }
  };
  new MutationObserver(look).observe(document.body, {childList: true, subtree: true, characterData: true});
  look();
}"""


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process itself (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def browser_cpu_seconds() -> float:
    """utime + stime of every chromium process (the browser draws the page: on a small machine its
    share of the cores is what the page's delay depends on)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            raw = stat.read_text()
            if raw.split("(", 1)[1].rsplit(")", 1)[0].startswith(("chromium", "chrome")):
                fields = raw.rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def sample_cpu(pid: int, seconds: float) -> list[float]:
    """Percent of one core, one sample per second."""
    samples = []
    for _ in range(round(seconds)):
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(1.0)
        samples.append(100.0 * (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0))
    return samples


def delays(received: list[tuple[float, float]], seen: list[tuple[float, float]]) -> list[float]:
    """For each received snapshot, seconds until the page showed it (or a newer one)."""
    out = []
    for wall_s, t_s in received:
        shown = next((ms / 1000.0 for ms, t in seen if t >= round(t_s, 2) - 1e-6), None)
        if shown is not None:
            out.append(shown - wall_s)
    return out


@contextlib.contextmanager
def serve(runs_dir: Path, log: Path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != Env.BROKER_URL}
    env |= {Env.RUNS_DIR.value: str(runs_dir)}
    cmd = [sys.executable, "-m", "streamlit", "run", "app/Home.py", "--server.address", "127.0.0.1",
           "--server.port", str(port), "--browser.gatherUsageStats", "false", "--server.headless", "true"]
    with log.open("wb") as out:
        server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                break
            time.sleep(0.3)
        yield url, server.pid
    finally:
        server.terminate()
        try:
            server.wait(45)
        except subprocess.TimeoutExpired:
            server.kill()


def start_run(page, duration_s: float) -> tuple[str, str]:
    caption = page.get_by_text(re.compile(r"^MQTT broker: mqtt://")).text_content()
    broker = re.search(r"MQTT broker: (mqtt://\S+) \(embedded", caption).group(1)
    page.get_by_text("Advanced start options").click()
    field = page.get_by_label("Duration (s), 0 = the scenario's own", exact=True)
    field.fill(f"{duration_s:g}")
    field.press("Enter")
    page.get_by_text("Advanced start options").click()
    page.get_by_role("button", name="Start", exact=True).click()
    knobs = page.get_by_text(re.compile(r"^Run [0-9a-f]{6}\. "))
    knobs.wait_for(timeout=30_000)
    return broker, knobs.text_content()[4:10]


def measure(args: argparse.Namespace) -> dict:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp) / "runs", Path(tmp) / "st.log") as (url, pid):
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 2200})
            page.goto(f"{url}/Live")
            page.get_by_role("heading", name="Live control room").wait_for(timeout=60_000)
            time.sleep(2.0)
            idle = sample_cpu(pid, args.idle_s)
            broker, run_id = start_run(page, args.duration_s)
            with TopicWatch(broker, f"prfaas/{run_id}/metrics") as watch:
                page.get_by_text(re.compile(r"^Last snapshot: t = ")).wait_for(timeout=60_000)
                time.sleep(args.warmup_s)
                page.evaluate(OBSERVER_JS)
                start, chromium0 = time.time(), browser_cpu_seconds()
                busy = sample_cpu(pid, args.window_s)
                chromium_pct = 100.0 * (browser_cpu_seconds() - chromium0) / (time.time() - start)
                time.sleep(1.5)  # let the last messages of the window reach the page
                seen = page.evaluate("window.__seen")
                received = [(m.at_s, float(m.payload["t_s"])) for m in watch.messages
                            if start <= m.at_s <= start + args.window_s]
            stop = page.get_by_role("button", name="Stop", exact=True)
            if stop.is_enabled():
                stop.click()
            browser.close()
    lags = delays(received, seen)
    return {"idle_cpu_pct": idle, "running_cpu_pct": busy, "browser_cpu_pct": chromium_pct, "delay_s": lags,
            "messages": len(received), "page_updates": len(seen), "run_id": run_id}


def summarize(raw: dict) -> dict:
    busy, idle, lags = raw["running_cpu_pct"], raw["idle_cpu_pct"], sorted(raw["delay_s"])
    p90 = lags[min(len(lags) - 1, int(0.9 * len(lags)))] if lags else None
    cpu = statistics.fmean(busy)
    return {
        "cpu_pct_mean": cpu, "cpu_pct_median": statistics.median(busy), "cpu_pct_max": max(busy),
        "idle_cpu_pct_mean": statistics.fmean(idle), "cpu_ratio_to_idle": cpu / max(statistics.fmean(idle), 1e-9),
        "browser_cpu_pct": raw["browser_cpu_pct"],
        "delay_s_median": statistics.median(lags) if lags else None, "delay_s_p90": p90,
        "delay_s_max": lags[-1] if lags else None, "messages": raw["messages"],
        "page_updates": raw["page_updates"],
        "target_cpu_pct": TARGET_CPU_PCT, "target_delay_s": TARGET_DELAY_S,
        "cpu_ok": cpu <= TARGET_CPU_PCT, "delay_ok": bool(lags) and lags[-1] <= TARGET_DELAY_S,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a shorter run and window (CI-sized)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    args.duration_s, args.idle_s, args.warmup_s, args.window_s = (
        (25.0, 5.0, 2.0, 12.0) if args.quick else (45.0, 10.0, 3.0, 30.0))
    raw = measure(args)
    summary = summarize(raw)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    doc = {"bench": "dashboard_live", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                                                 "python": platform.python_version()},
           "git_sha": sha, "config": {"scenario": "scenarios/live-quickstart.yaml", "engine": "live",
                                      "duration_s": args.duration_s, "window_s": args.window_s,
                                      "idle_s": args.idle_s, "refresh_s": 1.0, "quick": args.quick},
           "samples": raw, "summary": summary}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    s = summary
    print(f"{'measure':<44}{'value':>12}{'target':>10}")
    print(f"{'server CPU, mean of 1-s samples (% core)':<44}{s['cpu_pct_mean']:>12.1f}{TARGET_CPU_PCT:>10.0f}")
    print(f"{'server CPU, max 1-s sample (% core)':<44}{s['cpu_pct_max']:>12.1f}{'':>10}")
    print(f"{'server CPU, page open, no run (% core)':<44}{s['idle_cpu_pct_mean']:>12.1f}{'':>10}")
    print(f"{'browser CPU, all chromium processes (% core)':<44}{s['browser_cpu_pct']:>12.1f}{'':>10}")
    for key, label in (("delay_s_median", "median"), ("delay_s_p90", "p90"), ("delay_s_max", "max")):
        value = f"{s[key]:.3f}" if s[key] is not None else "-"
        print(f"{'MQTT -> page delay, ' + label + ' (s)':<44}{value:>12}{TARGET_DELAY_S if label == 'max' else '':>10}")
    print(f"{'snapshots received / page updates':<44}{s['messages']:>6} / {s['page_updates']:<4}")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 1 if args.check and not (s["cpu_ok"] and s["delay_ok"]) else 0


if __name__ == "__main__":
    sys.exit(main())
