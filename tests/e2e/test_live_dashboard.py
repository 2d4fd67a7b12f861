"""End to end: the dashboard in Debian's chromium, as a new user goes through it.

The dashboard is served as `make run` serves it (embedded broker, its defaults). The test starts a
short live-quickstart run from the Live page, applies a threshold and a link change (checked on the
run's status topic and in its summary.json), saves the run as a scenario and replays that file
headlessly; starts live-bandwidth-drop on the virtual engine and reads the scheduler's move in its
Decisions table beside the charts drawn from its record; reads the paper-vs-project table on the
Threshold explorer; and compares the two runs on the Runs page (the B - A column).

Screenshots go to the test's tmp dir, and also to $PRFAAS_SCREENSHOTS (e.g. docs/img) when set:
that is how the README's screenshots are made.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.live_charts import CHART_TITLES
from emulator.telemetry.watch import TopicWatch
from tests.e2e.browser import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS_ENV, VIEWPORT, first_scheduler_move, shoot

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [*BROWSER_MARKS, pytest.mark.slow]
# Arrivals of the run: long enough that the knobs are turned while it still runs on a slow machine
# (the page's first points took 32 s on a loaded CI run); the test stops the run once they are.
DURATION_S = 60
EXPLORER_VIEWPORT = {"width": 1400, "height": 2000}  # the paper beside the project too
# The caption above the charts, as a JS regular expression whose group counts the points drawn.
SNAPSHOTS = r"/Last snapshot: t = [0-9.]+ s · ([0-9]+) snapshots/"
RECORDED = r"/From the run's record: ([0-9]+) samples/"
# The Live charts (Vega-Lite, each described by its title) that hold a drawn line or area.
CHARTS_DRAWN_JS = """(titles) => titles.every((title) => {
  const chart = document.querySelector(`[data-testid=stVegaLiteChart][aria-label="${title}"]`);
  return chart !== null && [...chart.querySelectorAll('.mark-line path, .mark-area path')].some(
    (path) => (path.getAttribute('d') || '').length > 2);
})"""
TITLES_JS = json.dumps(list(CHART_TITLES.values()))


def _wait_charts(page, caption: str, at_least: int, timeout_s: float) -> None:
    """Until the five charts are drawn and the caption above them (`Last snapshot: ... · N snapshots`
    or `From the run's record: N samples`) counts at least `at_least` points."""
    page.wait_for_function(
        f"""() => {{
          const m = document.body.innerText.match({caption});
          return m !== null && parseInt(m[1]) >= {at_least} && ({CHARTS_DRAWN_JS})({TITLES_JS});
        }}""", timeout=timeout_s * 1000)


def _start_quickstart(page) -> tuple[str, str]:
    """Start live-quickstart (shortened) from the page; (broker URL, run id) as the page shows them."""
    caption = page.get_by_text(re.compile(r"^MQTT broker: mqtt://")).text_content()
    broker = re.search(r"MQTT broker: (mqtt://\S+) \(embedded", caption).group(1)
    page.get_by_text("Advanced start options").click()
    duration = page.get_by_label("Duration (s), 0 = the scenario's own", exact=True)
    duration.fill(str(DURATION_S))
    duration.press("Enter")
    page.get_by_text("Advanced start options").click()  # folded again, out of the screenshots
    page.get_by_role("button", name="Start", exact=True).click()
    knobs_caption = page.get_by_text(re.compile(r"^Run [0-9a-f]{6}\. "))  # the sidebar's, on our run
    knobs_caption.wait_for(timeout=30_000)
    return broker, knobs_caption.text_content()[4:10]


def _move_threshold(page) -> int:
    """Three steps of 128 tokens down with the keyboard, then Apply (the slider sends nothing by
    itself); returns where the slider ended."""
    slider = page.get_by_role("slider")
    slider.focus()
    for _ in range(3):
        page.keyboard.press("ArrowLeft")
        time.sleep(0.3)
    tokens = int(slider.input_value())
    page.get_by_role("button", name="Apply threshold").click()
    return tokens


def _change_link(page, bandwidth_mbit: int) -> None:
    """The link's fields are a form: typed, then sent as one message by Apply link."""
    page.get_by_label("Bandwidth (Mbit/s; empty = unshaped)", exact=True).fill(str(bandwidth_mbit))
    page.get_by_role("button", name="Apply link").click()


def _choose(page, label: str, option: str) -> None:
    """Pick `option` in the selectbox labelled `label`."""
    page.get_by_test_id("stSelectbox").filter(has_text=label).first.click()
    page.get_by_role("option", name=option, exact=True).click()


def _grid_text(page, has_text: str) -> str:
    """The text of the first data grid on the page that holds `has_text` (its cells are in the DOM)."""
    grid = page.get_by_test_id("stDataFrame").filter(has_text=has_text).first
    grid.wait_for(timeout=60_000)
    return (grid.text_content() or "").replace("→", "->")


