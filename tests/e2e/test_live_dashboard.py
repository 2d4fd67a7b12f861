"""End to end: the Live page in Debian's chromium drives a real live run of live-quickstart.

The dashboard is served as `make run` serves it (embedded broker, its defaults); the test starts
the scenario from the page, waits for data in the TTFT and egress charts, moves the threshold
slider, and checks on the run's status topic (the status that follows every control message
carries the router's `threshold_tokens`) and in its summary.json (`meta.knob_changes`) that the
emulator took the new threshold. Then it opens the Threshold explorer and reads the optimum.

Screenshots go to the test's tmp dir, and also to $PRFAAS_SCREENSHOTS (e.g. docs/img) when set:
that is how the README's screenshots are made.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from emulator.telemetry.watch import TopicWatch
from tests.e2e.browser import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [*BROWSER_MARKS, pytest.mark.slow]
DURATION_S = 25  # arrivals of the run: enough for charts with data, short enough for CI
SCREENSHOTS_ENV = "PRFAAS_SCREENSHOTS"
VIEWPORT = {"width": 1400, "height": 2200}  # the whole Live page
EXPLORER_VIEWPORT = {"width": 1400, "height": 1300}
# How many finite y values each named trace holds, for the chart that has a trace of that name.
TRACE_POINTS_JS = """(name) => {
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    for (const trace of gd._fullData || []) {  // decoded: gd.data may hold base64 typed arrays
      if (trace.name === name) {
        return Array.from(trace.y || []).filter((v) => v !== null && Number.isFinite(v)).length;
      }
    }
  }
  return 0;
}"""


def _shoot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    page.screenshot(path=str(path))
    if target := os.environ.get(SCREENSHOTS_ENV):
        out = ROOT / target if not Path(target).is_absolute() else Path(target)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, out / name)
    return path


def _wait_points(page, trace: str, at_least: int, timeout_s: float) -> None:
    page.wait_for_function(f"({TRACE_POINTS_JS})({json.dumps(trace)}) >= {at_least}", timeout=timeout_s * 1000)


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
    """Three steps of 128 tokens down with the keyboard; returns where the slider ended."""
    slider = page.get_by_role("slider")
    slider.focus()
    for _ in range(3):
        page.keyboard.press("ArrowLeft")
        time.sleep(0.3)
    time.sleep(1.0)
    return int(slider.input_value())


def test_live_page_drives_a_live_run(live_dashboard, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    url, _server = live_dashboard
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(f"{url}/Live")
            page.get_by_role("heading", name="Live control room").wait_for(timeout=30_000)
            broker, run_id = _start_quickstart(page)
            status = f"prfaas/{run_id}/status"
            with TopicWatch(broker, status) as watch:
                _wait_points(page, "TTFT P50", 1, timeout_s=60)
                _wait_points(page, "egress", 3, timeout_s=30)
                tokens = _move_threshold(page)
                assert tokens < 2048, "the slider did not move"
                # the emulator's own report: the status that follows the control message
                watch.wait_for(status, lambda payload: payload.get("threshold_tokens") == tokens, timeout_s=15)
            page.get_by_text(re.compile(f"threshold (->|→) {tokens} tokens: applied")).wait_for(timeout=15_000)
            if os.environ.get(SCREENSHOTS_ENV):  # the README's picture: let the run show more
                page.wait_for_function("document.body.innerText.includes('draining')", timeout=60_000)
            time.sleep(2.0)
            live_png = _shoot(page, tmp_path, "live.png")
            assert page.get_by_test_id("stException").count() == 0
            stop = page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop", exact=True)
            if stop.is_enabled():  # else the run has ended by itself
                stop.click()
            recorded = page.get_by_test_id("stMarkdownContainer").filter(has_text="Knob changes the run recorded:")
            recorded.wait_for(timeout=60_000)
            assert f"threshold -> {tokens} tokens" in recorded.text_content().replace("→", "->")

            page.get_by_role("link", name="Threshold explorer").click()
            page.get_by_role("heading", name="Threshold explorer").wait_for(timeout=30_000)
            page.get_by_text("t* = 19,620").wait_for(timeout=30_000)  # the optimum on the chart
            optimum = page.get_by_test_id("stMetric").filter(has_text="Threshold t (tokens)")
            assert "19,620" in optimum.text_content()
            page.get_by_test_id("stToast").wait_for(state="detached", timeout=15_000)  # "Stopping ..."
            page.set_viewport_size(EXPLORER_VIEWPORT)
            time.sleep(1.0)
            explorer_png = _shoot(page, tmp_path, "threshold-explorer.png")
        finally:
            browser.close()
    summaries = list((tmp_path / "runs").glob(f"live-quickstart-*-{run_id}/summary.json"))
    assert len(summaries) == 1
    meta = json.loads(summaries[0].read_text())["meta"]
    assert any(change.endswith(f"control: threshold -> {tokens} tokens") for change in meta["knob_changes"])
    assert live_png.stat().st_size > 0 and explorer_png.stat().st_size > 0
