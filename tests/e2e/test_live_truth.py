"""Issue 26's acceptance in Debian's chromium: what the Live page shows is what the run is doing.

live-quickstart starts from the page with a timeline (through "More overrides", as `--set` takes it)
that raises the threshold to 4,096 and cuts the link to 50 Mbit/s ten seconds in: the knobs, not
only the tiles, then show those values, and Apply sends them as they are. Turning the short-term
scheduler on, in a scenario that runs none, shows refused with the run's reason (it once showed a
green "taken"), and the toggle returns to what the run does. Stop ends the run `stopped`: the tiles
equal its record, and the Runs page lists it as stopped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.browser import BROWSER_MARKS, page_at, shoot

pytestmark = [*BROWSER_MARKS, pytest.mark.slow]
TIMELINE_AT_S = 10
OVERRIDES = (f"timeline=[{{at_s: {TIMELINE_AT_S}, set: {{router.threshold_tokens: 4096}}}}, "
             f"{{at_s: {TIMELINE_AT_S}, link: {{bandwidth_mbit: 50}}}}]\nworkload.arrival.rate_per_s=0.3")
DURATION_S = 90  # the test stops the run long before
# The text of the tile titled `title` ([data-testid=stMetric]), or null.
TILE_JS = """(title) => {
  for (const metric of document.querySelectorAll('[data-testid=stMetric]')) {
    const label = metric.querySelector('[data-testid=stMetricLabel]');
    if (label && label.textContent.trim() === title) {
      return metric.querySelector('[data-testid=stMetricValue]').textContent.trim();
    }
  }
  return null;
}"""

# Whether the sidebar's switch labelled `label` is drawn off.
SWITCH_OFF_JS = """(label) => [...document.querySelectorAll('[data-testid=stSidebar] input[role=switch]')]
  .some((el) => el.getAttribute('aria-label') === label && !el.checked)"""


def _tile(page, title: str) -> str | None:
    return page.evaluate(TILE_JS, title)


def _wait_tile(page, title: str, value: str, timeout_s: float) -> None:
    page.wait_for_function(f"([t, v]) => ({TILE_JS})(t) === v", arg=[title, value], timeout=timeout_s * 1000)


def _start(page) -> str:
    """Start live-quickstart with the timeline; the run id, as the sidebar shows it."""
    page.get_by_text("Advanced start options").click()
    duration = page.get_by_label("Duration (s), 0 = the scenario's own", exact=True)
    duration.fill(str(DURATION_S))
    duration.press("Enter")
    overrides = page.get_by_label("More overrides", exact=True)
    overrides.fill(OVERRIDES)
    overrides.press("Tab")
    page.get_by_text("Advanced start options").click()
    page.get_by_role("button", name="Start", exact=True).click()
    knobs_caption = page.get_by_text(re.compile(r"^Run [0-9a-f]{6}\. "))
    knobs_caption.wait_for(timeout=30_000)
    return knobs_caption.text_content()[4:10]


def _sidebar(page):
    return page.get_by_test_id("stSidebar")


def test_the_live_page_shows_what_the_run_is_doing(live_dashboard, tmp_path: Path) -> None:
    url, _server = live_dashboard
    with page_at(f"{url}/Live", "Live control room") as page:
        run_id = _start(page)
        slider = _sidebar(page).get_by_role("slider")
        bandwidth = _sidebar(page).get_by_label("Bandwidth (Mbit/s; empty = unshaped)", exact=True)
        _wait_tile(page, "Threshold (tokens)", "2,048", timeout_s=90)  # the run, before its timeline
        assert slider.input_value() == "2048" and bandwidth.input_value() == "200.0"

        # the timeline moves the run: the tiles and the knobs follow
        _wait_tile(page, "Threshold (tokens)", "4,096", timeout_s=180)  # start-up, then 10 s of run
        _wait_tile(page, "Link", "50 Mbit/s · 10 ms", timeout_s=15)
        for field, value in ((slider, "4096"), (bandwidth, "50.0")):
            page.wait_for_function("([el, v]) => el.value === v", arg=[field.element_handle(), value],
                                   timeout=15_000)
        # Apply sends the knob as it stands: the run stays at 4,096 (it once went down to 3,072)
        _sidebar(page).get_by_role("button", name="Apply threshold").click()
        page.get_by_text(re.compile(r"threshold (->|→) 4096 tokens: applied")).wait_for(timeout=15_000)
        assert _tile(page, "Threshold (tokens)") == "4,096"

        # a knob the run refuses shows refused, with its reason, and the toggle returns to off
        toggle = _sidebar(page).get_by_label("Scheduler, short-term (re-search t)", exact=True)
        toggle.click(force=True)  # the switch's input sits under its drawn track
        refused = page.get_by_test_id("stAlertContentError").filter(has_text="scheduler short-term on")
        refused.wait_for(timeout=15_000)
        assert "refused: control/scheduler: this scenario runs no scheduler" in refused.text_content()
        assert page.get_by_test_id("stAlertContentSuccess").filter(has_text="scheduler").count() == 0
        # the run does not run it: the switch is drawn anew, off (app.knob_sync)
        page.wait_for_function(SWITCH_OFF_JS, arg="Scheduler, short-term (re-search t)", timeout=15_000)
        shoot(page, tmp_path, "live-truth.png")

        # Stop: the run ends `stopped`, and the tiles are its record
        page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop", exact=True).click()
        page.get_by_text(re.compile(r"^Recorded in ")).wait_for(timeout=90_000)
        _wait_tile(page, "State", "stopped", timeout_s=30)
        summaries = list((tmp_path / "runs").glob(f"live-quickstart-*-{run_id}/summary.json"))
        assert len(summaries) == 1
        doc = json.loads(summaries[0].read_text())
        summary = doc["summary"]
        assert doc["meta"]["outcome"] == "stopped"
        assert _tile(page, "Completed / arrived") == f"{summary['completed']} / {summary['requests']}"
        assert _tile(page, "Failed") == str(summary["failed_count"])
        assert page.get_by_test_id("stException").count() == 0

        # the Runs page lists it as stopped
        page.goto(f"{url}/Runs")
        page.get_by_role("heading", name="Runs").wait_for(timeout=30_000)
        runs_dir = page.get_by_label("Runs directory", exact=True)
        runs_dir.fill(str(tmp_path / "runs"))
        runs_dir.press("Enter")
        listing = page.get_by_test_id("stDataFrame").filter(has_text=run_id).first
        listing.wait_for(timeout=30_000)
        assert "stopped" in (listing.text_content() or "")