def test_live_page_drives_a_live_run(live_dashboard, tmp_path: Path) -> None:
    """A live run with a threshold and a link change, saved as a scenario that replays headlessly;
    a virtual run's charts and the scheduler's move in its decisions; the paper beside the project;
    the Runs page's comparison with differences."""
    from playwright.sync_api import sync_playwright

    url, _server = live_dashboard
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT, accept_downloads=True)
            page.goto(f"{url}/Live")
            page.get_by_role("heading", name="Live control room").wait_for(timeout=30_000)
            assert page.get_by_role("button", name="Deploy").count() == 0  # a local lab, not a hosted app
            broker, run_id = _start_quickstart(page)
            status = f"prfaas/{run_id}/status"
            with TopicWatch(broker, status) as watch:
                # the workers are timed at start (rate auto) before the first snapshot: 7-44 s alone,
                # longer on a loaded 2-core machine
                _wait_charts(page, SNAPSHOTS, 1, timeout_s=180)
                _wait_charts(page, SNAPSHOTS, 3, timeout_s=30)
                tokens = _move_threshold(page)
                assert tokens < 2048, "the slider did not move"
                # the emulator's own report: the status that follows the control message
                watch.wait_for(status, lambda payload: payload.get("threshold_tokens") == tokens, timeout_s=15)
                _change_link(page, 120)
                watch.wait_for(status, lambda payload: "link -> 120 Mbit/s" in payload.get("note", ""),
                               timeout_s=15)
            page.get_by_text(re.compile(f"threshold (->|→) {tokens} tokens: applied")).wait_for(timeout=15_000)
            if os.environ.get(SCREENSHOTS_ENV):  # the README's picture: let the run show more
                page.wait_for_function("['draining', 'finished', 'ended'].some((s) => "
                                       "document.body.innerText.includes(s))", timeout=240_000)
                # the run ends by itself: the picture shows its results drawn whole
                page.get_by_role("button", name="Save as scenario (YAML)").wait_for(timeout=120_000)
            time.sleep(2.0)
            live_png = shoot(page, tmp_path, "live.png")
            assert page.get_by_test_id("stException").count() == 0
            stop = page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop", exact=True)
            if stop.is_enabled():  # else the run has ended by itself
                stop.click()
            page.get_by_text(re.compile(r"^Recorded in ")).wait_for(timeout=60_000)
            decisions = _grid_text(page, "why")
            assert f"threshold -> {tokens} tokens" in decisions and "link -> 120 Mbit/s" in decisions
            with page.expect_download() as download:
                page.get_by_role("button", name="Save as scenario (YAML)").click()
            saved = tmp_path / "saved.yaml"
            download.value.save_as(saved)

            _choose(page, "Scenario", "live-bandwidth-drop.yaml")
            page.get_by_test_id("stRadio").get_by_text("virtual", exact=True).click()
            advanced = page.get_by_test_id("stExpander").get_by_text("Advanced start options")
            advanced.click()
            duration = page.get_by_label("Duration (s), 0 = the scenario's own", exact=True)
            duration.fill("0")
            duration.press("Enter")
            advanced.click()
            page.get_by_role("button", name="Start", exact=True).click()
            page.get_by_text(re.compile(r"^From the run's record: ")).wait_for(timeout=60_000)
            _wait_charts(page, RECORDED, 10, timeout_s=30)  # the charts, drawn from the record
            [record] = (tmp_path / "runs").glob("live-bandwidth-drop-*/summary.json")
            assert first_scheduler_move(record).what in _grid_text(page, "why")  # what the run decided, on the page
            time.sleep(1.0)
            virtual_png = shoot(page, tmp_path, "live-virtual.png")

            page.get_by_role("link", name="Threshold explorer").click()
            page.get_by_role("heading", name="Threshold explorer").wait_for(timeout=30_000)
            page.get_by_text("t* = 19,620").wait_for(timeout=30_000)  # the optimum on the chart
            optimum = page.get_by_test_id("stMetric").filter(has_text="Threshold t (tokens)")
            assert "19,620" in optimum.text_content()
            paper = _grid_text(page, "Paper")
            assert "19,400" in paper and "19,620" in paper and "3:5" in paper
            page.set_viewport_size(EXPLORER_VIEWPORT)
            time.sleep(1.0)
            explorer_png = shoot(page, tmp_path, "threshold-explorer.png")

            page.set_viewport_size(VIEWPORT)
            page.goto(f"{url}/Runs")
            page.get_by_role("heading", name="Runs").wait_for(timeout=30_000)
            runs_dir = page.get_by_label("Runs directory", exact=True)
            runs_dir.fill(str(tmp_path / "runs"))
            runs_dir.press("Enter")
            listing = _grid_text(page, "live-bandwidth-drop")  # the listing of the two runs, how each ended
            assert "live-quickstart" in listing and "finished" in listing
            page.get_by_role("tab", name="Compare runs").click()
            compare = _grid_text(page, "B - A")
            assert "TTFT P50" in compare
            time.sleep(1.0)
            runs_png = shoot(page, tmp_path, "runs-compare.png")
        finally:
            browser.close()
    summaries = list((tmp_path / "runs").glob(f"live-quickstart-*-{run_id}/summary.json"))
    assert len(summaries) == 1
    meta = json.loads(summaries[0].read_text())["meta"]
    assert any(change.endswith(f"control: threshold -> {tokens} tokens") for change in meta["knob_changes"])
    replay = subprocess.run([sys.executable, "-m", "emulator", "run", str(saved), "--engine", "virtual",
                             "--out", str(tmp_path / "replay")], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert replay.returncode == 0, replay.stderr
    replayed = json.loads((tmp_path / "replay" / "summary.json").read_text())["meta"]["knob_changes"]
    # every knob the run took before its arrivals ended is replayed; one sent while it drained (a
    # slow machine) has no timeline event and is named in the file's header instead
    for event in meta["control_events"]:
        change = "threshold -> " if "set" in event else "link -> 120 Mbit/s"
        if event["at_s"] <= DURATION_S:
            assert any(f"t={event['at_s']:.1f}s timeline: {change}" in line for line in replayed), (event, replayed)
        else:
            assert "# left out: at" in saved.read_text()
    for png in (live_png, virtual_png, explorer_png, runs_png):
        assert png.stat().st_size > 0
